//===- CudaOps.cpp - CudaBackend's ops on md's own kernels ----------------===//
//
// Every CudaBackend op but the GEMMs (CudaGemm.cpp): the shared argument
// check (OpChecks.h), then sizes for the launchers of Kernels.h, which only
// queue work on the op's stream. By family: elementwise ops, casts and
// accumulation (Elementwise.cu); layer, RMS and batch norms and softmax
// (Norms.cu); causal attention (Attention.cu); index ops, layout,
// reductions and the optimizer updates.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackendImpl.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/core/OpChecks.h"
#include "runtime/core/Strides.h"

namespace md::cuda {

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

absl::Status CudaBackend::binary(const BinaryArgs &args) {
  MD_RETURN_IF_ERROR(checkBinary(args));
  MD_STREAM(args);
  const Shape &full = args.out.shape;
  MD_ASSIGN_OR_RETURN(k::Strided space,
                      strided("binary", full,
                              broadcastStrides(args.lhs.shape, full),
                              broadcastStrides(args.rhs.shape, full)));
  k::Binary op = args.op == BinaryOp::add   ? k::Binary::add
                 : args.op == BinaryOp::sub ? k::Binary::sub
                 : args.op == BinaryOp::mul ? k::Binary::mul
                 : args.op == BinaryOp::div ? k::Binary::div
                 : args.op == BinaryOp::maximum ? k::Binary::maximum
                                                : k::Binary::minimum;
  MD_LAUNCH(k::binary(op, args.lhs.data, dt(args.lhs), args.rhs.data,
                      dt(args.rhs), args.out.data, dt(args.out), space,
                      args.out.numel(), s),
            "binary");
  return absl::OkStatus();
}

absl::Status CudaBackend::scale(const ScaleArgs &args) {
  MD_RETURN_IF_ERROR(checkScale(args));
  MD_STREAM(args);
  MD_LAUNCH(k::unary(k::Unary::scale, args.x.data, dt(args.x), args.out.data,
                     dt(args.out), args.x.numel(), float(args.factor), s),
            "scale");
  return absl::OkStatus();
}

namespace {

/// An elementwise kernel of one tensor, x into out, after checkUnary; and
/// of its gradient, dy and x into dx, after checkUnaryGrad.
absl::Status launchUnary(const char *op, k::Unary kind, const TensorRef &x,
                         const TensorRef &out, cudaStream_t s) {
  MD_RETURN_IF_ERROR(checkUnary(op, x, out));
  return cudaStatus(
      k::unary(kind, x.data, dt(x), out.data, dt(out), x.numel(), 1.0f, s),
      absl::StrCat(op, " kernel launch").c_str());
}
absl::Status launchUnaryGrad(const char *op, k::UnaryGrad kind,
                             const TensorRef &dy, const TensorRef &x,
                             const TensorRef &dx, cudaStream_t s,
                             float factor = 1.0f) {
  MD_RETURN_IF_ERROR(checkUnaryGrad(op, dy, x, dx));
  return cudaStatus(k::unaryGrad(kind, dy.data, dt(dy), x.data, dt(x), dx.data,
                                 dt(dx), x.numel(), factor, s),
                    absl::StrCat(op, " kernel launch").c_str());
}

} // namespace

absl::Status CudaBackend::gelu(const GeluArgs &args) {
  MD_STREAM(args);
  return launchUnary(
      "gelu", args.approximate ? k::Unary::geluTanh : k::Unary::geluExact,
      args.x, args.out, s);
}

absl::Status CudaBackend::geluGrad(const GeluGradArgs &args) {
  MD_STREAM(args);
  return launchUnaryGrad("gelu_grad",
                         args.approximate ? k::UnaryGrad::geluTanh
                                          : k::UnaryGrad::geluExact,
                         args.dy, args.x, args.dx, s);
}

absl::Status CudaBackend::relu(const ReluArgs &args) {
  MD_STREAM(args);
  return launchUnary("relu", k::Unary::relu, args.x, args.out, s);
}

absl::Status CudaBackend::reluGrad(const ReluGradArgs &args) {
  MD_STREAM(args);
  return launchUnaryGrad("relu_grad", k::UnaryGrad::relu, args.dy, args.x,
                         args.dx, s);
}

absl::Status CudaBackend::silu(const SiluArgs &args) {
  MD_STREAM(args);
  return launchUnary("silu", k::Unary::silu, args.x, args.out, s);
}

absl::Status CudaBackend::siluGrad(const SiluGradArgs &args) {
  MD_STREAM(args);
  return launchUnaryGrad("silu_grad", k::UnaryGrad::silu, args.dy, args.x,
                         args.dx, s);
}

namespace {

/// The elementwise kernels' case of an md.elementwise function: the math
/// cases follow silu in ElementwiseFn's order (Kernels.h).
k::Unary unaryOf(ElementwiseFn fn) {
  return static_cast<k::Unary>(static_cast<int>(k::Unary::exp) +
                               static_cast<int>(fn));
}
k::UnaryGrad unaryGradOf(ElementwiseFn fn) {
  return static_cast<k::UnaryGrad>(static_cast<int>(k::UnaryGrad::exp) +
                                   static_cast<int>(fn));
}
static_assert(static_cast<int>(k::Unary::rsqrt) -
                  static_cast<int>(k::Unary::exp) ==
              static_cast<int>(ElementwiseFn::rsqrt));
static_assert(static_cast<int>(k::UnaryGrad::rsqrt) -
                  static_cast<int>(k::UnaryGrad::exp) ==
              static_cast<int>(ElementwiseFn::rsqrt));

} // namespace

absl::Status CudaBackend::elementwise(const ElementwiseArgs &args) {
  MD_STREAM(args);
  return launchUnary(ElementwiseFnName(args.fn), unaryOf(args.fn), args.x,
                     args.out, s);
}

absl::Status CudaBackend::elementwiseGrad(const ElementwiseGradArgs &args) {
  MD_STREAM(args);
  return launchUnaryGrad("elementwise_grad", unaryGradOf(args.fn), args.dy,
                         args.x, args.dx, s);
}

absl::Status CudaBackend::pow(const PowArgs &args) {
  MD_RETURN_IF_ERROR(checkUnary("pow", args.x, args.out));
  MD_STREAM(args);
  MD_LAUNCH(k::unary(k::Unary::pow, args.x.data, dt(args.x), args.out.data,
                     dt(args.out), args.x.numel(), float(args.exponent), s),
            "pow");
  return absl::OkStatus();
}

absl::Status CudaBackend::powGrad(const PowGradArgs &args) {
  MD_STREAM(args);
  return launchUnaryGrad("pow_grad", k::UnaryGrad::pow, args.dy, args.x,
                         args.dx, s, float(args.exponent));
}

absl::Status CudaBackend::clamp(const ClampArgs &args) {
  MD_RETURN_IF_ERROR(checkUnary("clamp", args.x, args.out));
  MD_STREAM(args);
  MD_LAUNCH(k::clamp(args.x.data, dt(args.x), args.out.data, dt(args.out),
                     args.x.numel(), float(args.min), float(args.max), s),
            "clamp");
  return absl::OkStatus();
}

absl::Status CudaBackend::clampGrad(const ClampGradArgs &args) {
  MD_RETURN_IF_ERROR(checkUnaryGrad("clamp_grad", args.dy, args.x, args.dx));
  MD_STREAM(args);
  MD_LAUNCH(k::clampGrad(args.dy.data, dt(args.dy), args.x.data, dt(args.x),
                         args.dx.data, dt(args.dx), args.x.numel(),
                         float(args.min), float(args.max), s),
            "clamp_grad");
  return absl::OkStatus();
}

absl::Status CudaBackend::accumulate(const AccumulateArgs &args) {
  MD_RETURN_IF_ERROR(checkAccumulate(args));
  MD_STREAM(args);
  MD_LAUNCH(k::accumulate(args.acc.data, dt(args.acc), args.g.data, dt(args.g),
                          args.out.data, dt(args.out), args.acc.numel(), s),
            "accumulate");
  return absl::OkStatus();
}

absl::Status CudaBackend::cast(const CastArgs &args) {
  MD_RETURN_IF_ERROR(checkCast(args));
  MD_STREAM(args);
  if (args.x.dtype == args.out.dtype) {
    if (args.x.data != args.out.data && args.x.bytes() > 0)
      MD_CUDA(cudaMemcpyAsync(args.out.data, args.x.data,
                              size_t(args.x.bytes()), cudaMemcpyDeviceToDevice,
                              s));
    return absl::OkStatus();
  }
  if (isIndex(args.x.dtype)) {
    MD_LAUNCH(k::castIndex(args.x.data, args.x.dtype == DType::i32,
                           args.out.data, dt(args.out), args.x.numel(), s),
              "cast");
    return absl::OkStatus();
  }
  MD_LAUNCH(k::cast(args.x.data, dt(args.x), args.out.data, dt(args.out),
                    args.x.numel(), s),
            "cast");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Norms, softmax
//===----------------------------------------------------------------------===//

namespace {

/// layer_norm, and rms_norm as a layer norm without mean or beta: one
/// kernel, whose `rms` flag selects the statistics.
absl::Status launchNorm(const LayerNormArgs &args, const RowDims &d, bool rms,
                        cudaStream_t s) {
  const void *beta = args.beta ? args.beta->data : nullptr;
  int bt = args.beta ? dt(*args.beta) : 0;
  return cudaStatus(
      k::layerNorm(args.x.data, dt(args.x), args.gamma.data, dt(args.gamma),
                   beta, bt, args.out.data, dt(args.out), d.rows, d.d, args.eps,
                   rms, nullptr, s),
      rms ? "rms_norm kernel launch" : "layer_norm kernel launch");
}

/// The gradients of launchNorm: dx row by row, which leaves each row's
/// statistics in scratch, then dgamma (and dbeta) over the rows from them.
absl::Status launchNormGrad(const LayerNormGradArgs &args, const RowDims &d,
                            bool rms, cudaStream_t s) {
  Scratch stats(s);
  MD_RETURN_IF_ERROR(stats.allocate(2 * d.rows * 4, false));
  MD_RETURN_IF_ERROR(
      cudaStatus(k::layerNormGradDx(args.dy.data, dt(args.dy), args.x.data,
                                    dt(args.x), args.gamma.data, dt(args.gamma),
                                    args.dx.data, dt(args.dx), d.rows, d.d,
                                    args.eps, rms, stats.as<float>(), s),
                 rms ? "rms_norm_grad dx kernel launch"
                     : "layer_norm_grad dx kernel launch"));
  void *dbeta = args.dbeta ? args.dbeta->data : nullptr;
  int dbt = args.dbeta ? dt(*args.dbeta) : 0;
  return cudaStatus(
      k::layerNormGradParams(args.dy.data, dt(args.dy), args.x.data, dt(args.x),
                             stats.as<float>(), d.rows, d.d, rms,
                             args.dgamma.data, dt(args.dgamma), dbeta, dbt, s),
      rms ? "rms_norm_grad dgamma kernel launch"
          : "layer_norm_grad dgamma kernel launch");
}

} // namespace

absl::Status CudaBackend::layerNorm(const LayerNormArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims d, checkLayerNorm(args));
  MD_STREAM(args);
  return launchNorm(args, d, /*rms=*/false, s);
}

absl::Status CudaBackend::layerNormGrad(const LayerNormGradArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims d, checkLayerNormGrad(args));
  MD_STREAM(args);
  return launchNormGrad(args, d, /*rms=*/false, s);
}

