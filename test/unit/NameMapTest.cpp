//===- NameMapTest.cpp - --init-map files: parsing and applying -----------===//

#include "runtime/exec/NameMap.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace md::runtime {
namespace {

using ::testing::HasSubstr;

SafetensorsEntry entry(std::vector<int64_t> shape, int64_t begin) {
  int64_t n = 4;
  for (int64_t d : shape)
    n *= d;
  return {"F32", shape, begin, begin + n};
}

/// A nanoGPT-like file: a fused [6, 2] c_attn per block, a tied head.
SafetensorsHeader fileWithTwoBlocks() {
  SafetensorsHeader h;
  h.tensors["transformer.h.0.attn.c_attn.weight"] = entry({6, 2}, 0);
  h.tensors["transformer.h.1.attn.c_attn.weight"] = entry({6, 2}, 48);
  h.tensors["transformer.wte.weight"] = entry({5, 2}, 96);
  h.tensors["lm_head.weight"] = entry({5, 2}, 136);
  h.fileBytes = 176;
  return h;
}

constexpr const char *kMap = R"(# nanoGPT
map h.*.attn.q.weight transformer.h.*.attn.c_attn.weight rows 0/3
map h.*.attn.k.weight transformer.h.*.attn.c_attn.weight rows 1/3
map h.*.attn.v.weight transformer.h.*.attn.c_attn.weight rows 2/3   # v
map wte.weight transformer.wte.weight
ignore lm_head.weight
)";

TEST(NameMapTest, PlacesBlocksOfRowsUnderMdNames) {
  absl::StatusOr<NameMap> map = ParseNameMap(kMap, "n.map");
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ(map->rules.size(), 5u);
  absl::StatusOr<SafetensorsHeader> h =
      ApplyNameMap(*map, fileWithTwoBlocks(), "w.safetensors");
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->tensors.size(), 7u); // q, k, v of 2 blocks and wte
  const SafetensorsEntry &k1 = h->tensors.at("h.1.attn.k.weight");
  EXPECT_EQ(k1.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(k1.begin, 48 + 16); // rows 2..3 of block 1's [6, 2]
  EXPECT_EQ(k1.end, 48 + 32);
  EXPECT_EQ(h->tensors.at("h.0.attn.v.weight").begin, 32);
  EXPECT_EQ(h->tensors.at("wte.weight").begin, 96);
  EXPECT_EQ(h->tensors.count("lm_head.weight"), 0u);
}

TEST(NameMapTest, TransposesConv1DWeightsAndTheirColumnBlocks) {
  // Hugging Face's GPT-2: Conv1D weights are [in, out], c_attn's fused
  // q, k, v are blocks of columns.
  SafetensorsHeader file;
  file.tensors["h.0.attn.c_attn.weight"] = entry({2, 6}, 0);
  file.tensors["h.0.mlp.c_fc.weight"] = entry({2, 8}, 48);
  file.fileBytes = 112;
  absl::StatusOr<NameMap> map = ParseNameMap(
      "map h.*.attn.k.weight h.*.attn.c_attn.weight transpose rows 1/3\n"
      "map h.*.attn.q.weight h.*.attn.c_attn.weight transpose rows 0/3\n"
      "map h.*.attn.v.weight h.*.attn.c_attn.weight transpose rows 2/3\n"
      "map h.*.mlp.fc.weight h.*.mlp.c_fc.weight transpose\n",
      "hf.map");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_TRUE(map->rules[3].transpose);
  absl::StatusOr<SafetensorsHeader> h =
      ApplyNameMap(*map, file, "w.safetensors");
  ASSERT_TRUE(h.ok()) << h.status();
  // k is columns 2..3 of the [2, 6] tensor, transposed: [2, 2]; the entry
  // spans the whole file tensor, which is read and transposed.
  const SafetensorsEntry &k = h->tensors.at("h.0.attn.k.weight");
  EXPECT_EQ(k.shape, (std::vector<int64_t>{2, 2}));
  ASSERT_TRUE(k.transposed.has_value());
  EXPECT_EQ(k.transposed->fileCols, 6);
  EXPECT_EQ(k.transposed->firstCol, 2);
  EXPECT_EQ(k.begin, 0);
  EXPECT_EQ(k.end, 48);
  EXPECT_EQ(h->tensors.at("h.0.attn.v.weight").transposed->firstCol, 4);
  const SafetensorsEntry &fc = h->tensors.at("h.0.mlp.fc.weight");
  EXPECT_EQ(fc.shape, (std::vector<int64_t>{8, 2}));
  EXPECT_EQ(fc.transposed->firstCol, 0);
  EXPECT_EQ(fc.transposed->fileCols, 8);

  // Only a 2-D tensor whose columns split; `transpose` before `rows`.
  file.tensors["h.0.ln.weight"] = entry({6}, 112);
  NameMap bad = *ParseNameMap("map h.*.ln h.*.ln.weight transpose\n"
                              "ignore h.*.attn.c_attn.weight\n"
                              "ignore h.*.mlp.c_fc.weight\n",
                              "hf.map");
  EXPECT_THAT(std::string(ApplyNameMap(bad, file, "w.safetensors")
                              .status()
                              .message()),
              HasSubstr("hf.map:1: h.0.ln.weight in w.safetensors is [6]: "
                        "'transpose' takes a 2-D tensor whose 0 columns "
                        "split into 1 equal blocks"));
  EXPECT_THAT(std::string(ParseNameMap("map a b rows 0/2 transpose\n", "m")
                              .status()
                              .message()),
              HasSubstr("m:1: expected 'map MD_PARAMETER FILE_TENSOR "
                        "[transpose] [rows K/N]'"));
}

