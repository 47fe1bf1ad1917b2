//===- OpcodeTableTest.cpp - every row of Opcodes.def, end to end --------===//
//
// Walks runtime/core/Opcodes.def and proves, per row, what the table
// promises: a signature for the loader, an encoder for the emitter, a
// decoder for the executor that reaches the row's Backend entry, a type
// rule, and a CPU and a CUDA implementation.
//
// What the build proves before this test runs:
//  - each row's value is its fb::Opcode and every opcode has a row, in
//    order (static_asserts in Schema.cpp);
//  - each kernel row's Args struct has the fields its operands and slots
//    name, and its Backend entry exists and takes that struct (the
//    generated decoders in KernelDispatch.cpp would not compile);
//  - each opcode has a type rule (TypeRules.cpp's switch has no default and
//    is compiled with -Werror=switch) and an executor case (Executor.cpp,
//    also -Werror=switch; kernel rows get theirs from the table);
//  - the CPU and CUDA backends declare one override per Backend entry
//    (BackendOps.def), so a missing kernel leaves the class abstract (the
//    static_asserts below) or its vtable unresolved (a link error of every
//    binary that links the backend, this one included).
// What runs here: names against plan.fbs, every encoder against the
// signature and plan.fbs's layouts, every decoder against the entry it
// calls and the operands and slots it reads, and every CPU kernel called
// through the table.
//
//===----------------------------------------------------------------------===//

#include <any>
#include <cctype>
#include <cstdint>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/exec/KernelDispatch.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/plan/OpAttrs.h"
#include "runtime/plan/Schema.h"
#include "gtest/gtest.h"
#ifdef MD_ENABLE_CUDA
#include "runtime/cuda/CudaBackend.h"
#endif

namespace md {
namespace {

using plan::Arity;
using plan::GetOpcodeInfo;
using plan::IntAttr;
using plan::OpcodeInfo;
using runtime::TensorRef;

static_assert(!std::is_abstract_v<cpu::CpuBackend>,
              "the CPU backend lacks a kernel of BackendOps.def");
#ifdef MD_ENABLE_CUDA
static_assert(!std::is_abstract_v<cuda::CudaBackend>,
              "the CUDA backend lacks a kernel of BackendOps.def");
#endif

#define MD_EXPAND(...) __VA_ARGS__

/// plan.fbs's enumerator in snake_case ("AdamWUpdate" -> "adamw_update").
std::string snakeCase(const std::string &name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    unsigned char c = name[i];
    if (i > 0 && std::isupper(c) && i + 1 < name.size() &&
        std::islower(static_cast<unsigned char>(name[i + 1])))
      out += '_';
    out += static_cast<char>(std::tolower(c));
  }
  return out;
}

/// A value of slot kind K that its range check accepts.
template <IntAttr K> typename plan::IntSlot<K>::type sample() {
  using T = typename plan::IntSlot<K>::type;
  if constexpr (std::is_same_v<T, bool>)
    return true;
  else if constexpr (K == IntAttr::Dataset)
    return 0;
  else
    return static_cast<T>(1);
}

// Every opcode's attribute struct, every slot set to a sample.
#define MD_I(field, name, Kind) a.field = sample<IntAttr::Kind>();
#define MD_I_NOARG(field, name, Kind) a.field = sample<IntAttr::Kind>();
#define MD_I_OPT(field, name, Kind) a.field = sample<IntAttr::Kind>();
#define MD_I_LIST(field, name, Kind, min)                                      \
  a.field.assign((min) + 1, sample<IntAttr::Kind>());
#define MD_F(field, name, Kind) a.field = 0.5;
#define MD_F_LIST(field, name, min) a.field.assign((min) + 1, 0.5);
#define MD_OP(Name, Value, Str, Flags, Since, Rule, Ins, Outs, Ints, Floats,   \
              Strings, Blocks)                                                 \
  plan::attrs::Name sample##Name() {                                           \
    plan::attrs::Name a;                                                       \
    { MD_EXPAND Ints MD_EXPAND Floats }                                        \
    return a;                                                                  \
  }
#include "runtime/core/Opcodes.def"

