//===- ExecutorPartsTest.cpp - the executor's parts on their own ----------===//
//
// What the executor's parts do outside a run: the semantics of the scalar
// instructions, the host's copies of scalars (hits, overlaps, verification
// against the device), the data feeds of a plan (training batches,
// evaluations and the feed in use), and the names and publication of
// checkpoint files. ExecutorTest runs them inside whole plans.
//
//===----------------------------------------------------------------------===//

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/exec/Checkpoint.h"
#include "runtime/exec/DataFeeds.h"
#include "runtime/exec/HostScalars.h"
#include "runtime/exec/PlanAccess.h"
#include "runtime/exec/Safetensors.h"
#include "runtime/core/Status.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/plan/Loader.h"
#include "test/plan/TrainingPlans.h"

namespace md::runtime {
namespace {

using fb::ArithKind;
using fb::CompareKind;
using fb::DType;

Scalar arith(ArithKind k, DType t, Scalar a, Scalar b = Scalar::Int(0)) {
  absl::StatusOr<Scalar> r = ScalarArith(k, t, a, b);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : Scalar::Int(-12345);
}

TEST(ScalarInstructions, IntegersWrapAroundAtTheirWidth) {
  EXPECT_EQ(
      arith(ArithKind::Add, DType::I64, Scalar::Int(INT64_MAX), Scalar::Int(1))
          .i,
      INT64_MIN);
  EXPECT_EQ(
      arith(ArithKind::Add, DType::I32, Scalar::Int(INT32_MAX), Scalar::Int(1))
          .i,
      INT32_MIN);
  EXPECT_EQ(
      arith(ArithKind::Mul, DType::I32, Scalar::Int(65536), Scalar::Int(65536))
          .i,
      0);
  EXPECT_EQ(arith(ArithKind::Neg, DType::I64, Scalar::Int(INT64_MIN)).i,
            INT64_MIN);
  EXPECT_EQ(
      arith(ArithKind::Div, DType::I64, Scalar::Int(INT64_MIN), Scalar::Int(-1))
          .i,
      INT64_MIN);
  EXPECT_EQ(
      arith(ArithKind::Rem, DType::I64, Scalar::Int(INT64_MIN), Scalar::Int(-1))
          .i,
      0);
  EXPECT_EQ(
      arith(ArithKind::Rem, DType::I64, Scalar::Int(-7), Scalar::Int(2)).i, -1);
}

TEST(ScalarInstructions, BoolsAndBitwiseOperations) {
  EXPECT_EQ(arith(ArithKind::Not, DType::Bool, Scalar::Int(1)).i, 0);
  EXPECT_EQ(arith(ArithKind::Not, DType::Bool, Scalar::Int(0)).i, 1);
  EXPECT_EQ(arith(ArithKind::Not, DType::I64, Scalar::Int(0)).i, -1);
  EXPECT_EQ(
      arith(ArithKind::Add, DType::Bool, Scalar::Int(1), Scalar::Int(1)).i, 0);
  EXPECT_EQ(arith(ArithKind::Xor, DType::I32, Scalar::Int(6), Scalar::Int(3)).i,
            5);
  EXPECT_EQ(
      arith(ArithKind::Min, DType::I32, Scalar::Int(-2), Scalar::Int(3)).i, -2);
}

TEST(ScalarInstructions, IntegerDivisionByZeroIsAnError) {
  absl::StatusOr<Scalar> div =
      ScalarArith(ArithKind::Div, DType::I64, Scalar::Int(1), Scalar::Int(0));
  ASSERT_FALSE(div.ok());
  EXPECT_EQ(div.status().message(), "integer division by zero");
  absl::StatusOr<Scalar> rem =
      ScalarArith(ArithKind::Rem, DType::I32, Scalar::Int(1), Scalar::Int(0));
  ASSERT_FALSE(rem.ok());
  EXPECT_EQ(rem.status().message(), "integer remainder by zero");
}

TEST(ScalarInstructions, FloatsRoundToTheResultType) {
  // 0.1 + 0.2 in double is not the f32 sum rounded: F32 rounds once.
  Scalar f32 =
      arith(ArithKind::Add, DType::F32, Scalar::Float(0.1), Scalar::Float(0.2));
  EXPECT_EQ(f32.f, static_cast<double>(static_cast<float>(0.1 + 0.2)));
  Scalar f64 =
      arith(ArithKind::Add, DType::F64, Scalar::Float(0.1), Scalar::Float(0.2));
  EXPECT_EQ(f64.f, 0.1 + 0.2);
  // An integer operand is read as its value.
  EXPECT_EQ(arith(ArithKind::Div, DType::F64, Scalar::Int(1), Scalar::Int(4)).f,
            0.25);
  EXPECT_TRUE(std::isnan(
      arith(ArithKind::Max, DType::F32, Scalar::Float(NAN), Scalar::Float(1))
          .f));
  EXPECT_FALSE(ScalarArith(ArithKind::And, DType::F32, Scalar::Float(1),
                           Scalar::Float(1))
                   .ok());
}

TEST(ScalarInstructions, ComparisonsOfFloatsAreOrdered) {
  Scalar nan = Scalar::Float(NAN), one = Scalar::Float(1);
  EXPECT_FALSE(ScalarCompare(CompareKind::Eq, nan, nan));
  EXPECT_TRUE(ScalarCompare(CompareKind::Ne, nan, nan));
  EXPECT_FALSE(ScalarCompare(CompareKind::Lt, nan, one));
  EXPECT_FALSE(ScalarCompare(CompareKind::Ge, nan, one));
  // A float against an integer compares values.
  EXPECT_TRUE(ScalarCompare(CompareKind::Eq, Scalar::Int(1), one));
  EXPECT_TRUE(ScalarCompare(CompareKind::Lt, Scalar::Int(INT64_MIN),
                            Scalar::Int(INT64_MIN + 1)));
  EXPECT_TRUE(ScalarCompare(CompareKind::Le, Scalar::Int(3), Scalar::Int(3)));
}

TEST(ScalarInstructions, ConversionsTruncateAndRefuseWhatDoesNotFit) {
  absl::StatusOr<Scalar> r = ScalarConvert(DType::I32, Scalar::Float(-2.9));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->isFloat);
  EXPECT_EQ(r->i, -2);
  absl::StatusOr<Scalar> big = ScalarConvert(DType::I32, Scalar::Float(3e9));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE(ScalarConvert(DType::I64, Scalar::Float(NAN)).ok());
  EXPECT_EQ(ScalarConvert(DType::I32, Scalar::Int(int64_t(1) << 32))->i, 0);
  EXPECT_EQ(ScalarConvert(DType::Bool, Scalar::Float(0.5))->i, 1);
  EXPECT_EQ(ScalarConvert(DType::F32, Scalar::Int(7))->f, 7.0);
}

TEST(ScalarEncoding, RoundTripsAtEachDType) {
  struct Case {
    DType t;
    Scalar in;
    double out;
  };
  const Case cases[] = {
      {DType::F32, Scalar::Float(0.1), static_cast<float>(0.1)},
      {DType::F64, Scalar::Float(0.1), 0.1},
      {DType::BF16, Scalar::Float(1.0 + 1.0 / 256), 1.0}, // a tie: even
      {DType::F16, Scalar::Float(65519.0), 65504.0},
      {DType::I32, Scalar::Float(-3.7), -3.0},
      {DType::I64, Scalar::Int(INT64_MIN), static_cast<double>(INT64_MIN)},
      {DType::Bool, Scalar::Int(5), 1.0},
  };
  for (const Case &c : cases) {
    uint8_t bytes[8] = {};
    encodeScalar(c.t, c.in, bytes);
    EXPECT_EQ(decodeScalar(c.t, bytes).asDouble(), c.out)
        << plan::DTypeName(c.t);
  }
  EXPECT_EQ(formatValue(3.0), "3");
  EXPECT_EQ(formatValue(0.25), "0.25");
  EXPECT_EQ(formatValue(NAN), "nan");
}

/// A fake device: the bytes the host scalars would read back.
struct Device {
  alignas(8) char memory[64] = {};
  int reads = 0;
};

void store(HostScalars &h, char *at, DType t, Scalar v) {
  uint8_t bytes[8] = {};
  encodeScalar(t, v, bytes);
  std::memcpy(at, bytes, static_cast<size_t>(plan::DTypeSize(t)));
  h.remember(at, t, bytes);
}

TEST(HostScalarCopies, AHitNeedsNoDeviceRead) {
  Device d;
  HostScalars h;
  store(h, d.memory, DType::F32, Scalar::Float(0.1));
  auto read = [&](const char *at, DType t) {
    auto fn = [&](uint8_t *out) {
      ++d.reads;
      std::memcpy(out, at, static_cast<size_t>(plan::DTypeSize(t)));
      return absl::OkStatus();
    };
    return h.read(at, t, fn);
  };
  absl::StatusOr<Scalar> v = read(d.memory, DType::F32);
  ASSERT_TRUE(v.ok());
  // The copy holds the value as the device does: rounded to f32.
  EXPECT_EQ(v->f, static_cast<double>(static_cast<float>(0.1)));
  EXPECT_EQ(d.reads, 0);
  // Another type or address at the same bytes is read from the device.
  ASSERT_TRUE(read(d.memory, DType::I32).ok());
  ASSERT_TRUE(read(d.memory + 4, DType::F32).ok());
  EXPECT_EQ(d.reads, 2);
}

TEST(HostScalarCopies, AWriteOverAnyByteDropsTheCopy) {
  Device d;
  HostScalars h;
  store(h, d.memory + 8, DType::I64, Scalar::Int(42));
  store(h, d.memory + 16, DType::F32, Scalar::Float(2));
  ASSERT_EQ(h.size(), 2u);
  h.forget(d.memory, d.memory + 8); // ends where the first begins
  EXPECT_EQ(h.size(), 2u);
  h.forget(d.memory + 15, d.memory + 16); // its last byte
  EXPECT_EQ(h.size(), 1u);
  // Remembering over the other drops the older copy.
  store(h, d.memory + 16, DType::I32, Scalar::Int(7));
  EXPECT_EQ(h.size(), 1u);
  h.forget(d.memory + 19, d.memory + 40);
  EXPECT_TRUE(h.empty());
}

TEST(HostScalarCopies, VerificationCatchesAStaleCopy) {
  Device d;
  HostScalars h(/*verify=*/true);
  store(h, d.memory, DType::F32, Scalar::Float(3));
  auto fn = [&](uint8_t *out) {
    ++d.reads;
    std::memcpy(out, d.memory, 4);
    return absl::OkStatus();
  };
  absl::StatusOr<Scalar> v = h.read(d.memory, DType::F32, fn);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->f, 3.0);
  EXPECT_EQ(d.reads, 1);
  // The device changes behind the host's back (a write nobody forgot).
  float five = 5;
  std::memcpy(d.memory, &five, 4);
  absl::StatusOr<Scalar> stale = h.read(d.memory, DType::F32, fn);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(stale.status().message(),
            "the host's copy of the scalar (3) is stale: the device holds 5");
  // Without verification the same copy is returned unchecked.
  HostScalars trusting;
  store(trusting, d.memory + 8, DType::F32, Scalar::Float(3));
  std::memcpy(d.memory + 8, &five, 4);
  auto fn8 = [&](uint8_t *out) {
    ++d.reads;
    std::memcpy(out, d.memory + 8, 4);
    return absl::OkStatus();
  };
  int before = d.reads;
  absl::StatusOr<Scalar> trusted = trusting.read(d.memory + 8, DType::F32, fn8);
  ASSERT_TRUE(trusted.ok());
  EXPECT_EQ(trusted->f, 3.0);
  EXPECT_EQ(d.reads, before);
}

