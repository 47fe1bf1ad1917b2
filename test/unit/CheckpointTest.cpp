//===- CheckpointTest.cpp - sharded checkpoints' layout, meta and files ---===//
//
// The parts of md's sharded checkpoints that need no running job: the
// logical tensors and pieces a plan's state maps to under every preset,
// meta.json written and read back (and foreign or damaged ones refused,
// naming the file and field; every edit of it refused by its own checksum),
// the files' checksums (corrupt, truncated and missing files named), the
// rank files' headers against meta.json (another save's id, step, rank, a
// piece the file does not hold), publication over an older checkpoint, and stale
// temporary directories of dead saves, which are removed and never found
// as checkpoints, and a save's retention (keep = K), which removes only
// md's complete checkpoints of its format. test/mdrun/resume.sh runs saves
// and loads end to end.
//
//===----------------------------------------------------------------------===//

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <xxhash.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/exec/Checkpoint.h"
#include "runtime/exec/CheckpointLayout.h"
#include "runtime/exec/CheckpointMeta.h"
#include "runtime/exec/Safetensors.h"
#include "runtime/data/Sampler.h"
#include "runtime/plan/Loader.h"
#include "test/plan/TrainingPlans.h"

namespace md::runtime {
namespace {

namespace ex = plan::examples;

std::string tempDir() {
  const char *base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base && *base ? base : "/tmp") + "/md-ckpt-XXXXXX";
  EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
  return pattern;
}

bool exists(const std::string &path) {
  return ::access(path.c_str(), F_OK) == 0;
}

void write(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string read(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

struct Bound {
  std::vector<uint8_t> bytes;
  std::optional<plan::LoadedPlan> loaded;
  plan::WorldBinding world;
};

std::unique_ptr<Bound> bind(ex::Preset preset, int64_t worldSize,
                            fb::DType paramDtype = fb::DType::F32) {
  ex::TrainingPlanOptions o;
  o.preset = preset;
  o.paramDtype = paramDtype;
  o.shardGroupSize = 2;
  auto b = std::make_unique<Bound>();
  b->bytes = ex::TrainingPlan(o).finish();
  absl::StatusOr<plan::LoadedPlan> l = plan::LoadPlan(b->bytes);
  EXPECT_TRUE(l.ok()) << l.status();
  if (!l.ok())
    return nullptr;
  b->loaded.emplace(std::move(*l));
  absl::StatusOr<plan::WorldBinding> w =
      plan::BindWorldSize(*b->loaded, worldSize);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok())
    return nullptr;
  b->world = *w;
  return b;
}

TEST(CheckpointLayout, EveryPresetSavesTheSameTensorsEachOnce) {
  std::map<std::string, std::vector<int64_t>> reference;
  const ex::Preset presets[] = {ex::Preset::Ddp, ex::Preset::Zero1,
                                ex::Preset::FsdpGradOp, ex::Preset::FsdpFull,
                                ex::Preset::Hybrid};
  for (ex::Preset preset : presets) {
    SCOPED_TRACE(ex::PresetName(preset));
    std::unique_ptr<Bound> b = bind(preset, 4);
    ASSERT_NE(b, nullptr);
    std::vector<TensorLayout> tensors =
        ShardedLayout(b->loaded->plan(), b->world);
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const TensorLayout &t : tensors) {
      EXPECT_NE(t.name.rfind("grad_acc/", 0), 0u) << t.name;
      // The pieces cover the tensor once, in order.
      int64_t covered = 0;
      for (const TensorPiece &p : t.pieces) {
        EXPECT_EQ(p.start, covered) << t.name;
        EXPECT_GT(p.count, 0) << t.name;
        EXPECT_LT(p.rank, 4) << t.name;
        covered += p.count;
      }
      EXPECT_EQ(covered, ShapeElements(t.shape)) << t.name;
      if (t.name.rfind("params/", 0) != 0)
        shapes[t.name] = t.shape;
    }
    EXPECT_TRUE(shapes.count("master/fc1.weight"));
    EXPECT_TRUE(shapes.count("exp_avg_sq/fc2.bias"));
    if (reference.empty())
      reference = shapes;
    EXPECT_EQ(shapes, reference);
  }
}

TEST(CheckpointLayout, ShardsAreWrittenOnceByTheRanksThatHoldThem) {
  // fsdp-full at W = 4: every rank writes its quarter of the master
  // weights; ddp: rank 0 writes the replicated state; hybrid (shard groups
  // of 2): ranks 0 and 1 write, ranks 2 and 3 hold copies.
  auto writers = [](ex::Preset preset) {
    std::unique_ptr<Bound> b = bind(preset, 4);
    std::set<int64_t> ranks;
    if (b == nullptr)
      return ranks;
    for (const TensorLayout &t : ShardedLayout(b->loaded->plan(), b->world))
      if (t.name.rfind("master/", 0) == 0)
        for (const TensorPiece &p : t.pieces)
          ranks.insert(p.rank);
    return ranks;
  };
  EXPECT_EQ(writers(ex::Preset::FsdpFull), (std::set<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(writers(ex::Preset::Ddp), (std::set<int64_t>{0}));
  EXPECT_EQ(writers(ex::Preset::Hybrid), (std::set<int64_t>{0, 1}));

  std::unique_ptr<Bound> b = bind(ex::Preset::FsdpFull, 4);
  ASSERT_NE(b, nullptr);
  const fb::Plan &plan = b->loaded->plan();
  for (uint32_t x = 0; x < plan.buffers()->size(); ++x) {
    const fb::Buffer &buf = *plan.buffers()->Get(x);
    if (buf.role() == fb::StateRole::GradAcc) {
      EXPECT_FALSE(IsCheckpointState(buf));
    }
    if (buf.role() != fb::StateRole::Master)
      continue;
    // Rank 3 holds the last quarter, padding after the unit's numel.
    HeldRange h = RankRange(buf, b->world, 3);
    EXPECT_TRUE(h.writes);
    EXPECT_EQ(h.begin, 3 * h.elements);
    EXPECT_EQ(h.valid, std::max<int64_t>(0, buf.numel() - h.begin));
  }
}

TEST(CheckpointLayout, ASeekedSamplerContinuesWhereItStood) {
  // The data position a checkpoint keeps is all the sampler needs: a
  // stream sought to it reads what the uninterrupted one reads next, across
  // an epoch's end.
  data::SamplerOptions so;
  so.datasetSize = 50;
  so.worldSize = 2;
  so.rank = 1;
  so.batchSize = 4;
  so.seed = 7;
  absl::StatusOr<data::DistributedSampler> a =
      data::DistributedSampler::Create(so);
  absl::StatusOr<data::DistributedSampler> b =
      data::DistributedSampler::Create(so);
  ASSERT_TRUE(a.ok() && b.ok());
  data::BatchStream whole(*a), resumed(*b);
  for (int k = 0; k < 9; ++k)
    whole.next();
  resumed.seek(whole.epoch(), whole.batchesInEpoch(), whole.batchesRead());
  for (int k = 0; k < 10; ++k) {
    data::BatchStream::Next x = whole.next(), y = resumed.next();
    EXPECT_EQ(x.epoch, y.epoch) << k;
    EXPECT_EQ(x.indices, y.indices) << k;
  }
  EXPECT_EQ(whole.epoch(), 3); // 6 batches per epoch: 19 batches read
  EXPECT_EQ(resumed.batchesRead(), 19);
}

//===----------------------------------------------------------------------===//
// meta.json
//===----------------------------------------------------------------------===//

ShardedMeta sampleMeta() {
  ShardedMeta m;
  m.id = "0123456789abcdef";
  m.model = "gpt \"small\"";
  m.plan = "fsdp-full";
  m.worldSize = 2;
  m.shardGroupSize = 2;
  m.step = 100;
  m.epoch = 3;
  m.batchesInEpoch = 7;
  m.batchesRead = 407;
  m.microBatch = 8;
  m.seed = 1337;
  m.samplerSeed = -5;
  m.files = {{"rank_00000.safetensors", 1024, 0xfedcba9876543210ull},
             {"rank_00001.safetensors", 1000, 0x42}};
  TensorLayout t;
  t.name = "master/w";
  t.dtype = "F32";
  t.shape = {3, 4};
  t.pieces = {{0, "u0.master", 0, 0, 6}, {1, "u0.master", 0, 6, 6}};
  m.tensors.push_back(t);
  return m;
}

TEST(CheckpointMeta, RoundTrips) {
  ShardedMeta m = sampleMeta();
  std::string json = ShardedMetaJson(m);
  EXPECT_NE(json.find("\"format\": \"md-sharded\""), std::string::npos);
  EXPECT_NE(json.find("\"version\": 3"), std::string::npos);
  EXPECT_NE(json.find("\n  \"meta_xxh3\": \""), std::string::npos);
  absl::StatusOr<ShardedMeta> back = ParseShardedMeta(json, "c/meta.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->checksummed);
  EXPECT_EQ(back->version, 3);
  EXPECT_EQ(back->id, m.id);
  EXPECT_EQ(back->model, m.model);
  EXPECT_EQ(back->step, 100);
  EXPECT_EQ(back->batchesRead, 407);
  EXPECT_EQ(back->samplerSeed, -5);
  ASSERT_EQ(back->files.size(), 2u);
  EXPECT_EQ(back->files[0].xxh3, 0xfedcba9876543210ull);
  EXPECT_EQ(back->files[1].bytes, 1000);
  ASSERT_EQ(back->tensors.size(), 1u);
  EXPECT_EQ(back->tensors[0].shape, (std::vector<int64_t>{3, 4}));
  ASSERT_EQ(back->tensors[0].pieces.size(), 2u);
  EXPECT_EQ(back->tensors[0].pieces[1].rank, 1);
  EXPECT_EQ(back->tensors[0].pieces[1].start, 6);
}

/// The message of parsing `json` as c/meta.json.
std::string parseError(const std::string &json) {
  absl::StatusOr<ShardedMeta> m = ParseShardedMeta(json, "c/meta.json");
  EXPECT_FALSE(m.ok());
  return m.ok() ? "" : std::string(m.status().message());
}

void replace(std::string &s, const std::string &from, const std::string &to) {
  size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
}

/// meta.json's text `json` (of version 3) after an edit, with its checksum
/// made to hold again, as one who edits it on purpose would: what the
/// fields' own checks and the rank files' headers must then find.
std::string reseal(const std::string &json) {
  const size_t tail = std::string("  \"meta_xxh3\": \"").size() + 16 + 4;
  std::string body = json.substr(0, json.size() - tail);
  return absl::StrFormat("%s  \"meta_xxh3\": \"%016x\"\n}\n", body,
                         XXH3_64bits(body.data(), body.size()));
}

/// `json` (version 3) as version 2 wrote it: no checksum.
std::string asVersion2(std::string json) {
  size_t at = json.rfind(",\n  \"meta_xxh3\"");
  EXPECT_NE(at, std::string::npos);
  json = json.substr(0, at) + "\n}\n";
  size_t v = json.find("\"version\": 3");
  EXPECT_NE(v, std::string::npos);
  json.replace(v, 12, "\"version\": 2");
  return json;
}

TEST(CheckpointMeta, ForeignAndDamagedFilesAreRefusedByName) {
  EXPECT_EQ(parseError("{\"__metadata__\": {}} trailing"),
            "c/meta.json: not an md checkpoint's meta.json (not the JSON md "
            "writes, at byte 21)");
  std::string json = ShardedMetaJson(sampleMeta());
  std::string other = json;
  replace(other, "\"md-sharded\"", "\"pt\"");
  EXPECT_EQ(parseError(other),
            "c/meta.json: format: \"pt\", not an md sharded checkpoint");
  other = json;
  replace(other, "\"version\": 3", "\"version\": 1");
  EXPECT_EQ(parseError(other),
            "c/meta.json: version: 1; this md reads versions 2 to 3 (version "
            "1 lists no tensor layout and cannot be loaded)");
  other = json;
  replace(other, "\"version\": 3", "\"version\": 4");
  EXPECT_EQ(parseError(other), "c/meta.json: version: 4; this md reads "
                               "versions 2 to 3 (a newer md saved it)");
  // Edited with the checksum made to hold again: the fields' own checks.
  other = json;
  replace(other, "\"step\": 100,", "");
  EXPECT_EQ(parseError(reseal(other)), "c/meta.json: step: missing");
  other = json;
  replace(other, "\"xxh3\": \"0000000000000042\"", "\"xxh3\": \"42\"");
  EXPECT_EQ(parseError(reseal(other)),
            "c/meta.json: files[1].xxh3: \"42\" is not 16 hex digits");
  other = json;
  replace(other, "\"name\": \"rank_00001.safetensors\"", "\"name\": \"../x\"");
  EXPECT_EQ(parseError(reseal(other)),
            "c/meta.json: files[1].name: \"../x\" is not a file name");
  // A piece that leaves a gap, or one on a rank the world lacks.
  other = json;
  replace(other, "\"start\": 6", "\"start\": 7");
  EXPECT_EQ(parseError(reseal(other)),
            "c/meta.json: tensors[0].pieces[1]: elements [7, 13) do not "
            "continue the 6 before them in a tensor of 12");
  other = json;
  replace(other, "\"rank\": 1", "\"rank\": 2");
  EXPECT_EQ(parseError(reseal(other)),
            "c/meta.json: tensors[0].pieces[1].rank: 2, but the world size "
            "is 2");
  other = json;
  replace(other, "\"count\": 6}]", "\"count\": 5}]");
  EXPECT_EQ(parseError(reseal(other)),
            "c/meta.json: tensors[0]: its pieces cover 11 of 12 elements");
}

TEST(CheckpointMeta, EveryEditIsRefusedByItsChecksum) {
  const std::string json = ShardedMetaJson(sampleMeta());
  // Each field, edited as one would by hand: a DataLoss naming meta.json
  // and both checksums, before any field is believed.
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"\"step\": 100", "\"step\": 99"},
      {"\"id\": \"0123456789abcdef\"", "\"id\": \"0123456789abcdee\""},
      {"\"model\": \"gpt", "\"model\": \"gpu"},
      {"\"plan\": \"fsdp-full\"", "\"plan\": \"ddp\""},
      {"\"world_size\": 2", "\"world_size\": 3"},
      {"\"shard_group_size\": 2", "\"shard_group_size\": 1"},
      {"\"epoch\": 3", "\"epoch\": 4"},
      {"\"batches_in_epoch\": 7", "\"batches_in_epoch\": 8"},
      {"\"batches_read\": 407", "\"batches_read\": 406"},
      {"\"micro_batch\": 8", "\"micro_batch\": 4"},
      {"\"seed\": 1337", "\"seed\": 1338"},
      {"\"sampler_seed\": -5", "\"sampler_seed\": 5"},
      {"\"bytes\": 1000", "\"bytes\": 1001"},
      {"\"xxh3\": \"0000000000000042\"", "\"xxh3\": \"0000000000000043\""},
      {"\"dtype\": \"F32\"", "\"dtype\": \"BF16\""},
      {"\"shape\": [3, 4]", "\"shape\": [4, 3]"},
      {"\"offset\": 0, \"start\": 6", "\"offset\": 1, \"start\": 6"},
      {"\"tensor\": \"u0.master\", \"offset\": 0, \"start\": 6",
       "\"tensor\": \"u1.master\", \"offset\": 0, \"start\": 6"},
      {"\"name\": \"master/w\"", "\"name\": \"master/v\""},
  };
  for (const auto &[from, to] : edits) {
    std::string other = json;
    replace(other, from, to);
    absl::StatusOr<ShardedMeta> m = ParseShardedMeta(other, "c/meta.json");
    ASSERT_FALSE(m.ok()) << to;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << to;
    EXPECT_EQ(m.status().message().find("c/meta.json: XXH3-64 checksum "), 0u)
        << m.status();
    EXPECT_NE(m.status().message().find(
                  ", but its meta_xxh3 is "),
              std::string::npos)
        << m.status();
  }
  // Every byte changed, one at a time: never accepted.
  for (size_t at = 0; at < json.size(); ++at) {
    std::string other = json;
    other[at] = other[at] == '7' ? '8' : '7';
    EXPECT_FALSE(ParseShardedMeta(other, "c/meta.json").ok())
        << "byte " << at << " changed and accepted";
  }
  // The checksum removed (or not last): refused as well.
  std::string cut = json.substr(0, json.rfind(",\n  \"meta_xxh3\"")) + "\n}\n";
  EXPECT_EQ(parseError(cut),
            "c/meta.json: meta_xxh3: missing, or not the last field as md "
            "writes it (edited or damaged)");
}

TEST(CheckpointMeta, Version2IsReadWithoutAChecksum) {
  // An older md's meta.json (version 2) has no checksum: it is read, and
  // says so (the resume warns); one that carries a checksum is an edited
  // version 3.
  const std::string json = ShardedMetaJson(sampleMeta());
  absl::StatusOr<ShardedMeta> m =
      ParseShardedMeta(asVersion2(json), "c/meta.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->checksummed);
  EXPECT_EQ(m->version, 2);
  EXPECT_EQ(m->step, 100);
  std::string downgraded = json;
  replace(downgraded, "\"version\": 3", "\"version\": 2");
  EXPECT_EQ(parseError(downgraded),
            "c/meta.json: version 2, which has no meta_xxh3, but it carries "
            "one (edited)");
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

TEST(CheckpointFiles, CorruptTruncatedAndMissingFilesAreNamed) {
  std::string dir = tempDir();
  std::string path = dir + "/rank_00000.safetensors";
  std::vector<SafetensorsTensor> tensors(1);
  tensors[0].name = "u0.master";
  tensors[0].dtype = "F32";
  tensors[0].shape = {4};
  tensors[0].data.assign(16, 7);
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  absl::StatusOr<CheckpointFile> f = HashFile(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->name, "rank_00000.safetensors");
  EXPECT_EQ(f->bytes, static_cast<int64_t>(read(path).size()));
  EXPECT_TRUE(VerifyCheckpointFile(dir, *f, true).ok());

  // One byte flipped: the size holds, the checksum does not.
  std::string bytes = read(path);
  bytes.back() ^= 1;
  write(path, bytes);
  EXPECT_TRUE(VerifyCheckpointFile(dir, *f, false).ok());
  absl::Status s = VerifyCheckpointFile(dir, *f, true);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message().find(path + ": XXH3-64 checksum "), 0u) << s;
  EXPECT_NE(s.message().find("(corrupt)"), std::string::npos) << s;

  write(path, bytes.substr(0, 10));
  s = VerifyCheckpointFile(dir, *f, false);
  EXPECT_EQ(s.message(), absl::StrFormat("%s: 10 bytes, but meta.json lists "
                                         "%d (truncated)",
                                         path, f->bytes));

  ::unlink(path.c_str());
  s = VerifyCheckpointFile(dir, *f, true);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message().find(path + ": missing (meta.json lists it)"), 0u) << s;

  // A file that is no safetensors at all: its header is refused by name.
  write(path, std::string("\x10\0\0\0\0\0\0\0{not json}      ", 24));
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  absl::StatusOr<SafetensorsHeader> h = ReadSafetensorsHeader(fd, path);
  ::close(fd);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message().find(path + ": not a safetensors file"), 0u)
      << h.status();
  std::filesystem::remove_all(dir);
}

TEST(CheckpointFiles, RankFilesHeadersMustMatchMetaJson) {
  // A checkpoint of two ranks, each file holding 6 of a 12-element tensor
  // and repeating the save's id, its rank and the step in its header.
  std::string dir = tempDir();
  ShardedMeta m = sampleMeta();
  m.files.clear();
  for (int r = 0; r < 2; ++r) {
    std::vector<SafetensorsTensor> tensors(1);
    tensors[0].name = "u0.master";
    tensors[0].dtype = "F32";
    tensors[0].shape = {6};
    tensors[0].data.assign(24, static_cast<uint8_t>(r));
    std::string path = ShardFileName(dir, r);
    ASSERT_TRUE(WriteSafetensors(path, tensors,
                                 {{"format", "md-sharded-rank"},
                                  {"id", m.id},
                                  {"rank", absl::StrCat(r)},
                                  {"step", "100"}})
                    .ok());
    absl::StatusOr<CheckpointFile> f = HashFile(path);
    ASSERT_TRUE(f.ok()) << f.status();
    m.files.push_back(*f);
  }
  // meta.json (as read back) against the files, on the rank that checks
  // their checksums.
  auto problem = [&](const ShardedMeta &edited) -> std::string {
    absl::StatusOr<ShardedMeta> read =
        ParseShardedMeta(ShardedMetaJson(edited), dir + "/meta.json");
    EXPECT_TRUE(read.ok()) << read.status();
    for (int64_t r = 0; r < 2; ++r) {
      absl::Status s =
          RankFileCheckStatus(dir, *read, r, CheckRankFile(dir, *read, r, true));
      if (!s.ok()) {
        EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
        return std::string(s.message());
      }
    }
    return "";
  };
  EXPECT_EQ(problem(m), "");
  const std::string f0 = ShardFileName(dir, 0);
  ShardedMeta e = m;
  e.step = 99;
  EXPECT_EQ(problem(e),
            f0 + ": holds step 100, but meta.json says step 99");
  e = m;
  e.id = "00000000deadbeef";
  EXPECT_EQ(problem(e), f0 + ": written by save 0123456789abcdef, but "
                             "meta.json's id is 00000000deadbeef (a file of "
                             "another save)");
  e = m;
  std::swap(e.files[0], e.files[1]);
  EXPECT_EQ(problem(e), ShardFileName(dir, 1) +
                            ": holds rank 1's state, but meta.json lists it "
                            "as rank 0's");
  e = m;
  e.tensors[0].dtype = "BF16";
  EXPECT_EQ(problem(e), f0 + ": holds no BF16 tensor 'u0.master' of 6 "
                             "elements or more, which meta.json places "
                             "master/w's elements [0, 6) in");
  e = m;
  e.tensors[0].pieces[1].offset = 1;
  EXPECT_EQ(problem(e), ShardFileName(dir, 1) +
                            ": holds no F32 tensor 'u0.master' of 7 elements "
                            "or more, which meta.json places master/w's "
                            "elements [6, 12) in");
  e = m;
  e.tensors[0].pieces[0].fileTensor = "u1.master";
  EXPECT_EQ(problem(e), f0 + ": holds no F32 tensor 'u1.master' of 6 "
                             "elements or more, which meta.json places "
                             "master/w's elements [0, 6) in");
  // Without the full check (another rank's file) only the size is checked.
  e = m;
  e.step = 99;
  EXPECT_EQ(CheckRankFile(dir, e, 0, false).problem, FileProblem::None);

  // A file that is no md rank file at all.
  std::vector<SafetensorsTensor> plain(1);
  plain[0].name = "u0.master";
  plain[0].dtype = "F32";
  plain[0].shape = {6};
  plain[0].data.assign(24, 0);
  ASSERT_TRUE(WriteSafetensors(f0, plain).ok());
  absl::StatusOr<CheckpointFile> f = HashFile(f0);
  ASSERT_TRUE(f.ok());
  m.files[0] = *f;
  EXPECT_EQ(problem(m), f0 + ": not a rank file of an md sharded checkpoint "
                             "(its header does not read as one of format "
                             "md-sharded-rank)");
  std::filesystem::remove_all(dir);
}

TEST(CheckpointFiles, AFileWrittenInChunksIsHashedAsItIsWritten) {
  // Two tensors filled through a 5-byte staging buffer (chunks that split
  // elements and tensors' ends), hashed by what the writer hands out: the
  // same bytes and hash as WriteSafetensors' file and HashFile.
  std::string dir = tempDir();
  std::vector<SafetensorsTensor> whole(2);
  whole[0] = {"b", "F32", {3}, {}};
  whole[1] = {"a", "BF16", {2, 3}, {}};
  for (SafetensorsTensor &t : whole)
    for (size_t i = 0; i < 12; ++i) // 3 f32 and 6 bf16 values
      t.data.push_back(static_cast<uint8_t>(31 * i + t.name[0]));
  ASSERT_TRUE(WriteSafetensors(dir + "/whole.safetensors", whole).ok());
  std::vector<SafetensorsSource> sources;
  std::vector<int64_t> fills;
  for (const SafetensorsTensor &t : whole) {
    const std::vector<uint8_t> *data = &t.data;
    sources.push_back({t.name, t.dtype, t.shape,
                       [data, &fills](int64_t at, absl::Span<uint8_t> out) {
                         fills.push_back(static_cast<int64_t>(out.size()));
                         std::memcpy(out.data(), data->data() + at, out.size());
                         return absl::OkStatus();
                       }});
  }
  StreamHash hash;
  ASSERT_TRUE(WriteSafetensorsFrom(
                  dir + "/chunked.safetensors", sources, {},
                  [&](absl::Span<const uint8_t> b) {
                    hash.update(b.data(), b.size());
                  },
                  5)
                  .ok());
  EXPECT_EQ(read(dir + "/chunked.safetensors"),
            read(dir + "/whole.safetensors"));
  EXPECT_EQ(fills, (std::vector<int64_t>{5, 5, 2, 5, 5, 2})); // a, then b
  absl::StatusOr<CheckpointFile> f = HashFile(dir + "/chunked.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(hash.bytes(), f->bytes);
  EXPECT_EQ(hash.digest(), f->xxh3);

  // Data of another size than the shape's, and an unknown dtype, are
  // refused naming the tensor, before anything is written.
  std::vector<SafetensorsTensor> short1 = {{"w", "F32", {3}, {1, 2, 3}}};
  EXPECT_EQ(WriteSafetensors(dir + "/short.safetensors", short1),
            absl::InvalidArgumentError(
                dir + "/short.safetensors: tensor w: 3 bytes of data for "
                      "shape [3] of F32"));
  std::vector<SafetensorsSource> odd = {{"w", "F8", {3}, sources[0].fill}};
  EXPECT_EQ(WriteSafetensorsFrom(dir + "/odd.safetensors", odd, {}),
            absl::InvalidArgumentError(dir + "/odd.safetensors: tensor w: "
                                             "unknown dtype F8"));
  EXPECT_FALSE(exists(dir + "/short.safetensors"));
  EXPECT_FALSE(exists(dir + "/odd.safetensors"));

  // A fill that fails is the write's error, and leaves no file.
  sources[1].fill = [](int64_t, absl::Span<uint8_t>) {
    return absl::InternalError("the device is gone");
  };
  absl::Status s =
      WriteSafetensorsFrom(dir + "/failed.safetensors", sources, {});
  EXPECT_EQ(s, absl::InternalError("the device is gone"));
  EXPECT_FALSE(exists(dir + "/failed.safetensors"));
  std::filesystem::remove_all(dir);
}

TEST(CheckpointFiles, HeaderGivesEachTensorsByteRange) {
  std::string dir = tempDir();
  std::string path = dir + "/f.safetensors";
  std::vector<SafetensorsTensor> tensors(2);
  tensors[0] = {"b", "BF16", {3}, {1, 2, 3, 4, 5, 6}};
  tensors[1] = {"a", "F32", {2}, {9, 9, 9, 9, 8, 8, 8, 8}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"k", "v"}}).ok());
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  absl::StatusOr<SafetensorsHeader> h = ReadSafetensorsHeader(fd, path);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->metadata.at("k"), "v");
  const SafetensorsEntry &b = h->tensors.at("b");
  EXPECT_EQ(b.dtype, "BF16");
  EXPECT_EQ(b.end - b.begin, 6);
  uint8_t got[2];
  ASSERT_TRUE(ReadAllAt(fd, got, 2, b.begin + 2));
  EXPECT_EQ(got[0], 3);
  EXPECT_EQ(got[1], 4);
  // Tensors lie in name order: "b" ends the file.
  EXPECT_EQ(h->tensors.at("a").end, b.begin);
  EXPECT_EQ(b.end, h->fileBytes);
  ::close(fd);
  std::filesystem::remove_all(dir);
}

