//===- PlanLoaderTest.cpp - the plan loader on good and bad plans -------===//
//
// Good plans come from test/plan/ExamplePlans (a tiny fsdp-full MLP with a
// micro-steps body, reduce-scatter, clipping, AdamW and hooks). Every bad
// plan is that plan with one thing broken, and each test checks the field
// path the loader names. The last tests feed truncated, bit-flipped and
// shuffled files: a sealed plan whose bytes changed is always refused by
// its checksum, and behind the checksum (the changed bytes sealed again,
// or a plan without one) the verifiers refuse or find it still valid,
// never a crash, and a FlatBuffers refusal names the table and field.
//
// Block and instruction indices of the tiny MLP used below:
//   blocks[0] step: [0] micro_steps, [1] state_load, [2] all_gather (records
//     event 0), [3] view (waits for event 0), [4..6] views, [7] batch,
//     [8] matmul, [9] relu, [10] matmul, [11] cross_entropy, [12] record_loss,
//     [13] accum_scale, [14] cross_entropy_grad, [15] matmul_grad,
//     [16] relu_grad, [17] matmul_grad, [18] flatten, [19] grad_total,
//     [20] reduce_scatter, [21] global_norm, [22] all_reduce, [23] sqrt,
//     [24] clip, [25..27] state_load, [28] step, [29] constant 1,
//     [30] scalar_arith (step + 1), [31] lr, [32] adamw_update,
//     [33..35] state_store
//   blocks[1] micro-steps body: the step's [1..18] at [0..17], then
//     [18] grad_accumulate
//   blocks[2] hooks: [0] every 10, [1] every 50, [2] every 100
//   blocks[3] every 10: [0] loss, [1] all_reduce, [2] log, [3] constant,
//     [4] scalar_compare, [5] if
//   blocks[4] then: [0] print, [1] exit
//   blocks[5] every 50: [0] evaluate, [1] log
//   blocks[6] eval body: gather, forward, [12] yield
//   blocks[7] every 100: [0] save
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/plan/Checksum.h"
#include "runtime/plan/Loader.h"
#include "runtime/plan/Memory.h"
#include "runtime/plan/PlanBuilder.h"
#include "runtime/plan/Schema.h"
#include "runtime/plan/Summary.h"
#include "test/plan/ExamplePlans.h"
#include "test/plan/TrainingPlans.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace md::plan {
namespace {

using examples::TinyMlpOptions;
using examples::TinyMlpPlan;
using ::testing::HasSubstr;

constexpr int32_t kStep = 0, kMicro = 1, kHooks = 2, kEvery10 = 3, kThen = 4,
                  kEvery50 = 5, kEvalBody = 6;

fb::PlanT Tiny(const TinyMlpOptions &options = {}) {
  return TinyMlpPlan(options).plan();
}

LoadOptions At(int64_t worldSize) {
  LoadOptions options;
  options.worldSize = worldSize;
  return options;
}

absl::StatusOr<LoadedPlan> Load(const fb::PlanT &plan, int64_t worldSize = 2) {
  return LoadPlan(PlanBuilder::serialize(plan), At(worldSize));
}

fb::InstructionT &Inst(fb::PlanT &plan, int32_t block, int32_t index) {
  return *plan.blocks.at(block)->instructions.at(index);
}

fb::BufferT &Buf(fb::PlanT &plan, int32_t index) {
  return *plan.buffers.at(index);
}

/// The loader refuses `plan` with a message containing `expected`.
void ExpectRefused(const fb::PlanT &plan, const std::string &expected,
                   int64_t worldSize = 2) {
  absl::StatusOr<LoadedPlan> loaded = Load(plan, worldSize);
  ASSERT_FALSE(loaded.ok())
      << "accepted a plan that should fail with: " << expected;
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr(expected));
  EXPECT_EQ(std::string(loaded.status().message()).find('\n'),
            std::string::npos)
      << "errors are one line";
}

/// Applies `mutate` to the tiny MLP and expects the loader to refuse it.
void ExpectRefusedAfter(const std::function<void(fb::PlanT &)> &mutate,
                        const std::string &expected, int64_t worldSize = 2) {
  fb::PlanT plan = Tiny();
  mutate(plan);
  ExpectRefused(plan, expected, worldSize);
}

// --- the schema table ----------------------------------------------------

TEST(PlanSchemaTest, EveryOpcodeHasOneSignature) {
  std::vector<std::string> names;
  for (int v = 1; v <= static_cast<int>(fb::Opcode::MAX); ++v) {
    auto opcode = static_cast<fb::Opcode>(v);
    const OpcodeInfo *info = GetOpcodeInfo(opcode);
    ASSERT_NE(info, nullptr)
        << "no signature for " << fb::EnumNameOpcode(opcode);
    EXPECT_EQ(info->opcode, opcode);
    EXPECT_LE(info->inputs.min, info->inputs.max) << info->name;
    EXPECT_LE(info->outputs.min, info->outputs.max) << info->name;
    names.push_back(info->name);
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end())
      << "duplicate names";
  EXPECT_EQ(GetOpcodeInfo(fb::Opcode::Invalid), nullptr);
  EXPECT_EQ(GetOpcodeInfo(static_cast<fb::Opcode>(999)), nullptr);
  EXPECT_EQ(OpcodeName(static_cast<fb::Opcode>(999)), "opcode 999");
}

TEST(PlanSchemaTest, OnlyNonCommunicatingIoMayBeRank0Only) {
  // The rank0_only rule leans on these flags.
  EXPECT_TRUE(GetOpcodeInfo(fb::Opcode::Log)->is(kIo));
  EXPECT_FALSE(GetOpcodeInfo(fb::Opcode::Log)->is(kCollective));
  EXPECT_TRUE(GetOpcodeInfo(fb::Opcode::Save)->is(kCollective));
  EXPECT_TRUE(GetOpcodeInfo(fb::Opcode::Evaluate)->is(kCollective));
  EXPECT_TRUE(GetOpcodeInfo(fb::Opcode::AllReduce)->is(kCollective));
}

TEST(PlanSchemaTest, ShardElementsRoundUp) {
  EXPECT_EQ(ShardElements(212, 2), 106);
  EXPECT_EQ(ShardElements(212, 3), 71);
  EXPECT_EQ(ShardElements(0, 4), 0);
  EXPECT_EQ(ShardElements(INT64_MAX, 2), INT64_MAX / 2 + 1);
  EXPECT_EQ(ShardElements(5, 0), 5); // an unbound world
}

TEST(PlanSchemaTest, SourceHashIsFnv1a64) {
  EXPECT_EQ(SourceHash(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(SourceHash("a"), 0xaf63dc4c8601ec8cull);
}

// --- good plans ------------------------------------------------------------

TEST(PlanLoaderTest, TinyMlpLoadsAndBinds) {
  absl::StatusOr<LoadedPlan> loaded = Load(Tiny(), 2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->bound());
  EXPECT_EQ(loaded->world().worldSize, 2);
  EXPECT_EQ(loaded->world().shardGroupSize, 2);
  EXPECT_EQ(loaded->world().replicateGroupSize, 1);
  EXPECT_EQ(loaded->world().accumulationSteps, 2); // 16 / (4 * 2)
  EXPECT_EQ(loaded->site(kMicro).parentBlock, kStep);
  EXPECT_EQ(loaded->site(kMicro).parentInstruction, 0);
  EXPECT_EQ(loaded->site(kMicro).depth, 1);
  EXPECT_EQ(loaded->site(kThen).parentBlock, kEvery10);
  EXPECT_EQ(loaded->site(kThen).parentInstruction, 5);
  EXPECT_EQ(loaded->site(kThen).depth, 2);
  EXPECT_EQ(loaded->site(kStep).parentBlock, -1);
  EXPECT_EQ(std::string(loaded->plan().header()->model()->c_str()), "tiny_mlp");
}

TEST(PlanLoaderTest, MinimalPlanLoads) {
  absl::StatusOr<LoadedPlan> loaded =
      LoadPlan(examples::MinimalPlan().finish());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->world().worldSize, 1); // pinned by the plan
  EXPECT_EQ(loaded->world().accumulationSteps, 4);
}

TEST(PlanLoaderTest, WithoutWorldSizeAnUnpinnedPlanStaysUnbound) {
  absl::StatusOr<LoadedPlan> loaded = Load(Tiny(), 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->bound());
  absl::StatusOr<WorldBinding> world = BindWorldSize(*loaded, 4);
  ASSERT_TRUE(world.ok()) << world.status();
  EXPECT_EQ(world->accumulationSteps, 1);
}

TEST(PlanLoaderTest, APinnedPlanBindsItsWorldSize) {
  TinyMlpOptions pinned;
  pinned.pinnedWorldSize = 2;
  absl::StatusOr<LoadedPlan> loaded = Load(Tiny(pinned), 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->world().worldSize, 2);
}

TEST(PlanLoaderTest, AccumulationStepsFollowTheWorldSize) {
  absl::StatusOr<LoadedPlan> loaded = Load(Tiny(), 0);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(BindWorldSize(*loaded, 1)->accumulationSteps, 4);
  EXPECT_EQ(BindWorldSize(*loaded, 4)->accumulationSteps, 1);
  for (int64_t w : {3, 8}) {
    absl::StatusOr<WorldBinding> world = BindWorldSize(*loaded, w);
    ASSERT_FALSE(world.ok()) << "W = " << w;
    EXPECT_THAT(
        std::string(world.status().message()),
        HasSubstr(
            "global_batch 16 is not a multiple of micro_batch 4 x world size"));
  }
  EXPECT_THAT(std::string(BindWorldSize(*loaded, 0).status().message()),
              HasSubstr("world size 0 is not between 1 and"));
}

// --- stage (a) ---------------------------------------------------------------

TEST(PlanLoaderTest, RefusesEveryTruncation) {
  std::vector<uint8_t> bytes = TinyMlpPlan().finish();
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<LoadedPlan> loaded =
        LoadPlan(absl::MakeConstSpan(bytes.data(), n), At(2));
    if (!loaded.ok())
      continue;
    // Only the zero padding after the last string may go: the plan is the same.
    for (size_t k = n; k < bytes.size(); ++k)
      ASSERT_EQ(bytes[k], 0)
          << "accepted the first " << n << " of " << bytes.size()
          << " bytes, dropping data at " << k;
    EXPECT_EQ(loaded->plan().blocks()->size(), 8u);
  }
  EXPECT_THAT(
      std::string(
          LoadPlan(absl::MakeConstSpan(bytes.data(), 7)).status().message()),
      HasSubstr("not a plan file: 7 bytes is too short"));
  EXPECT_THAT(
      std::string(LoadPlan(absl::MakeConstSpan(bytes.data(), bytes.size() / 2))
                      .status()
                      .message()),
      HasSubstr("checksum: the plan says XXH3-64 "));
  // A plan without a checksum (an older mdc's) cut in half: the verifier
  // names the first table it cannot read.
  std::vector<uint8_t> old = PlanBuilder::serialize(Tiny(), false);
  std::string message(
      LoadPlan(absl::MakeConstSpan(old.data(), old.size() / 2))
          .status()
          .message());
  EXPECT_THAT(message,
              HasSubstr("malformed plan file: the FlatBuffers verifier refuses "));
  EXPECT_THAT(message, HasSubstr("(the table at byte "));
}

