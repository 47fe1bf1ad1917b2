//===- OptimizerGroupsTest.cpp - optimizer parameter groups ---------------===//
//
// The ranges of parameter groups in a unit's flat buffer (from a plan) and
// in a rank's shard of it, and an update run range by range: a shard that
// spans parameters of two groups must get, bit for bit, what each
// parameter gets when it is updated alone with its group's weight decay
// and learning rate (the reference, computed here with the backend's own
// kernel on each whole parameter).
//
//===----------------------------------------------------------------------===//

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/exec/OptimizerGroups.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/plan/PlanBuilder.h"

namespace md::test {
namespace {

using namespace md::runtime;
using plan::PlanBuilder;

/// A plan with one unit of 20 elements: a (5, group 1), b (7, group 0),
/// c (8, group 2), and groups default (wd 0.1), no_decay (wd 0), attn
/// (wd 0.1, lr x 0.5).
std::vector<uint8_t> groupedPlan() {
  PlanBuilder b;
  b.addUnit("", 20);
  int32_t a = b.addParam("a", {5}, fb::DType::F32, 0, 0);
  b.addParam("b", {7}, fb::DType::F32, 0, 5);
  int32_t c = b.addParam("c", {2, 4}, fb::DType::F32, 0, 12);
  b.plan().params[a]->group = 1;
  b.plan().params[c]->group = 2;
  auto group = [&](const char *name, double wd, double lrScale) {
    auto g = std::make_unique<fb::OptimizerGroupT>();
    g->name = name;
    g->weight_decay = wd;
    g->lr_scale = lrScale;
    b.recipe().optimizer->groups.push_back(std::move(g));
  };
  group("default", 0.1, 1.0);
  group("ndim = 1", 0.0, 1.0);
  group("match = \"c\"", 0.1, 0.5);
  return b.finish();
}

void expectSegment(const OptimizerSegment &s, int64_t begin, int64_t end,
                   int32_t group) {
  EXPECT_EQ(s.begin, begin);
  EXPECT_EQ(s.end, end);
  EXPECT_EQ(s.group, group);
}

TEST(OptimizerGroups, UnitRangesFollowTheParametersGroups) {
  std::vector<uint8_t> bytes = groupedPlan();
  const fb::Plan &plan = *fb::GetPlan(bytes.data());
  std::vector<std::vector<OptimizerSegment>> units =
      UnitOptimizerSegments(plan);
  ASSERT_EQ(units.size(), 1u);
  ASSERT_EQ(units[0].size(), 3u);
  expectSegment(units[0][0], 0, 5, 1);
  expectSegment(units[0][1], 5, 12, 0);
  expectSegment(units[0][2], 12, 20, 2);
  EXPECT_EQ(units[0][0].weightDecay, 0.0);
  EXPECT_EQ(units[0][1].weightDecay, 0.1);
  EXPECT_EQ(units[0][2].lrScale, 0.5);

  std::vector<OptimizerGroupSummary> summary = SummarizeOptimizerGroups(plan);
  ASSERT_EQ(summary.size(), 3u);
  EXPECT_EQ(summary[2].members, 1);
  EXPECT_EQ(summary[2].numel, 8);
  EXPECT_EQ(summary[1].str(),
            "ndim = 1: 1 param, 5 elements, weight_decay 0, lr_scale 1");
}

TEST(OptimizerGroups, NoGroupsNoRanges) {
  PlanBuilder b;
  b.addUnit("", 4);
  b.addParam("w", {4}, fb::DType::F32, 0, 0);
  std::vector<uint8_t> bytes = b.finish();
  EXPECT_TRUE(UnitOptimizerSegments(*fb::GetPlan(bytes.data())).empty());
  EXPECT_TRUE(SummarizeOptimizerGroups(*fb::GetPlan(bytes.data())).empty());
}

TEST(OptimizerGroups, ShardRangesAreRelativeAndTheLastTakesThePadding) {
  std::vector<uint8_t> bytes = groupedPlan();
  std::vector<OptimizerSegment> unit =
      UnitOptimizerSegments(*fb::GetPlan(bytes.data()))[0];
  // 20 elements over 3 ranks: shards of 7, padded to 21.
  std::vector<OptimizerSegment> r0 = ShardOptimizerSegments(unit, 0, 7);
  ASSERT_EQ(r0.size(), 2u);
  expectSegment(r0[0], 0, 5, 1);
  expectSegment(r0[1], 5, 7, 0);
  std::vector<OptimizerSegment> r1 = ShardOptimizerSegments(unit, 7, 7);
  ASSERT_EQ(r1.size(), 2u);
  expectSegment(r1[0], 0, 5, 0);
  expectSegment(r1[1], 5, 7, 2);
  std::vector<OptimizerSegment> r2 = ShardOptimizerSegments(unit, 14, 7);
  ASSERT_EQ(r2.size(), 1u);
  expectSegment(r2[0], 0, 7, 2);
  // A shard wholly in the padding (a unit smaller than the ranks).
  std::vector<OptimizerSegment> pad = ShardOptimizerSegments(unit, 21, 7);
  ASSERT_EQ(pad.size(), 1u);
  expectSegment(pad[0], 0, 7, 2);
}

/// Deterministic, varied values.
std::vector<float> values(int64_t n, float scale, float shift) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = shift + scale * static_cast<float>((i * 7919 % 23) - 11) / 11.0f;
  return v;
}

TensorRef ref(std::vector<float> &v, int64_t begin, int64_t end) {
  return TensorRef(v.data() + begin, DType::f32, Shape{end - begin});
}

/// The unit of groupedPlan() with its parameters' values.
struct UnitState {
  std::vector<float> param = values(20, 0.5f, 1.0f),
                     grad = values(20, 0.01f, 0.002f),
                     m = values(20, 0.003f, 0.0f), v = values(20, 1e-5f, 2e-5f);
};

TEST(OptimizerGroups, AdamWShardSpanningTwoGroupsMatchesEachParameterAlone) {
  std::vector<uint8_t> bytes = groupedPlan();
  const fb::Plan &plan = *fb::GetPlan(bytes.data());
  std::vector<OptimizerSegment> unit = UnitOptimizerSegments(plan)[0];
  cpu::CpuBackend backend(1);
  const float lr = 3e-3f;
  auto args = [&](UnitState &s, int64_t begin, int64_t end) {
    AdamWArgs a;
    a.param = a.newParam = ref(s.param, begin, end);
    a.grad = ref(s.grad, begin, end);
    a.m = a.newM = ref(s.m, begin, end);
    a.v = a.newV = ref(s.v, begin, end);
    a.lr = lr;
    a.step = 3;
    a.beta1 = 0.9;
    a.beta2 = 0.95;
    a.eps = 1e-8;
    a.weightDecay = 0.1; // the default group's, as the plan's instruction
    return a;
  };

  // The reference: each parameter alone with its group's values.
  UnitState want;
  struct Param {
    int64_t begin, end;
    double wd, lrScale;
  };
  for (Param p : {Param{0, 5, 0.0, 1.0}, Param{5, 12, 0.1, 1.0},
                  Param{12, 20, 0.1, 0.5}}) {
    AdamWArgs a = args(want, p.begin, p.end);
    a.weightDecay = p.wd;
    a.lr = static_cast<float>(double(lr) * p.lrScale);
    ASSERT_TRUE(backend.adamwUpdate(a).ok());
  }

  // Ranks of 3 updating shards of 7 (the last one padded to 21).
  UnitState got;
  got.param.resize(21, 0.0f);
  got.grad.resize(21, 0.0f);
  got.m.resize(21, 0.0f);
  got.v.resize(21, 0.0f);
  for (int64_t rank = 0; rank < 3; ++rank) {
    AdamWArgs a = args(got, rank * 7, rank * 7 + 7);
    a.unit = 0;
    std::vector<OptimizerSegment> local =
        ShardOptimizerSegments(unit, rank * 7, 7);
    ASSERT_TRUE(RunGroupedUpdate(backend, a, local).ok());
  }
  for (int64_t i = 0; i < 20; ++i) {
    EXPECT_EQ(std::memcmp(&got.param[i], &want.param[i], 4), 0)
        << "param element " << i;
    EXPECT_EQ(std::memcmp(&got.m[i], &want.m[i], 4), 0) << "m element " << i;
    EXPECT_EQ(std::memcmp(&got.v[i], &want.v[i], 4), 0) << "v element " << i;
  }
  // The groups changed something: without them every element would decay.
  UnitState plain;
  AdamWArgs all = args(plain, 0, 20);
  ASSERT_TRUE(backend.adamwUpdate(all).ok());
  EXPECT_NE(plain.param[0], got.param[0]);
  EXPECT_NE(plain.param[15], got.param[15]);
  EXPECT_EQ(std::memcmp(&plain.param[8], &got.param[8], 4), 0);
}

TEST(OptimizerGroups, SgdWithMomentumShardMatchesEachParameterAlone) {
  std::vector<uint8_t> bytes = groupedPlan();
  std::vector<OptimizerSegment> unit =
      UnitOptimizerSegments(*fb::GetPlan(bytes.data()))[0];
  cpu::CpuBackend backend(1);
  std::vector<float> p0 = values(20, 0.5f, 1.0f), g = values(20, 0.01f, 0.0f),
                     b0 = values(20, 0.004f, 0.001f);
  auto run = [&](std::vector<float> &p, std::vector<float> &buf, int64_t begin,
                 int64_t end, double wd, float lr) {
    SgdArgs a;
    a.param = a.newParam = ref(p, begin, end);
    a.grad = ref(g, begin, end);
    a.momentumBuffer = ref(buf, begin, end);
    a.newMomentumBuffer = ref(buf, begin, end);
    a.lr = lr;
    a.step = 2;
    a.momentum = 0.9;
    a.weightDecay = wd;
    return a;
  };
  std::vector<float> wantP = p0, wantB = b0;
  ASSERT_TRUE(backend.sgdUpdate(run(wantP, wantB, 0, 5, 0.0, 0.1f)).ok());
  ASSERT_TRUE(backend.sgdUpdate(run(wantP, wantB, 5, 12, 0.1, 0.1f)).ok());
  ASSERT_TRUE(backend
                  .sgdUpdate(run(wantP, wantB, 12, 20, 0.1,
                                 static_cast<float>(0.1 * 0.5)))
                  .ok());
  // Two ranks: shards of 10, each spanning two groups.
  std::vector<float> gotP = p0, gotB = b0;
  for (int64_t rank = 0; rank < 2; ++rank) {
    SgdArgs a = run(gotP, gotB, rank * 10, rank * 10 + 10, 0.1, 0.1f);
    a.unit = 0;
    ASSERT_TRUE(RunGroupedUpdate(backend, a,
                                 ShardOptimizerSegments(unit, rank * 10, 10))
                    .ok());
  }
  EXPECT_EQ(std::memcmp(gotP.data(), wantP.data(), 20 * 4), 0);
  EXPECT_EQ(std::memcmp(gotB.data(), wantB.data(), 20 * 4), 0);
}

TEST(OptimizerGroups, RangesThatDoNotTileTheOperandsAreRefused) {
  cpu::CpuBackend backend(1);
  std::vector<float> p(4, 1.0f), g(4, 0.1f), m(4, 0.0f), v(4, 0.0f);
  AdamWArgs a;
  a.param = a.newParam = ref(p, 0, 4);
  a.grad = ref(g, 0, 4);
  a.m = a.newM = ref(m, 0, 4);
  a.v = a.newV = ref(v, 0, 4);
  OptimizerSegment half;
  half.begin = 0;
  half.end = 2;
  absl::Status status = RunGroupedUpdate(backend, a, {half});
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("cover 2 of 4"), std::string::npos) << status;
}

} // namespace
} // namespace md::test
