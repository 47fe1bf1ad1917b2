//===- MdDataTest.cpp - md-data's token files -----------------------------===//

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "runtime/data/Dataset.h"
#include "runtime/data/Markov.h"
#include "tools/md-data/MarkovTokens.h"

namespace md::mddata {
namespace {

using runtime::DType;

std::string tempDir() {
  std::string dir = absl::StrFormat("%s/md-data-tool-test-%d",
                                    ::testing::TempDir(), getpid());
  ::mkdir(dir.c_str(), 0777);
  return dir;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// The file's bytes as little-endian uint16 tokens.
std::vector<int64_t> tokensOf(const std::string &bytes) {
  std::vector<int64_t> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<unsigned char>(bytes[2 * i]) |
             static_cast<unsigned char>(bytes[2 * i + 1]) << 8;
  return out;
}

MarkovTokensOptions options(int64_t vocab, int64_t tokens, uint64_t seed,
                            const std::string &name, uint64_t chainSeed = 0) {
  MarkovTokensOptions o;
  o.vocab = vocab;
  o.tokens = tokens;
  o.seed = seed;
  o.chainSeed = chainSeed;
  o.output = tempDir() + "/" + name;
  return o;
}

std::string write(const MarkovTokensOptions &o) {
  absl::StatusOr<MarkovTokensResult> r = WriteMarkovTokens(o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) {
    EXPECT_EQ(r->bytes, 2 * o.tokens);
  }
  return readFile(o.output);
}

TEST(MdDataTest, WritesTheWalkAsLittleEndianUint16) {
  // A vocabulary above 256 so that both bytes of a token matter.
  MarkovTokensOptions o = options(1000, 5001, 3, "walk.bin");
  std::string bytes = write(o);
  ASSERT_EQ(bytes.size(), 2u * 5001);
  std::vector<int64_t> tokens = tokensOf(bytes);
  std::vector<int64_t> walk;
  data::MarkovChain(1000, 0).walk(
      WalkKey(3), 5001, [&](int64_t, int64_t token) { walk.push_back(token); });
  EXPECT_EQ(tokens, walk);
  int64_t high = 0;
  for (int64_t t : tokens) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 1000);
    high += t > 255;
  }
  EXPECT_GT(high, 1000);
  // Written under a temporary name and renamed: nothing else is left.
  std::set<std::string> names;
  DIR *dir = ::opendir(tempDir().c_str());
  ASSERT_NE(dir, nullptr);
  while (dirent *e = ::readdir(dir))
    if (std::string(e->d_name).rfind("walk.bin", 0) == 0)
      names.insert(e->d_name);
  ::closedir(dir);
  EXPECT_EQ(names, (std::set<std::string>{"walk.bin"}));
  std::remove(o.output.c_str());
}

TEST(MdDataTest, DeterministicForASeed) {
  MarkovTokensOptions a = options(512, 20000, 1, "a.bin"),
                      b = options(512, 20000, 1, "b.bin");
  std::string x = write(a), y = write(b);
  EXPECT_EQ(x, y);
  // Writing over an existing file replaces it.
  a.tokens = 100;
  EXPECT_EQ(write(a), x.substr(0, 200));
  std::remove(a.output.c_str());
  std::remove(b.output.c_str());
}

TEST(MdDataTest, SeedsWalkTheSameChainChainSeedsAnother) {
  MarkovTokensOptions train = options(512, 20000, 1, "train.bin"),
                      val = options(512, 20000, 2, "val.bin"),
                      other = options(512, 20000, 1, "other.bin", 7);
  std::vector<int64_t> t = tokensOf(write(train)), v = tokensOf(write(val)),
                       o = tokensOf(write(other));
  EXPECT_NE(t, v);
  EXPECT_NE(t, o);
  data::MarkovChain chain(512, 0);
  auto edges = [&](const std::vector<int64_t> &tokens) {
    int64_t on = 0;
    for (size_t i = 0; i + 1 < tokens.size(); ++i)
      for (int64_t s = 0; s < chain.successors(); ++s)
        if (chain.successor(tokens[i], s) == tokens[i + 1]) {
          ++on;
          break;
        }
    return on;
  };
  // Every transition of both seeds is an edge of chain 0; chain seed 7 is
  // another chain.
  EXPECT_EQ(edges(t), 19999);
  EXPECT_EQ(edges(v), 19999);
  EXPECT_LT(edges(o), 1000);
  std::remove(train.output.c_str());
  std::remove(val.output.c_str());
  std::remove(other.output.c_str());
}

TEST(MdDataTest, TheTokensSourceReadsItBack) {
  MarkovTokensOptions o = options(512, 10000, 5, "read.bin");
  std::vector<int64_t> tokens = tokensOf(write(o));
  data::Field f;
  f.dtype = DType::i32;
  f.shape = {64};
  f.bound = 512;
  f.name = "idx";
  data::DataSource src;
  src.kind = data::DataKind::Tokens;
  src.path = o.output;
  absl::StatusOr<std::unique_ptr<data::Dataset>> d =
      data::OpenDataset(src, {f, f});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->size(), 9999 / 64);
  std::vector<int32_t> idx(4 * 64), tgt(4 * 64);
  ASSERT_TRUE((*d)->read(0, {0, 1, 2, 3}, {idx.data(), tgt.data()}).ok());
  for (int b = 0; b < 4; ++b) {
    // The window is the file's tokens at some offset.
    bool found = false;
    for (size_t start = 0; start + 65 <= tokens.size() && !found; ++start) {
      found = true;
      for (int t = 0; t < 64 && found; ++t)
        found = tokens[start + t] == idx[b * 64 + t] &&
                tokens[start + t + 1] == tgt[b * 64 + t];
    }
    EXPECT_TRUE(found) << "window " << b;
  }
  std::remove(o.output.c_str());
}