TEST(HostScalarCopies, ADeviceErrorIsReturned) {
  HostScalars h;
  alignas(8) char memory[8] = {};
  absl::StatusOr<Scalar> v = h.read(memory, DType::I64, [](uint8_t *) {
    return absl::InternalError("buffer 3 ('x') is not allocated");
  });
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(), "buffer 3 ('x') is not allocated");
}

//===----------------------------------------------------------------------===//
// Data feeds
//===----------------------------------------------------------------------===//

/// A training plan with an evaluation, loaded, and the instructions the
/// feeds are opened for.
struct FeedPlan {
  std::vector<uint8_t> bytes;
  std::optional<plan::LoadedPlan> loaded;
  const fb::Instruction *trainBatch = nullptr;
  const fb::Instruction *evaluate = nullptr;
  const fb::Instruction *evalBatch = nullptr;

  FeedPlan() {
    plan::examples::TrainingPlanOptions o;
    o.preset = plan::examples::Preset::Ddp;
    o.pinnedWorldSize = 1;
    o.evalEvery = 1;
    bytes = plan::examples::TrainingPlan(o).finish();
    absl::StatusOr<plan::LoadedPlan> l = plan::LoadPlan(bytes);
    EXPECT_TRUE(l.ok()) << l.status();
    if (!l.ok())
      return;
    loaded.emplace(std::move(*l));
    const fb::Plan &p = loaded->plan();
    for (const fb::Block *block : *p.blocks())
      for (const fb::Instruction *inst : *block->instructions()) {
        if (inst->opcode() == fb::Opcode::Evaluate)
          evaluate = inst;
        if (inst->opcode() == fb::Opcode::Batch &&
            block->kind() == fb::BlockKind::Step && trainBatch == nullptr)
          trainBatch = inst;
        if (inst->opcode() == fb::Opcode::Batch &&
            block->kind() == fb::BlockKind::EvalBody)
          evalBatch = inst;
      }
  }
  const fb::Plan &plan() const { return loaded->plan(); }
};