// --- the checksum ------------------------------------------------------------

TEST(PlanChecksumTest, ASealedPlanCarriesItsChecksum) {
  std::vector<uint8_t> bytes = TinyMlpPlan().finish();
  std::optional<PlanChecksumField> field = FindPlanChecksum(bytes);
  ASSERT_TRUE(field.has_value());
  EXPECT_EQ(field->stated, PlanChecksum(bytes, field->offset));
  absl::StatusOr<LoadedPlan> loaded = LoadPlan(bytes, At(2));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->checksum(), field->stated);
  // Sealing again changes nothing; an unsealed plan has no field.
  std::vector<uint8_t> again = bytes;
  ASSERT_TRUE(SealPlan(again).ok());
  EXPECT_EQ(again, bytes);
  std::vector<uint8_t> old = PlanBuilder::serialize(Tiny(), false);
  EXPECT_FALSE(FindPlanChecksum(old).has_value());
  EXPECT_FALSE(SealPlan(old).ok());
}

TEST(PlanChecksumTest, APlanWithoutAChecksumLoadsAsBefore) {
  // What an mdc before the checksum wrote: accepted, as older schema
  // versions are, and said to have none.
  absl::StatusOr<LoadedPlan> loaded =
      LoadPlan(PlanBuilder::serialize(Tiny(), false), At(2));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->checksum().has_value());
}

TEST(PlanChecksumTest, EveryChangedByteIsRefused) {
  // One byte changed, anywhere: never accepted. Where the root table still
  // reads, the checksum names both values; the few bytes of the root table
  // and its vtable that hold the checksum's place are refused by the
  // verifier (or as a plan of no checksum whose bytes are the original's).
  const std::vector<uint8_t> good = TinyMlpPlan().finish();
  const std::optional<PlanChecksumField> field = FindPlanChecksum(good);
  ASSERT_TRUE(field.has_value());
  const std::string stated = absl::StrFormat("%016x", field->stated);
  int byChecksum = 0;
  for (size_t at = 0; at < good.size(); ++at) {
    std::vector<uint8_t> bytes = good;
    bytes[at] ^= 0x5a;
    absl::StatusOr<LoadedPlan> loaded = LoadPlan(bytes, At(2));
    if (loaded.ok()) {
      // Only a change that leaves the plan without its checksum field can
      // pass, and then every other byte is the original's.
      EXPECT_FALSE(loaded->checksum().has_value()) << "byte " << at;
      continue;
    }
    std::string message(loaded.status().message());
    if (message.find("checksum: the plan says XXH3-64 ") == 0) {
      ++byChecksum;
      if (at < field->offset || at >= field->offset + 8)
        EXPECT_THAT(message, HasSubstr(stated)) << "byte " << at;
    }
  }
  EXPECT_GT(byChecksum, static_cast<int>(good.size()) * 9 / 10);
  // The message in full, once.
  std::vector<uint8_t> bytes = good;
  bytes[good.size() - 9] ^= 1;
  EXPECT_THAT(std::string(LoadPlan(bytes).status().message()),
              testing::MatchesRegex(
                  "checksum: the plan says XXH3-64 " + stated +
                  ", its [0-9]+ bytes hash to [0-9a-f]{16}: they changed "
                  "after mdc wrote them \\(a damaged or edited file\\); "
                  "compile it again"));
}

TEST(PlanChecksumTest, RandomCorruptionsAreNeverAcceptedWithAnotherMeaning) {
  // 2000 plans with 1 to 8 random bytes changed, a range shuffled or
  // overwritten: none loads unless it is the original plan.
  const std::vector<uint8_t> good = TinyMlpPlan().finish();
  std::mt19937 rng(31);
  int accepted = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> bytes = good;
    if (trial % 2 == 0) {
      for (int k = 1 + static_cast<int>(rng() % 8); k > 0; --k)
        bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    } else {
      size_t a = rng() % bytes.size();
      size_t len = std::min<size_t>(1 + rng() % 64, bytes.size() - a);
      std::shuffle(bytes.begin() + a, bytes.begin() + a + len, rng);
    }
    if (bytes == good)
      continue;
    absl::StatusOr<LoadedPlan> loaded = LoadPlan(bytes, At(0));
    if (!loaded.ok())
      continue;
    ++accepted;
    // Accepted only without its checksum, every other byte unchanged.
    EXPECT_FALSE(loaded->checksum().has_value());
  }
  EXPECT_LE(accepted, 2);
}

TEST(PlanChecksumTest, TheVerifierNamesTheInstructionAndFieldItStopsAt) {
  // A plan without a checksum whose blocks[0].instructions[8] (matmul) has
  // its ints pointing outside the file: the refusal names them.
  fb::PlanT plan = Tiny();
  Inst(plan, kStep, 8).ints = {1, 2};
  std::vector<uint8_t> bytes = PlanBuilder::serialize(plan, false);
  std::vector<uint8_t> copy = bytes; // aligned, to read the layout from
  const fb::Instruction *inst =
      fb::GetPlan(copy.data())->blocks()->Get(kStep)->instructions()->Get(8);
  const auto *table = reinterpret_cast<const flatbuffers::Table *>(inst);
  const size_t field =
      static_cast<size_t>(reinterpret_cast<const uint8_t *>(table) -
                          copy.data()) +
      table->GetOptionalFieldOffset(fb::Instruction::VT_INTS);
  const uint32_t outside = 0x7ffffff0;
  std::memcpy(&bytes[field], &outside, 4);
  std::string message(LoadPlan(bytes, At(2)).status().message());
  EXPECT_THAT(message,
              HasSubstr("malformed plan file: the FlatBuffers verifier "
                        "refuses blocks[0].instructions[8].ints (opcode "
                        "matmul) (the table at byte "));
  // Sealed again (as a writer that meant it would), the same refusal.
  fb::PlanT sealedPlan = Tiny();
  Inst(sealedPlan, kStep, 8).ints = {1, 2};
  std::vector<uint8_t> sealed = PlanBuilder::serialize(sealedPlan);
  std::vector<uint8_t> sealedCopy = sealed;
  const fb::Instruction *sealedInst = fb::GetPlan(sealedCopy.data())
                                          ->blocks()
                                          ->Get(kStep)
                                          ->instructions()
                                          ->Get(8);
  const auto *sealedTable =
      reinterpret_cast<const flatbuffers::Table *>(sealedInst);
  const size_t sealedField =
      static_cast<size_t>(reinterpret_cast<const uint8_t *>(sealedTable) -
                          sealedCopy.data()) +
      sealedTable->GetOptionalFieldOffset(fb::Instruction::VT_INTS);
  std::memcpy(&sealed[sealedField], &outside, 4);
  EXPECT_THAT(std::string(LoadPlan(sealed, At(2)).status().message()),
              HasSubstr("checksum: the plan says XXH3-64 "));
  ASSERT_TRUE(SealPlan(sealed).ok());
  EXPECT_THAT(std::string(LoadPlan(sealed, At(2)).status().message()),
              HasSubstr("refuses blocks[0].instructions[8].ints (opcode "
                        "matmul)"));
}

TEST(PlanLoaderTest, RefusesAnotherFileIdentifier) {
  std::vector<uint8_t> bytes = TinyMlpPlan().finish();
  std::copy_n("XY\x01Z", 4, bytes.begin() + 4);
  EXPECT_THAT(
      std::string(LoadPlan(bytes).status().message()),
      HasSubstr(
          "not a plan file: file identifier 'XY\\x01Z', expected 'MDP1'"));
  std::copy_n("MDP2", 4, bytes.begin() + 4);
  EXPECT_THAT(
      std::string(LoadPlan(bytes).status().message()),
      HasSubstr(
          "plan file of another format generation: identifier 'MDP2', this "
          "runtime reads 'MDP1'"));
}