// The command line, parsed and through the binary.
absl::StatusOr<CommandLine> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "md-data");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

TEST(MdDataTest, CommandLine) {
  absl::StatusOr<CommandLine> ok =
      parse({"markov", "--vocab=512", "--tokens", "100", "--seed", "4",
             "--chain-seed=9", "-o", "x.bin"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->mode, CommandLine::Mode::Markov);
  EXPECT_EQ(ok->markov.vocab, 512);
  EXPECT_EQ(ok->markov.tokens, 100);
  EXPECT_EQ(ok->markov.seed, 4u);
  EXPECT_EQ(ok->markov.chainSeed, 9u);
  EXPECT_EQ(ok->markov.output, "x.bin");
  EXPECT_EQ(parse({"--help"})->mode, CommandLine::Mode::Help);
  EXPECT_TRUE(parse({"markov", "--vocab", "65536", "--tokens", "1", "-o", "x"})
                  .ok());
  EXPECT_TRUE(parse({"markov", "--vocab", "65537", "--tokens", "1", "-o", "x"})
                  .ok()); // a uint32 file
  struct Bad {
    std::vector<std::string> args;
    const char *message;
  } bad[] = {
      {{"markov", "--vocab", "16777217", "--tokens", "1", "-o", "x"},
       "--vocab 16777217: more than 16777216 tokens (md-data's limit)"},
      {{"markov", "--vocab", "0", "--tokens", "1", "-o", "x"},
       "--vocab 0: not a positive integer"},
      {{"markov", "--vocab", "8", "--tokens", "-5", "-o", "x"},
       "--tokens -5: not a positive integer"},
      {{"markov", "--vocab", "8", "--tokens", "9", "--seed", "x", "-o", "x"},
       "--seed x: not a non-negative integer"},
      {{"markov", "--vocab", "8", "--tokens", "9"}, "markov needs -o FILE"},
      {{"markov", "--tokens", "9", "-o", "x"}, "markov needs --vocab V"},
      {{"markov", "--vocab", "8", "-o", "x"}, "markov needs --tokens N"},
      {{"markov", "--vocab", "8", "--tokens", "9", "-o"}, "-o needs a value"},
      {{"markov", "--vocab", "8", "--tokens", "9", "--frob", "-o", "x"},
       "unknown option '--frob'"},
      {{"uniform", "--vocab", "8", "--tokens", "9", "-o", "x"},
       "unknown command 'uniform'"},
      {{}, "no command given"},
  };
  for (const Bad &b : bad) {
    absl::StatusOr<CommandLine> r = parse(b.args);
    ASSERT_FALSE(r.ok()) << b.message;
    EXPECT_NE(r.status().message().find(b.message), std::string::npos)
        << r.status();
  }
}

/// Runs md-data with `args` in a shell; returns its exit status and puts
/// its standard output and error in `out`.
int run(const std::string &args, std::string &out) {
  std::string command =
      absl::StrFormat("'%s' %s 2>&1", MD_DATA_BINARY, args);
  FILE *p = ::popen(command.c_str(), "r");
  if (p == nullptr)
    return -1;
  out.clear();
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(MdDataTest, ExitStatus) {
  std::string dir = tempDir(), out;
  std::string file = dir + "/sub/run.bin";
  EXPECT_EQ(run("markov --vocab 512 --tokens 3000 --seed 2 -o '" + file + "'",
                out),
            0)
      << out;
  EXPECT_NE(out.find("md-data: wrote " + file +
                     ": 3,000 uint16 tokens (6,000 bytes), a walk (seed 2) "
                     "on the Markov chain over 512 tokens (chain seed 0); "
                     "entropy rate 1.0273 nats/token"),
            std::string::npos)
      << out;
  EXPECT_EQ(readFile(file).size(), 6000u);
  // Beyond 65536 tokens the file holds uint32, which the tokens reader
  // reads for such a vocabulary.
  std::string wide = dir + "/wide.bin";
  EXPECT_EQ(run("markov --vocab 70000 --tokens 3 -o '" + wide + "'", out), 0)
      << out;
  EXPECT_NE(out.find(": 3 uint32 tokens (12 bytes)"), std::string::npos)
      << out;
  EXPECT_EQ(readFile(wide).size(), 12u);
  EXPECT_EQ(run("markov --vocab 99999999 --tokens 3 -o x.bin", out), 2);
  EXPECT_NE(out.find("md-data: error: --vocab 99999999: more than 16777216"),
            std::string::npos)
      << out;
  EXPECT_EQ(run("markov --vocab 8", out), 2);
  EXPECT_EQ(run("", out), 2);
  EXPECT_EQ(run("--help", out), 0);
  EXPECT_NE(out.find("usage: md-data markov"), std::string::npos);
  // A file that cannot be written: exit 1, naming it.
  EXPECT_EQ(run("markov --vocab 8 --tokens 3 -o '" + file + "/below-a-file'",
                out),
            1);
  EXPECT_NE(out.find("md-data: error: " + file), std::string::npos) << out;
  std::remove(file.c_str());
  ::rmdir((dir + "/sub").c_str());
}

/// A raw little-endian file of `width`-byte ids.
void writeRaw(const std::string &path, const std::vector<int64_t> &ids,
              int width) {
  std::string bytes;
  for (int64_t v : ids)
    for (int k = 0; k < width; ++k)
      bytes += static_cast<char>(static_cast<uint64_t>(v) >> (8 * k));
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(MdDataTest, ConvertRewritesIdsAsMdsTokenFile) {
  const std::string dir = tempDir();
  const std::vector<int64_t> ids = {3, 0, 511, 7, 42};
  // int32 -> uint16 (a vocabulary of 512), the ids kept.
  writeRaw(dir + "/t.i32", ids, 4);
  ConvertTokensOptions o;
  o.from = TokenFormat::int32;
  o.input = dir + "/t.i32";
  o.output = dir + "/t.bin";
  absl::StatusOr<ConvertTokensResult> r = ConvertTokens(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, 5);
  EXPECT_EQ(r->vocab, 512);
  EXPECT_EQ(r->largest, 511);
  EXPECT_EQ(tokensOf(readFile(o.output)), ids);
  EXPECT_EQ(Describe(o, *r),
            "md-data: wrote " + o.output + ": 5 uint16 tokens (10 bytes) from " +
                o.input + " (int32), ids 0 to 511, for a vocabulary of 512");
  // A vocabulary beyond 65536 takes uint32.
  o.vocab = 70000;
  r = ConvertTokens(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(readFile(o.output).size(), 20u);
  // An id outside --vocab, a negative one, a file of a partial token, the
  // output over the input: refused, naming the file.
  o.vocab = 100;
  EXPECT_EQ(ConvertTokens(o).status().message(),
            o.input + ": token 511 at position 2 is outside --vocab 100");
  o.vocab = 0;
  writeRaw(dir + "/neg.i64", {1, -5}, 8);
  o.from = TokenFormat::int64;
  o.input = dir + "/neg.i64";
  EXPECT_EQ(ConvertTokens(o).status().message(),
            o.input + ": token -5 at position 1 is negative (read as int64)");
  std::ofstream(dir + "/odd.u16", std::ios::binary) << "abc";
  o.from = TokenFormat::uint16;
  o.input = dir + "/odd.u16";
  EXPECT_EQ(ConvertTokens(o).status().message(),
            o.input + ": 3 bytes is not a whole number of uint16 tokens");
  o.output = o.input;
  EXPECT_THAT(std::string(ConvertTokens(o).status().message()),
              ::testing::HasSubstr("would overwrite the input"));
  EXPECT_EQ(ParseTokenFormat("int33").status().message(),
            "--from int33: expected uint16, uint32, int32, int64 or npy");
}

// The tokens source refuses, before launch, a 32-bit file that a uint16
// vocabulary would read, and ids outside the vocabulary, with counts.
TEST(MdDataTest, TheTokensCheckFindsWideFilesAndBadIds) {
  const std::string dir = tempDir();
  std::vector<int64_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = 1 + static_cast<int64_t>(i * 7 % 500);
  auto check = [&](const std::string &name) {
    std::vector<data::Field> fields(2);
    for (data::Field &f : fields) {
      f.dtype = DType::i32;
      f.shape = {64};
      f.bound = 512;
    }
    fields[0].name = "idx";
    fields[1].name = "targets";
    absl::StatusOr<std::unique_ptr<data::Dataset>> d =
        data::OpenTokens(dir + "/" + name, 1, fields);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? (*d)->checkContents() : d.status();
  };
  writeRaw(dir + "/ok.bin", ids, 2);
  EXPECT_TRUE(check("ok.bin").ok());
  writeRaw(dir + "/wide.bin", ids, 4);
  EXPECT_EQ(check("wide.bin").message(),
            dir + "/wide.bin looks like 32-bit tokens: read as the uint16 "
                  "tokens a vocabulary of 512 takes, 4000 of its 4000 tokens "
                  "at odd positions are 0 (of 8000 scanned); convert it: "
                  "md-data convert --from uint32 " +
                dir + "/wide.bin -o FILE");
  ids[10] = 600;
  ids[20] = 900;
  writeRaw(dir + "/bad.bin", ids, 2);
  EXPECT_EQ(check("bad.bin").message(),
            dir + "/bad.bin: 2 of 4000 uint16 tokens scanned are outside the "
                  "model's vocabulary of 512 (the first at position 10 is "
                  "600, the largest 900)");
}

} // namespace
} // namespace md::mddata