TEST(NameMapTest, ATensorTheMapDoesNotPlaceIsRefused) {
  NameMap map = *ParseNameMap("map wte.weight transformer.wte.weight\n"
                              "map h.*.attn.q.weight "
                              "transformer.h.*.attn.c_attn.weight rows 0/3\n",
                              "n.map");
  absl::Status s =
      ApplyNameMap(map, fileWithTwoBlocks(), "w.safetensors").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("w.safetensors holds lm_head.weight, which n.map "
                        "neither maps nor ignores"));
}

TEST(NameMapTest, ARuleWhoseTensorIsMissingIsRefused) {
  NameMap map = *ParseNameMap(
      std::string(kMap) + "map ln_f.weight transformer.ln_f.weight\n", "n.map");
  absl::Status s =
      ApplyNameMap(map, fileWithTwoBlocks(), "w.safetensors").status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("n.map:7: w.safetensors holds no tensor "
                        "'transformer.ln_f.weight'"));
}

TEST(NameMapTest, RowsThatDoNotSplitAndTwoPlacementsAreRefused) {
  NameMap four = *ParseNameMap(
      "map wte.weight transformer.wte.weight rows 1/4\nignore lm_head.weight\n"
      "ignore transformer.h.*.attn.c_attn.weight\n",
      "n.map");
  absl::Status s =
      ApplyNameMap(four, fileWithTwoBlocks(), "w.safetensors").status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("n.map:1: transformer.wte.weight's 5 rows in "
                        "w.safetensors do not split into 4 equal blocks"));
  NameMap twice = *ParseNameMap("map wte.weight transformer.wte.weight\n"
                                "map wte.weight lm_head.weight\n"
                                "ignore transformer.h.*.attn.c_attn.weight\n",
                                "n.map");
  s = ApplyNameMap(twice, fileWithTwoBlocks(), "w.safetensors").status();
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("n.map: lines 1 and 2 both place wte.weight"));
}

TEST(NameMapTest, BadLinesAreNamedByFileAndLine) {
  struct Case {
    const char *text, *want;
  } cases[] = {
      {"mapp a b\n", "n.map:1: unknown rule 'mapp'"},
      {"\n# c\nmap a\n", "n.map:3: expected 'map MD_PARAMETER FILE_TENSOR"},
      {"map a b rows 3/3\n", "n.map:1: expected 'rows K/N' with 0 <= K < N"},
      {"map a.* b\n", "n.map:1: 'a.*' and 'b' must both have a '*' or neither"},
      {"ignore a.*.*\n", "n.map:1: a name has at most one '*'"},
      {"ignore\n", "n.map:1: expected 'ignore FILE_TENSOR'"},
  };
  for (const Case &c : cases) {
    absl::Status s = ParseNameMap(c.text, "n.map").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.want)) << c.text;
  }
  EXPECT_EQ(ReadNameMap("/nonexistent/n.map").status().code(),
            absl::StatusCode::kNotFound);
}

} // namespace
} // namespace md::runtime