TEST(PlanLoaderTest, KeepAndFailedSlotsNeedSchemaVersion3) {
  // A save's keep and a failing exit load at version 3; at version 2 the
  // loader names the slot's version rather than misreading the plan.
  for (bool fails : {false, true}) {
    examples::TrainingPlanOptions o;
    o.exitAtStep = 4;
    o.exitFails = fails;
    o.saveEvery = 2;
    o.saveKeep = fails ? 0 : 3;
    PlanBuilder built = examples::TrainingPlan(o);
    fb::PlanT plan = std::move(built.plan());
    EXPECT_EQ(plan.schema_version, 3u);
    EXPECT_TRUE(Load(plan, 2).ok());
    plan.schema_version = 2;
    ExpectRefused(plan, fails ? "exit with 1 ints needs schema_version 3, the "
                                "plan says 2"
                              : "save with 2 ints needs schema_version 3, the "
                                "plan says 2");
  }
  // keep is positive, as any slot of its kind.
  examples::TrainingPlanOptions o;
  o.saveEvery = 2;
  o.saveKeep = 3;
  PlanBuilder built = examples::TrainingPlan(o);
  fb::PlanT plan = std::move(built.plan());
  for (auto &block : plan.blocks)
    for (auto &inst : block->instructions)
      if (inst->opcode == fb::Opcode::Save)
        inst->ints[1] = 0;
  ExpectRefused(plan, "blocks[3].instructions[0].ints[1]: 0 is not positive");
}

TEST(PlanLoaderTest, FrozenParametersHaveUnitsOfTheirOwnFromVersion8) {
  // A unit's flat buffer holds trainable or frozen parameters, not both.
  ExpectRefusedAfter([](fb::PlanT &p) { p.params[1]->trainable = false; },
                     "params[1].trainable: unit 0 holds trainable and frozen "
                     "parameters; md keeps them in separate units");
  // A frozen parameter in no buffer (offset -1) is still allowed.
  fb::PlanT plan = Tiny();
  plan.params[1]->trainable = false;
  plan.params[1]->offset = -1;
  EXPECT_TRUE(Load(plan).ok());
  // A unit whose parameters are all frozen, in a `frozen` state, loads at
  // version 8; at version 7 the loader names the version it needs.
  plan = Tiny();
  for (auto &param : plan.params)
    param->trainable = false;
  for (auto &buffer : plan.buffers)
    if (buffer->role == fb::StateRole::Master)
      buffer->role = fb::StateRole::Frozen;
  plan.schema_version = kFrozenSchemaVersion;
  absl::StatusOr<LoadedPlan> loaded = Load(plan);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  plan.schema_version = kFrozenSchemaVersion - 1;
  ExpectRefused(plan, "role: frozen parameters need schema_version 8, the "
                      "plan says 7");
  // A frozen state belongs to a unit.
  plan.schema_version = kFrozenSchemaVersion;
  for (auto &buffer : plan.buffers)
    if (buffer->role == fb::StateRole::Frozen)
      buffer->unit = -1;
  ExpectRefused(plan, "unit: a frozen state belongs to a unit");
}

TEST(PlanLoaderTest, RefusesANewerOrZeroSchemaVersion) {
  fb::PlanT plan = Tiny();
  plan.schema_version = kSchemaVersion + 1;
  ExpectRefused(plan, "schema_version: plan version " +
                          std::to_string(kSchemaVersion + 1) +
                          " is newer than this runtime's " +
                          std::to_string(kSchemaVersion));
  plan.schema_version = 0;
  ExpectRefused(plan, "schema_version: 0 is not a version");
}

TEST(PlanLoaderTest, RefusesAMisalignedVectorOf8ByteValues) {
  // Found by plan-load-fuzzer: FlatBuffers' verifier checks a vector's
  // length for 4-byte alignment only, so an int64 vector may start at 4 mod
  // 8. Build one: hide a vector {length 1, value 212} at a 4 mod 8 data
  // address inside buffers[5]'s name and point its shape field at it.
  fb::PlanT plan = Tiny();
  const std::string marker(40, 'Z');
  Buf(plan, 5).name = marker;
  std::vector<uint8_t> bytes = PlanBuilder::serialize(plan);
  auto at =
      std::search(bytes.begin(), bytes.end(), marker.begin(), marker.end());
  ASSERT_NE(at, bytes.end());
  size_t fake = static_cast<size_t>(at - bytes.begin());
  fake += (8 - fake % 8) % 8; // the length at 0 mod 8, so the values at 4 mod 8
  const uint32_t length = 1;
  const int64_t value = 212;
  std::memcpy(&bytes[fake], &length, 4);
  std::memcpy(&bytes[fake + 4], &value, 8);
  // The uoffset of the shape field points from the field to the vector.
  std::vector<uint8_t> aligned(bytes); // a copy to read the layout from
  const fb::Buffer *buffer = fb::GetPlan(aligned.data())->buffers()->Get(5);
  const auto *table = reinterpret_cast<const flatbuffers::Table *>(buffer);
  size_t field = static_cast<size_t>(reinterpret_cast<const uint8_t *>(table) -
                                     aligned.data()) +
                 table->GetOptionalFieldOffset(fb::Buffer::VT_SHAPE);
  ASSERT_LT(field, fake);
  const uint32_t offset = static_cast<uint32_t>(fake - field);
  std::memcpy(&bytes[field], &offset, 4);
  ASSERT_TRUE(SealPlan(bytes).ok()); // the alignment check behind the checksum
  EXPECT_THAT(
      std::string(LoadPlan(bytes, At(2)).status().message()),
      HasSubstr("malformed plan file: buffers[5].shape is not 8-byte aligned"));
}

TEST(PlanLoaderTest, EnforcesItsLimits) {
  std::vector<uint8_t> bytes = TinyMlpPlan().finish();
  LoadOptions small;
  small.maxBytes = 100;
  EXPECT_THAT(std::string(LoadPlan(bytes, small).status().message()),
              HasSubstr("is larger than the limit of 100 bytes"));
  LoadOptions shallow;
  shallow.maxDepth = 2;
  EXPECT_THAT(std::string(LoadPlan(bytes, shallow).status().message()),
              HasSubstr("over the limits of 2 nested tables"));
  LoadOptions few;
  few.maxTables = 10;
  EXPECT_FALSE(LoadPlan(bytes, few).ok());
}

// --- indices
// ---------------------------------------------------------------------

TEST(PlanLoaderTest, RefusesEachKindOfIndexOutOfRange) {
  const size_t numBuffers = Tiny().buffers.size();
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 8).inputs[1] = 9999; },
      absl::StrCat(
          "blocks[0].instructions[8].inputs[1]: buffer 9999 out of range (",
          numBuffers, " buffers)"));
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kMicro, 7).outputs[0] = -1; },
      "blocks[1].instructions[7].outputs[0]: buffer -1 out of range");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 3).waits[0] = 7; },
      "blocks[0].instructions[3].waits[0]: event 7 out of range (4 events)");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 2).record = 5; },
      "blocks[0].instructions[2].record: event 5 out of range (4 events)");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 8).loc = 3; },
      "blocks[0].instructions[8].loc: location 3 out of range (1 locations)");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 0).blocks[0] = 42; },
      "blocks[0].instructions[0].blocks[0]: block 42 out of range (8 blocks)");
  ExpectRefusedAfter([](fb::PlanT &p) { p.params[1]->unit = 3; },
                     "params[1].unit: unit 3 out of range (1 units)");
  ExpectRefusedAfter([](fb::PlanT &p) { Buf(p, 0).unit = 5; },
                     "buffers[0].unit: unit 5 out of range (1 units)");
  ExpectRefusedAfter([](fb::PlanT &p) { Buf(p, 5).block = 99; },
                     "buffers[5].block: block 99 out of range (8 blocks)");
  ExpectRefusedAfter([](fb::PlanT &p) { p.step_block = 9; },
                     "step_block: block 9 out of range (8 blocks)");
  ExpectRefusedAfter([](fb::PlanT &p) { p.hooks_block = -7; },
                     "hooks_block: block -7 out of range (8 blocks)");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 7).ints[0] = 5; },
      "blocks[0].instructions[7].ints[0]: dataset 5 out of range (2 datasets)");
  ExpectRefusedAfter([](fb::PlanT &p) { p.recipe->train_data = 4; },
                     "recipe.train_data: dataset 4 out of range (2 datasets)");
  ExpectRefusedAfter([](fb::PlanT &p) { p.units[0]->id = 3; },
                     "units[0].id: 3, but a unit's id is its index");
}

TEST(PlanLoaderTest, QuotesNamesOnOneLine) {
  // ExpectRefused also checks that the message is one line.
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        p.params[0]->name = "fc\n1";
        p.params[1]->name = "fc\n1";
      },
      "params[1].name: 'fc\\x0a1' names two parameters");
}

// --- sizes
// ---------------------------------------------------------------------------

TEST(PlanLoaderTest, RefusesSizesThatOverflowOrDisagree) {
  // buffers[4] is a shard of the master weights, buffers[5] the gathered
  // f32[212].
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Buf(p, 5).shape = {int64_t{1} << 40, int64_t{1} << 40};
        Buf(p, 5).numel = 1;
      },
      "buffers[5].shape: element count overflows 64 bits");
  ExpectRefusedAfter([](fb::PlanT &p) { Buf(p, 0).numel = INT64_MAX / 2; },
                     "buffers[0]: 4611686018427387903 elements of f32 overflow "
                     "64-bit byte counts");
  ExpectRefusedAfter([](fb::PlanT &p) { Buf(p, 5).numel += 1; },
                     "buffers[5].numel: 213, but its shape has 212 elements");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Buf(p, 5).shape = {-2, -106};
      },
      "buffers[5].shape[0]: negative dim -2");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Buf(p, 5).shape = {1, 1, 1, 1, 1, 1, 1, 1, 212}; },
      "buffers[5].shape: rank 9 is more than 8 dims");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        p.params[0]->shape = {INT64_MAX, 2};
      },
      "params[0].shape: element count overflows 64 bits");
  ExpectRefusedAfter([](fb::PlanT &p) { p.params[3]->offset = INT64_MAX - 1; },
                     "params[3].offset: elements [9223372036854775806, "
                     "9223372036854775806 + 4) "
                     "do not fit in unit 0 of 212 elements");
  ExpectRefusedAfter([](fb::PlanT &p) { p.params[1]->offset = 100; },
                     "params[1].offset: overlaps params[0] in unit 0");
  ExpectRefusedAfter([](fb::PlanT &p) { p.units[0]->numel = -1; },
                     "units[0].numel: -1 is negative");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Buf(p, 4).shape = {3}; },
      "buffers[4].shape: a shard has no static shape (1 dims given)");
}

