//===- DataTest.cpp - the distributed sampler and the data sources --------===//

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "runtime/data/Dataset.h"
#include "runtime/data/Markov.h"
#include "runtime/data/Sampler.h"

namespace md::data {
namespace {

using runtime::DType;

DistributedSampler sampler(int64_t n, int64_t world, int64_t rank,
                           int64_t batch, Tail tail = Tail::Drop,
                           bool reshuffle = true, uint64_t seed = 7) {
  SamplerOptions o;
  o.datasetSize = n;
  o.worldSize = world;
  o.rank = rank;
  o.batchSize = batch;
  o.seed = seed;
  o.tail = tail;
  o.reshuffleEachEpoch = reshuffle;
  absl::StatusOr<DistributedSampler> s = DistributedSampler::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

std::vector<int64_t> epochSamples(DistributedSampler &s, int64_t epoch) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < s.batchesPerEpoch(); ++b) {
    std::vector<int64_t> batch = s.batch(epoch, b);
    out.insert(out.end(), batch.begin(), batch.end());
  }
  return out;
}

TEST(SamplerTest, RanksReadDisjointSamplesEquallyOften) {
  for (int64_t world : {1, 2, 3, 4}) {
    std::set<int64_t> seen;
    int64_t perRank = -1;
    for (int64_t r = 0; r < world; ++r) {
      DistributedSampler s = sampler(103, world, r, 4);
      if (perRank < 0)
        perRank = s.batchesPerEpoch();
      EXPECT_EQ(s.batchesPerEpoch(), perRank) << "world " << world;
      EXPECT_EQ(s.batchesPerEpoch(), 103 / (4 * world));
      for (int64_t i : epochSamples(s, 0)) {
        EXPECT_GE(i, 0);
        EXPECT_LT(i, 103);
        EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " read twice";
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), perRank * 4 * world);
  }
}

TEST(SamplerTest, PadWrapsAroundSoEverySampleIsRead) {
  std::multiset<int64_t> seen;
  for (int64_t r = 0; r < 2; ++r) {
    DistributedSampler s = sampler(10, 2, r, 4, Tail::Pad);
    EXPECT_EQ(s.batchesPerEpoch(), 2); // ceil(10 / 8)
    for (int64_t i : epochSamples(s, 0))
      seen.insert(i);
  }
  EXPECT_EQ(seen.size(), 16u);
  for (int64_t i = 0; i < 10; ++i)
    EXPECT_GE(seen.count(i), 1u) << i;
}

TEST(SamplerTest, ReshufflesEachEpochDeterministically) {
  DistributedSampler a = sampler(64, 2, 0, 4);
  DistributedSampler b = sampler(64, 2, 0, 4);
  std::vector<int64_t> e0 = epochSamples(a, 0), e1 = epochSamples(a, 1);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, epochSamples(b, 0)); // same seed, same order
  EXPECT_EQ(e1, epochSamples(b, 1));
  std::vector<int64_t> s0 = e0, s1 = e1;
  std::sort(s0.begin(), s0.end());
  std::sort(s1.begin(), s1.end());
  EXPECT_NE(s0, s1); // the ranks' shares change between epochs too
  DistributedSampler other = sampler(64, 2, 0, 4, Tail::Drop, true, 8);
  EXPECT_NE(epochSamples(other, 0), e0);
  DistributedSampler once = sampler(64, 2, 0, 4, Tail::Drop, false);
  EXPECT_EQ(epochSamples(once, 0), epochSamples(once, 3));
  // A permutation: every index exactly once.
  std::vector<int64_t> perm = a.permutation(5);
  std::sort(perm.begin(), perm.end());
  for (int64_t i = 0; i < 64; ++i)
    EXPECT_EQ(perm[i], i);
}

TEST(SamplerTest, EndlessDataInterleavesRanks) {
  SamplerOptions o;
  o.worldSize = 3;
  o.rank = 1;
  o.batchSize = 2;
  absl::StatusOr<DistributedSampler> s = DistributedSampler::Create(o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->batchesPerEpoch(), -1);
  EXPECT_EQ(s->batch(0, 0), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(s->batch(0, 1), (std::vector<int64_t>{7, 10}));
}

TEST(SamplerTest, StreamRollsOverEpochs) {
  BatchStream stream(sampler(16, 2, 1, 4)); // 2 batches per epoch
  for (int64_t k = 0; k < 5; ++k) {
    BatchStream::Next n = stream.next();
    EXPECT_EQ(n.epoch, k / 2);
    EXPECT_EQ(n.indices.size(), 4u);
  }
  EXPECT_EQ(stream.batchesRead(), 5);
}

TEST(SamplerTest, RefusesDataSmallerThanOneBatchPerRank) {
  SamplerOptions o;
  o.datasetSize = 7;
  o.worldSize = 2;
  o.batchSize = 4;
  absl::StatusOr<DistributedSampler> s = DistributedSampler::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(
                "7 samples, fewer than one batch of 4 on each of 2 ranks"),
            std::string::npos)
      << s.status();
  o.rank = 2;
  o.datasetSize = 100;
  EXPECT_FALSE(DistributedSampler::Create(o).ok());
}

