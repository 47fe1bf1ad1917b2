//===- CostModel.cpp - time of collectives and compute ops ---------------===//

#include "passes/analysis/CostModel.h"

#include <algorithm>
#include <cmath>
#include <optional>

using namespace mlir;
using namespace md;

int64_t CostModel::collectiveNs(int64_t wireBytes) const {
  // 1 GB/s moves one byte per nanosecond.
  return std::llround(link.alphaUs * 1e3 +
                      static_cast<double>(wireBytes) / link.betaGBps);
}

int64_t CostModel::computeNs(int64_t flops) const {
  // 1 TFLOP/s is 1e3 FLOPs per nanosecond.
  return std::llround(static_cast<double>(flops) / (computeTflops * 1e3));
}

int64_t CostModel::latencyBoundBytes() const {
  return std::llround(link.alphaUs * 1e3 * link.betaGBps);
}

static int64_t numel(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  return tensor.getNumElements();
}

/// 2·batch·M·N·K of `a` [..., M, K] (or [..., K, M] transposed) times `b`
/// with the result [..., M, N].
static int64_t matmulFlops(Type aType, bool transposeA, Type resultType) {
  auto a = dyn_cast<RankedTensorType>(aType);
  auto result = dyn_cast<RankedTensorType>(resultType);
  if (!a || !result || !a.hasStaticShape() || !result.hasStaticShape() ||
      a.getRank() < 2)
    return 0;
  int64_t k = a.getDimSize(a.getRank() - (transposeA ? 2 : 1));
  return 2 * result.getNumElements() * k;
}

static int64_t attentionFlops(Type qType, std::optional<uint64_t> window) {
  auto q = dyn_cast<RankedTensorType>(qType);
  if (!q || !q.hasStaticShape() || q.getRank() != 3)
    return 0;
  int64_t b = q.getDimSize(0), t = q.getDimSize(1), d = q.getDimSize(2);
  // Q·K^T and P·V are 2·B·T²·D each; the causal mask halves both. A window
  // W < T leaves about T·W - W²/2 of the T²/2 pairs: 2·B·D·(2·T·W - W²),
  // which is the causal count at W = T.
  int64_t w = window ? std::min<int64_t>(int64_t(*window), t) : t;
  return 2 * b * d * (2 * t * w - w * w);
}

int64_t md::estimateFlops(Operation *op) {
  if (isa<CollectiveOpInterface, StateLoadOp, StateStoreOp, BatchOp, ViewOp,
          FlattenOp, ReshapeOp, CastOp, ShardSliceOp, ParamRefOp>(op))
    return 0;
  if (auto matmul = dyn_cast<MatmulOp>(op))
    return matmulFlops(matmul.getA().getType(), matmul.getTransposeA(),
                       matmul.getResult().getType());
  if (auto fused = dyn_cast<MatmulGeluOp>(op))
    // The product, then one operation per element for the GELU, as the
    // unfused md.matmul and md.gelu count.
    return matmulFlops(fused.getA().getType(), fused.getTransposeA(),
                       fused.getOut().getType()) +
           numel(fused.getOut().getType());
  if (auto grad = dyn_cast<MatmulGradOp>(op))
    // dA and dB are one product each, as large as the forward one.
    return 2 * matmulFlops(grad.getA().getType(), grad.getTransposeA(),
                           grad.getDy().getType());
  if (auto attention = dyn_cast<CausalAttentionOp>(op))
    return attentionFlops(attention.getQ().getType(), attention.getWindow());
  if (auto grad = dyn_cast<CausalAttentionGradOp>(op))
    return 2 * attentionFlops(grad.getQ().getType(), grad.getWindow());
  int64_t flops = 0;
  if (op->getNumRegions() != 0) {
    for (Region &region : op->getRegions())
      for (Operation &nested : region.getOps())
        flops += estimateFlops(&nested);
    return flops;
  }
  for (Type type : op->getResultTypes())
    flops += numel(type);
  return flops;
}
