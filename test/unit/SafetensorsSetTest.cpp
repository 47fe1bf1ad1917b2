//===- SafetensorsSetTest.cpp - --init from a save_pretrained folder ------===//

#include "runtime/exec/Safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace md::runtime {
namespace {

using ::testing::HasSubstr;

/// The directories freshDir made, removed when the tests end.
class TempDirs : public ::testing::Environment {
public:
  static std::vector<std::string> &dirs() {
    static std::vector<std::string> list;
    return list;
  }
  void TearDown() override {
    for (const std::string &dir : dirs())
      EXPECT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0);
  }
};
const ::testing::Environment *const kTempDirs =
    ::testing::AddGlobalTestEnvironment(new TempDirs);

/// A fresh directory under the test's temporary directory.
std::string freshDir(const std::string &name) {
  const char *tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/md-stset-" + name +
                    "-" + std::to_string(::getpid());
  std::string cmd = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  TempDirs::dirs().push_back(dir);
  return dir;
}

SafetensorsTensor tensor(const std::string &name, std::vector<float> values) {
  SafetensorsTensor t;
  t.name = name;
  t.dtype = "F32";
  t.shape = {static_cast<int64_t>(values.size())};
  t.data.resize(values.size() * 4);
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

void writeText(const std::string &path, const std::string &text) {
  std::ofstream(path) << text;
}

/// Two shards and their index, as save_pretrained writes them.
std::string shardedFolder(const std::string &name, const std::string &index) {
  std::string dir = freshDir(name);
  EXPECT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors",
                               {tensor("a", {1, 2}), tensor("b", {3})}, {})
                  .ok());
  EXPECT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors",
                               {tensor("c", {4, 5, 6})}, {})
                  .ok());
  writeText(dir + "/model.safetensors.index.json", index);
  return dir;
}

constexpr const char *kIndex = R"({
  "metadata": {"total_size": 24, "format": "pt", "nested": [1, {"x": null}]},
  "weight_map": {
    "a": "model-00001-of-00002.safetensors",
    "b": "model-00001-of-00002.safetensors",
    "c": "model-00002-of-00002.safetensors"
  }
})";

TEST(SafetensorsSetTest, AFolderOfShardsReadsAsOneFile) {
  std::string dir = shardedFolder("shards", kIndex);
  absl::StatusOr<SafetensorsSet> set = OpenSafetensorsSet(dir);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->files.size(), 2u);
  ASSERT_EQ(set->header.tensors.size(), 3u);
  const SafetensorsEntry &c = set->header.tensors.at("c");
  EXPECT_EQ(c.shape, (std::vector<int64_t>{3}));
  float values[3];
  ASSERT_TRUE(ReadAllAt(set->files[c.file]->fd, values, sizeof values, c.begin));
  EXPECT_EQ(values[0], 4.0f);
  EXPECT_EQ(values[2], 6.0f);
  EXPECT_NE(set->header.tensors.at("a").file, c.file);
  EXPECT_THAT(set->paths[c.file], HasSubstr("model-00002-of-00002"));
}

TEST(SafetensorsSetTest, OneFileAndAFolderWithOneFileRead) {
  std::string dir = freshDir("single");
  ASSERT_TRUE(
      WriteSafetensors(dir + "/model.safetensors", {tensor("w", {7})}, {}).ok());
  for (const std::string &path : {dir, dir + "/", dir + "/model.safetensors"}) {
    absl::StatusOr<SafetensorsSet> set = OpenSafetensorsSet(path);
    ASSERT_TRUE(set.ok()) << path << ": " << set.status();
    EXPECT_EQ(set->files.size(), 1u);
    EXPECT_EQ(set->header.tensors.at("w").file, 0);
  }
}

TEST(SafetensorsSetTest, AnIndexThatDisagreesWithItsShardsIsRefused) {
  struct Case {
    std::string index, message;
  } cases[] = {
      // b is in shard 1, the index says 2.
      {R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
           "b": "model-00002-of-00002.safetensors",
           "c": "model-00002-of-00002.safetensors"}})",
       "holds b, which"},
      // b is in no shard of the index.
      {R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
           "c": "model-00002-of-00002.safetensors"}})",
       "holds b, which"},
      // d is indexed but no shard holds it.
      {R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
           "b": "model-00001-of-00002.safetensors",
           "c": "model-00002-of-00002.safetensors",
           "d": "model-00002-of-00002.safetensors"}})",
       "puts d in"},
      {R"({"weight_map": {"a": "../model-00001-of-00002.safetensors"}})",
       "which is not a file name"},
      {R"({"weight_map": {"a": "missing.safetensors"}})", "cannot open"},
      {R"({"metadata": {}})", "has no weight_map"},
      {R"({"weight_map": {"a": 3}})", "not an index of safetensors shards"},
      {R"({"weight_map": {"a": "x", "a": "y"}})",
       "not an index of safetensors shards"},
      {"[1, 2]", "not an index of safetensors shards"},
  };
  int k = 0;
  for (const Case &c : cases) {
    std::string dir = shardedFolder("bad" + std::to_string(k++), c.index);
    absl::StatusOr<SafetensorsSet> set = OpenSafetensorsSet(dir);
    ASSERT_FALSE(set.ok()) << c.index;
    EXPECT_THAT(std::string(set.status().message()), HasSubstr(c.message))
        << c.index;
  }
}

} // namespace
} // namespace md::runtime