// --- enums
// -----------------------------------------------------------------------------

TEST(PlanLoaderTest, RefusesUnknownEnumValues) {
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kStep, 9).opcode = static_cast<fb::Opcode>(999);
      },
      "blocks[0].instructions[9].opcode: unknown opcode 999");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 9).opcode = fb::Opcode::Invalid; },
      "blocks[0].instructions[9].opcode: unknown opcode 0");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Buf(p, 5).dtype = static_cast<fb::DType>(200); },
      "buffers[5].dtype: 200 is not an element type");
  ExpectRefusedAfter([](fb::PlanT &p) { Buf(p, 5).dtype = fb::DType::Invalid; },
                     "buffers[5].dtype: 0 is not an element type");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 2).ints[0] = 9; },
      "blocks[0].instructions[2].ints[0]: 9 is not a group (0 to 2)");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 20).ints[1] = 7; },
      "blocks[0].instructions[20].ints[1]: 7 is not a reduction (0 to 4)");
  ExpectRefusedAfter([](fb::PlanT &p) { Inst(p, kStep, 20).ints[2] = -2; },
                     "blocks[0].instructions[20].ints[2]: bucket -2 is neither "
                     "a bucket id nor -1");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Buf(p, 0).role = static_cast<fb::StateRole>(42); },
      "buffers[0].role: unknown state role 42");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Buf(p, 0).size_kind = static_cast<fb::SizeKind>(5); },
      "buffers[0].size_kind: unknown size kind 5");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { p.blocks[7]->kind = static_cast<fb::BlockKind>(77); },
      "blocks[7].kind: unknown block kind 77");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        p.header->options->shard = static_cast<fb::ShardKind>(9);
      },
      "header.options.shard: unknown shard kind 9");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        p.params[0]->init->kind = static_cast<fb::InitKind>(6);
      },
      "params[0].init.kind: unknown initialiser 6");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kEvery10, 4).ints[0] = 6; },
      "blocks[3].instructions[4].ints[0]: 6 is not a comparison kind (0 to 5)");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 8).ints[1] = 2; },
      "blocks[0].instructions[8].ints[1]: 2 is not a flag (0 to 1)");
  ExpectRefusedAfter([](fb::PlanT &p) { Inst(p, kStep, 8).stream = 2; },
                     "blocks[0].instructions[8].stream: 2 is not a stream (0 "
                     "compute, 1 comm)");
}

// --- arity and attributes
// -----------------------------------------------------------------

TEST(PlanLoaderTest, RefusesWrongArityAndMissingAttributes) {
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 8).inputs.push_back(4); },
      "blocks[0].instructions[8].inputs: matmul takes 2 to 3, has 4");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 2).ints.pop_back(); },
      "blocks[0].instructions[2].ints: all_gather takes 3, has 2");
  ExpectRefusedAfter([](fb::PlanT &p) { Inst(p, kStep, 24).floats.clear(); },
                     "blocks[0].instructions[24].floats: clip takes 1, has 0");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 24).outputs.push_back(4); },
      "blocks[0].instructions[24].outputs: clip of 1 gradients has 2 results");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kEvery10, 2).strings.clear(); },
      "blocks[3].instructions[2].strings: log takes at least 1, has 0");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kEvery10, 2).strings = {"train", "a", "b"};
      },
      "blocks[3].instructions[2].strings: log takes its tag and either no "
      "value "
      "names or one per value (1 values), has 3 strings");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 24).floats[0] = std::nan(""); },
      "blocks[0].instructions[24].floats[0]: nan is not a finite number");
  ExpectRefusedAfter([](fb::PlanT &p) { Inst(p, kStep, 32).floats[2] = 0; },
                     "blocks[0].instructions[32]: adamw_update: floats[2] "
                     "(eps) 0 is not positive");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        for (int k = 0; k < 2; ++k) {
          p.blocks.push_back(std::make_unique<fb::BlockT>());
          p.blocks.back()->kind = fb::BlockKind::Else;
        }
        Inst(p, kEvery10, 5).blocks = {kThen, 8, 9};
      },
      "blocks[3].instructions[5].blocks: if takes 1 to 2, has 3");
}

// --- operand types
// ------------------------------------------------------------------------

TEST(PlanLoaderTest, RefusesOperandsOfTheWrongType) {
  // fc1's matmul: x [4, 8] times w1 [16, 8]^T, fed fc2's weight [4, 16]
  // instead.
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kStep, 8).inputs[1] = Inst(p, kStep, 10).inputs[1];
      },
      "blocks[0].instructions[8].inputs[1]: matmul: buffer");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kStep, 8).inputs[1] = Inst(p, kStep, 10).inputs[1];
      },
      "is f32[4, 16], but its contracted dim 16 differs from "
      "blocks[0].instructions[8].inputs[0]'s 8");
  ExpectRefusedAfter([](fb::PlanT &p) { Inst(p, kStep, 6).ints[0] = 209; },
                     "blocks[0].instructions[6].outputs[0]: view: buffer");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 6).ints[0] = 209; },
      "which at offset 209 runs past the 212 elements of inputs[0]");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kStep, 18).inputs.push_back(Inst(p, kStep, 18).inputs[0]);
      },
      "too small for the 340 elements of the inputs");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kStep, 2).outputs[0] = Inst(p, kStep, 3).outputs[0];
      },
      "blocks[0].instructions[2].outputs[0]: all_gather: buffer");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kStep, 2).outputs[0] = Inst(p, kStep, 3).outputs[0];
      },
      "is f32[16, 8], but must be the 1-D buffer of 212 elements "
      "blocks[0].instructions[2].inputs[0] shards");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kStep, 2).ints[0] = static_cast<int64_t>(fb::Group::Replicate);
      },
      "is f32 shard(212, world), but the collective's group is replicate");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 8).inputs[1] = 0; },
      "blocks[0].instructions[8].inputs[1]: matmul: buffer 0 is f32 shard(212, "
      "world), persistent state (master): only state_load, state_store, "
      "grad_accumulate and grad_total touch state");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kStep, 33).outputs[0] = Inst(p, kStep, 33).inputs[0];
      },
      "blocks[0].instructions[33].outputs[0]: state_store: buffer");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kEvery10, 4).outputs[0] = Inst(p, kEvery10, 4).inputs[0];
      },
      "but must be bool");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kEvery10, 3).floats = {1.0, 2.0};
      },
      "so a constant needs exactly its 1 values in floats and none in ints");
}

TEST(PlanLoaderTest, ChecksAMatmulGeluAsAMatmulWithItsPreAndVersion4) {
  // fc1's matmul (x [4, 8] by w1 [16, 8]^T) as a matmul_gelu: its second
  // output, pre, has the type of its first.
  auto fuse = [](fb::PlanT &p) {
    fb::InstructionT &inst = Inst(p, kStep, 8);
    inst.opcode = fb::Opcode::MatmulGelu;
    inst.ints.push_back(1); // approximate
    auto pre = std::make_unique<fb::BufferT>(Buf(p, inst.outputs[0]));
    pre->name = "pre";
    p.buffers.push_back(std::move(pre));
    inst.outputs.push_back(static_cast<int32_t>(p.buffers.size()) - 1);
    p.schema_version = 4;
  };
  fb::PlanT plan = Tiny();
  fuse(plan);
  absl::StatusOr<LoadedPlan> loaded = Load(plan);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  plan.schema_version = 3;
  ExpectRefused(plan, "blocks[0].instructions[8].opcode: matmul_gelu needs "
                      "schema_version 4, the plan says 3");
  ExpectRefusedAfter(
      [&](fb::PlanT &p) {
        fuse(p);
        p.buffers.back()->dtype = fb::DType::BF16;
      },
      "blocks[0].instructions[8].outputs[1]: matmul_gelu: buffer");
  ExpectRefusedAfter(
      [&](fb::PlanT &p) {
        fuse(p);
        Inst(p, kStep, 8).inputs[1] = Inst(p, kStep, 10).inputs[1];
      },
      "but its contracted dim 16 differs from "
      "blocks[0].instructions[8].inputs[0]'s 8");
}

// --- rank0_only
// ------------------------------------------------------------------------------

TEST(PlanLoaderTest, RefusesRank0OnlyOnCollectivesAndNonIo) {
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kEvery10, 1).rank0_only = true; },
      "blocks[3].instructions[1]: rank0_only on all_reduce, which "
      "communicates: "
      "every rank must run it");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, 7, 0).rank0_only = true; },
      "blocks[7].instructions[0]: rank0_only on save, which communicates");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kEvery50, 0).rank0_only = true; },
      "rank0_only on evaluate, which communicates");
  ExpectRefusedAfter([](fb::PlanT &p) { Inst(p, kStep, 8).rank0_only = true; },
                     "blocks[0].instructions[8]: rank0_only on matmul, which "
                     "is not io that rank 0 "
                     "may do alone");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kThen, 1).rank0_only = true; },
      "rank0_only on exit, which is not io that rank 0 may do alone");
  fb::PlanT plan = Tiny();
  Inst(plan, kThen, 0).rank0_only = true; // print on rank 0: fine
  EXPECT_TRUE(Load(plan).ok()) << Load(plan).status();
}

// --- program order
// -----------------------------------------------------------------------------

