//===- SyncBatchNorm.cpp - md-sync-batch-norm ------------------------------===//
//
// With `sync_batch_norm` in the recipe, batch statistics are those of the
// global batch (PyTorch's SyncBatchNorm). Every md.batch_norm of the model's
// functions is rewritten into per-channel means all-reduced over the world:
//
//   m   = all_reduce_avg(mean(x))                 // global mean
//   v   = all_reduce_avg(mean((x - m)^2))         // global biased variance
//   y   = (x - m) * rsqrt(v + eps) * gamma + beta
//
// Every rank's micro-batch has the same size, so the average of the ranks'
// means is the global mean; the variance uses the global mean (two passes,
// no E[x^2] - E[x]^2 cancellation). The pass runs before md-autodiff, which
// differentiates the rewrite: the derivative of an average all-reduce is the
// average all-reduce of the cotangent, the backward half of SyncBatchNorm.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdDiscardableAttrs.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace md {
#define GEN_PASS_DEF_SYNCBATCHNORM
#include "passes/Passes.h.inc"
} // namespace md

using namespace mlir;
using namespace md;

namespace {
class SyncBatchNormPass
    : public md::impl::SyncBatchNormBase<SyncBatchNormPass> {
public:
  void runOnOperation() override {
    ModelOp model = getOperation();
    TrainOp train = model.getTrain();
    if (!train || !train.getSyncBatchNorm())
      return;
    SmallVector<BatchNormOp> norms;
    model.walk([&](BatchNormOp op) { norms.push_back(op); });
    for (BatchNormOp op : norms)
      rewrite(op);
  }

private:
  void rewrite(BatchNormOp op) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    auto xType = cast<RankedTensorType>(op.getX().getType());
    Type element = xType.getElementType();
    int64_t channels = xType.getShape().back();
    SmallVector<int64_t> dims;
    for (int64_t d = 0; d + 1 < xType.getRank(); ++d)
      dims.push_back(d);
    auto channelType = RankedTensorType::get({channels}, element);
    auto syncMean = [&](Value v) -> Value {
      Value local = MeanOp::create(b, loc, channelType, v,
                                   b.getDenseI64ArrayAttr(dims), false);
      auto reduced = AllReduceOp::create(b, loc, Group::world, nullptr, local,
                                         ReductionKind::avg);
      mark::setSyncBatchNorm(reduced);
      return reduced;
    };
    Value mean = syncMean(op.getX());
    Value centered = SubOp::create(b, loc, xType, op.getX(), mean);
    Value squares = MulOp::create(b, loc, xType, centered, centered);
    Value var = syncMean(squares);
    Value invstd = RsqrtOp::create(b, loc, var, op.getEps());
    Value normed = MulOp::create(b, loc, xType, centered, invstd);
    Value scaled = MulOp::create(b, loc, xType, normed, op.getGamma());
    Value y = AddOp::create(b, loc, xType, scaled, op.getBeta());
    auto asStats = [&](Value v) -> Value {
      if (v.getType() == op.getMean().getType())
        return v;
      return CastOp::create(b, loc, op.getMean().getType(), v);
    };
    op.getY().replaceAllUsesWith(y);
    op.getMean().replaceAllUsesWith(asStats(mean));
    op.getInvstd().replaceAllUsesWith(asStats(invstd));
    op.erase();
  }
};
} // namespace