//===----------------------------------------------------------------------===//
// Sources
//===----------------------------------------------------------------------===//

Field field(DType t, std::vector<int64_t> shape, int64_t bound = 0) {
  Field f;
  f.dtype = t;
  f.shape = std::move(shape);
  f.bound = bound;
  f.name = "f";
  return f;
}

std::string tempPath(const char *name) {
  return absl::StrFormat("%s/md-data-test-%d-%s", ::testing::TempDir(),
                         getpid(), name);
}

/// Writes `values` to a new temporary file `name` and returns its path.
template <typename T>
std::string writeTemp(const char *name, const std::vector<T> &values) {
  std::string path = tempPath(name);
  FILE *f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  if (f) {
    EXPECT_EQ(std::fwrite(values.data(), sizeof(T), values.size(), f),
              values.size());
    std::fclose(f);
  }
  return path;
}

TEST(SyntheticTest, ClassificationIsDeterministicAndLearnable) {
  DataSource src;
  src.seed = 3;
  auto open = [&] {
    absl::StatusOr<std::unique_ptr<Dataset>> d =
        OpenDataset(src, {field(DType::f32, {6}), field(DType::i32, {}, 5)});
    EXPECT_TRUE(d.ok()) << d.status();
    return std::move(*d);
  };
  std::unique_ptr<Dataset> a = open(), b = open();
  EXPECT_EQ(a->size(), -1);
  EXPECT_NE(a->describe().find("classification, 6 features, 5 classes"),
            std::string::npos);
  std::vector<float> x1(6 * 64), x2(6 * 64);
  std::vector<int32_t> y1(64), y2(64);
  std::vector<int64_t> idx(64);
  for (int i = 0; i < 64; ++i)
    idx[i] = 1000 + i;
  ASSERT_TRUE(a->read(0, idx, {x1.data(), y1.data()}).ok());
  ASSERT_TRUE(b->read(0, idx, {x2.data(), y2.data()}).ok());
  EXPECT_EQ(x1, x2);
  EXPECT_EQ(y1, y2);
  std::set<int32_t> classes(y1.begin(), y1.end());
  EXPECT_GE(classes.size(), 3u);
  for (int32_t y : y1) {
    EXPECT_GE(y, 0);
    EXPECT_LT(y, 5);
  }
  // Reading samples one at a time gives the same bits.
  std::vector<float> x3(6);
  std::vector<int32_t> y3(1);
  ASSERT_TRUE(a->read(0, {idx[7]}, {x3.data(), y3.data()}).ok());
  EXPECT_TRUE(std::equal(x3.begin(), x3.end(), x1.begin() + 42));
  EXPECT_EQ(y3[0], y1[7]);
  // Another epoch or seed gives other samples of the same task.
  std::vector<float> x4(6 * 64);
  ASSERT_TRUE(a->read(1, idx, {x4.data(), y2.data()}).ok());
  EXPECT_NE(x1, x4);
}

TEST(SyntheticTest, SequencesFollowASparseChain) {
  DataSource src;
  absl::StatusOr<std::unique_ptr<Dataset>> d = OpenDataset(
      src, {field(DType::i32, {32}, 50), field(DType::i64, {32}, 50)});
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<int32_t> idx(4 * 32);
  std::vector<int64_t> tgt(4 * 32);
  ASSERT_TRUE((*d)->read(0, {0, 1, 2, 3}, {idx.data(), tgt.data()}).ok());
  std::map<int64_t, std::set<int64_t>> next;
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 32; ++t) {
      EXPECT_LT(idx[b * 32 + t], 50);
      if (t + 1 < 32)
        EXPECT_EQ(idx[b * 32 + t + 1],
                  tgt[b * 32 + t]); // targets are idx shifted
      next[idx[b * 32 + t]].insert(tgt[b * 32 + t]);
    }
  for (const auto &[token, successors] : next)
    EXPECT_LE(successors.size(), 4u) << token;
}