/// Host memory for the outputs of a batch instruction (the CPU backend's
/// device memory is the host's).
struct BatchMemory {
  std::vector<Buffer> buffers;
  std::vector<TensorRef> outs;

  BatchMemory(const fb::Plan &plan, const fb::Instruction &batch,
              Backend &backend) {
    for (int32_t x : *batch.outputs()) {
      const fb::Buffer &b = *plan.buffers()->Get(x);
      Shape shape(b.shape()->begin(), b.shape()->end());
      runtime::DType t =
          plan_access::kernelDType(b.dtype()).value_or(runtime::DType::f32);
      TensorRef ref(nullptr, t, shape);
      absl::StatusOr<Buffer> mem = backend.allocate(ref.bytes());
      EXPECT_TRUE(mem.ok()) << mem.status();
      ref.data = mem->data();
      buffers.push_back(std::move(*mem));
      outs.push_back(ref);
    }
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> all;
    for (const TensorRef &t : outs)
      all.insert(all.end(), static_cast<const uint8_t *>(t.data),
                 static_cast<const uint8_t *>(t.data) + t.bytes());
    return all;
  }
};

TEST(DataFeedsTest, TrainingBatchesFollowTheSamplerAcrossAnEvaluation) {
  FeedPlan fp;
  ASSERT_TRUE(fp.loaded && fp.trainBatch && fp.evaluate && fp.evalBatch);
  cpu::CpuBackend backend(1);
  DataFeeds with(fp.plan(), 1, 0, 7), without(fp.plan(), 1, 0, 7);
  ASSERT_TRUE(with.openTraining().ok());
  ASSERT_TRUE(without.openTraining().ok());
  RunInfo info;
  with.describe(info);
  EXPECT_NE(info.data, "none");
  // Synthetic data are endless: no epochs, every rank its own samples.
  EXPECT_EQ(info.sampler, "endless; rank r reads samples r, r + 1, ...");

  BatchMemory a(fp.plan(), *fp.trainBatch, backend);
  BatchMemory b(fp.plan(), *fp.trainBatch, backend);
  BatchMemory e(fp.plan(), *fp.evalBatch, backend);
  ASSERT_TRUE(with.read(a.outs, backend).ok());
  ASSERT_TRUE(without.read(b.outs, backend).ok());
  EXPECT_EQ(a.bytes(), b.bytes());

  // Three evaluation batches, read from the held-out feed.
  int runs = 0;
  std::vector<uint8_t> firstEval;
  int32_t dataset = static_cast<int32_t>(fp.evaluate->ints()->Get(0));
  absl::StatusOr<double> mean =
      with.evaluate(dataset, fp.evalBatch, 3, [&]() -> absl::StatusOr<double> {
        MD_RETURN_IF_ERROR(with.read(e.outs, backend));
        if (runs == 0)
          firstEval = e.bytes();
        return ++runs; // losses 1, 2, 3
      });
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(*mean, 2.0);
  ASSERT_EQ(firstEval.size(), a.bytes().size());
  EXPECT_NE(firstEval, a.bytes()) << "held-out data are other samples";

  // One that fails half way still hands the batches back to training.
  absl::StatusOr<double> failed =
      with.evaluate(dataset, fp.evalBatch, 3, [&]() -> absl::StatusOr<double> {
        MD_RETURN_IF_ERROR(with.read(e.outs, backend));
        return absl::DataLossError("the body failed");
      });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDataLoss);

  // Training goes on where it stopped, as if nothing had been evaluated.
  ASSERT_TRUE(with.read(a.outs, backend).ok());
  ASSERT_TRUE(without.read(b.outs, backend).ok());
  EXPECT_EQ(a.bytes(), b.bytes());
  EXPECT_EQ(with.epoch(), without.epoch());
}

