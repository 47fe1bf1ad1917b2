//===- MemoryModelTest.cpp - the memory model mdc and mdrun share ---------===//
//
// The pieces of runtime/plan/Memory.h that the compiler's analysis and the
// runtime's PerRankMemory both run: the sweep of live intervals by category,
// the totals at the peak and the rows of the report. (PerRankMemory on whole
// plans is tested in PlanLoaderTest; the two reports agree on every model in
// test/lit/plan/emit-models.test.)
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Memory.h"
#include "runtime/plan/MemoryFormat.h"

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace md::plan {
namespace {

using fb::MemoryCategory;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

int64_t at(const CategoryBytes &bytes, MemoryCategory category) {
  return bytes[static_cast<size_t>(category)];
}

TEST(MemoryModelTest, LiveBytesSumsTheIntervalsAtEachPosition) {
  std::vector<LiveInterval> intervals = {
      {0, 2, MemoryCategory::Activations, 10},
      {1, 1, MemoryCategory::Grads, 5},
      {1, 3, MemoryCategory::Activations, 7},
      {3, 3, MemoryCategory::CommBuffers, 1}};
  absl::StatusOr<std::vector<CategoryBytes>> live = LiveBytes(5, intervals);
  ASSERT_TRUE(live.ok()) << live.status();
  ASSERT_EQ(live->size(), 5u);
  const int64_t activations[] = {10, 17, 17, 7, 0};
  const int64_t grads[] = {0, 5, 0, 0, 0};
  const int64_t comm[] = {0, 0, 0, 1, 0};
  for (size_t p = 0; p < 5; ++p) {
    EXPECT_EQ(at((*live)[p], MemoryCategory::Activations), activations[p]) << p;
    EXPECT_EQ(at((*live)[p], MemoryCategory::Grads), grads[p]) << p;
    EXPECT_EQ(at((*live)[p], MemoryCategory::CommBuffers), comm[p]) << p;
    EXPECT_EQ(at((*live)[p], MemoryCategory::Params), 0) << p;
  }
}

TEST(MemoryModelTest, LiveBytesAgreesWithCountingEachPosition) {
  std::mt19937_64 random(14);
  for (int round = 0; round < 200; ++round) {
    int64_t positions = 1 + static_cast<int64_t>(random() % 30);
    std::vector<LiveInterval> intervals;
    for (int k = static_cast<int>(random() % 20); k > 0; --k) {
      int64_t a = static_cast<int64_t>(random() % positions);
      int64_t b = static_cast<int64_t>(random() % positions);
      intervals.push_back({std::min(a, b), std::max(a, b),
                           static_cast<MemoryCategory>(1 + random() % 6),
                           static_cast<int64_t>(random() % 1000)});
    }
    absl::StatusOr<std::vector<CategoryBytes>> live =
        LiveBytes(positions, intervals);
    ASSERT_TRUE(live.ok()) << live.status();
    for (int64_t p = 0; p < positions; ++p) {
      CategoryBytes expected{};
      for (const LiveInterval &i : intervals)
        if (i.first <= p && p <= i.last)
          expected[static_cast<size_t>(i.category)] += i.bytes;
      EXPECT_EQ((*live)[p], expected) << "round " << round << ", at " << p;
    }
  }
}

TEST(MemoryModelTest, LiveBytesRefusesOverflowAndBadIntervals) {
  EXPECT_FALSE(LiveBytes(2, {{0, 1, MemoryCategory::Params, kMax},
                             {1, 1, MemoryCategory::Params, 1}})
                   .ok());
  EXPECT_TRUE(LiveBytes(2, {{0, 0, MemoryCategory::Params, kMax},
                            {1, 1, MemoryCategory::Params, kMax}})
                  .ok());
  EXPECT_FALSE(LiveBytes(2, {{0, 2, MemoryCategory::Params, 1}}).ok());
  EXPECT_FALSE(LiveBytes(2, {{1, 0, MemoryCategory::Params, 1}}).ok());
  EXPECT_FALSE(LiveBytes(2, {{-1, 0, MemoryCategory::Params, 1}}).ok());
  EXPECT_FALSE(LiveBytes(-1, {}).ok());
  absl::StatusOr<std::vector<CategoryBytes>> none = LiveBytes(0, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(MemoryModelTest, TotalsAddUpToThePeak) {
  CategoryBytes bytes{};
  bytes[static_cast<size_t>(MemoryCategory::Params)] = 1;
  bytes[static_cast<size_t>(MemoryCategory::Grads)] = 2;
  bytes[static_cast<size_t>(MemoryCategory::GradAcc)] = 4;
  bytes[static_cast<size_t>(MemoryCategory::Optimizer)] = 8;
  bytes[static_cast<size_t>(MemoryCategory::Activations)] = 16;
  bytes[static_cast<size_t>(MemoryCategory::CommBuffers)] = 32;
  // A buffer without a category is an activation; a host scalar is not
  // device memory.
  bytes[static_cast<size_t>(MemoryCategory::Unspecified)] = 64;
  bytes[static_cast<size_t>(MemoryCategory::Host)] = 128;
  absl::StatusOr<MemoryTotals> totals = MemoryTotals::Of(bytes);
  ASSERT_TRUE(totals.ok());
  EXPECT_EQ(totals->params, 1);
  EXPECT_EQ(totals->grads, 2);
  EXPECT_EQ(totals->gradAcc, 4);
  EXPECT_EQ(totals->optimizer, 8);
  EXPECT_EQ(totals->activations, 80);
  EXPECT_EQ(totals->commBuffers, 32);
  EXPECT_EQ(totals->peak, 127);

  bytes[static_cast<size_t>(MemoryCategory::Grads)] = kMax;
  EXPECT_FALSE(MemoryTotals::Of(bytes).ok());
}

TEST(MemoryModelTest, RowsComeInTheReportsOrder) {
  MemoryTotals totals;
  totals.params = 1;
  totals.grads = 2;
  totals.gradAcc = 3;
  totals.optimizer = 4;
  totals.activations = 5;
  totals.commBuffers = 6;
  totals.peak = 21;
  std::string names;
  int64_t expected = 1;
  for (const MemoryRow &row : MemoryRows(totals)) {
    names += std::string(row.name) + " ";
    if (expected <= 6)
      EXPECT_EQ(row.bytes, expected++) << row.name;
    else
      EXPECT_EQ(row.bytes, 21);
  }
  EXPECT_EQ(names,
            "params grads grad_acc optimizer activations comm_buffers peak ");
  // The rows name the categories as the plan does.
  EXPECT_STREQ(MemoryCategoryName(MemoryCategory::GradAcc), "grad_acc");
  EXPECT_STREQ(MemoryCategoryName(MemoryCategory::CommBuffers), "comm_buffers");
}

TEST(MemoryModelTest, BytesTextUsesBinaryUnits) {
  EXPECT_EQ(BytesText(0), "0 B");
  EXPECT_EQ(BytesText(1023), "1023 B");
  EXPECT_EQ(BytesText(1024), "1.0 KiB");
  EXPECT_EQ(BytesText(1360), "1.3 KiB");
  EXPECT_EQ(BytesText(int64_t(25) << 20), "25.0 MiB");
  EXPECT_EQ(BytesText(int64_t(3) << 40), "3.0 TiB");
  EXPECT_EQ(BytesText(kMax), "8.0 EiB");
}

MemoryTotals sampleTotals() {
  MemoryTotals totals;
  totals.params = 424;
  totals.grads = 0;
  totals.gradAcc = 848;
  totals.optimizer = 848;
  totals.activations = 1360;
  totals.commBuffers = 848;
  totals.peak = 4328;
  return totals;
}

TEST(MemoryModelTest, TextSectionHasEveryRowInHumanAndExactBytes) {
  EXPECT_EQ(FormatMemoryText(sampleTotals(), 2),
            "memory per rank at W = 2, at the peak\n"
            "  params               424 B  (424 bytes)\n"
            "  grads                  0 B  (0 bytes)\n"
            "  grad_acc             848 B  (848 bytes)\n"
            "  optimizer            848 B  (848 bytes)\n"
            "  activations        1.3 KiB  (1360 bytes)\n"
            "  comm_buffers         848 B  (848 bytes)\n"
            "  peak               4.2 KiB  (4328 bytes)\n");
}

TEST(MemoryModelTest, JsonSectionIsAnObjectAtTheGivenDepth) {
  const std::string rows = "\"params\": 424,\n"
                           "\"grads\": 0,\n"
                           "\"grad_acc\": 848,\n"
                           "\"optimizer\": 848,\n"
                           "\"activations\": 1360,\n"
                           "\"comm_buffers\": 848,\n"
                           "\"peak\": 4328\n";
  // Each row indented by `indent` + 2, the closing brace by `indent`.
  auto indented = [&](int indent) {
    std::string out = "{\n", pad(indent + 2, ' ');
    size_t begin = 0;
    for (size_t end; (end = rows.find('\n', begin)) != std::string::npos;
         begin = end + 1)
      out += pad + rows.substr(begin, end + 1 - begin);
    return out + std::string(indent, ' ') + "}";
  };
  EXPECT_EQ(FormatMemoryJson(sampleTotals(), 2), indented(2));
  EXPECT_EQ(FormatMemoryJson(sampleTotals(), 0), indented(0));
  // Exact bytes, however large.
  MemoryTotals big;
  big.peak = kMax;
  EXPECT_NE(FormatMemoryJson(big, 2).find("\"peak\": 9223372036854775807\n"),
            std::string::npos);
}

/// An instruction: `stream`, the event it records, those it waits for.
StreamEvents inst(int32_t stream, int32_t record = -1,
                  std::vector<int32_t> waits = {}) {
  return {stream, record, std::move(waits)};
}

TEST(MemoryModelTest, ComputeInstructionsTouchTheirOperandsWhenTheyRun) {
  std::vector<StreamWindow> w =
      StreamWindows({inst(0), inst(0, 3), inst(0, -1, {3})});
  ASSERT_EQ(w.size(), 3u);
  for (int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(w[i].start, i);
    EXPECT_EQ(w[i].release, i);
  }
}

TEST(MemoryModelTest, CommInstructionsReadUntilTheComputeStreamWaits) {
  // 0: a collective recording 7; 1: compute; 2: waits for 7.
  std::vector<StreamWindow> w =
      StreamWindows({inst(1, 7), inst(0), inst(0, -1, {7}), inst(0)});
  EXPECT_EQ(w[0].release, 2);
  // Nobody waits: to the end of the block (its size).
  w = StreamWindows({inst(0), inst(1, 7), inst(0)});
  EXPECT_EQ(w[1].release, 3);
  // A wait for a later collective also waits for this one: the comm stream
  // runs in order.
  w = StreamWindows({inst(1, 1), inst(1, 2), inst(0), inst(0, -1, {2})});
  EXPECT_EQ(w[0].release, 3);
  EXPECT_EQ(w[1].release, 3);
  // A wait for an event recorded before the collective releases nothing.
  w = StreamWindows({inst(0, 4), inst(1), inst(0, -1, {4}), inst(0)});
  EXPECT_EQ(w[1].release, 4);
}

TEST(MemoryModelTest, CommInstructionsMayStartAfterTheEventsTheyWaitFor) {
  // 0: compute; 1: compute recording 5; 2: compute; 3: a collective waiting
  // for 5 may start at 2; 4: a later collective no earlier than it.
  std::vector<StreamWindow> w =
      StreamWindows({inst(0), inst(0, 5), inst(0), inst(1, -1, {5}), inst(1)});
  EXPECT_EQ(w[3].start, 2);
  EXPECT_EQ(w[4].start, 2);
  // Without a wait: from the block's first instruction.
  w = StreamWindows({inst(0), inst(0), inst(1)});
  EXPECT_EQ(w[2].start, 0);
  // The latest record of an event counts.
  w = StreamWindows(
      {inst(0, 5), inst(0), inst(0, 5), inst(0), inst(1, -1, {5})});
  EXPECT_EQ(w[4].start, 3);
  EXPECT_TRUE(StreamWindows({}).empty());
}

} // namespace
} // namespace md::plan
