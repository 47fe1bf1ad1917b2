//===- Schema.cpp - opcode signatures, dtype sizes and names ------------===//
//
// The table behind GetOpcodeInfo. Each row restates the layout plan.fbs
// documents next to the opcode; PlanLoaderTest checks that every opcode of
// the schema has exactly one row.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Schema.h"

#include <initializer_list>
#include <vector>

#include "absl/strings/str_cat.h"

namespace md::plan {
namespace {

using fb::Opcode;
using K = IntAttr;

constexpr Arity N(int32_t n) { return {n, n}; }
constexpr Arity R(int32_t lo, int32_t hi) { return {lo, hi}; }
constexpr Arity AtLeast(int32_t lo) { return {lo, Arity::kMany}; }

/// Builds one row.
class Sig {
public:
  Sig(Opcode opcode, const char *name, Arity inputs, Arity outputs) {
    info_.opcode = opcode;
    info_.name = name;
    info_.inputs = inputs;
    info_.outputs = outputs;
  }
  Sig &ints(Arity arity, std::initializer_list<IntAttr> leading = {},
            IntAttr rest = IntAttr::Any) {
    info_.ints = arity;
    size_t i = 0;
    for (IntAttr kind : leading)
      info_.leadingInts[i++] = kind;
    info_.restInts = rest;
    return *this;
  }
  Sig &floats(Arity arity) {
    info_.floats = arity;
    return *this;
  }
  Sig &strings(Arity arity) {
    info_.strings = arity;
    return *this;
  }
  Sig &blocks(Arity arity) {
    info_.blocks = arity;
    return *this;
  }
  Sig &flags(uint32_t flags) {
    info_.flags = flags;
    return *this;
  }
  operator OpcodeInfo() const { return info_; }

private:
  OpcodeInfo info_;
};

std::vector<OpcodeInfo> buildTable() {
  const Arity kDims = AtLeast(2); // keepdim, then at least one dim
  std::vector<OpcodeInfo> rows = {
      // compute
      Sig(Opcode::Matmul, "matmul", R(2, 3), N(1))
          .ints(N(2), {K::Bool, K::Bool}),
      Sig(Opcode::MatmulGrad, "matmul_grad", N(3), R(2, 3))
          .ints(N(2), {K::Bool, K::Bool}),
      Sig(Opcode::Add, "add", N(2), N(1)),
      Sig(Opcode::Sub, "sub", N(2), N(1)),
      Sig(Opcode::Mul, "mul", N(2), N(1)),
      Sig(Opcode::Scale, "scale", N(1), N(1)).floats(N(1)),
      Sig(Opcode::Gelu, "gelu", N(1), N(1)).ints(N(1), {K::Bool}),
      Sig(Opcode::GeluGrad, "gelu_grad", N(2), N(1)).ints(N(1), {K::Bool}),
      Sig(Opcode::Relu, "relu", N(1), N(1)),
      Sig(Opcode::ReluGrad, "relu_grad", N(2), N(1)),
      Sig(Opcode::LayerNorm, "layer_norm", R(2, 3), N(1)).floats(N(1)),
      Sig(Opcode::LayerNormGrad, "layer_norm_grad", N(3), R(2, 3)).floats(N(1)),
      Sig(Opcode::RmsNorm, "rms_norm", N(2), N(1)).floats(N(1)),
      Sig(Opcode::RmsNormGrad, "rms_norm_grad", N(3), N(2)).floats(N(1)),
      Sig(Opcode::BatchNorm, "batch_norm", N(3), N(3)).floats(N(1)),
      Sig(Opcode::BatchNormGrad, "batch_norm_grad", N(5), N(3)),
      Sig(Opcode::Softmax, "softmax", N(1), N(1)).ints(N(1)),
      Sig(Opcode::SoftmaxGrad, "softmax_grad", N(2), N(1)).ints(N(1)),
      Sig(Opcode::CausalAttention, "causal_attention", N(3), N(1))
          .ints(N(1), {K::Positive}),
      Sig(Opcode::CausalAttentionGrad, "causal_attention_grad", N(4), N(3))
          .ints(N(1), {K::Positive}),
      Sig(Opcode::Embedding, "embedding", N(2), N(1)),
      Sig(Opcode::EmbeddingGrad, "embedding_grad", N(2), N(1))
          .ints(N(1), {K::Positive}),
      Sig(Opcode::CrossEntropy, "cross_entropy", N(2), N(1)).ints(R(0, 1)),
      Sig(Opcode::CrossEntropyGrad, "cross_entropy_grad", N(3), N(1))
          .ints(R(0, 1)),
      Sig(Opcode::Mean, "mean", N(1), N(1)).ints(kDims, {K::Bool}),
      Sig(Opcode::MeanGrad, "mean_grad", N(1), N(1)).ints(kDims, {K::Bool}),
      Sig(Opcode::Sum, "sum", N(1), N(1)).ints(kDims, {K::Bool}),
      Sig(Opcode::SumGrad, "sum_grad", N(1), N(1)).ints(kDims, {K::Bool}),
      Sig(Opcode::SumTo, "sum_to", N(1), N(1)),
      Sig(Opcode::Reshape, "reshape", N(1), N(1)),
      Sig(Opcode::Transpose, "transpose", N(1), N(1))
          .ints(
              AtLeast(1),
              {K::NonNegative, K::NonNegative, K::NonNegative, K::NonNegative},
              K::NonNegative),
      Sig(Opcode::Arange, "arange", N(0), N(1)).ints(N(2)),
      Sig(Opcode::Accumulate, "accumulate", N(2), N(1)),
      // optimizer
      Sig(Opcode::AdamWUpdate, "adamw_update", N(6), N(3)).floats(N(4)),
      Sig(Opcode::SgdUpdate, "sgd_update", R(4, 5), R(1, 2))
          .floats(N(3))
          .ints(N(1), {K::Bool}),
      Sig(Opcode::GlobalNorm, "global_norm", AtLeast(1), N(1))
          .ints(N(1), {K::Bool}),
      Sig(Opcode::Clip, "clip", AtLeast(2), AtLeast(1)).floats(N(1)),
      Sig(Opcode::Sqrt, "sqrt", N(1), N(1)),
      // buffers
      Sig(Opcode::Cast, "cast", N(1), N(1)),
      Sig(Opcode::Flatten, "flatten", AtLeast(1), N(1)),
      Sig(Opcode::View, "view", N(1), N(1)).ints(N(1), {K::NonNegative}),
      Sig(Opcode::ShardSlice, "shard_slice", N(1), N(1)).ints(N(1), {K::Group}),
      // collectives
      Sig(Opcode::AllGather, "all_gather", N(1), N(1))
          .ints(N(3), {K::Group, K::Bucket, K::NonNegative})
          .flags(kCollective),
      Sig(Opcode::ReduceScatter, "reduce_scatter", N(1), N(1))
          .ints(N(4), {K::Group, K::Reduction, K::Bucket, K::NonNegative})
          .flags(kCollective),
      Sig(Opcode::AllReduce, "all_reduce", N(1), N(1))
          .ints(N(3), {K::Group, K::Reduction, K::Bucket})
          .flags(kCollective),
      Sig(Opcode::Broadcast, "broadcast", N(1), N(1))
          .ints(N(3), {K::Group, K::Bucket, K::NonNegative})
          .flags(kCollective),
      Sig(Opcode::Barrier, "barrier", N(0), N(0))
          .ints(N(2), {K::Group, K::Bucket})
          .flags(kCollective),
      // state and the step
      Sig(Opcode::StateLoad, "state_load", N(1), N(1))
          .flags(kVaryingResult), // shards differ
      Sig(Opcode::StateStore, "state_store", N(1), N(1)),
      Sig(Opcode::Batch, "batch", N(0), AtLeast(1))
          .ints(N(1), {K::Dataset})
          .flags(kVaryingResult),
      Sig(Opcode::AccumScale, "accum_scale", N(0), N(1)).flags(kUniformResult),
      Sig(Opcode::RecordLoss, "record_loss", N(1), N(0)),
      Sig(Opcode::GradAccumulate, "grad_accumulate", N(1), N(1)),
      Sig(Opcode::GradTotal, "grad_total", N(2), N(1)),
      // values of the run
      Sig(Opcode::Step, "step", N(0), N(1)).flags(kUniformResult),
      Sig(Opcode::Epoch, "epoch", N(0), N(1)).flags(kUniformResult),
      Sig(Opcode::WorldSize, "world_size", N(0), N(1)).flags(kUniformResult),
      Sig(Opcode::Lr, "lr", N(1), N(1)),
      Sig(Opcode::Loss, "loss", N(0), N(1)).flags(kVaryingResult),
      Sig(Opcode::WallTime, "wall_time", N(0), N(1)).flags(kVaryingResult),
      Sig(Opcode::FileExists, "file_exists", N(0), N(1))
          .strings(N(1))
          .flags(kVaryingResult),
      // host scalars
      Sig(Opcode::Constant, "constant", N(0), N(1))
          .ints(R(0, Arity::kMany))
          .floats(R(0, Arity::kMany))
          .flags(kUniformResult),
      Sig(Opcode::ScalarArith, "scalar_arith", R(1, 2), N(1))
          .ints(N(1), {K::ArithKind}),
      Sig(Opcode::ScalarCompare, "scalar_compare", N(2), N(1))
          .ints(N(1), {K::CompareKind}),
      Sig(Opcode::ScalarConvert, "scalar_convert", N(1), N(1)),
      // io
      Sig(Opcode::Log, "log", AtLeast(0), N(0)).strings(AtLeast(1)).flags(kIo),
      Sig(Opcode::Print, "print", AtLeast(0), N(0)).strings(N(1)).flags(kIo),
      Sig(Opcode::Evaluate, "evaluate", N(0), N(1))
          .ints(N(2), {K::Dataset, K::NonNegative})
          .blocks(N(1))
          .flags(kIo | kCollective | kControl | kUniformResult | kHooksOnly),
      Sig(Opcode::Save, "save", N(0), N(0))
          .ints(N(1), {K::CheckpointFormat})
          .strings(R(0, 1))
          .flags(kIo | kCollective | kHooksOnly),
      Sig(Opcode::Exit, "exit", N(0), N(0))
          .strings(R(0, 1))
          .flags(kIo | kHooksOnly),
      // control
      Sig(Opcode::If, "if", N(1), AtLeast(0)).blocks(R(1, 2)).flags(kControl),
      Sig(Opcode::Every, "every", N(0), N(0))
          .ints(N(2), {K::Positive, K::PeriodUnit})
          .blocks(N(1))
          .flags(kControl),
      Sig(Opcode::For, "for", N(2), N(1)).blocks(N(1)).flags(kControl),
      Sig(Opcode::MicroSteps, "micro_steps", N(0), N(0))
          .blocks(N(1))
          .flags(kControl),
      Sig(Opcode::Yield, "yield", AtLeast(0), N(0)),
  };
  // Index the rows by opcode value; a hole stays Invalid.
  std::vector<OpcodeInfo> table(static_cast<size_t>(Opcode::MAX) + 1);
  for (const OpcodeInfo &row : rows)
    table[static_cast<size_t>(row.opcode)] = row;
  return table;
}

const std::vector<OpcodeInfo> &table() {
  static const std::vector<OpcodeInfo> kTable = buildTable();
  return kTable;
}

} // namespace

const OpcodeInfo *GetOpcodeInfo(fb::Opcode opcode) {
  auto index = static_cast<size_t>(opcode);
  const std::vector<OpcodeInfo> &rows = table();
  if (index >= rows.size() || rows[index].opcode == fb::Opcode::Invalid)
    return nullptr;
  return &rows[index];
}

std::string OpcodeName(fb::Opcode opcode) {
  if (const OpcodeInfo *info = GetOpcodeInfo(opcode))
    return info->name;
  return absl::StrCat("opcode ", static_cast<int>(opcode));
}

int64_t DTypeSize(fb::DType dtype) {
  switch (dtype) {
  case fb::DType::F32:
  case fb::DType::I32:
    return 4;
  case fb::DType::BF16:
  case fb::DType::F16:
    return 2;
  case fb::DType::I64:
  case fb::DType::F64:
    return 8;
  case fb::DType::Bool:
    return 1;
  case fb::DType::Invalid:
    return 0;
  }
  return 0;
}

const char *DTypeName(fb::DType dtype) {
  switch (dtype) {
  case fb::DType::F32:
    return "f32";
  case fb::DType::BF16:
    return "bf16";
  case fb::DType::F16:
    return "f16";
  case fb::DType::I32:
    return "i32";
  case fb::DType::I64:
    return "i64";
  case fb::DType::F64:
    return "f64";
  case fb::DType::Bool:
    return "bool";
  case fb::DType::Invalid:
    return "invalid";
  }
  return "?";
}

const char *GroupName(fb::Group group) {
  switch (group) {
  case fb::Group::World:
    return "world";
  case fb::Group::Shard:
    return "shard";
  case fb::Group::Replicate:
    return "replicate";
  }
  return "?";
}

const char *ReductionName(fb::Reduction reduction) {
  switch (reduction) {
  case fb::Reduction::Sum:
    return "sum";
  case fb::Reduction::Avg:
    return "avg";
  case fb::Reduction::Max:
    return "max";
  case fb::Reduction::Min:
    return "min";
  case fb::Reduction::Prod:
    return "prod";
  }
  return "?";
}

const char *StateRoleName(fb::StateRole role) {
  switch (role) {
  case fb::StateRole::None:
    return "transient";
  case fb::StateRole::Master:
    return "master";
  case fb::StateRole::Params:
    return "params";
  case fb::StateRole::ExpAvg:
    return "exp_avg";
  case fb::StateRole::ExpAvgSq:
    return "exp_avg_sq";
  case fb::StateRole::Momentum:
    return "momentum";
  case fb::StateRole::GradAcc:
    return "grad_acc";
  case fb::StateRole::Buffer:
    return "buffer";
  }
  return "?";
}

const char *BlockKindName(fb::BlockKind kind) {
  switch (kind) {
  case fb::BlockKind::Step:
    return "step";
  case fb::BlockKind::Hooks:
    return "hooks";
  case fb::BlockKind::MicroSteps:
    return "micro_steps";
  case fb::BlockKind::Then:
    return "then";
  case fb::BlockKind::Else:
    return "else";
  case fb::BlockKind::Every:
    return "every";
  case fb::BlockKind::ForBody:
    return "for";
  case fb::BlockKind::EvalBody:
    return "eval";
  }
  return "?";
}

} // namespace md::plan