TEST(DataFeedsTest, EvaluationLengths) {
  FeedPlan fp;
  ASSERT_TRUE(fp.loaded && fp.evaluate && fp.evalBatch);
  cpu::CpuBackend backend(1);
  DataFeeds feeds(fp.plan(), 1, 0, 7);
  ASSERT_TRUE(feeds.openTraining().ok());
  int32_t dataset = static_cast<int32_t>(fp.evaluate->ints()->Get(0));
  int runs = 0;
  auto body = [&]() -> absl::StatusOr<double> {
    ++runs;
    return 0.5;
  };
  // "All" of synthetic data is kSyntheticEvalSamples, in batches of the
  // plan's (per rank, one rank).
  int64_t batch = fp.plan()
                      .buffers()
                      ->Get(fp.evalBatch->outputs()->Get(0))
                      ->shape()
                      ->Get(0);
  absl::StatusOr<double> all = feeds.evaluate(dataset, fp.evalBatch, 0, body);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(runs, kSyntheticEvalSamples / batch);
  EXPECT_EQ(*all, 0.5);
  // A body without a batch runs once.
  runs = 0;
  absl::StatusOr<double> once = feeds.evaluate(dataset, nullptr, 5, body);
  ASSERT_TRUE(once.ok());
  EXPECT_EQ(runs, 1);
  // A batch instruction outside an evaluation reads the training data;
  // without any, it is an error.
  DataFeeds none(fp.plan(), 1, 0, 7);
  BatchMemory m(fp.plan(), *fp.evalBatch, backend);
  absl::Status s = none.read(m.outs, backend);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "a batch instruction without data");
}