TEST(CheckpointFiles, StaleTemporariesAreRemovedAndNeverFound) {
  std::string root = tempDir();
  auto makeCheckpoint = [&](const std::string &dir, bool meta) {
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
    write(ShardFileName(dir, 0), "x");
    if (meta)
      write(dir + "/meta.json", "{}");
  };
  EXPECT_EQ(LatestShardedCheckpointStep(root), -1);
  makeCheckpoint(root + "/step_00000004", true);
  // A dead run's save of step 8, complete but never published, and one
  // without meta.json: neither is a checkpoint.
  makeCheckpoint(root + "/step_00000008.tmp-00000000deadbeef", true);
  makeCheckpoint(root + "/step_00000009", false);
  EXPECT_EQ(LatestShardedCheckpointStep(root), 4);

  std::string mine = SaveTempDir(root + "/step_00000012", "0123456789abcdef");
  EXPECT_EQ(mine, root + "/step_00000012.tmp-0123456789abcdef");
  makeCheckpoint(mine, false);
  ASSERT_TRUE(RemoveStaleTemporaries(root, mine).ok());
  EXPECT_FALSE(exists(root + "/step_00000008.tmp-00000000deadbeef"));
  EXPECT_TRUE(exists(mine));
  EXPECT_TRUE(exists(root + "/step_00000004/meta.json"));
  EXPECT_EQ(LatestShardedCheckpointStep(root), 4);

  EXPECT_EQ(NewSaveId().size(), 16u);
  EXPECT_NE(NewSaveId(), NewSaveId());
  std::filesystem::remove_all(root);
}

