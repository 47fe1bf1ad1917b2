//===- CudaPointwiseOps.cpp - elementwise, norm, softmax, attention -------===//
//
// CudaBackend's ops over elements and rows: binary and unary elementwise
// ops, casts and accumulation (Elementwise.cu), layer, RMS and batch norms
// and softmax (Norms.cu), and causal attention (Attention.cu).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaBackendImpl.h"

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
                                            : k::Binary::mul;
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

absl::Status CudaBackend::gelu(const GeluArgs &args) {
  MD_RETURN_IF_ERROR(checkGelu(args));
  MD_STREAM(args);
  MD_LAUNCH(
      k::unary(args.approximate ? k::Unary::geluTanh : k::Unary::geluExact,
               args.x.data, dt(args.x), args.out.data, dt(args.out),
               args.x.numel(), 1.0f, s),
      "gelu");
  return absl::OkStatus();
}

absl::Status CudaBackend::geluGrad(const GeluGradArgs &args) {
  MD_RETURN_IF_ERROR(checkGeluGrad(args));
  MD_STREAM(args);
  MD_LAUNCH(k::unaryGrad(args.approximate ? k::UnaryGrad::geluTanh
                                          : k::UnaryGrad::geluExact,
                         args.dy.data, dt(args.dy), args.x.data, dt(args.x),
                         args.dx.data, dt(args.dx), args.x.numel(), s),
            "gelu_grad");
  return absl::OkStatus();
}

absl::Status CudaBackend::relu(const ReluArgs &args) {
  MD_RETURN_IF_ERROR(checkRelu(args));
  MD_STREAM(args);
  MD_LAUNCH(k::unary(k::Unary::relu, args.x.data, dt(args.x), args.out.data,
                     dt(args.out), args.x.numel(), 1.0f, s),
            "relu");
  return absl::OkStatus();
}

absl::Status CudaBackend::reluGrad(const ReluGradArgs &args) {
  MD_RETURN_IF_ERROR(checkReluGrad(args));
  MD_STREAM(args);
  MD_LAUNCH(k::unaryGrad(k::UnaryGrad::relu, args.dy.data, dt(args.dy),
                         args.x.data, dt(args.x), args.dx.data, dt(args.dx),
                         args.x.numel(), s),
            "relu_grad");
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
  if (d.seq > k::maxAttentionSeq() || d.headDim > k::maxAttentionSeq())
    return absl::UnimplementedError(absl::StrFormat(
        "%s: T = %d (head dim %d) exceeds the CUDA kernel's limit of %d", op,
        d.seq, d.headDim, k::maxAttentionSeq()));
  return absl::OkStatus();
}
} // namespace

absl::Status CudaBackend::causalAttention(const CausalAttentionArgs &args) {
  MD_ASSIGN_OR_RETURN(AttentionDims d, checkCausalAttention(args));
  MD_RETURN_IF_ERROR(attentionLimit("causal_attention", d));
  MD_STREAM(args);
  MD_LAUNCH(k::attention(args.q.data, args.k.data, args.v.data, dt(args.q),
                         args.out.data, dt(args.out), d.batch, d.seq, d.heads,
                         d.headDim, s),
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
                             d.headDim, s),
            "causal_attention_grad");
  return absl::OkStatus();
}

} // namespace md::cuda