//===----------------------------------------------------------------------===//
// Checkpoint files
//===----------------------------------------------------------------------===//

std::string tempDir() {
  const char *base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base && *base ? base : "/tmp") + "/md-ckpt-XXXXXX";
  char *made = ::mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr);
  return pattern;
}

TEST(CheckpointFiles, Names) {
  EXPECT_EQ(CheckpointPath("out", fb::CheckpointFormat::Full, 42),
            "out/step_00000042.safetensors");
  EXPECT_EQ(CheckpointPath("", fb::CheckpointFormat::Sharded, 7),
            "checkpoints/step_00000007");
  EXPECT_EQ(ShardFileName("c/step_00000007", 3),
            "c/step_00000007/rank_00003.safetensors");
  EXPECT_STREQ(SafetensorsDType(DType::BF16), "BF16");
  EXPECT_STREQ(SafetensorsDType(DType::Bool), "BOOL");
}

TEST(CheckpointFiles, FullCheckpointReadsBackByName) {
  std::string dir = tempDir();
  std::string path = dir + "/step_00000001.safetensors";
  std::vector<NamedTensor> params = {{"w", {2, 2}, {1, 2, 3, 4}},
                                     {"b", {2}, {-1, 0.5}}};
  ASSERT_TRUE(WriteFullCheckpoint(path, params, {{"step", "1"}}).ok());
  absl::StatusOr<std::vector<SafetensorsTensor>> read =
      ReadSafetensors(path, nullptr);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  for (const SafetensorsTensor &t : *read) {
    const NamedTensor &p = t.name == "w" ? params[0] : params[1];
    EXPECT_EQ(t.dtype, "F32");
    EXPECT_EQ(t.shape, p.shape);
    ASSERT_EQ(t.data.size(), p.values.size() * 4);
    EXPECT_EQ(std::memcmp(t.data.data(), p.values.data(), t.data.size()), 0);
  }
  std::filesystem::remove_all(dir);
}

} // namespace
} // namespace md::runtime