/// Encodes the sample attributes of `opcode` into an instruction of it.
absl::Status encodeSample(fb::Opcode opcode, fb::InstructionT &inst) {
  inst.opcode = opcode;
  switch (opcode) {
#define MD_OP(Name, ...)                                                       \
  case fb::Opcode::Name:                                                       \
    return plan::Encode(sample##Name(), inst);
#include "runtime/core/Opcodes.def"
  default:
    return absl::InvalidArgumentError("no row");
  }
}

/// The most items each list of `arity` can take short of unbounded: one
/// optional or one more repeated item than the least.
uint32_t fullCount(Arity arity) {
  return static_cast<uint32_t>(arity.min + (arity.max > arity.min ? 1 : 0));
}

TEST(OpcodeTableTest, NamesAreThoseOfPlanFbs) {
  for (int v = 1; v <= static_cast<int>(fb::Opcode::MAX); ++v) {
    auto opcode = static_cast<fb::Opcode>(v);
    const OpcodeInfo *info = GetOpcodeInfo(opcode);
    ASSERT_NE(info, nullptr) << v;
    EXPECT_EQ(info->name, snakeCase(fb::EnumNameOpcode(opcode)));
  }
}

TEST(OpcodeTableTest, EveryEncoderWritesTheSignaturesLayout) {
  for (int v = 1; v <= static_cast<int>(fb::Opcode::MAX); ++v) {
    auto opcode = static_cast<fb::Opcode>(v);
    const OpcodeInfo &info = *GetOpcodeInfo(opcode);
    fb::InstructionT inst;
    ASSERT_TRUE(encodeSample(opcode, inst).ok()) << info.name;
    EXPECT_TRUE(info.ints.contains(static_cast<int64_t>(inst.ints.size())))
        << info.name << ": " << inst.ints.size() << " ints";
    EXPECT_TRUE(info.floats.contains(static_cast<int64_t>(inst.floats.size())))
        << info.name << ": " << inst.floats.size() << " floats";
    for (size_t k = 0; k < inst.ints.size(); ++k) {
      if (info.intKind(k) == IntAttr::Bool) {
        EXPECT_EQ(inst.ints[k], 1) << info.name << " ints[" << k << "]";
      }
    }
  }
}

TEST(OpcodeTableTest, EncodersPutSlotsWherePlanFbsSays) {
  // Layouts copied from plan.fbs's comments, not from the table.
  fb::InstructionT inst;
  plan::attrs::ReduceScatter rs;
  rs.group = fb::Group::Shard;
  rs.reduction = fb::Reduction::Avg;
  rs.bucket = int64_t{7};
  rs.axis = int64_t{2};
  ASSERT_TRUE(plan::Encode(rs, inst).ok());
  EXPECT_EQ(inst.ints, (std::vector<int64_t>{1, 1, 7, 2}));

  plan::attrs::Broadcast bc;
  bc.group = fb::Group::Replicate;
  bc.bucket = int64_t{-1};
  bc.root = int64_t{3};
  ASSERT_TRUE(plan::Encode(bc, inst).ok());
  EXPECT_EQ(inst.ints, (std::vector<int64_t>{2, -1, 3}));

  plan::attrs::SgdUpdate sgd;
  sgd.nesterov = true;
  sgd.momentum = 0.9;
  sgd.dampening = 0.0;
  sgd.weightDecay = 0.01;
  ASSERT_TRUE(plan::Encode(sgd, inst).ok());
  EXPECT_EQ(inst.ints, (std::vector<int64_t>{1}));
  EXPECT_EQ(inst.floats, (std::vector<double>{0.9, 0.0, 0.01}));

  plan::attrs::AdamWUpdate adamw;
  adamw.beta1 = 0.9;
  adamw.beta2 = 0.95;
  adamw.eps = 1e-8;
  adamw.weightDecay = 0.1;
  ASSERT_TRUE(plan::Encode(adamw, inst).ok());
  EXPECT_EQ(inst.floats, (std::vector<double>{0.9, 0.95, 1e-8, 0.1}));
  EXPECT_TRUE(inst.ints.empty());

  plan::attrs::Mean mean;
  mean.keepdim = false;
  mean.dims = {-1, 0};
  ASSERT_TRUE(plan::Encode(mean, inst).ok());
  EXPECT_EQ(inst.ints, (std::vector<int64_t>{0, -1, 0}));

  plan::attrs::CrossEntropy ce;
  ASSERT_TRUE(plan::Encode(ce, inst).ok());
  EXPECT_TRUE(inst.ints.empty()); // no ignore_index
  ce.ignoreIndex = int64_t{-100};
  ASSERT_TRUE(plan::Encode(ce, inst).ok());
  EXPECT_EQ(inst.ints, (std::vector<int64_t>{-100}));
}

TEST(OpcodeTableTest, EncoderRefusesAnUnsetSlot) {
  plan::attrs::Matmul m;
  m.transposeA = true;
  fb::InstructionT inst;
  absl::Status s = plan::Encode(m, inst);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "matmul: attribute transpose_b is not set");
}