TEST(PlanLoaderTest, RefusesAWaitBeforeItsRecord) {
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kStep, 2).record = -1; },
      "blocks[0].instructions[3].waits[0]: event 0 is waited on before any "
      "instruction records it");
  // The micro-steps body records event 0 too, but it may run zero times.
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kStep, 2).record = -1;
        Inst(p, kStep, 1).waits = {0};
      },
      "blocks[0].instructions[1].waits[0]: event 0 is waited on before any "
      "instruction records "
      "it");
  // A record after the wait in the same block does not count either.
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kStep, 2).record = -1;
        Inst(p, kStep, 35).record = 0;
      },
      "blocks[0].instructions[3].waits[0]: event 0 is waited on before");
}

TEST(PlanLoaderTest, RefusesABufferUsedOutsideItsLiveness) {
  // The relu's output r (step [9]) is last read by matmul_grad at [15].
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Buf(p, Inst(p, kStep, 9).outputs[0]).last = 12; },
      "blocks[0].instructions[15].inputs[1]: buffer");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Buf(p, Inst(p, kStep, 9).outputs[0]).last = 12; },
      "('r') is used at instruction 15 of blocks[0], outside its liveness "
      "interval [9, 12]");
  // The gathered flat parameters must outlive their views.
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Buf(p, Inst(p, kStep, 2).outputs[0]).last = 6; },
      "blocks[0].instructions[3]: view buffer");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Buf(p, Inst(p, kStep, 2).outputs[0]).last = 6; },
      "lives until instruction 17 of blocks[0], but its source");
  // A buffer of the micro-steps body read in the step block.
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        Inst(p, kStep, 9).inputs[0] = Inst(p, kMicro, 8).inputs[0];
      },
      "which does not contain this instruction");
  // An interval that starts after the buffer is written: its readers read
  // it before anything in the interval writes it.
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Buf(p, Inst(p, kStep, 9).outputs[0]).first = 10; },
      "reads it before anything in its liveness interval");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        fb::BufferT &b = Buf(p, Inst(p, kStep, 9).outputs[0]);
        b.first = b.last = 35;
      },
      "nothing in its liveness interval [35, 35] of blocks[0] writes it");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Buf(p, Inst(p, kStep, 9).outputs[0]).last = 400; },
      "liveness interval [9, 400] is not within the 36 instructions of "
      "blocks[0]");
}

// --- the block tree
// ------------------------------------------------------------------------------

TEST(PlanLoaderTest, RefusesABlockTreeThatIsNotATree) {
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kHooks, 1).blocks = {kEvery10}; },
      "blocks[2].instructions[1].blocks[0]: block 3 is already run by "
      "blocks[2].instructions[0]");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kHooks, 1).blocks = {kStep}; },
      "blocks[2].instructions[1].blocks[0]: block 0 is the step block");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { p.blocks.push_back(std::make_unique<fb::BlockT>()); },
      "blocks[8]: no instruction runs it");
  // Two blocks that run each other and nothing else reaches.
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        for (int k = 0; k < 2; ++k) {
          auto block = std::make_unique<fb::BlockT>();
          block->kind = fb::BlockKind::Every;
          auto inst = std::make_unique<fb::InstructionT>();
          inst->opcode = fb::Opcode::MicroSteps;
          inst->blocks = {k == 0 ? 9 : 8};
          block->instructions.push_back(std::move(inst));
          p.blocks.push_back(std::move(block));
        }
      },
      "not reachable from the step or hooks block");
  ExpectRefusedAfter(
      [](fb::PlanT &p) { p.blocks[kThen]->kind = fb::BlockKind::Else; },
      "blocks[3].instructions[5].blocks[0]: blocks[4] is a 'else' block; if "
      "runs a "
      "'then' block");
  ExpectRefusedAfter([](fb::PlanT &p) { p.hooks_block = kStep; },
                     "hooks_block: block 0 is also the step block");
  // Ifs nested deeper than the limit.
  fb::PlanT plan = Tiny();
  int32_t parent = kThen;
  for (int depth = 0; depth < 16; ++depth) {
    auto block = std::make_unique<fb::BlockT>();
    block->kind = fb::BlockKind::Then;
    plan.blocks.push_back(std::move(block));
    auto inst = std::make_unique<fb::InstructionT>();
    inst->opcode = fb::Opcode::If;
    inst->inputs = {Inst(plan, kEvery10, 5).inputs[0]};
    inst->blocks = {static_cast<int32_t>(plan.blocks.size() - 1)};
    plan.blocks[parent]->instructions.insert(
        plan.blocks[parent]->instructions.begin(), std::move(inst));
    parent = static_cast<int32_t>(plan.blocks.size() - 1);
  }
  ExpectRefused(plan, "nested 17 blocks deep, more than 16");
}

TEST(PlanLoaderTest, RefusesInstructionsOutOfPlace) {
  ExpectRefusedAfter(
      [](fb::PlanT &p) { Inst(p, kMicro, 18).opcode = fb::Opcode::GradTotal; },
      "blocks[1].instructions[18]");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        p.blocks[kStep]->instructions.push_back(
            std::make_unique<fb::InstructionT>(Inst(p, 7, 0)));
      },
      "blocks[0].instructions[36]: save runs only in the hooks; it is in a "
      "'step' block");
  ExpectRefusedAfter([](fb::PlanT &p) { Inst(p, kEvalBody, 6).ints[0] = 0; },
                     "blocks[6].instructions[6].ints[0]: an evaluation batch "
                     "reads dataset 0, not "
                     "its evaluate's dataset 1");
  ExpectRefusedAfter(
      [](fb::PlanT &p) {
        auto &insts = p.blocks[kEvalBody]->instructions;
        insts.insert(insts.begin(),
                     std::make_unique<fb::InstructionT>(*insts.back()));
      },
      "blocks[6].instructions[0]: yield is not the last instruction of its "
      "block");
}

// --- uniformity
// ------------------------------------------------------------------------------------

TEST(PlanLoaderTest, RefusesCollectivesAndExitsUnderAConditionThatVaries) {
  // `if loss > 10 { print; stop }` on this rank's own loss: ranks disagree.
  auto compareLocalLoss = [](fb::PlanT &p) {
    int32_t loss = Inst(p, kEvery10, 0).outputs[0];
    Inst(p, kEvery10, 4).inputs[0] = loss;
    Buf(p, loss).last = 5;
  };
  ExpectRefusedAfter(compareLocalLoss,
                     "blocks[4].instructions[1]: exit runs only on the ranks "
                     "where the condition of "
                     "blocks[3].instructions[5] holds, and that condition "
                     "varies between ranks");
  // An all-reduce in that branch.
  ExpectRefusedAfter(
      [&](fb::PlanT &p) {
        compareLocalLoss(p);
        auto &then = p.blocks[kThen]->instructions;
        then.insert(then.begin(),
                    std::make_unique<fb::InstructionT>(Inst(p, kEvery10, 1)));
        then.erase(then.end() - 1); // no exit
      },
      "blocks[4].instructions[0]: all_reduce runs only on the ranks where");
  // The condition on the all-reduced loss (the example as built) is uniform.
  EXPECT_TRUE(Load(Tiny()).ok());
}

TEST(PlanLoaderTest, AcceptsAZeroLearningRateAndRefusesANegativeOne) {
  // PyTorch's optimizers accept lr = 0 (the weights stay as they are).
  fb::PlanT plan = Tiny();
  plan.recipe->optimizer->lr = 0.0;
  EXPECT_TRUE(Load(plan).ok());
  ExpectRefusedAfter([](fb::PlanT &p) { p.recipe->optimizer->lr = -0.5; },
                     "recipe.optimizer.lr: -0.5 is negative");
}

// --- optimizer parameter groups ---------------------------------------------

/// The tiny MLP with two parameter groups (its first parameter in group 1)
/// and every optimizer update naming its unit, as mdc writes a plan whose
/// recipe has `groups`.
fb::PlanT GroupedTiny() {
  fb::PlanT plan = Tiny();
  plan.schema_version =
      std::max(plan.schema_version, kParamGroupsSchemaVersion);
  for (const char *name : {"default", "ndim = 1"}) {
    auto group = std::make_unique<fb::OptimizerGroupT>();
    group->name = name;
    group->weight_decay = 0.0;
    group->lr_scale = 1.0;
    plan.recipe->optimizer->groups.push_back(std::move(group));
  }
  plan.params.at(0)->group = 1;
  for (auto &block : plan.blocks)
    for (auto &inst : block->instructions) {
      // The tiny MLP has one unit.
      if (inst->opcode == fb::Opcode::AdamWUpdate)
        inst->ints = {0};
      if (inst->opcode == fb::Opcode::SgdUpdate)
        inst->ints.push_back(0);
    }
  return plan;
}

TEST(PlanLoaderTest, LoadsParameterGroupsAndRefusesInconsistentOnes) {
  absl::StatusOr<LoadedPlan> loaded = Load(GroupedTiny());
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  fb::PlanT old = GroupedTiny();
  old.schema_version = 2;
  ExpectRefused(old, "recipe.optimizer.groups: parameter groups need "
                     "schema_version 3, the plan says 2");
  fb::PlanT negative = GroupedTiny();
  negative.recipe->optimizer->groups.at(1)->lr_scale = -1.0;
  ExpectRefused(negative, "recipe.optimizer.groups[1].lr_scale");
  fb::PlanT outOfRange = GroupedTiny();
  outOfRange.params.at(0)->group = 2;
  ExpectRefused(outOfRange, "params[0].group: 2 is not a group of the "
                            "optimizer (2 groups");
  // An update that names a unit in a plan without groups, and one whose
  // operands are not its unit's flat buffer.
  fb::PlanT noGroups = GroupedTiny();
  noGroups.recipe->optimizer->groups.clear();
  noGroups.params.at(0)->group = 0;
  ExpectRefused(noGroups, "(unit) 0, but the optimizer has no parameter "
                          "groups");
  fb::PlanT badUnit = GroupedTiny();
  badUnit.units.push_back(std::make_unique<fb::UnitT>());
  badUnit.units.back()->id = 1;
  badUnit.units.back()->numel = 3;
  for (auto &block : badUnit.blocks)
    for (auto &inst : block->instructions)
      if (inst->opcode == fb::Opcode::AdamWUpdate ||
          inst->opcode == fb::Opcode::SgdUpdate)
        inst->ints.back() = 1;
  ExpectRefused(badUnit, "but unit 1's flat buffer has 3");
}

