//===- RankPathTest.cpp - per-rank file names of RankPath.h ---------------===//
//
// mdc and the executor accept the same paths (UnknownRankPlaceholder) and
// every rank expands them with its own values (ExpandRankPath).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/RankPath.h"

#include "gtest/gtest.h"

namespace md::runtime {
namespace {

TEST(RankPathTest, PathsWithoutBracesAreKeptAsTheyAre) {
  EXPECT_EQ(UnknownRankPlaceholder("STOP"), std::nullopt);
  EXPECT_EQ(ExpandRankPath("runs/a.b/STOP", RankValues{3, 1, 4}),
            "runs/a.b/STOP");
  EXPECT_EQ(ExpandRankPath("", RankValues{}), "");
}

TEST(RankPathTest, EachPlaceholderIsThisRanksValue) {
  const RankValues r{5, 1, 8};
  EXPECT_EQ(ExpandRankPath("stop.{rank}", r), "stop.5");
  EXPECT_EQ(ExpandRankPath("{local_rank}", r), "1");
  EXPECT_EQ(ExpandRankPath("n{rank}-of-{world_size}/x{rank}", r),
            "n5-of-8/x5");
  EXPECT_EQ(ExpandRankPath("{rank}{rank}", r), "55");
  EXPECT_EQ(UnknownRankPlaceholder("n{rank}-of-{world_size}/{local_rank}"),
            std::nullopt);
}

TEST(RankPathTest, UnknownOrUnbalancedBracesAreNamed) {
  EXPECT_EQ(UnknownRankPlaceholder("stop.{step}"), "{step}");
  EXPECT_EQ(UnknownRankPlaceholder("stop.{rank}.{}"), "{}");
  EXPECT_EQ(UnknownRankPlaceholder("stop.{rank"), "{rank");
  EXPECT_EQ(UnknownRankPlaceholder("stop.rank}"), "}");
  EXPECT_EQ(UnknownRankPlaceholder("{rank}}"), "}");
  EXPECT_EQ(UnknownRankPlaceholder("{{rank}}"), "{{rank}");
}

TEST(RankPathTest, UnknownBracesSurviveExpansionUnchanged) {
  // The executor refuses such a path before expanding it; were one expanded,
  // it would keep its text rather than lose it.
  const RankValues r{2, 0, 4};
  EXPECT_EQ(ExpandRankPath("a{step}b{rank}", r), "a{step}b2");
  EXPECT_EQ(ExpandRankPath("a{rank", r), "a{rank");
}

} // namespace
} // namespace md::runtime