/// Records the entry called and its arguments instead of running it.
class RecordingBackend final : public cpu::CpuBackend {
public:
  RecordingBackend() : cpu::CpuBackend(1) {}
#define MD_BACKEND_OP(entry, Args)                                             \
  absl::Status entry(const runtime::Args &args) override {                     \
    called = #entry;                                                           \
    stream = args.stream.id;                                                   \
    last = args;                                                               \
    return absl::OkStatus();                                                   \
  }
#include "runtime/core/BackendOps.def"

  std::string called;
  int stream = -1;
  std::any last;
};

/// A plan's worth of buffers: tensor i points at a distinct fake address
/// (nothing reads them), and host scalar reads record which buffer they
/// read.
struct Decoding {
  std::vector<TensorRef> refs;
  std::vector<int32_t> floatReads, intReads;
  RecordingBackend backend;

  Decoding() {
    for (int i = 0; i < 64; ++i)
      refs.emplace_back(data(i), runtime::DType::f32, runtime::Shape{});
  }
  static void *data(int32_t buffer) {
    return reinterpret_cast<void *>(
        static_cast<uintptr_t>(0x1000 * (buffer + 1)));
  }

  /// Dispatches `inst` with inputs 0..ins-1 and outputs 32..32+outs-1.
  absl::Status run(fb::InstructionT inst, uint32_t ins, uint32_t outs) {
    inst.inputs.clear();
    inst.outputs.clear();
    for (uint32_t k = 0; k < ins; ++k)
      inst.inputs.push_back(static_cast<int32_t>(k));
    for (uint32_t k = 0; k < outs; ++k)
      inst.outputs.push_back(static_cast<int32_t>(32 + k));
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(fb::Instruction::Pack(fbb, &inst));
    const auto *packed =
        flatbuffers::GetRoot<fb::Instruction>(fbb.GetBufferPointer());
    auto readFloat = [&](int32_t x) -> absl::StatusOr<double> {
      floatReads.push_back(x);
      return 0.25;
    };
    auto readInt = [&](int32_t x) -> absl::StatusOr<int64_t> {
      intReads.push_back(x);
      return 5;
    };
    // An optimizer update's sample names a unit (its optional slot): the
    // executor would give it its parameter groups' ranges; one range of
    // the sample's own decay over the one element stands for them.
    runtime::OptimizerSegment whole;
    whole.end = 1;
    whole.weightDecay = 0.5;
    std::vector<runtime::OptimizerSegment> segments = {whole};
    runtime::KernelContext ctx{backend, refs, readFloat, readInt};
    ctx.optimizerSegments = &segments;
    return runtime::DispatchKernel(ctx, *packed);
  }
  template <typename Args> const Args &args() const {
    return std::any_cast<const Args &>(backend.last);
  }
};

TEST(OpcodeTableTest, EveryKernelRowReachesItsBackendEntry) {
  std::set<std::string> reached;
  for (int v = 1; v <= static_cast<int>(fb::Opcode::MAX); ++v) {
    auto opcode = static_cast<fb::Opcode>(v);
    const OpcodeInfo &info = *GetOpcodeInfo(opcode);
    EXPECT_EQ(info.kernel, runtime::IsKernelOpcode(opcode)) << info.name;
    fb::InstructionT inst;
    ASSERT_TRUE(encodeSample(opcode, inst).ok());
    inst.stream = 1;
    Decoding d;
    absl::Status s =
        d.run(inst, fullCount(info.inputs), fullCount(info.outputs));
    if (!info.kernel) {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << info.name;
      EXPECT_EQ(runtime::KernelEntryName(opcode), nullptr) << info.name;
      continue;
    }
    ASSERT_TRUE(s.ok()) << info.name << ": " << s;
    ASSERT_NE(runtime::KernelEntryName(opcode), nullptr) << info.name;
    EXPECT_EQ(d.backend.called, runtime::KernelEntryName(opcode)) << info.name;
    EXPECT_EQ(d.backend.stream, 1) << info.name;
    reached.insert(d.backend.called);
  }
  // Every entry of the interface has an opcode, but view: a plan's view
  // aliases its source and runs nothing.
  std::set<std::string> entries = {
#define MD_BACKEND_OP(entry, Args) #entry,
#include "runtime/core/BackendOps.def"
  };
  entries.erase("view");
  EXPECT_EQ(reached, entries);
}