// --- world size
// --------------------------------------------------------------------------------------

TEST(PlanLoaderTest, RefusesAWorldSizeThePlanCannotRunAt) {
  TinyMlpOptions pinned;
  pinned.pinnedWorldSize = 2;
  ExpectRefused(Tiny(pinned),
                "the plan is pinned to world size 2 and cannot run at 4; "
                "recompile with mdc "
                "--world-size 4",
                4);
  ExpectRefused(
      Tiny(),
      "global_batch 16 is not a multiple of micro_batch 4 x world size 3: "
      "the accumulation steps would not be a whole number; it runs at world "
      "size 1, 2 or 4",
      3);

  fb::PlanT hybrid = Tiny();
  hybrid.header->options->shard = fb::ShardKind::Hybrid;
  hybrid.header->shard_group_size = 2;
  EXPECT_TRUE(Load(hybrid, 4).ok()) << Load(hybrid, 4).status();
  // The sizes that run a hybrid plan are multiples of its shard group.
  ExpectRefused(hybrid, "; it runs at world size 2 or 4", 8);
  // A long list is cut after twelve sizes: 720 micro-steps have 30
  // divisors.
  TinyMlpOptions many;
  many.globalBatch = 4 * 720;
  ExpectRefused(Tiny(many),
                "; it runs at world size 1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, "
                "16, ... (30 sizes in all)",
                7);
  ExpectRefused(
      hybrid, "hybrid shard group of 2 ranks does not divide world size 1", 1);
  hybrid.header->shard_group_size = 0;
  ExpectRefused(hybrid, "header.shard_group_size: a hybrid plan needs a shard "
                        "group of at least 2");
  fb::PlanT notHybrid = Tiny();
  notHybrid.header->shard_group_size = 4;
  ExpectRefused(notHybrid,
                "header.shard_group_size: 4 on a plan that is not hybrid");
}

// --- memory and summary
// ------------------------------------------------------------------------------

TEST(PlanMemoryTest, TinyMlpAtTwoAndFourRanks) {
  constexpr int64_t N = examples::TinyMlpShape::kUnitNumel; // 212
  absl::StatusOr<LoadedPlan> loaded = Load(Tiny(), 0);
  ASSERT_TRUE(loaded.ok());
  absl::StatusOr<MemoryReport> two = PerRankMemory(*loaded, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->params, (N / 2) * 4);        // master shard
  EXPECT_EQ(two->optimizer, 2 * (N / 2) * 4); // exp_avg, exp_avg_sq shards
  EXPECT_EQ(two->gradAcc, N * 4);             // grad_acc: A = 2
  EXPECT_EQ(two->peak, two->params + two->grads + two->gradAcc +
                           two->optimizer + two->activations +
                           two->commBuffers);
  EXPECT_FALSE(two->compilerCategories);
  // The state loads alias their states (nothing else writes them while
  // they are live), so the optimizer step adds only the clipped gradient
  // and the updates. The transient peak is in the micro-step body at its
  // second matmul_grad (micro [16]): the gathered unit (N f32, a comm
  // buffer) and x 128 + dh 256 + dx 128 + dw1 512 + db1 64 + dw2 256 +
  // db2 16 bytes of activations.
  EXPECT_EQ(two->peakBlock, kMicro);
  EXPECT_EQ(two->peakInstruction, 16);
  EXPECT_EQ(two->activations, 128 + 256 + 128 + 512 + 64 + 256 + 16);
  EXPECT_EQ(two->commBuffers, N * 4);

  absl::StatusOr<MemoryReport> four = PerRankMemory(*loaded, 4);
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->params, (N / 4) * 4);
  EXPECT_EQ(four->gradAcc, 0); // A = 1: no accumulator
  EXPECT_FALSE(PerRankMemory(*loaded, 3).ok());
}

/// step: [0] batch x f32[4, c]; [1] micro_steps { [0] batch y f32[8];
/// [1] reshape y -> y2 f32[2, 4] }; [2] relu x -> z; [3] all_reduce z -> z2
/// (z and z2 are comm buffers). Persistent: master f32[10], grad_acc f32[10]
/// (only when accumulating). Pinned to W = 1 with A = 4.
LoadedPlan NestedPlan(int64_t c) {
  PlanBuilder b = examples::MinimalPlan();
  fb::PlanT &p = b.plan();
  p.buffers.clear();
  p.blocks.clear();
  int32_t step = b.addBlock(fb::BlockKind::Step);
  int32_t micro = b.addBlock(fb::BlockKind::MicroSteps);
  b.setStepBlock(step);
  b.addBuffer(
      PlanBuilder::state(PlanBuilder::full("master", fb::DType::F32, {10}),
                         fb::StateRole::Master));
  b.addBuffer(
      PlanBuilder::state(PlanBuilder::full("grad_acc", fb::DType::F32, {10}),
                         fb::StateRole::GradAcc, -1, true));
  int32_t x = b.addBuffer(PlanBuilder::full("x", fb::DType::F32, {4, c}));
  int32_t y = b.addBuffer(PlanBuilder::full("y", fb::DType::F32, {8}));
  int32_t y2 = b.addBuffer(PlanBuilder::full("y2", fb::DType::F32, {2, 4}));
  int32_t z = b.addBuffer(PlanBuilder::full("z", fb::DType::F32, {4, c}));
  int32_t z2 = b.addBuffer(PlanBuilder::full("z2", fb::DType::F32, {4, c}));
  b.add(step, fb::Opcode::Batch, {}, {x}).ints = {0};
  b.add(step, fb::Opcode::MicroSteps).blocks = {micro};
  b.add(micro, fb::Opcode::Batch, {}, {y}).ints = {0};
  b.add(micro, fb::Opcode::Reshape, {y}, {y2});
  b.add(step, fb::Opcode::Relu, {x}, {z});
  b.add(step, fb::Opcode::AllReduce, {z}, {z2}).ints = {0, 0, -1};
  EXPECT_TRUE(b.inferLiveness().ok());
  EXPECT_EQ(p.buffers[x]->last, 2);
  EXPECT_EQ(p.buffers[y]->block, micro);
  absl::StatusOr<LoadedPlan> loaded = LoadPlan(b.finish());
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return *loaded;
}

TEST(PlanMemoryTest, PeakFollowsTheRuleThroughNestedBlocks) {
  // c = 2: [0] x 32; [1] x 32 + the body's peak y + y2 64 = 96; [2] x + z
  // = 64; [3] z + z2 = 64. The peak is inside the body, at its [1].
  absl::StatusOr<MemoryReport> memory = PerRankMemory(NestedPlan(2), 1);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->params, 40);
  EXPECT_EQ(memory->gradAcc, 40); // A = 16 / 4 = 4
  EXPECT_EQ(memory->optimizer, 0);
  EXPECT_EQ(memory->activations, 96);
  EXPECT_EQ(memory->commBuffers, 0);
  EXPECT_EQ(memory->peakBlock, 1);
  EXPECT_EQ(memory->peakInstruction, 1);
  EXPECT_EQ(memory->peak, 40 + 40 + 96);

  // c = 8: [1] 128 + 64 = 192; [2] x 128 + z 128 = 256, first reached there
  // (z is a comm buffer); [3] z + z2 = 256.
  memory = PerRankMemory(NestedPlan(8), 1);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->activations, 128);
  EXPECT_EQ(memory->commBuffers, 128);
  EXPECT_EQ(memory->peakBlock, 0);
  EXPECT_EQ(memory->peakInstruction, 2);
  EXPECT_EQ(memory->peak, 40 + 40 + 256);
}

TEST(PlanMemoryTest, ViewsTakeNoBytesOfTheirOwn) {
  // step: [0] batch x f32[64]; [1] view x[0] -> v f32[8, 8]; [2] relu v -> r.
  // The view keeps x alive until [2] and adds nothing: 256 + 256 bytes.
  PlanBuilder b = examples::MinimalPlan();
  fb::PlanT &p = b.plan();
  p.buffers.clear();
  p.blocks.clear();
  int32_t step = b.addBlock(fb::BlockKind::Step);
  b.setStepBlock(step);
  int32_t x = b.addBuffer(PlanBuilder::full("x", fb::DType::F32, {64}));
  int32_t v = b.addBuffer(PlanBuilder::full("v", fb::DType::F32, {8, 8}));
  int32_t r = b.addBuffer(PlanBuilder::full("r", fb::DType::F32, {8, 8}));
  b.add(step, fb::Opcode::Batch, {}, {x}).ints = {0};
  b.add(step, fb::Opcode::View, {x}, {v}).ints = {0};
  b.add(step, fb::Opcode::Relu, {v}, {r});
  ASSERT_TRUE(b.inferLiveness().ok());
  EXPECT_EQ(p.buffers[x]->last, 2); // extended to the view's last use
  absl::StatusOr<LoadedPlan> loaded = LoadPlan(b.finish());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<MemoryReport> memory = PerRankMemory(*loaded, 1);
  ASSERT_TRUE(memory.ok());
  EXPECT_EQ(memory->activations, 512);
  EXPECT_EQ(memory->peakInstruction, 2);
}