TEST(MarkovTest, SyntheticSequencesWalkChainSeedZero) {
  DataSource src;
  absl::StatusOr<std::unique_ptr<Dataset>> d = OpenDataset(
      src, {field(DType::i32, {64}, 300), field(DType::i32, {64}, 300)});
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<int32_t> idx(8 * 64), tgt(8 * 64);
  ASSERT_TRUE((*d)->read(0, {0, 1, 2, 3, 4, 5, 6, 7},
                         {idx.data(), tgt.data()})
                  .ok());
  MarkovChain chain(300, 0), other(300, 1);
  int64_t notInOther = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    auto isEdge = [&](const MarkovChain &c) {
      for (int64_t s = 0; s < c.successors(); ++s)
        if (c.successor(idx[i], s) == tgt[i])
          return true;
      return false;
    };
    EXPECT_TRUE(isEdge(chain)) << idx[i] << " -> " << tgt[i];
    notInOther += !isEdge(other);
  }
  EXPECT_GT(notInOther, 0) << "chain seed 1 should be another chain";
}

TEST(MarkovTest, EntropyRateIsTheConditionalEntropyOfAWalk) {
  // One successor distribution without coincidences has entropy
  // -sum p ln p over (0.6, 0.25, 0.1, 0.05) = 1.0331 nats.
  const double row = -(0.6 * std::log(0.6) + 0.25 * std::log(0.25) +
                       0.1 * std::log(0.1) + 0.05 * std::log(0.05));
  MarkovChain chain(64, 3);
  std::optional<double> h = chain.entropyRate();
  ASSERT_TRUE(h.has_value());
  EXPECT_LE(*h, row + 1e-12);
  EXPECT_GT(*h, 0.8);
  // The empirical conditional entropy of a long walk converges to it.
  const int64_t n = 400000;
  std::map<std::pair<int64_t, int64_t>, int64_t> pairs;
  std::map<int64_t, int64_t> from;
  int64_t previous = -1;
  chain.walk(runtime::HashKey(11, 12), n, [&](int64_t, int64_t token) {
    if (previous >= 0) {
      ++pairs[{previous, token}];
      ++from[previous];
    }
    previous = token;
  });
  double empirical = 0;
  for (const auto &[pair, count] : pairs)
    empirical -= static_cast<double>(count) *
                 std::log(static_cast<double>(count) /
                          static_cast<double>(from[pair.first]));
  empirical /= static_cast<double>(n - 1);
  EXPECT_NEAR(empirical, *h, 0.01);
  // A single token: no uncertainty. A large vocabulary: successors rarely
  // coincide.
  EXPECT_EQ(MarkovChain(1, 0).entropyRate(), 0.0);
  std::optional<double> large = MarkovChain(65536, 0).entropyRate();
  ASSERT_TRUE(large.has_value());
  EXPECT_NEAR(*large, row, 0.002);
}

TEST(SyntheticTest, IntegerInputsNeedABound) {
  DataSource src;
  absl::StatusOr<std::unique_ptr<Dataset>> d =
      OpenDataset(src, {field(DType::i32, {3})});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("cannot tell the range"),
            std::string::npos);
}

