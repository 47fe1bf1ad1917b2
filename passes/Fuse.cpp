//===- Fuse.cpp - md-fuse: transposes into matmuls, matmul + GELU -------===//
//
// Fusions the kernels can take, made on the forward before md-autodiff so
// that the backward is derived from the fused ops (one rule per fused op in
// passes/analysis/VjpRules.cpp) and no later pass or plan ever sees the
// unfused form.
//
// A transpose of the last two dims feeding md.matmul becomes the matmul's
// transpose flag: both backends' GEMMs take either layout of either operand
// (runtime/cpu/Matmul.cpp through oneDNN or cblas, runtime/cuda/CudaGemm.cpp
// through cuBLASLt), shared or batched, and md.matmul_grad honours the same
// flags. Any other permutation moves a batch dim, which no GEMM layout (one
// leading dim, one batch stride) can express, so it stays.
//
// An md.matmul read only by an md.gelu becomes md.matmul_gelu, whose
// kernels write both the product (`pre`, which the backward needs) and its
// GELU (`out`): the CPU backend with the same GEMM and GELU as the two ops,
// bit for bit, the CUDA backend with cuBLASLt's GELU epilogue where it
// applies. Transposes are folded first, so that a fused matmul has its
// final flags.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

namespace md {
#define GEN_PASS_DEF_FUSE
#include "passes/Passes.h.inc"
} // namespace md

using namespace mlir;
using namespace md;

namespace {

/// Whether `perm` swaps the last two dims and keeps every other in place.
bool isLastTwoSwap(ArrayRef<int64_t> perm) {
  int64_t rank = static_cast<int64_t>(perm.size());
  if (rank < 2 || perm[rank - 1] != rank - 2 || perm[rank - 2] != rank - 1)
    return false;
  for (int64_t i = 0; i + 2 < rank; ++i)
    if (perm[i] != i)
      return false;
  return true;
}

/// Whether `use` is the `a` or `b` operand of an md.matmul (not its bias).
bool isMatmulFactor(OpOperand &use) {
  auto matmul = dyn_cast<MatmulOp>(use.getOwner());
  return matmul &&
         (&use == &matmul.getAMutable() || &use == &matmul.getBMutable());
}

class FusePass : public md::impl::FuseBase<FusePass> {
public:
  void runOnOperation() override {
    SmallVector<TransposeOp> transposes;
    getOperation().walk([&](TransposeOp op) { transposes.push_back(op); });
    for (TransposeOp op : transposes)
      foldIntoMatmuls(op);
    SmallVector<GeluOp> gelus;
    getOperation().walk([&](GeluOp op) { gelus.push_back(op); });
    for (GeluOp op : gelus)
      fuseMatmulGelu(op);
  }

private:
  /// Rewrites every use of `op` into the flag of the matmul that reads it,
  /// and erases `op`; does nothing unless every use can take it, since a
  /// transpose that stays for one use would still cost its copy.
  void foldIntoMatmuls(TransposeOp op) {
    if (!isLastTwoSwap(op.getPerm()) || op->use_empty() ||
        !llvm::all_of(op->getUses(), isMatmulFactor))
      return;
    Value source = op.getX();
    for (OpOperand &use : llvm::make_early_inc_range(op->getUses())) {
      auto matmul = cast<MatmulOp>(use.getOwner());
      if (&use == &matmul.getAMutable())
        matmul.setTransposeA(!matmul.getTransposeA());
      else
        matmul.setTransposeB(!matmul.getTransposeB());
      use.set(source);
    }
    op->erase();
    ++numTransposesFolded;
  }

  /// gelu(matmul(...)) as one md.matmul_gelu, when the GELU is the only
  /// reader of the product (another would need the product on its own,
  /// which the fused op also returns, but nothing is gained then).
  void fuseMatmulGelu(GeluOp gelu) {
    auto matmul = gelu.getX().getDefiningOp<MatmulOp>();
    if (!matmul || !matmul->hasOneUse())
      return;
    OpBuilder b(gelu);
    Type type = matmul.getType();
    auto fused = MatmulGeluOp::create(
        b, matmul.getLoc(), type, type, matmul.getA(), matmul.getB(),
        matmul.getBias(), matmul.getTransposeAAttr(),
        matmul.getTransposeBAttr(), gelu.getApproximateAttr());
    gelu.replaceAllUsesWith(fused.getOut());
    gelu->erase();
    matmul->erase();
    ++numMatmulGelus;
  }
};

} // namespace