TEST(PlanLoaderTest, CastFromAnIntegerNeedsSchemaVersion7) {
  // step: [0] arange 0..8 -> i i64[8]; [1] cast i -> f f32[8]; [2] relu f.
  // Version 7 let cast take an integer; an older plan with one is refused
  // by name, and a cast to an integer stays refused at any version.
  PlanBuilder b = examples::MinimalPlan();
  fb::PlanT &p = b.plan();
  p.buffers.clear();
  p.blocks.clear();
  int32_t step = b.addBlock(fb::BlockKind::Step);
  b.setStepBlock(step);
  int32_t i = b.addBuffer(PlanBuilder::full("i", fb::DType::I64, {8}));
  int32_t f = b.addBuffer(PlanBuilder::full("f", fb::DType::F32, {8}));
  int32_t r = b.addBuffer(PlanBuilder::full("r", fb::DType::F32, {8}));
  b.add(step, fb::Opcode::Arange, {}, {i}).ints = {0, 8};
  b.add(step, fb::Opcode::Cast, {i}, {f});
  b.add(step, fb::Opcode::Relu, {f}, {r});
  ASSERT_TRUE(b.inferLiveness().ok());
  p.schema_version = 7;
  EXPECT_TRUE(Load(p, 1).ok()) << Load(p, 1).status();
  p.schema_version = 6;
  ExpectRefused(p,
                "cast: buffer 0 is i64[8], but a cast from an integer needs "
                "schema_version 7, the plan says 6",
                1);
  p.schema_version = 7;
  Inst(p, step, 1).inputs = {f};
  Inst(p, step, 1).outputs = {i};
  ExpectRefused(p, "cast: buffer 0 is i64[8], but must be a float tensor", 1);
}

TEST(PlanLoaderTest, AnAttentionWindowNeedsSchemaVersion9) {
  // step: [0] batch x f32[2, 8, 12]; [1] causal_attention(x, x, x), 3 heads,
  // window 4 -> o; [2] its gradient with the same window. Version 9 added
  // the window slot: an older plan with one is refused by name (its
  // runtime would attend to every earlier position), a window of 0 at any
  // version by the slot's range.
  PlanBuilder b = examples::MinimalPlan();
  fb::PlanT &p = b.plan();
  p.buffers.clear();
  p.blocks.clear();
  int32_t step = b.addBlock(fb::BlockKind::Step);
  b.setStepBlock(step);
  auto full = [&](const char *name) {
    return b.addBuffer(PlanBuilder::full(name, fb::DType::F32, {2, 8, 12}));
  };
  int32_t x = full("x");
  b.add(step, fb::Opcode::Batch, {}, {x}).ints = {0};
  int32_t o = full("o");
  b.add(step, fb::Opcode::CausalAttention, {x, x, x}, {o}).ints = {3, 4};
  int32_t dq = full("dq"), dk = full("dk"), dv = full("dv");
  b.add(step, fb::Opcode::CausalAttentionGrad, {o, x, x, x}, {dq, dk, dv})
      .ints = {3, 4};
  ASSERT_TRUE(b.inferLiveness().ok());
  p.schema_version = kAttentionWindowSchemaVersion;
  EXPECT_TRUE(Load(p, 1).ok()) << Load(p, 1).status();
  p.schema_version = kAttentionWindowSchemaVersion - 1;
  ExpectRefused(p,
                "blocks[0].instructions[1]: causal_attention: ints[1]: a "
                "window needs schema_version 9, the plan says 8",
                1);
  p.schema_version = kAttentionWindowSchemaVersion;
  Inst(p, step, 2).ints = {3, 0};
  ExpectRefused(p, "blocks[0].instructions[2].ints[1]", 1);
  // Without a window the opcodes load at their first version, as before.
  Inst(p, step, 1).ints = {3};
  Inst(p, step, 2).ints = {3};
  p.schema_version = 1;
  EXPECT_TRUE(Load(p, 1).ok()) << Load(p, 1).status();
}

TEST(PlanLoaderTest, AClampBoundMayBeInfiniteButNotNaN) {
  // step: [0] batch x f32[8]; [1] clamp x to [0, inf) -> y. Only a slot of
  // the Bound kind takes an infinity (no bound); NaN is refused there too,
  // and an infinite float of any other kind stays refused.
  PlanBuilder b = examples::MinimalPlan();
  fb::PlanT &p = b.plan();
  p.buffers.clear();
  p.blocks.clear();
  p.schema_version = 7;
  int32_t step = b.addBlock(fb::BlockKind::Step);
  b.setStepBlock(step);
  int32_t x = b.addBuffer(PlanBuilder::full("x", fb::DType::F32, {8}));
  int32_t y = b.addBuffer(PlanBuilder::full("y", fb::DType::F32, {8}));
  int32_t z = b.addBuffer(PlanBuilder::full("z", fb::DType::F32, {8}));
  const double inf = std::numeric_limits<double>::infinity();
  b.add(step, fb::Opcode::Batch, {}, {x}).ints = {0};
  b.add(step, fb::Opcode::Clamp, {x}, {y}).floats = {0.0, inf};
  b.add(step, fb::Opcode::Scale, {y}, {z}).floats = {2.0};
  ASSERT_TRUE(b.inferLiveness().ok());
  EXPECT_TRUE(Load(p, 1).ok()) << Load(p, 1).status();
  Inst(p, step, 1).floats = {-inf, std::nan("")};
  ExpectRefused(p, "floats[1]: a bound is a number or -inf / inf, not NaN", 1);
  Inst(p, step, 1).floats = {0.0, inf};
  Inst(p, step, 2).floats = {inf};
  ExpectRefused(p, "floats[0]: inf is not a finite number", 1);
}

TEST(PlanSummaryTest, TinyMlpAtTwoRanks) {
  constexpr int64_t bytes = examples::TinyMlpShape::kUnitNumel * 4; // 848
  absl::StatusOr<LoadedPlan> loaded = Load(Tiny(), 2);
  ASSERT_TRUE(loaded.ok());
  absl::StatusOr<PlanSummary> summary = Summarize(*loaded, 2);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->paramCount, 4);
  EXPECT_EQ(summary->paramElements, 212);
  EXPECT_EQ(summary->paramBytes, bytes);
  ASSERT_EQ(summary->units.size(), 1u);
  EXPECT_EQ(summary->units[0].params, 4);
  // One step at A = 2: the step block once, the micro-steps body once.
  const CollectiveTally &gather = summary->perStep[0];
  EXPECT_EQ(gather.kind, "all_gather");
  EXPECT_EQ(gather.count, 2);
  EXPECT_EQ(gather.bytes, 2 * bytes);
  EXPECT_EQ(gather.busBytes, bytes); // 2 x (n - 1) / n
  const CollectiveTally &scatter = summary->perStep[1];
  EXPECT_EQ(scatter.count, 1);
  EXPECT_EQ(scatter.bytes, bytes);
  EXPECT_EQ(scatter.busBytes, bytes / 2);
  const CollectiveTally &reduce = summary->perStep[2];
  EXPECT_EQ(reduce.count, 1);
  EXPECT_EQ(reduce.bytes, 4);
  EXPECT_EQ(reduce.busBytes, 4); // 2 (n - 1) / n = 1
  EXPECT_EQ(summary->perStepTotal.count, 4);
  EXPECT_EQ(summary->conditionalCollectives, 0);
  // Buckets 0 (the all-gathers), 1 (reduce-scatter), 2 (norm all-reduce).
  ASSERT_EQ(summary->buckets.size(), 3u);
  EXPECT_EQ(summary->buckets[0].id, 0);
  EXPECT_EQ(summary->buckets[0].collectives, 2);
  EXPECT_EQ(summary->buckets[2].kinds, std::vector<std::string>{"all_reduce"});
  // Hooks.
  ASSERT_EQ(summary->hooks.size(), 3u);
  EXPECT_EQ(summary->hooks[0].period, 10);
  EXPECT_EQ(summary->hooks[0].actions,
            (std::vector<std::string>{
                "all_reduce", "log \"train\" (rank 0)",
                "if { print \"loss diverged\", exit \"loss diverged\" }"}));
  EXPECT_EQ(summary->hooks[1].actions,
            (std::vector<std::string>{"evaluate \"data/val.npy\" (2 batches)",
                                      "log \"val\""}));
  EXPECT_TRUE(summary->hooks[1].communicates);
  EXPECT_EQ(summary->hooks[2].actions,
            std::vector<std::string>{"save sharded \"ckpt/tiny\""});

  // At W = 1 nothing moves.
  absl::StatusOr<PlanSummary> one = Summarize(*loaded, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->perStepTotal.busBytes, 0);
  EXPECT_EQ(one->perStep[0].count, 4); // A = 4: the body runs 3 times
}