void writeNpy(const std::string &path, const char *descr,
              const std::string &shape, const void *data, size_t bytes) {
  std::string header = absl::StrFormat(
      "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
  while ((10 + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  FILE *f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  uint16_t len = static_cast<uint16_t>(header.size());
  std::fwrite(&len, 2, 1, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::fwrite(data, 1, bytes, f);
  std::fclose(f);
}

TEST(NpyTest, ReadsOneFilePerInput) {
  std::string base = tempPath("train.npy");
  std::vector<float> x(10 * 3);
  std::vector<int64_t> y(10);
  for (int i = 0; i < 30; ++i)
    x[i] = static_cast<float>(i);
  for (int i = 0; i < 10; ++i)
    y[i] = i % 4;
  writeNpy(NpyFieldPath(base, 0, 2), "<f4", "(10, 3)", x.data(), x.size() * 4);
  writeNpy(NpyFieldPath(base, 1, 2), "<i8", "(10,)", y.data(), y.size() * 8);
  EXPECT_EQ(NpyFieldPath(base, 1, 2), tempPath("train.1.npy"));
  DataSource src;
  src.kind = DataKind::Npy;
  src.path = base;
  absl::StatusOr<std::unique_ptr<Dataset>> d =
      OpenDataset(src, {field(DType::f32, {3}), field(DType::i32, {})});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->size(), 10);
  std::vector<float> xb(6);
  std::vector<int32_t> yb(2);
  ASSERT_TRUE((*d)->read(0, {7, 2}, {xb.data(), yb.data()}).ok());
  EXPECT_EQ(xb, (std::vector<float>{21, 22, 23, 6, 7, 8}));
  EXPECT_EQ(yb, (std::vector<int32_t>{3, 2}));

  // A shape that does not fit the input is an error naming the file.
  absl::StatusOr<std::unique_ptr<Dataset>> bad =
      OpenDataset(src, {field(DType::f32, {4}), field(DType::i32, {})});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.status().message().find("train.0.npy: shape (10, 3) does not fit"),
      std::string::npos)
      << bad.status();
  src.path = tempPath("missing.npy");
  EXPECT_EQ(OpenDataset(src, {field(DType::f32, {3})}).status().code(),
            absl::StatusCode::kNotFound);
  std::remove(NpyFieldPath(base, 0, 2).c_str());
  std::remove(NpyFieldPath(base, 1, 2).c_str());
}

TEST(TokensTest, WindowsOfTPlusOneTokens) {
  std::vector<uint16_t> tokens(1000);
  for (int i = 0; i < 1000; ++i)
    tokens[i] = static_cast<uint16_t>(i % 97);
  std::string path = writeTemp("tokens.bin", tokens);
  DataSource src;
  src.kind = DataKind::Tokens;
  src.path = path;
  src.seed = 5;
  absl::StatusOr<std::unique_ptr<Dataset>> d = OpenDataset(
      src, {field(DType::i32, {16}, 97), field(DType::i32, {16}, 97)});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->size(), 999 / 16);
  std::vector<int32_t> idx(3 * 16), tgt(3 * 16);
  ASSERT_TRUE((*d)->read(0, {0, 1, 2}, {idx.data(), tgt.data()}).ok());
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 16; ++t) {
      EXPECT_EQ(tgt[b * 16 + t],
                (idx[b * 16 + t] + 1) % 97); // consecutive tokens
      if (t + 1 < 16)
        EXPECT_EQ(idx[b * 16 + t + 1], tgt[b * 16 + t]);
    }
  // A vocabulary smaller than the file's tokens is an error.
  absl::StatusOr<std::unique_ptr<Dataset>> small = OpenDataset(
      src, {field(DType::i32, {16}, 10), field(DType::i32, {16}, 10)});
  ASSERT_TRUE(small.ok());
  std::vector<int32_t> a(64 * 16), c(64 * 16);
  std::vector<int64_t> many(64);
  for (int i = 0; i < 64; ++i)
    many[i] = i;
  absl::Status s = (*small)->read(0, many, {a.data(), c.data()});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("outside the model's vocabulary of 10"),
            std::string::npos)
      << s;
  std::remove(path.c_str());
}

TEST(TokensTest, Uint32TokensForVocabulariesBeyond16Bits) {
  // A vocabulary of 100000 does not fit in uint16: the file holds uint32.
  std::vector<uint32_t> tokens(500);
  for (int i = 0; i < 500; ++i)
    tokens[i] = 70000u + static_cast<uint32_t>(i);
  std::string path = writeTemp("tokens32.bin", tokens);
  DataSource src;
  src.kind = DataKind::Tokens;
  src.path = path;
  absl::StatusOr<std::unique_ptr<Dataset>> d = OpenDataset(
      src, {field(DType::i32, {8}, 100000), field(DType::i32, {8}, 100000)});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->size(), 499 / 8);
  std::vector<int32_t> idx(2 * 8), tgt(2 * 8);
  ASSERT_TRUE((*d)->read(0, {0, 1}, {idx.data(), tgt.data()}).ok());
  for (int k = 0; k < 16; ++k) {
    EXPECT_GE(idx[k], 70000);
    EXPECT_LT(idx[k], 70500);
    EXPECT_EQ(tgt[k], idx[k] + 1);
  }
  // 2002 bytes is no whole number of uint32 tokens.
  FILE *f = std::fopen(path.c_str(), "ab");
  ASSERT_NE(f, nullptr);
  std::fputc(0, f);
  std::fputc(0, f);
  std::fclose(f);
  absl::StatusOr<std::unique_ptr<Dataset>> odd = OpenDataset(
      src, {field(DType::i32, {8}, 100000), field(DType::i32, {8}, 100000)});
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("not a whole number of uint32 tokens"),
            std::string::npos)
      << odd.status();
  std::remove(path.c_str());
}

} // namespace
} // namespace md::data