absl::Status CudaBackend::rmsNorm(const RmsNormArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims d, checkRmsNorm(args));
  MD_STREAM(args);
  return launchNorm({args.x, args.gamma, std::nullopt, args.out, args.eps}, d,
                    /*rms=*/true, s);
}

absl::Status CudaBackend::rmsNormGrad(const RmsNormGradArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims d, checkRmsNormGrad(args));
  MD_STREAM(args);
  return launchNormGrad({args.dy, args.x, args.gamma, args.dx, args.dgamma,
                         std::nullopt, args.eps},
                        d, /*rms=*/true, s);
}

absl::Status CudaBackend::batchNorm(const BatchNormArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims d, checkBatchNorm(args));
  MD_STREAM(args);
  MD_LAUNCH(k::batchNorm(args.x.data, dt(args.x), args.gamma.data,
                         dt(args.gamma), args.beta.data, dt(args.beta),
                         args.out.data, dt(args.out), args.mean.as<float>(),
                         args.invstd.as<float>(), d.rows, d.d, args.eps, s),
            "batch_norm");
  return absl::OkStatus();
}

absl::Status CudaBackend::batchNormGrad(const BatchNormGradArgs &args) {
  MD_ASSIGN_OR_RETURN(RowDims d, checkBatchNormGrad(args));
  MD_STREAM(args);
  Scratch sums(s);
  MD_RETURN_IF_ERROR(sums.allocate(2 * d.d * 4, false));
  MD_LAUNCH(k::batchNormGrad(
                args.dy.data, dt(args.dy), args.x.data, dt(args.x),
                args.gamma.data, dt(args.gamma), args.mean.as<const float>(),
                args.invstd.as<const float>(), args.dx.data, dt(args.dx),
                args.dgamma.data, dt(args.dgamma), args.dbeta.data,
                dt(args.dbeta), sums.as<float>(), d.rows, d.d, s),
            "batch_norm_grad");
  return absl::OkStatus();
}