TEST(PlanSummaryTest, TinyMlpFlopsPerStep) {
  // B = 4 samples of D = 8 features, H = 16 hidden, C = 4 classes.
  //   fc1 matmul   x[4, 8] w1[16, 8]^T + b1:  2*4*16*8 + 4*16 = 1088
  //   fc2 matmul   r[4, 16] w2[4, 16]^T + b2: 2*4*4*16 + 4*4  =  528
  //   fc2 grad     dr, dw2, db2:              4*4*4*16 + 4*4  = 1040
  //   fc1 grad     dx, dw1, db1:              4*4*16*8 + 4*16 = 2112
  // 4768 per micro-step; hooks (the eval forward) are not counted.
  constexpr int64_t kForward = 1088 + 528, kBackward = 1040 + 2112;
  constexpr int64_t kMicroStep = kForward + kBackward; // 4768
  absl::StatusOr<LoadedPlan> loaded = Load(Tiny(), 2);
  ASSERT_TRUE(loaded.ok());

  const fb::Plan &plan = loaded->plan();
  auto flopsOf = [&](int32_t index) {
    return InstructionFlops(
        plan, *plan.blocks()->Get(kStep)->instructions()->Get(index));
  };
  EXPECT_EQ(flopsOf(8), 1088);  // matmul
  EXPECT_EQ(flopsOf(10), 528);  // matmul
  EXPECT_EQ(flopsOf(15), 1040); // matmul_grad
  EXPECT_EQ(flopsOf(17), 2112); // matmul_grad
  EXPECT_EQ(flopsOf(9), 0);     // relu: not counted
  EXPECT_EQ(flopsOf(32), 0);    // adamw_update: not counted

  // W = 2, A = 2: the step block once and the micro-steps body once.
  absl::StatusOr<PlanSummary> two = Summarize(*loaded, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->flops.size(), 4u);
  EXPECT_EQ(two->flops[0].kind, "matmul");
  EXPECT_EQ(two->flops[0].count, 4);
  EXPECT_EQ(two->flops[0].flops, 2 * kForward);
  EXPECT_EQ(two->flops[1].kind, "matmul_grad");
  EXPECT_EQ(two->flops[1].count, 4);
  EXPECT_EQ(two->flops[1].flops, 2 * kBackward);
  EXPECT_EQ(two->flops[2].kind, "causal_attention");
  EXPECT_EQ(two->flops[2].count, 0);
  EXPECT_EQ(two->flops[3].kind, "causal_attention_grad");
  EXPECT_EQ(two->flopsPerRank, 2 * kMicroStep);
  EXPECT_EQ(two->flopsAllRanks, 4 * kMicroStep);
  EXPECT_EQ(two->conditionalFlopInstructions, 0);

  // The global batch is 4 micro-batches at every W: W = 1 runs them all on
  // one rank (A = 4), W = 4 one each (A = 1, the body never runs).
  absl::StatusOr<PlanSummary> one = Summarize(*loaded, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->flopsPerRank, 4 * kMicroStep);
  EXPECT_EQ(one->flopsAllRanks, 4 * kMicroStep);
  absl::StatusOr<PlanSummary> four = Summarize(*loaded, 4);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->flops[0].count, 2);
  EXPECT_EQ(four->flopsPerRank, kMicroStep);
  EXPECT_EQ(four->flopsAllRanks, 4 * kMicroStep);
}

TEST(PlanSummaryTest, AttentionBatchedMatmulAndConditionalFlops) {
  // step: [0] batch x f32[2, 8, 12], w f32[2, 12, 6]
  //       [1] causal_attention(x, x, x), 3 heads  -> o    4*2*8*8*12  =  6144
  //       [2] causal_attention_grad(o, x, x, x)    10*2*8*8*12  = 15360
  //       [3] matmul x[2, 8, 12] w[2, 12, 6] (batched b) 2*2*8*6*12 = 2304
  //       [4] matmul_grad of it (no bias)           4*2*8*6*12  = 4608
  //       [5] constant true, [6] if { matmul x^T[2, 12, 8] w: not counted }
  PlanBuilder b = examples::MinimalPlan();
  fb::PlanT &p = b.plan();
  p.buffers.clear();
  p.blocks.clear();
  int32_t step = b.addBlock(fb::BlockKind::Step);
  int32_t then = b.addBlock(fb::BlockKind::Then);
  b.setStepBlock(step);
  auto full = [&](const char *name, std::vector<int64_t> shape,
                  fb::DType dtype = fb::DType::F32) {
    return b.addBuffer(PlanBuilder::full(name, dtype, std::move(shape)));
  };
  int32_t x = full("x", {2, 8, 12}), w = full("w", {2, 12, 6});
  b.add(step, fb::Opcode::Batch, {}, {x, w}).ints = {0};
  int32_t o = full("o", {2, 8, 12});
  b.add(step, fb::Opcode::CausalAttention, {x, x, x}, {o}).ints = {3};
  int32_t dq = full("dq", {2, 8, 12}), dk = full("dk", {2, 8, 12}),
          dv = full("dv", {2, 8, 12});
  b.add(step, fb::Opcode::CausalAttentionGrad, {o, x, x, x}, {dq, dk, dv})
      .ints = {3};
  int32_t y = full("y", {2, 8, 6});
  b.add(step, fb::Opcode::Matmul, {x, w}, {y}).ints = {0, 0};
  int32_t dx = full("dx", {2, 8, 12}), dw = full("dw", {2, 12, 6});
  b.add(step, fb::Opcode::MatmulGrad, {y, x, w}, {dx, dw}).ints = {0, 0};
  int32_t cond = full("cond", {}, fb::DType::Bool);
  b.add(step, fb::Opcode::Constant, {}, {cond}).ints = {1};
  b.add(step, fb::Opcode::If, {cond}).blocks = {then};
  int32_t z = full("z", {2, 12, 12});
  b.add(then, fb::Opcode::Matmul, {x, x}, {z}).ints = {1, 0};
  ASSERT_TRUE(b.inferLiveness().ok());
  absl::StatusOr<LoadedPlan> loaded = LoadPlan(b.finish());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<PlanSummary> summary = Summarize(*loaded, 1);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->flops[0].count, 1);
  EXPECT_EQ(summary->flops[0].flops, 2304);
  EXPECT_EQ(summary->flops[1].flops, 4608);
  EXPECT_EQ(summary->flops[2].count, 1);
  EXPECT_EQ(summary->flops[2].flops, 6144);
  EXPECT_EQ(summary->flops[3].flops, 15360);
  EXPECT_EQ(summary->flopsPerRank, 2304 + 4608 + 6144 + 15360);
  EXPECT_EQ(summary->flopsAllRanks, summary->flopsPerRank); // pinned W = 1
  EXPECT_EQ(summary->conditionalFlopInstructions, 1);
}

// --- robustness
// ---------------------------------------------------------------------------------------

/// The plans LoadAndUse was given that the loader accepted, and the world
/// sizes they were used at.
struct Uses {
  int accepted = 0;
  int worldSizes = 0;
};

/// Loads `bytes`; an accepted plan must then serve what a consumer asks of
/// it (mdrun --inspect, the launcher): at every world size it binds at (its
/// pinned W, else 1 and 2), its memory report and summary are computable
/// and agree, and a pinned plan binds at its own W.
void LoadAndUse(const std::vector<uint8_t> &bytes, Uses &uses) {
  absl::StatusOr<LoadedPlan> loaded = LoadPlan(bytes, At(0));
  if (!loaded.ok())
    return;
  ++uses.accepted;
  std::vector<int64_t> sizes = {1, 2};
  if (loaded->bound()) {
    sizes = {loaded->world().worldSize};
    EXPECT_TRUE(BindWorldSize(*loaded, sizes[0]).ok())
        << "an accepted plan pinned to W = " << sizes[0]
        << " does not bind at it";
  }
  for (int64_t w : sizes) {
    if (!BindWorldSize(*loaded, w).ok())
      continue; // a batch W does not divide: refused, as it should be
    ++uses.worldSizes;
    absl::StatusOr<MemoryReport> memory = PerRankMemory(*loaded, w);
    absl::StatusOr<PlanSummary> summary = Summarize(*loaded, w);
    EXPECT_TRUE(memory.ok()) << "W = " << w << ": " << memory.status();
    EXPECT_TRUE(summary.ok()) << "W = " << w << ": " << summary.status();
    if (!memory.ok() || !summary.ok())
      continue;
    EXPECT_EQ(summary->world.worldSize, w);
    EXPECT_EQ(summary->memory.peak, memory->peak) << "W = " << w;
    EXPECT_GE(memory->peak, 0) << "W = " << w;
  }
}

TEST(PlanRobustnessTest, RandomBitFlipsAreRefusedOrStillValid) {
  const std::vector<uint8_t> good = TinyMlpPlan().finish();
  std::mt19937 rng(20240611);
  Uses uses;
  constexpr int kTrials = 4000;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<uint8_t> bytes = good;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f)
      bytes[rng() % bytes.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    (void)SealPlan(bytes); // past the checksum, to the verifiers
    LoadAndUse(bytes, uses);
  }
  // Most flips hit offsets, indices or sizes the verifiers check; some
  // land in names or float values and stay valid, and were used.
  EXPECT_LT(uses.accepted, kTrials / 2);
  EXPECT_GT(uses.worldSizes, 0);
  std::cout << "[          ] " << uses.accepted << " of " << kTrials
            << " bit-flipped plans are still valid\n";
}

TEST(PlanRobustnessTest, RandomByteShufflesAreRefusedOrStillValid) {
  const std::vector<uint8_t> good = TinyMlpPlan().finish();
  std::mt19937 rng(7);
  Uses uses;
  constexpr int kTrials = 2000;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<uint8_t> bytes = good;
    size_t a = rng() % bytes.size(), len = 1 + rng() % 64;
    size_t bpos = rng() % bytes.size();
    len = std::min({len, bytes.size() - a, bytes.size() - bpos});
    switch (trial % 3) {
    case 0: // swap two ranges
      for (size_t k = 0; k < len; ++k)
        std::swap(bytes[a + k], bytes[bpos + k]);
      break;
    case 1: // shuffle a range
      std::shuffle(bytes.begin() + a, bytes.begin() + a + len, rng);
      break;
    default: // overwrite a range with random bytes
      for (size_t k = 0; k < len; ++k)
        bytes[a + k] = static_cast<uint8_t>(rng());
      break;
    }
    (void)SealPlan(bytes); // past the checksum, to the verifiers
    LoadAndUse(bytes, uses);
  }
  // Most rearrangements break an offset, a vtable or an index the verifiers
  // check; the accepted ones were used in LoadAndUse.
  EXPECT_LT(uses.accepted, kTrials / 2);
  EXPECT_GT(uses.worldSizes, 0);
  std::cout << "[          ] " << uses.accepted << " of " << kTrials
            << " rearranged plans are still valid, used at " << uses.worldSizes
            << " world sizes\n";
}

} // namespace
} // namespace md::plan