TEST(OpcodeTableTest, DecodersReadOperandsAndSlotsInPlace) {
  using namespace runtime;
  auto at = [](int32_t buffer) { return Decoding::data(buffer); };
  {
    // matmul: in [a, b, [bias]]; ints [transpose_a, transpose_b].
    fb::InstructionT inst;
    inst.opcode = fb::Opcode::Matmul;
    inst.ints = {0, 1};
    Decoding d;
    ASSERT_TRUE(d.run(inst, 3, 1).ok());
    const auto &a = d.args<MatmulArgs>();
    EXPECT_EQ(a.a.data, at(0));
    EXPECT_EQ(a.b.data, at(1));
    ASSERT_TRUE(a.bias.has_value());
    EXPECT_EQ(a.bias->data, at(2));
    EXPECT_EQ(a.out.data, at(32));
    EXPECT_FALSE(a.transposeA);
    EXPECT_TRUE(a.transposeB);
    ASSERT_TRUE(d.run(inst, 2, 1).ok());
    EXPECT_FALSE(d.args<MatmulArgs>().bias.has_value());
  }
  {
    // sub: the shared BinaryArgs with the opcode's operation.
    fb::InstructionT inst;
    inst.opcode = fb::Opcode::Sub;
    Decoding d;
    ASSERT_TRUE(d.run(inst, 2, 1).ok());
    EXPECT_EQ(d.args<BinaryArgs>().op, BinaryOp::sub);
    EXPECT_EQ(d.args<BinaryArgs>().rhs.data, at(1));
  }
  {
    // sgd_update: in [param, grad, [momentum_buffer], lr, step]: the
    // optional item sits between fixed ones.
    fb::InstructionT inst;
    inst.opcode = fb::Opcode::SgdUpdate;
    inst.ints = {1};
    inst.floats = {0.9, 0.0, 0.01};
    Decoding d;
    ASSERT_TRUE(d.run(inst, 5, 2).ok());
    const auto &a = d.args<SgdArgs>();
    ASSERT_TRUE(a.momentumBuffer.has_value());
    EXPECT_EQ(a.momentumBuffer->data, at(2));
    ASSERT_TRUE(a.newMomentumBuffer.has_value());
    EXPECT_EQ(a.newMomentumBuffer->data, at(33));
    EXPECT_EQ(d.floatReads, (std::vector<int32_t>{3}));
    EXPECT_EQ(d.intReads, (std::vector<int32_t>{4}));
    EXPECT_EQ(a.lr, 0.25f);
    EXPECT_EQ(a.step, 5);
    EXPECT_EQ(a.momentum, 0.9);
    EXPECT_EQ(a.weightDecay, 0.01);
    EXPECT_TRUE(a.nesterov);

    Decoding plain;
    inst.floats = {0.0, 0.0, 0.0};
    inst.ints = {0};
    ASSERT_TRUE(plain.run(inst, 4, 1).ok());
    EXPECT_FALSE(plain.args<SgdArgs>().momentumBuffer.has_value());
    EXPECT_FALSE(plain.args<SgdArgs>().newMomentumBuffer.has_value());
    EXPECT_EQ(plain.floatReads, (std::vector<int32_t>{2}));
    EXPECT_EQ(plain.intReads, (std::vector<int32_t>{3}));
  }
  {
    // adamw_update: floats [beta1, beta2, eps, weight_decay].
    fb::InstructionT inst;
    inst.opcode = fb::Opcode::AdamWUpdate;
    inst.floats = {0.9, 0.95, 1e-8, 0.1};
    Decoding d;
    ASSERT_TRUE(d.run(inst, 6, 3).ok());
    const auto &a = d.args<AdamWArgs>();
    EXPECT_EQ(a.beta1, 0.9);
    EXPECT_EQ(a.beta2, 0.95);
    EXPECT_EQ(a.eps, 1e-8);
    EXPECT_EQ(a.weightDecay, 0.1);
    EXPECT_EQ(a.v.data, at(3));
    EXPECT_EQ(a.newV.data, at(34));
  }
  {
    // clip: in [g, ..., norm] out [g', ...]: a list before a fixed item.
    fb::InstructionT inst;
    inst.opcode = fb::Opcode::Clip;
    inst.floats = {1.0};
    Decoding d;
    ASSERT_TRUE(d.run(inst, 4, 3).ok());
    const auto &a = d.args<ClipArgs>();
    ASSERT_EQ(a.grads.size(), 3u);
    EXPECT_EQ(a.grads[2].data, at(2));
    EXPECT_EQ(a.norm.data, at(3));
    ASSERT_EQ(a.outs.size(), 3u);
    EXPECT_EQ(a.outs[2].data, at(34));
    EXPECT_EQ(a.maxNorm, 1.0);
  }
  {
    // mean_grad: ints [keepdim, dim, ...].
    fb::InstructionT inst;
    inst.opcode = fb::Opcode::MeanGrad;
    inst.ints = {1, -1, 0};
    Decoding d;
    ASSERT_TRUE(d.run(inst, 1, 1).ok());
    const auto &a = d.args<ReduceGradArgs>();
    EXPECT_EQ(a.kind, ReduceKind::mean);
    EXPECT_TRUE(a.keepdim);
    EXPECT_EQ(a.dims, (std::vector<int64_t>{-1, 0}));
  }
  {
    // cross_entropy_grad: ints [[ignore_index]].
    fb::InstructionT inst;
    inst.opcode = fb::Opcode::CrossEntropyGrad;
    Decoding d;
    ASSERT_TRUE(d.run(inst, 3, 1).ok());
    EXPECT_FALSE(d.args<CrossEntropyGradArgs>().ignoreIndex.has_value());
    inst.ints = {-100};
    ASSERT_TRUE(d.run(inst, 3, 1).ok());
    EXPECT_EQ(d.args<CrossEntropyGradArgs>().ignoreIndex, -100);
    EXPECT_EQ(d.args<CrossEntropyGradArgs>().targets.data, at(2));
  }
}