TEST(CheckpointFiles, OnlyTemporariesOfWritersGoneAreRemoved) {
  // Every kind of temporary a save leaves when killed: a sharded save's
  // directory and a full checkpoint's file. Those whose writer holds their
  // lock (here this test, through another descriptor, as a live save of
  // another run would) stay; the others go.
  std::string root = tempDir();
  const std::string deadFull = root + "/step_00000004.safetensors.tmp.999999";
  const std::string liveFull = root + "/step_00000008.safetensors.tmp.1";
  const std::string deadDir = root + "/step_00000012.tmp-00000000deadbeef";
  const std::string liveDir = root + "/step_00000016.tmp-00000000cafef00d";
  write(deadFull, "half a checkpoint");
  write(liveFull, "half a checkpoint");
  ASSERT_EQ(::mkdir(deadDir.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(liveDir.c_str(), 0755), 0);
  write(ShardFileName(deadDir, 0) + ".tmp.999999", "x");
  write(ShardFileName(liveDir, 0), "x");
  write(root + "/notes.tmp.1", "a user's");
  {
    TemporaryLock full(liveFull), dir(liveDir);
    EXPECT_TRUE(TemporaryWriterGone(deadFull));
    EXPECT_FALSE(TemporaryWriterGone(liveFull));
    ASSERT_TRUE(RemoveStaleTemporaries(root, "").ok());
    EXPECT_FALSE(exists(deadFull));
    EXPECT_FALSE(exists(deadDir));
    EXPECT_TRUE(exists(liveFull));
    EXPECT_TRUE(exists(ShardFileName(liveDir, 0)));
  }
  // Their writers gone too, the next save's housekeeping removes them.
  ASSERT_TRUE(RemoveStaleTemporaries(root, "").ok());
  EXPECT_FALSE(exists(liveFull));
  EXPECT_FALSE(exists(liveDir));
  EXPECT_TRUE(exists(root + "/notes.tmp.1"));
  std::filesystem::remove_all(root);
}

TEST(CheckpointFiles, AnAtomicWriteRemovesItsDeadWritersTemporaries) {
  // --save-final's file, killed mid-write before, then written again.
  std::string root = tempDir();
  const std::string path = root + "/final.safetensors";
  write(path + ".tmp.999999", "dead");
  write(path + ".tmp.2", "live");
  write(root + "/other.safetensors.tmp.999999", "another file's");
  TemporaryLock live(path + ".tmp.2");
  ASSERT_TRUE(WriteFileAtomically(path, [](int fd) {
                return WriteAll(fd, "new", 3);
              }).ok());
  EXPECT_EQ(read(path), "new");
  EXPECT_FALSE(exists(path + ".tmp.999999"));
  EXPECT_TRUE(exists(path + ".tmp.2"));
  EXPECT_TRUE(exists(root + "/other.safetensors.tmp.999999"));
  std::filesystem::remove_all(root);
}

TEST(CheckpointFiles, ACheckpointSetAsideByADeadSaveIsPutBack) {
  // A save on a file system without RENAME_EXCHANGE moves the published
  // step_5 aside, then renames its own directory in; it died in between.
  std::string root = tempDir();
  std::string aside = root + "/step_00000005.tmp-00000000000000aa.old";
  std::string unpublished = root + "/step_00000005.tmp-00000000000000aa";
  for (const std::string &dir : {aside, unpublished}) {
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
    write(dir + "/meta.json", dir == aside ? "old" : "new");
  }
  EXPECT_EQ(LatestShardedCheckpointStep(root), -1);
  ASSERT_TRUE(RestoreSetAsideCheckpoints(root).ok());
  EXPECT_EQ(read(root + "/step_00000005/meta.json"), "old");
  EXPECT_FALSE(exists(aside));
  EXPECT_EQ(LatestShardedCheckpointStep(root), 5);

  EXPECT_TRUE(exists(unpublished)); // only a save's cleanup removes it

  // The next save's cleanup puts back what it finds set aside (step_13)
  // first. When step_7 was published after all, its set-aside predecessor
  // is stale, and so is one without meta.json: neither is put back, and
  // the cleanup removes them.
  std::string aside13 = root + "/step_00000013.tmp-00000000000000ee.old";
  std::string published = root + "/step_00000007";
  std::string staleAside = published + ".tmp-00000000000000bb.old";
  std::string halfAside = root + "/step_00000009.tmp-00000000000000cc.old";
  for (const std::string &dir : {aside13, published, staleAside, halfAside})
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  write(aside13 + "/meta.json", "13");
  write(published + "/meta.json", "new");
  write(staleAside + "/meta.json", "old");
  write(ShardFileName(halfAside, 0), "x");
  std::string mine = SaveTempDir(root + "/step_00000011", "00000000000000dd");
  ASSERT_EQ(::mkdir(mine.c_str(), 0755), 0);
  ASSERT_TRUE(RemoveStaleTemporaries(root, mine).ok());
  EXPECT_EQ(read(published + "/meta.json"), "new");
  EXPECT_FALSE(exists(staleAside));
  EXPECT_FALSE(exists(halfAside));
  EXPECT_FALSE(exists(root + "/step_00000009"));
  EXPECT_FALSE(exists(unpublished));
  EXPECT_TRUE(exists(mine));
  EXPECT_EQ(read(root + "/step_00000013/meta.json"), "13");
  EXPECT_FALSE(exists(aside13));
  EXPECT_EQ(LatestShardedCheckpointStep(root), 13);
  // --resume auto passing over damaged ones: the newest below a step.
  EXPECT_EQ(LatestShardedCheckpointStep(root, 13), 7);
  EXPECT_EQ(LatestShardedCheckpointStep(root, 7), 5);
  EXPECT_EQ(LatestShardedCheckpointStep(root, 5), -1);
  std::filesystem::remove_all(root);
}

TEST(CheckpointFiles, PublishingReplacesAnOlderCheckpointOnlyWhenComplete) {
  std::string root = tempDir();
  std::string dir = root + "/step_00000005";
  auto prepare = [&](const std::string &tmp, const std::string &tag) {
    ASSERT_EQ(::mkdir(tmp.c_str(), 0755), 0);
    write(ShardFileName(tmp, 0), tag);
    write(ShardFileName(tmp, 1), tag);
    write(tmp + "/meta.json", tag);
  };
  prepare(dir + ".tmp-1", "old");
  ASSERT_TRUE(PublishShardedCheckpoint(dir + ".tmp-1", dir).ok());
  EXPECT_EQ(read(dir + "/meta.json"), "old");
  EXPECT_FALSE(exists(dir + ".tmp-1"));
  // A second save of the same step swaps in whole; the old one is gone
  // afterwards, not before.
  prepare(dir + ".tmp-2", "new");
  ASSERT_TRUE(PublishShardedCheckpoint(dir + ".tmp-2", dir).ok());
  EXPECT_EQ(read(dir + "/meta.json"), "new");
  EXPECT_EQ(read(ShardFileName(dir, 1)), "new");
  EXPECT_FALSE(exists(dir + ".tmp-2"));
  // A directory holding other files too is not replaced.
  write(dir + "/notes.txt", "mine");
  prepare(dir + ".tmp-3", "newer");
  absl::Status s = PublishShardedCheckpoint(dir + ".tmp-3", dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            dir + ": exists and holds other files; not replacing it");
  EXPECT_EQ(read(dir + "/meta.json"), "new");
  EXPECT_TRUE(exists(dir + ".tmp-3/meta.json"));
  std::filesystem::remove_all(root);
}

//===----------------------------------------------------------------------===//
// Retention (keep = K)
//===----------------------------------------------------------------------===//

/// A published sharded checkpoint of `step` under `root`, as a save leaves
/// it: two ranks' files and a meta.json listing them at their sizes.
std::string makeSharded(const std::string &root, int64_t step) {
  std::string dir = CheckpointPath(root, fb::CheckpointFormat::Sharded, step);
  EXPECT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
  ShardedMeta m = sampleMeta();
  m.step = step;
  for (int r = 0; r < 2; ++r) {
    std::string bytes(static_cast<size_t>(10 + r), 'x');
    write(ShardFileName(dir, r), bytes);
    m.files[r].bytes = static_cast<int64_t>(bytes.size());
  }
  write(dir + "/meta.json", ShardedMetaJson(m));
  return dir;
}

/// A full checkpoint of `step` under `root`, as a save writes it.
std::string makeFull(const std::string &root, int64_t step) {
  std::string path = CheckpointPath(root, fb::CheckpointFormat::Full, step);
  NamedTensor w{"w", {2}, {1.0f, 2.0f}};
  EXPECT_TRUE(WriteFullCheckpoint(path, {w},
                                  {{"format", "pt"},
                                   {"model", "tiny"},
                                   {"plan", "ddp"},
                                   {"step", absl::StrCat(step)},
                                   {"world_size", "2"}})
                  .ok());
  return path;
}

std::vector<std::string> names(const std::string &dir) {
  std::vector<std::string> out;
  for (const auto &e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CheckpointRetention, KeepsTheNewestShardedCheckpoints) {
  std::string root = tempDir();
  for (int64_t step : {2, 4, 6, 8})
    makeSharded(root, step);
  absl::StatusOr<std::vector<std::string>> removed =
      RetainNewestCheckpoints(root, fb::CheckpointFormat::Sharded, 2, 8);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, (std::vector<std::string>{root + "/step_00000002",
                                                root + "/step_00000004"}));
  EXPECT_EQ(names(root),
            (std::vector<std::string>{"step_00000006", "step_00000008"}));
  EXPECT_EQ(LatestShardedCheckpointStep(root), 8);
  // Nothing more to remove; keep = 1 leaves the one just written alone.
  removed = RetainNewestCheckpoints(root, fb::CheckpointFormat::Sharded, 2, 8);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(removed->empty());
  removed = RetainNewestCheckpoints(root, fb::CheckpointFormat::Sharded, 1, 8);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(names(root), (std::vector<std::string>{"step_00000008"}));
  std::filesystem::remove_all(root);
}

TEST(CheckpointRetention, NeverRemovesTheCheckpointJustWritten) {
  // A run resumed from step 3 writes step 4 while steps 6 and 9 of an
  // earlier run are still there: the one written stays whatever its step,
  // with the K - 1 newest others.
  std::string root = tempDir();
  for (int64_t step : {3, 4, 6, 9})
    makeSharded(root, step);
  absl::StatusOr<std::vector<std::string>> removed =
      RetainNewestCheckpoints(root, fb::CheckpointFormat::Sharded, 2, 4);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(names(root),
            (std::vector<std::string>{"step_00000004", "step_00000009"}));
  std::filesystem::remove_all(root);
}

TEST(CheckpointRetention, LeavesWhatIsNotACompleteCheckpointOfItsFormat) {
  std::string root = tempDir();
  makeSharded(root, 1);
  makeSharded(root, 2);
  makeSharded(root, 3);
  makeFull(root, 2);
  // Not md's complete checkpoints: a directory holding a user's file too,
  // one whose meta.json is another step's, one missing a rank's file, one
  // with no meta.json, a temporary of a save in progress, files and
  // directories named otherwise, a full checkpoint that is not safetensors.
  std::string notes = makeSharded(root, 4);
  write(notes + "/notes.txt", "mine");
  std::string renamed = makeSharded(root, 5);
  std::filesystem::rename(renamed, root + "/step_00000006");
  std::string damaged = makeSharded(root, 7);
  std::filesystem::remove(ShardFileName(damaged, 1));
  ASSERT_EQ(::mkdir((root + "/step_00000008").c_str(), 0755), 0);
  std::string inProgress =
      SaveTempDir(CheckpointPath(root, fb::CheckpointFormat::Sharded, 9),
                  "0123456789abcdef");
  ASSERT_EQ(::mkdir(inProgress.c_str(), 0755), 0);
  write(root + "/step_1", "short");
  write(root + "/README", "mine");
  write(root + "/step_00000005.safetensors", "not safetensors");
  makeSharded(root, 12);

  absl::StatusOr<std::vector<std::string>> removed =
      RetainNewestCheckpoints(root, fb::CheckpointFormat::Sharded, 2, 12);
  ASSERT_TRUE(removed.ok()) << removed.status();
  // Of the sharded checkpoints 1, 2, 3 and 12, 3 and 12 stay.
  EXPECT_EQ(*removed, (std::vector<std::string>{root + "/step_00000001",
                                                root + "/step_00000002"}));
  EXPECT_EQ(names(root), (std::vector<std::string>{
                             "README",
                             "step_00000002.safetensors",
                             "step_00000003",
                             "step_00000004",
                             "step_00000005.safetensors",
                             "step_00000006",
                             "step_00000007",
                             "step_00000008",
                             "step_00000009.tmp-0123456789abcdef",
                             "step_00000012",
                             "step_1",
                         }));
  EXPECT_TRUE(exists(notes + "/notes.txt"));

  // The full checkpoints count apart: the one at step 2 is the only real
  // one, step 5's is not safetensors.
  makeFull(root, 10);
  removed = RetainNewestCheckpoints(root, fb::CheckpointFormat::Full, 1, 10);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed,
            (std::vector<std::string>{root + "/step_00000002.safetensors"}));
  EXPECT_TRUE(exists(root + "/step_00000005.safetensors"));
  EXPECT_TRUE(exists(root + "/step_00000010.safetensors"));
  EXPECT_TRUE(exists(root + "/step_00000003/meta.json"));
  std::filesystem::remove_all(root);
}

