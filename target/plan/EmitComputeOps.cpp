//===- EmitComputeOps.cpp - md's compute ops as plan instructions --------===//
//
// The emitter's compute ops (Emitter.h): the kernels of the forward and
// backward, the optimizer updates, the buffer ops and the collectives. One
// op becomes one instruction with the same operands in the same order; each
// family fills its opcode's attribute struct (runtime/plan/OpAttrs.h, from
// Opcodes.def) by slot name, and the struct's type gives the opcode.
//
//===----------------------------------------------------------------------===//

#include "target/plan/Emitter.h"

#include "llvm/ADT/TypeSwitch.h"

#include <array>

namespace md::emitter {

namespace A = plan::attrs;

namespace {

template <typename T> int64_t i64(T v) { return static_cast<int64_t>(v); }
template <typename Op> double eps(Op n) { return n.getEps().convertToDouble(); }
template <typename Op> fb::Group group(Op c) {
  return static_cast<fb::Group>(c.getGroup());
}
template <typename Op> fb::Reduction reduction(Op c) {
  return static_cast<fb::Reduction>(c.getReductionKind());
}

} // namespace

LogicalResult Emitter::emitComputeOp(Operation &op, Context ctx) {
  if (op.getDialect() != model_->getDialect())
    return op.emitError("'")
           << op.getName() << "' cannot be emitted into a plan";
  FailureOr<SmallVector<int32_t>> in = uses(op.getOperands(), ctx.block, &op);
  if (failed(in))
    return failure();
  FailureOr<std::vector<int32_t>> out = computeOutputs(op);
  if (failed(out))
    return failure();
  Pending p{op, ctx, std::vector<int32_t>(in->begin(), in->end()),
            std::move(*out)};
  for (auto emit : {&Emitter::emitNnOp, &Emitter::emitUpdateOrBufferOp,
                    &Emitter::emitCollectiveOp})
    if (std::optional<LogicalResult> emitted = (this->*emit)(p))
      return *emitted;
  return op.emitError("'") << op.getName() << "' cannot be emitted into a plan";
}

FailureOr<std::vector<int32_t>> Emitter::computeOutputs(Operation &op) {
  // Optimizer updates run in place on the states they update (docs/memory.md):
  // a result whose operand was loaded from a state is that operand's buffer.
  auto inPlace = [&](Value result, Value operand) -> bool {
    auto it = buffers_.find(operand);
    if (!operand || it == buffers_.end() || !loadedFrom_.count(it->second))
      return false;
    buffers_[result] = it->second;
    return true;
  };
  std::vector<int32_t> outputs;
  auto adamw = dyn_cast<AdamWUpdateOp>(op);
  auto sgd = dyn_cast<SGDUpdateOp>(op);
  for (auto [i, result] : llvm::enumerate(op.getResults())) {
    Value updated;
    if (adamw)
      updated =
          std::array<Value, 3>{adamw.getParam(), adamw.getM(), adamw.getV()}[i];
    else if (sgd)
      updated = i == 0 ? sgd.getParam() : sgd.getMomentumBuffer();
    if (updated && inPlace(result, updated)) {
      outputs.push_back(buffers_[result]);
      continue;
    }
    // A view or reshape aliases its operand: both become a plan View.
    std::string name = op.getName().stripDialect().str();
    if (op.getNumResults() > 1)
      name += "#" + std::to_string(i);
    FailureOr<int32_t> x = newBuffer(result, name, &op);
    if (failed(x))
      return failure();
    outputs.push_back(*x);
  }
  return outputs;
}

std::optional<LogicalResult> Emitter::emitNnOp(const Pending &p) {
  auto emit = [&](const auto &a) { return emitAs(p, a); };
  // Mean, Sum and their gradients share keepdim and dims.
  auto reduce = [&](auto a, auto r) {
    a.keepdim = r.getKeepdim();
    a.dims.assign(r.getDims().begin(), r.getDims().end());
    return emit(a);
  };
  // An op and its gradient share their attributes: one setter each.
  auto withEps = [&](auto a, auto n) {
    a.eps = eps(n);
    return emit(a);
  };
  auto withTransposes = [&](auto a, auto m) {
    a.transposeA = m.getTransposeA();
    a.transposeB = m.getTransposeB();
    return emit(a);
  };
  auto withApproximate = [&](auto a, auto g) {
    a.approximate = g.getApproximate();
    return emit(a);
  };
  auto withAxis = [&](auto a, auto s) {
    a.axis = i64(s.getAxis());
    return emit(a);
  };
  auto withHeads = [&](auto a, auto c) {
    a.numHeads = i64(c.getNumHeads());
    return emit(a);
  };
  auto withIgnoreIndex = [&](auto a, auto c) {
    if (std::optional<uint64_t> index = c.getIgnoreIndex())
      a.ignoreIndex = i64(*index);
    return emit(a);
  };

  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(&p.op)
      .Case([&](MatmulOp m) { return withTransposes(A::Matmul(), m); })
      .Case([&](MatmulGradOp m) { return withTransposes(A::MatmulGrad(), m); })
      .Case([&](MatmulGeluOp m) {
        A::MatmulGelu a;
        a.approximate = m.getApproximate();
        return withTransposes(a, m);
      })
      .Case([&](AddOp) { return emit(A::Add()); })
      .Case([&](SubOp) { return emit(A::Sub()); })
      .Case([&](MulOp) { return emit(A::Mul()); })
      .Case([&](ScaleOp s) {
        A::Scale a;
        a.factor = s.getFactor().convertToDouble();
        return emit(a);
      })
      .Case([&](GeluOp g) { return withApproximate(A::Gelu(), g); })
      .Case([&](GeluGradOp g) { return withApproximate(A::GeluGrad(), g); })
      .Case([&](ReluOp) { return emit(A::Relu()); })
      .Case([&](ReluGradOp) { return emit(A::ReluGrad()); })
      .Case([&](SqrtOp) { return emit(A::Sqrt()); })
      .Case([&](RsqrtOp r) { return withEps(A::Rsqrt(), r); })
      .Case([&](LayerNormOp n) { return withEps(A::LayerNorm(), n); })
      .Case([&](LayerNormGradOp n) { return withEps(A::LayerNormGrad(), n); })
      .Case([&](RmsNormOp n) { return withEps(A::RmsNorm(), n); })
      .Case([&](RmsNormGradOp n) { return withEps(A::RmsNormGrad(), n); })
      .Case([&](BatchNormOp n) { return withEps(A::BatchNorm(), n); })
      .Case([&](BatchNormGradOp) { return emit(A::BatchNormGrad()); })
      .Case([&](SoftmaxOp s) { return withAxis(A::Softmax(), s); })
      .Case([&](SoftmaxGradOp s) { return withAxis(A::SoftmaxGrad(), s); })
      .Case([&](CausalAttentionOp c) {
        return withHeads(A::CausalAttention(), c);
      })
      .Case([&](CausalAttentionGradOp c) {
        return withHeads(A::CausalAttentionGrad(), c);
      })
      .Case([&](EmbeddingOp) { return emit(A::Embedding()); })
      .Case([&](EmbeddingGradOp e) {
        A::EmbeddingGrad a;
        a.numEmbeddings = i64(e.getNumEmbeddings());
        return emit(a);
      })
      .Case([&](CrossEntropyOp c) {
        return withIgnoreIndex(A::CrossEntropy(), c);
      })
      .Case([&](CrossEntropyGradOp c) {
        return withIgnoreIndex(A::CrossEntropyGrad(), c);
      })
      .Case([&](MeanOp r) { return reduce(A::Mean(), r); })
      .Case([&](MeanGradOp r) { return reduce(A::MeanGrad(), r); })
      .Case([&](SumOp r) { return reduce(A::Sum(), r); })
      .Case([&](SumGradOp r) { return reduce(A::SumGrad(), r); })
      .Case([&](SumToOp) { return emit(A::SumTo()); })
      .Case([&](ReshapeOp) {
        // A reshape aliases its operand: a view of all of it.
        A::View a;
        a.offset = int64_t{0};
        return emit(a);
      })
      .Case([&](TransposeOp t) {
        A::Transpose a;
        a.perm.assign(t.getPerm().begin(), t.getPerm().end());
        return emit(a);
      })
      .Case([&](ArangeOp r) {
        A::Arange a;
        a.start = i64(r.getStart());
        a.end = i64(r.getEnd());
        return emit(a);
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<LogicalResult> Emitter::emitUpdateOrBufferOp(const Pending &p) {
  auto emit = [&](const auto &a) { return emitAs(p, a); };
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(&p.op)
      .Case([&](AccumulateOp) { return emit(A::Accumulate()); })
      .Case([&](AdamWUpdateOp u) {
        A::AdamWUpdate a;
        a.beta1 = u.getBeta1().convertToDouble();
        a.beta2 = u.getBeta2().convertToDouble();
        a.eps = eps(u);
        a.weightDecay = u.getWeightDecay().convertToDouble();
        if (std::optional<uint64_t> unit = u.getUnit())
          a.unit = static_cast<int64_t>(*unit);
        return emit(a);
      })
      .Case([&](SGDUpdateOp u) {
        A::SgdUpdate a;
        a.nesterov = u.getNesterov();
        a.momentum = u.getMomentum().convertToDouble();
        a.dampening = u.getDampening().convertToDouble();
        a.weightDecay = u.getWeightDecay().convertToDouble();
        if (std::optional<uint64_t> unit = u.getUnit())
          a.unit = static_cast<int64_t>(*unit);
        return emit(a);
      })
      .Case([&](GlobalNormOp g) {
        A::GlobalNorm a;
        a.squared = g.getSquared();
        return emit(a);
      })
      .Case([&](ClipOp c) {
        A::Clip a;
        a.maxNorm = c.getMaxNorm().convertToDouble();
        return emit(a);
      })
      .Case([&](CastOp) { return emit(A::Cast()); })
      .Case([&](FlattenOp) { return emit(A::Flatten()); })
      .Case([&](ViewOp v) {
        A::View a;
        a.offset = i64(v.getOffset());
        return emit(a);
      })
      .Case([&](ShardSliceOp s) {
        A::ShardSlice a;
        a.group = group(s);
        return emit(a);
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<LogicalResult> Emitter::emitCollectiveOp(const Pending &p) {
  auto emit = [&](const auto &a) { return emitAs(p, a); };
  // Every collective names its group and bucket (-1: none).
  auto onGroup = [&](auto a, auto c) {
    a.group = group(c);
    std::optional<uint64_t> bucket = c.getBucket();
    a.bucket = bucket ? i64(*bucket) : int64_t{-1};
    return a;
  };
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(&p.op)
      .Case([&](AllGatherOp c) {
        A::AllGather a = onGroup(A::AllGather(), c);
        a.axis = i64(c.getAxis());
        return emit(a);
      })
      .Case([&](ReduceScatterOp c) {
        A::ReduceScatter a = onGroup(A::ReduceScatter(), c);
        a.reduction = reduction(c);
        a.axis = i64(c.getAxis());
        return emit(a);
      })
      .Case([&](AllReduceOp c) {
        A::AllReduce a = onGroup(A::AllReduce(), c);
        a.reduction = reduction(c);
        return emit(a);
      })
      .Case([&](BroadcastOp c) {
        A::Broadcast a = onGroup(A::Broadcast(), c);
        a.root = i64(c.getRoot());
        return emit(a);
      })
      .Case([&](BarrierOp c) { return emit(onGroup(A::Barrier(), c)); })
      .Default([](Operation *) { return std::nullopt; });
}

} // namespace md::emitter