TEST(OpcodeTableTest, DecoderRefusesAListThatDoesNotFit) {
  fb::InstructionT inst;
  inst.opcode = fb::Opcode::AdamWUpdate;
  inst.floats = {0.9, 0.95, 1e-8};
  Decoding d;
  absl::Status s = d.run(inst, 6, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.backend.called, "");
}

TEST(OpcodeTableTest, EveryCpuKernelRunsThroughTheTable) {
  // Null tensors: each kernel's argument check refuses them, which shows
  // the CPU backend implements the entry (an unimplemented one would not
  // link; this shows the call reaches a kernel that checks its operands).
  for (int v = 1; v <= static_cast<int>(fb::Opcode::MAX); ++v) {
    auto opcode = static_cast<fb::Opcode>(v);
    const OpcodeInfo &info = *GetOpcodeInfo(opcode);
    if (!info.kernel)
      continue;
    fb::InstructionT inst;
    ASSERT_TRUE(encodeSample(opcode, inst).ok());
    std::vector<TensorRef> refs(
        64, TensorRef(nullptr, runtime::DType::f32, runtime::Shape{2}));
    cpu::CpuBackend backend(1);
    inst.inputs.clear();
    inst.outputs.clear();
    for (uint32_t k = 0; k < fullCount(info.inputs); ++k)
      inst.inputs.push_back(static_cast<int32_t>(k));
    for (uint32_t k = 0; k < fullCount(info.outputs); ++k)
      inst.outputs.push_back(static_cast<int32_t>(32 + k));
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(fb::Instruction::Pack(fbb, &inst));
    auto readFloat = [](int32_t) -> absl::StatusOr<double> { return 0.1; };
    auto readInt = [](int32_t) -> absl::StatusOr<int64_t> { return 1; };
    absl::Status s = runtime::DispatchKernel(
        {backend, refs, readFloat, readInt},
        *flatbuffers::GetRoot<fb::Instruction>(fbb.GetBufferPointer()));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << info.name << ": " << s;
  }
}

} // namespace
} // namespace md
