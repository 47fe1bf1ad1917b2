//===- ShapeRulesTest.cpp - runtime/core/ShapeRules.h ---------------------===//
//
// The ops' shape rules that the dialect's verifiers, the plan loader's type
// rules, the frontend and the kernels' checks share: each result, and each
// problem with what it names.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/ShapeRules.h"

#include "gtest/gtest.h"

namespace md::rules {
namespace {

constexpr int64_t D = kDynamic;

TEST(ShapeRules, BroadcastingAsNumpy) {
  Broadcast b = BroadcastShapes({4, 1, 3}, {5, 1});
  ASSERT_TRUE(b.ok);
  EXPECT_EQ(b.shape, Shape({4, 5, 3}));
  EXPECT_EQ(BroadcastShapes({}, {2, 3}).shape, Shape({2, 3}));
  b = BroadcastShapes({2, 3}, {4, 3});
  EXPECT_FALSE(b.ok);
  EXPECT_EQ(b.dim, 0u);
  EXPECT_EQ(b.a, 2);
  EXPECT_EQ(b.b, 4);
  // An unknown dim takes the known one, and matches anything.
  EXPECT_EQ(BroadcastShapes({D, 3}, {4, 3}).shape, Shape({4, 3}));
  EXPECT_EQ(BroadcastShapes({D}, {D}).shape, Shape({D}));
  EXPECT_TRUE(BroadcastsTo({3}, {4, 3}));
  EXPECT_TRUE(BroadcastsTo({1, 3}, {4, 3}));
  EXPECT_FALSE(BroadcastsTo({2, 3}, {4, 3}));
  EXPECT_FALSE(BroadcastsTo({5, 4, 3}, {4, 3}));
  EXPECT_TRUE(BroadcastsTo({D, 3}, {4, 3}));
}

TEST(ShapeRules, AxesAndReductions) {
  EXPECT_EQ(NormalizeAxis(-1, 3), 2);
  EXPECT_EQ(NormalizeAxis(2, 3), 2);
  EXPECT_FALSE(NormalizeAxis(3, 3));
  EXPECT_FALSE(NormalizeAxis(-4, 3));
  Reduction r = ReduceDims({2, 3, 4}, {0, -1}, false);
  ASSERT_EQ(r.problem, Reduction::Problem::none);
  EXPECT_EQ(r.shape, Shape({3}));
  EXPECT_EQ(r.reduced, std::vector<bool>({true, false, true}));
  EXPECT_EQ(ReduceDims({2, 3, 4}, {1}, true).shape, Shape({2, 1, 4}));
  EXPECT_EQ(ReduceDims({2, 3}, {}, false).problem, Reduction::Problem::empty);
  r = ReduceDims({2, 3}, {0, 5}, false);
  EXPECT_EQ(r.problem, Reduction::Problem::outOfRange);
  EXPECT_EQ(r.dim, 5);
  EXPECT_EQ(r.index, 1u);
  r = ReduceDims({2, 3}, {1, -1}, false); // the same dim spelled twice
  EXPECT_EQ(r.problem, Reduction::Problem::twice);
  EXPECT_EQ(r.dim, -1);
  EXPECT_EQ(r.index, 1u);
}

TEST(ShapeRules, MatmulLayouts) {
  Matmul m = MatmulShapes({8, 4, 3}, {3, 5}, false, false);
  ASSERT_EQ(m.problem, Matmul::Problem::none);
  EXPECT_EQ(m.shape, Shape({8, 4, 5}));
  EXPECT_EQ(m.batch, 8);
  EXPECT_EQ(m.m, 4);
  EXPECT_EQ(m.n, 5);
  EXPECT_EQ(m.k, 3);
  EXPECT_FALSE(m.batchedB);
  // Transposes: a [K, M], b [N, K].
  m = MatmulShapes({3, 4}, {5, 3}, true, true);
  ASSERT_EQ(m.problem, Matmul::Problem::none);
  EXPECT_EQ(m.shape, Shape({4, 5}));
  // A batched b needs a's batch dims.
  m = MatmulShapes({2, 4, 3}, {2, 3, 5}, false, false);
  EXPECT_TRUE(m.batchedB);
  EXPECT_EQ(m.shape, Shape({2, 4, 5}));
  EXPECT_EQ(MatmulShapes({2, 4, 3}, {7, 3, 5}, false, false).problem,
            Matmul::Problem::batch);
  EXPECT_EQ(MatmulShapes({4}, {4, 5}, false, false).problem,
            Matmul::Problem::aRank);
  EXPECT_EQ(MatmulShapes({2, 2, 4, 3}, {2, 3, 5}, false, false).problem,
            Matmul::Problem::bRank);
  m = MatmulShapes({4, 3}, {2, 5}, false, false);
  EXPECT_EQ(m.problem, Matmul::Problem::contraction);
  EXPECT_EQ(m.ka, 3);
  EXPECT_EQ(m.kb, 2);
  // Unknown dims are compatible, and stay unknown.
  m = MatmulShapes({D, 4, D}, {3, 5}, false, false);
  ASSERT_EQ(m.problem, Matmul::Problem::none);
  EXPECT_EQ(m.shape, Shape({D, 4, 5}));
  EXPECT_EQ(m.batch, D);
  EXPECT_EQ(m.k, 3);
}

TEST(ShapeRules, AttentionAndTheRest) {
  Attention a = AttentionShape({2, 16, 64}, 4);
  ASSERT_EQ(a.problem, Attention::Problem::none);
  EXPECT_EQ(a.headDim, 16);
  EXPECT_EQ(AttentionShape({16, 64}, 4).problem, Attention::Problem::rank);
  EXPECT_EQ(AttentionShape({2, 16, 64}, 0).problem, Attention::Problem::heads);
  a = AttentionShape({2, 16, 66}, 4);
  EXPECT_EQ(a.problem, Attention::Problem::indivisible);
  EXPECT_EQ(a.channels, 66);
  EXPECT_EQ(AttentionShape({2, 16, D}, 4).problem, Attention::Problem::none);
  EXPECT_EQ(LastDimVector({2, 3, 7}), Shape({7}));
  EXPECT_EQ(CrossEntropyTargets({8, 64, 512}), Shape({8, 64}));
  EXPECT_EQ(ElementCount({}), 1);
  EXPECT_EQ(ElementCount({2, 3, 4}), 24);
  EXPECT_FALSE(ElementCount({int64_t(1) << 40, int64_t(1) << 40}));
  EXPECT_FALSE(ElementCount({2, D}));
}

} // namespace
} // namespace md::rules