absl::Status CudaBackend::softmax(const SoftmaxArgs &args) {
  MD_ASSIGN_OR_RETURN(AxisDims d, checkSoftmax(args));
  MD_STREAM(args);
  MD_LAUNCH(k::softmax(args.x.data, dt(args.x), args.out.data, dt(args.out),
                       d.outer, d.n, d.inner, s),
            "softmax");
  return absl::OkStatus();
}

absl::Status CudaBackend::softmaxGrad(const SoftmaxGradArgs &args) {
  MD_ASSIGN_OR_RETURN(AxisDims d, checkSoftmaxGrad(args));
  MD_STREAM(args);
  MD_LAUNCH(k::softmaxGrad(args.dy.data, dt(args.dy), args.y.data, dt(args.y),
                           args.dx.data, dt(args.dx), d.outer, d.n, d.inner, s),
            "softmax_grad");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

namespace {
absl::Status attentionLimit(const char *op, const AttentionDims &d) {
  if (d.seq > k::maxAttentionSeq() || d.headDim > k::maxAttentionHeadDim())
    return absl::UnimplementedError(absl::StrFormat(
        "%s: T = %d or head dim %d exceeds the CUDA kernels' limits (T <= "
        "%d, head dim <= %d)",
        op, d.seq, d.headDim, k::maxAttentionSeq(), k::maxAttentionHeadDim()));
  return absl::OkStatus();
}
} // namespace

absl::Status CudaBackend::causalAttention(const CausalAttentionArgs &args) {
  MD_ASSIGN_OR_RETURN(AttentionDims d, checkCausalAttention(args));
  MD_RETURN_IF_ERROR(attentionLimit("causal_attention", d));
  MD_STREAM(args);
  MD_LAUNCH(k::attention(args.q.data, args.k.data, args.v.data, dt(args.q),
                         args.out.data, dt(args.out), d.batch, d.seq, d.heads,
                         d.headDim, d.window, s),
            "causal_attention");
  return absl::OkStatus();
}

absl::Status
CudaBackend::causalAttentionGrad(const CausalAttentionGradArgs &args) {
  MD_ASSIGN_OR_RETURN(AttentionDims d, checkCausalAttentionGrad(args));
  MD_RETURN_IF_ERROR(attentionLimit("causal_attention_grad", d));
  MD_STREAM(args);
  Scratch stats(s);
  MD_RETURN_IF_ERROR(stats.allocate(3 * d.batch * d.heads * d.seq * 8, false));
  MD_LAUNCH(k::attentionGrad(args.dout.data, dt(args.dout), args.q.data,
                             args.k.data, args.v.data, dt(args.q), args.dq.data,
                             args.dk.data, args.dv.data, dt(args.dq),
                             stats.as<double>(), d.batch, d.seq, d.heads,
                             d.headDim, d.window, s),
            "causal_attention_grad");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Index ops: embedding, cross-entropy
//===----------------------------------------------------------------------===//

absl::StatusOr<int64_t>
CudaBackend::checkIndices(const char *op, const char *what,
                          const TensorRef &ids, int64_t rows, bool hasIgnore,
                          int64_t ignoreIndex, Stream stream) {
  cudaStream_t s = impl_->streams[stream.id];
  int64_t *host = impl_->hostCheck;
  MD_CUDA(cudaMemcpyAsync(impl_->check, host, 2 * sizeof(int64_t),
                          cudaMemcpyHostToDevice, s));
  const bool i32 = ids.dtype == DType::i32;
  MD_LAUNCH(k::checkIndices(ids.data, i32, ids.numel(), rows, hasIgnore,
                            ignoreIndex, impl_->check, s),
            "index check");
  MD_CUDA(cudaMemcpyAsync(host + 2, impl_->check, 2 * sizeof(int64_t),
                          cudaMemcpyDeviceToHost, s));
  // The one wait in a kernel's path: a bad index must fail this call.
  MD_RETURN_IF_ERROR(waitStream(s, op));
  const int64_t bad = host[2], counted = host[3];
  if (bad == INT64_MAX)
    return counted;
  int64_t value = 0;
  int32_t value32 = 0;
  const char *at = ids.as<const char>() + bad * dtypeSize(ids.dtype);
  if (i32) {
    MD_CUDA(cudaMemcpy(&value32, at, 4, cudaMemcpyDeviceToHost));
    value = value32;
  } else {
    MD_CUDA(cudaMemcpy(&value, at, 8, cudaMemcpyDeviceToHost));
  }
  return indexOutOfRange(op, what, bad, value, rows,
                         hasIgnore ? std::optional<int64_t>(ignoreIndex)
                                   : std::nullopt);
}

absl::Status CudaBackend::embedding(const EmbeddingArgs &args) {
  MD_ASSIGN_OR_RETURN(EmbeddingDims d, checkEmbedding(args));
  MD_STREAM(args);
  MD_RETURN_IF_ERROR(
      checkIndices("embedding", "ids", args.ids, d.rows, false, 0, args.stream)
          .status());
  MD_LAUNCH(k::embedding(args.table.data, int(dtypeSize(args.table.dtype)),
                         args.ids.data, args.ids.dtype == DType::i32,
                         args.out.data, d.positions, d.d, s),
            "embedding");
  return absl::OkStatus();
}

// Scatter-add with f32 atomics into an f32 accumulator (the result itself
// when it is f32), rounded once into a bf16/f16 result. The order of the
// additions into one row is not fixed, unlike the CPU backend's.
absl::Status CudaBackend::embeddingGrad(const EmbeddingGradArgs &args) {
  MD_ASSIGN_OR_RETURN(EmbeddingDims d, checkEmbeddingGrad(args));
  MD_STREAM(args);
  MD_RETURN_IF_ERROR(checkIndices("embedding_grad", "ids", args.ids, d.rows,
                                  false, 0, args.stream)
                         .status());
  const bool direct = args.out.dtype == DType::f32;
  Scratch acc(s);
  float *target = args.out.as<float>();
  if (!direct) {
    MD_RETURN_IF_ERROR(acc.allocate(d.rows * d.d * 4, true));
    target = acc.as<float>();
  } else if (d.rows * d.d > 0) {
    MD_CUDA(cudaMemsetAsync(target, 0, size_t(d.rows * d.d * 4), s));
  }
  MD_LAUNCH(k::embeddingGrad(args.dy.data, dt(args.dy), args.ids.data,
                             args.ids.dtype == DType::i32, target, d.positions,
                             d.d, s),
            "embedding_grad");
  if (!direct)
    MD_LAUNCH(k::cast(target, dt(DType::f32), args.out.data, dt(args.out),
                      d.rows * d.d, s),
              "embedding_grad cast");
  return absl::OkStatus();
}

absl::Status CudaBackend::crossEntropy(const CrossEntropyArgs &args) {
  MD_ASSIGN_OR_RETURN(CrossEntropyDims d, checkCrossEntropy(args));
  MD_STREAM(args);
  const bool hasIgnore = args.ignoreIndex.has_value();
  const int64_t ignore = args.ignoreIndex.value_or(0);
  MD_ASSIGN_OR_RETURN(int64_t counted,
                      checkIndices("cross_entropy", "targets", args.targets,
                                   d.classes, hasIgnore, ignore, args.stream));
  Scratch losses(s);
  MD_RETURN_IF_ERROR(losses.allocate(d.positions * 8, false));
  MD_LAUNCH(k::crossEntropy(args.logits.data, dt(args.logits),
                            args.targets.data, args.targets.dtype == DType::i32,
                            hasIgnore, ignore, d.positions, d.classes,
                            losses.as<double>(), counted, args.out.as<float>(),
                            s),
            "cross_entropy");
  return absl::OkStatus();
}

absl::Status CudaBackend::crossEntropyGrad(const CrossEntropyGradArgs &args) {
  MD_ASSIGN_OR_RETURN(CrossEntropyDims d, checkCrossEntropyGrad(args));
  MD_STREAM(args);
  const bool hasIgnore = args.ignoreIndex.has_value();
  const int64_t ignore = args.ignoreIndex.value_or(0);
  MD_ASSIGN_OR_RETURN(int64_t counted,
                      checkIndices("cross_entropy_grad", "targets",
                                   args.targets, d.classes, hasIgnore, ignore,
                                   args.stream));
  MD_LAUNCH(k::crossEntropyGrad(args.dloss.as<const float>(), args.logits.data,
                                dt(args.logits), args.targets.data,
                                args.targets.dtype == DType::i32, hasIgnore,
                                ignore, d.positions, d.classes, counted,
                                args.dlogits.data, dt(args.dlogits), s),
            "cross_entropy_grad");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Layout
//===----------------------------------------------------------------------===//

absl::Status CudaBackend::reshape(const ReshapeArgs &args) {
  MD_RETURN_IF_ERROR(checkReshape(args));
  MD_STREAM(args);
  if (args.out.data != args.x.data && args.x.bytes() > 0)
    MD_CUDA(cudaMemcpyAsync(args.out.data, args.x.data, size_t(args.x.bytes()),
                            cudaMemcpyDeviceToDevice, s));
  return absl::OkStatus();
}

absl::Status CudaBackend::transpose(const TransposeArgs &args) {
  MD_RETURN_IF_ERROR(checkTranspose(args));
  MD_STREAM(args);
  std::vector<int64_t> xStrides = rowMajorStrides(args.x.shape);
  std::vector<int64_t> src(args.perm.size());
  for (size_t i = 0; i < args.perm.size(); ++i)
    src[i] = xStrides[args.perm[i]];
  MD_ASSIGN_OR_RETURN(k::Strided space,
                      strided("transpose", args.out.shape, src));
  MD_LAUNCH(k::permute(args.x.data, args.out.data, int(dtypeSize(args.x.dtype)),
                       space, args.out.numel(), s),
            "transpose");
  return absl::OkStatus();
}

namespace {

/// The walk of a slice of `whole` along axis from start by step, over the
/// sliced tensor's shape: strideA steps through `whole`, and `offset` (in
/// elements) is where the slice starts in it.
absl::StatusOr<k::Strided> sliceSpace(const char *op, const TensorRef &whole,
                                      const TensorRef &sliced, int64_t axis,
                                      int64_t start, int64_t step,
                                      int64_t *offset) {
  std::vector<int64_t> strides = rowMajorStrides(whole.shape);
  *offset = start * strides[axis];
  strides[axis] *= step;
  return strided(op, sliced.shape, strides);
}

} // namespace

absl::Status CudaBackend::slice(const SliceArgs &args) {
  MD_RETURN_IF_ERROR(checkSlice(args));
  MD_STREAM(args);
  int64_t offset = 0;
  MD_ASSIGN_OR_RETURN(k::Strided space,
                      sliceSpace("slice", args.x, args.out, args.axis,
                                 args.start, args.step, &offset));
  const int es = int(dtypeSize(args.x.dtype));
  MD_LAUNCH(k::permute(args.x.as<const char>() + offset * es, args.out.data,
                       es, space, args.out.numel(), s),
            "slice");
  return absl::OkStatus();
}

absl::Status CudaBackend::sliceGrad(const SliceGradArgs &args) {
  MD_RETURN_IF_ERROR(checkSliceGrad(args));
  MD_STREAM(args);
  int64_t offset = 0;
  MD_ASSIGN_OR_RETURN(k::Strided space,
                      sliceSpace("slice_grad", args.dx, args.dy, args.axis,
                                 args.start, args.step, &offset));
  const int es = int(dtypeSize(args.dx.dtype));
  if (args.dx.bytes() > 0)
    MD_CUDA(cudaMemsetAsync(args.dx.data, 0, size_t(args.dx.bytes()), s));
  MD_LAUNCH(k::scatter(args.dy.data, args.dx.as<char>() + offset * es, es,
                       space, args.dy.numel(), s),
            "slice_grad");
  return absl::OkStatus();
}

// Each input scattered into its place: out's strides over the input's
// shape, from its first element along the axis.
absl::Status CudaBackend::concat(const ConcatArgs &args) {
  MD_RETURN_IF_ERROR(checkConcat(args));
  MD_STREAM(args);
  const std::vector<int64_t> strides = rowMajorStrides(args.out.shape);
  const int es = int(dtypeSize(args.out.dtype));
  int64_t at = 0;
  for (const TensorRef &in : args.inputs) {
    MD_ASSIGN_OR_RETURN(k::Strided space, strided("concat", in.shape, strides));
    MD_LAUNCH(k::scatter(in.data, args.out.as<char>() + at * strides[args.axis] * es,
                         es, space, in.numel(), s),
              "concat");
    at += in.shape[args.axis];
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::expand(const ExpandArgs &args) {
  MD_RETURN_IF_ERROR(checkExpand(args));
  MD_STREAM(args);
  MD_ASSIGN_OR_RETURN(k::Strided space,
                      strided("expand", args.out.shape,
                              broadcastStrides(args.x.shape, args.out.shape)));
  MD_LAUNCH(k::permute(args.x.data, args.out.data, int(dtypeSize(args.x.dtype)),
                       space, args.out.numel(), s),
            "expand");
  return absl::OkStatus();
}

absl::Status CudaBackend::arange(const ArangeArgs &args) {
  MD_RETURN_IF_ERROR(checkArange(args));
  MD_STREAM(args);
  MD_LAUNCH(k::arange(args.out.data, args.out.dtype == DType::i32, args.start,
                      args.out.numel(), s),
            "arange");
  return absl::OkStatus();
}

absl::Status CudaBackend::flatten(const FlattenArgs &args) {
  MD_RETURN_IF_ERROR(checkFlatten(args));
  MD_STREAM(args);
  char *out = args.out.as<char>();
  int64_t offset = 0;
  for (const TensorRef &in : args.inputs) {
    if (in.bytes() > 0)
      MD_CUDA(cudaMemcpyAsync(out + offset, in.data, size_t(in.bytes()),
                              cudaMemcpyDeviceToDevice, s));
    offset += in.bytes();
  }
  if (args.out.bytes() > offset)
    MD_CUDA(
        cudaMemsetAsync(out + offset, 0, size_t(args.out.bytes() - offset), s));
  return absl::OkStatus();
}

absl::Status CudaBackend::view(const ViewArgs &args) {
  MD_RETURN_IF_ERROR(checkView(args));
  MD_STREAM(args);
  const char *src =
      args.source.as<const char>() + args.offset * dtypeSize(args.source.dtype);
  if (args.out.data != src && args.out.bytes() > 0)
    MD_CUDA(cudaMemcpyAsync(args.out.data, src, size_t(args.out.bytes()),
                            cudaMemcpyDeviceToDevice, s));
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace {

/// The kept and the reduced dims of x as two iteration spaces over x's
/// strides; `keptShape` gives the kept dims in output order.
absl::Status splitDims(const char *op, const Shape &xShape,
                       const std::vector<bool> &isReduced,
                       const std::vector<int64_t> &keptShape,
                       const std::vector<int64_t> &keptStrides,
                       k::Strided &kept, k::Strided &reduced,
                       int64_t &reducedN) {
  std::vector<int64_t> xs = rowMajorStrides(xShape);
  std::vector<int64_t> rShape, rStrides;
  reducedN = 1;
  for (size_t i = 0; i < xShape.size(); ++i)
    if (isReduced[i]) {
      rShape.push_back(xShape[i]);
      rStrides.push_back(xs[i]);
      reducedN *= xShape[i];
    }
  MD_ASSIGN_OR_RETURN(kept, strided(op, keptShape, keptStrides));
  MD_ASSIGN_OR_RETURN(reduced, strided(op, rShape, rStrides));
  return absl::OkStatus();
}

} // namespace

absl::Status CudaBackend::reduce(const ReduceArgs &args) {
  MD_ASSIGN_OR_RETURN(ReducedDims isReduced, checkReduce(args));
  MD_STREAM(args);
  std::vector<int64_t> xs = rowMajorStrides(args.x.shape);
  std::vector<int64_t> keptShape, keptStrides;
  for (size_t i = 0; i < args.x.shape.size(); ++i)
    if (!isReduced[i]) {
      keptShape.push_back(args.x.shape[i]);
      keptStrides.push_back(xs[i]);
    }
  k::Strided kept, reduced;
  int64_t reducedN = 0;
  MD_RETURN_IF_ERROR(splitDims("reduce", args.x.shape, isReduced, keptShape,
                               keptStrides, kept, reduced, reducedN));
  // A mean over zero elements is 0 / 0 = NaN, as in PyTorch.
  double divisor = args.kind == ReduceKind::mean
                       ? double(reducedCount(args.x.shape, isReduced))
                       : 1.0;
  MD_LAUNCH(k::reduceSum(args.x.data, dt(args.x), args.out.data, dt(args.out),
                         kept, args.out.numel(), reduced, reducedN, divisor, s),
            "reduce");
  return absl::OkStatus();
}

absl::Status CudaBackend::reduceGrad(const ReduceGradArgs &args) {
  MD_ASSIGN_OR_RETURN(ReducedDims isReduced, checkReduceGrad(args));
  MD_STREAM(args);
  const Shape kept = keptShape(args.dx.shape, isReduced);
  MD_ASSIGN_OR_RETURN(k::Strided space,
                      strided("reduce_grad", args.dx.shape,
                              broadcastStrides(kept, args.dx.shape)));
  const bool mean = args.kind == ReduceKind::mean;
  MD_LAUNCH(k::broadcastTo(args.dy.data, dt(args.dy), args.dx.data, dt(args.dx),
                           space, args.dx.numel(), mean,
                           float(reducedCount(args.dx.shape, isReduced)), s),
            "reduce_grad");
  return absl::OkStatus();
}

// g summed over its extra leading dims and every dim where out has 1.
absl::Status CudaBackend::sumTo(const SumToArgs &args) {
  MD_RETURN_IF_ERROR(checkSumTo(args));
  MD_STREAM(args);
  const Shape &gs = args.g.shape, &os = args.out.shape;
  const size_t lead = gs.size() - os.size();
  std::vector<int64_t> gStrides = rowMajorStrides(gs);
  std::vector<bool> isReduced(gs.size());
  std::vector<int64_t> keptShape(os.begin(), os.end()), keptStrides;
  for (size_t i = 0; i < gs.size(); ++i)
    isReduced[i] = i < lead || os[i - lead] == 1;
  for (size_t i = 0; i < os.size(); ++i)
    keptStrides.push_back(os[i] == 1 ? 0 : gStrides[lead + i]);
  k::Strided kept, reduced;
  int64_t reducedN = 0;
  MD_RETURN_IF_ERROR(splitDims("sum_to", gs, isReduced, keptShape, keptStrides,
                               kept, reduced, reducedN));
  MD_LAUNCH(k::reduceSum(args.g.data, dt(args.g), args.out.data, dt(args.out),
                         kept, args.out.numel(), reduced, reducedN, 1.0, s),
            "sum_to");
  return absl::OkStatus();
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

// The per-step scalars as runtime/cpu/Optimizer.cpp takes them
// (OptimizerScalars.h); the kernels repeat its f32 operations.
absl::Status CudaBackend::adamwUpdate(const AdamWArgs &args) {
  MD_RETURN_IF_ERROR(checkAdamW(args));
  MD_STREAM(args);
  const AdamWScalars sc = adamwScalars(args);
  MD_LAUNCH(k::adamw(args.param.data, dt(args.param), args.grad.data,
                     dt(args.grad), args.m.as<const float>(),
                     args.v.as<const float>(), args.newParam.data,
                     dt(args.newParam), args.newM.as<float>(),
                     args.newV.as<float>(), args.param.numel(), sc, s),
            "adamw_update");
  return absl::OkStatus();
}

absl::Status CudaBackend::sgdUpdate(const SgdArgs &args) {
  MD_RETURN_IF_ERROR(checkSgd(args));
  MD_STREAM(args);
  const SgdScalars sc = sgdScalars(args);
  const float *buf =
      sc.useMomentum ? args.momentumBuffer->as<const float>() : nullptr;
  float *newBuf =
      sc.useMomentum ? args.newMomentumBuffer->as<float>() : nullptr;
  MD_LAUNCH(k::sgd(args.param.data, dt(args.param), args.grad.data,
                   dt(args.grad), buf, args.newParam.data, dt(args.newParam),
                   newBuf, args.param.numel(), sc, s),
            "sgd_update");
  return absl::OkStatus();
}

// f64 sums of squares, one slot per block, the tensors one launch after
// another: a fixed order, so the same inputs give the same bits.
absl::Status CudaBackend::globalNorm(const GlobalNormArgs &args) {
  MD_RETURN_IF_ERROR(checkGlobalNorm(args));
  MD_STREAM(args);
  Scratch partials(s);
  MD_RETURN_IF_ERROR(partials.allocate(k::kNormPartials * 8, true));
  for (const TensorRef &t : args.inputs)
    MD_LAUNCH(
        k::normPartials(t.data, dt(t), t.numel(), partials.as<double>(), s),
        "global_norm");
  MD_LAUNCH(k::normFinish(partials.as<double>(), args.out.as<float>(),
                          args.squared, s),
            "global_norm finish");
  return absl::OkStatus();
}

absl::Status CudaBackend::clip(const ClipArgs &args) {
  MD_RETURN_IF_ERROR(checkClip(args));
  MD_STREAM(args);
  for (size_t i = 0; i < args.grads.size(); ++i)
    MD_LAUNCH(k::clip(args.grads[i].data, dt(args.grads[i]), args.outs[i].data,
                      dt(args.outs[i]), args.grads[i].numel(),
                      args.norm.as<const float>(), float(args.maxNorm), s),
              "clip");
  return absl::OkStatus();
}

} // namespace md::cuda