TEST(CheckpointRetention, FullCheckpointsOfAnotherStepOrRunStay) {
  std::string root = tempDir();
  makeFull(root, 1);
  makeFull(root, 2);
  makeFull(root, 3);
  // A file renamed by hand: its metadata says step 1, its name step 4.
  std::filesystem::copy_file(root + "/step_00000001.safetensors",
                             root + "/step_00000004.safetensors");
  absl::StatusOr<std::vector<std::string>> removed =
      RetainNewestCheckpoints(root, fb::CheckpointFormat::Full, 2, 3);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(names(root),
            (std::vector<std::string>{"step_00000002.safetensors",
                                      "step_00000003.safetensors",
                                      "step_00000004.safetensors"}));
  // An empty directory name is the default "checkpoints", and a directory
  // that does not exist holds nothing to remove.
  removed =
      RetainNewestCheckpoints(root + "/none", fb::CheckpointFormat::Full, 1, 3);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(removed->empty());
  std::filesystem::remove_all(root);
}

TEST(CheckpointRetention, KeepBelowOneIsRefused) {
  absl::StatusOr<std::vector<std::string>> removed =
      RetainNewestCheckpoints("nowhere", fb::CheckpointFormat::Sharded, 0, 1);
  EXPECT_EQ(removed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(removed.status().message(),
            "keep = 0: a save keeps at least the checkpoint it wrote");
}

TEST(CheckpointRetention, ARemovalThatFailsIsAnErrorNamingTheCheckpoint) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "root may remove from a read-only directory";
  std::string root = tempDir();
  makeFull(root, 1);
  makeFull(root, 2);
  ASSERT_EQ(::chmod(root.c_str(), 0555), 0);
  absl::StatusOr<std::vector<std::string>> removed =
      RetainNewestCheckpoints(root, fb::CheckpointFormat::Full, 1, 2);
  ::chmod(root.c_str(), 0755);
  EXPECT_EQ(removed.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(removed.status().message(),
            root + "/step_00000001.safetensors: cannot remove it (keep = 1): "
                   "Permission denied");
  std::filesystem::remove_all(root);
}

} // namespace
} // namespace md::runtime
