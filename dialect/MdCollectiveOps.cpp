//===- MdCollectiveOps.cpp - md collective ops
//-------------------------------------===//
//
// Verifiers, the CollectiveOpInterface (bytes on the wire with nccl-tests'
// ring conventions) and the canonicalizations of md's collectives.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdAsmUtils.h"
#include "dialect/MdOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "runtime/core/Mesh.h"

using namespace mlir;
using namespace md;

#define GET_OP_CLASSES
#include "dialect/MdCollectiveOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Shared verification
//===----------------------------------------------------------------------===//

/// The number of ranks of `group` seen from `op` when it is statically known
/// (and sane; a bad mesh is reported by md.model's own verifier).
static std::optional<int64_t> knownGroupSize(Operation *op, Group group) {
  std::optional<int64_t> n = getStaticGroupSize(op, group);
  if (n && *n < 1)
    return std::nullopt;
  return n;
}

/// What every collective must satisfy.
static LogicalResult verifyCollective(Operation *op) {
  if (op->getDiscardableAttr("rank0_only"))
    return op->emitOpError("a collective cannot be rank0_only: the other "
                           "ranks would never join it");
  return success();
}

/// Whether `shard` is the padded shard `tensor<?xT>` of the flat buffer
/// `full` (`tensor<NxT>`).
static bool isFlatShardPair(RankedTensorType shard, RankedTensorType full) {
  return shard.getRank() == 1 && shard.isDynamicDim(0) && full.getRank() == 1 &&
         full.hasStaticShape();
}

/// The bytes of one rank's shard in an all-gather or reduce-scatter over
/// `groupSize` ranks: the shard's own size, or Mesh.h's ceil(N / n) elements
/// of a flat-shard pair.
static int64_t getShardBytes(Type shardType, Type fullType, int64_t groupSize) {
  auto shard = cast<RankedTensorType>(shardType);
  auto full = cast<RankedTensorType>(fullType);
  if (isFlatShardPair(shard, full))
    if (std::optional<int64_t> numel =
            md::mesh::shardNumel(full.getNumElements(), groupSize))
      return *numel * getElementBytes(full.getElementType());
  return getTensorBytes(shard);
}

static std::string formatDim(int64_t dim) {
  return ShapedType::isDynamic(dim) ? std::string("?") : std::to_string(dim);
}

/// All-gather (`scatter` false) and reduce-scatter (`scatter` true) relate a
/// per-rank shard to a full buffer n times as long along `axis`: the shard is
/// the input of an all-gather and the result of a reduce-scatter.
static LogicalResult verifyShardedPair(Operation *op, bool scatter,
                                       RankedTensorType input,
                                       RankedTensorType result, int64_t axis,
                                       Group group) {
  StringRef opName = scatter ? "reduce_scatter" : "all_gather";
  StringRef verb = scatter ? "scattered" : "gathered";
  StringRef shardName = scatter ? "result" : "input";
  StringRef fullName = scatter ? "input" : "result";
  RankedTensorType shard = scatter ? result : input;
  RankedTensorType full = scatter ? input : result;
  if (input.getElementType() != result.getElementType())
    return op->emitOpError("result element type ")
           << result.getElementType() << " differs from input element type "
           << input.getElementType();
  if (input.getRank() != result.getRank())
    return op->emitOpError("result rank ")
           << result.getRank() << " differs from input rank "
           << input.getRank();
  // The flat-shard form md-apply-plan uses: a 1-D buffer of N elements and
  // this rank's shard of it, ceil(N / n) elements of the buffer padded to
  // n x ceil(N / n) (runtime/core/Mesh.h), whose size is known once W is.
  if (isFlatShardPair(shard, full) && axis == 0)
    return success();
  int64_t rank = input.getRank();
  if (axis >= rank)
    return op->emitOpError("axis ")
           << axis << " is out of range for a rank-" << rank << " tensor";
  if (!shard.hasStaticShape())
    return op->emitOpError()
           << shardName << " shape " << formatShape(shard.getShape())
           << " must be static: it is this rank's shard";
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis || input.getDimSize(d) == result.getDimSize(d))
      continue;
    return op->emitOpError("dim ")
           << d << " differs between input (" << formatDim(input.getDimSize(d))
           << ") and result (" << formatDim(result.getDimSize(d))
           << "): only axis " << axis << " is " << verb;
  }

  int64_t shardDim = shard.getDimSize(axis);
  int64_t fullDim = full.getDimSize(axis);
  bool fullStatic = !ShapedType::isDynamic(fullDim);
  if (std::optional<int64_t> n = knownGroupSize(op, group)) {
    // reduce_scatter: say first that the full buffer does not split evenly.
    if (scatter && fullStatic && fullDim % *n != 0)
      return op->emitOpError()
             << opName << " of " << fullDim << " elements along axis " << axis
             << " is not divisible by group size " << *n;
    if (fullStatic && fullDim == *n * shardDim)
      return success();
    if (scatter && fullStatic)
      return op->emitOpError()
             << shardName << " dim " << axis << " must be " << fullName
             << " dim " << fullDim << " / group size " << *n << " = "
             << fullDim / *n << ", got " << shardDim;
    return op->emitOpError()
           << fullName << " dim " << axis << " must be group size " << *n
           << " x " << shardName << " dim " << shardDim << " = "
           << *n * shardDim << ", got " << formatDim(fullDim);
  }
  // Symbolic group size: the full dim, when static, is a positive multiple of
  // the shard dim (0 for an empty shard).
  if (fullStatic &&
      (shardDim == 0 ? fullDim != 0
                     : (fullDim < shardDim || fullDim % shardDim != 0)))
    return op->emitOpError()
           << fullName << " dim " << axis << " must be a multiple of "
           << shardName << " dim " << shardDim
           << " (the group size times it), got " << fullDim;
  return success();
}

/// The verifier all-gather (`scatter` false) and reduce-scatter (`scatter`
/// true) share: a collective whose input and result are a sharded pair.
template <typename OpT>
static LogicalResult verifyShardedCollective(OpT op, bool scatter) {
  if (failed(verifyCollective(op)))
    return failure();
  auto input = cast<RankedTensorType>(op.getInput().getType());
  auto result = cast<RankedTensorType>(op.getResult().getType());
  return verifyShardedPair(op, scatter, input, result,
                           static_cast<int64_t>(op.getAxis()), op.getGroup());
}

/// The full buffer of an all-gather or reduce-scatter over `groupSize` ranks:
/// n shards.
static int64_t getShardedFullBytes(Type shardType, Type fullType,
                                   int64_t groupSize) {
  return std::max<int64_t>(groupSize, 0) *
         getShardBytes(shardType, fullType, groupSize);
}

/// The bytes one rank of a ring all-gather or reduce-scatter sends: (n - 1)/n
/// of the n x shard bytes gathered or reduced.
static int64_t getShardedBytesSent(Type shardType, Type fullType,
                                   int64_t groupSize) {
  if (groupSize <= 1)
    return 0;
  return (groupSize - 1) * getShardBytes(shardType, fullType, groupSize);
}

//===----------------------------------------------------------------------===//
// Canonicalization patterns
//===----------------------------------------------------------------------===//
//
// Both rewrites are decided from facts every rank of an SPMD program shares:
// the group size pinned by md.model and the static tensor type, which is the
// same on every rank. So either every rank of the group drops the collective
// or none does, and no rank is left waiting for a peer that will never join.

namespace {
/// A collective over a group of statically one rank moves nothing: its result
/// is its operand (sum/avg/max/min/prod of one value is the value; the only
/// shard is the whole buffer; the root is the only rank).
template <typename OpT>
struct ForwardSingleRankCollective : OpRewritePattern<OpT> {
  using OpRewritePattern<OpT>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpT op,
                                PatternRewriter &rewriter) const override {
    if (knownGroupSize(op, op.getGroup()) != 1)
      return rewriter.notifyMatchFailure(op, "group size is not statically 1");
    if (op.getInput().getType() != op.getResult().getType())
      return rewriter.notifyMatchFailure(op, "types differ");
    rewriter.replaceOp(op, op.getInput());
    return success();
  }
};

/// A barrier over a group of statically one rank waits for nobody.
struct EraseSingleRankBarrier : OpRewritePattern<BarrierOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(BarrierOp op,
                                PatternRewriter &rewriter) const override {
    if (knownGroupSize(op, op.getGroup()) != 1)
      return rewriter.notifyMatchFailure(op, "group size is not statically 1");
    rewriter.eraseOp(op);
    return success();
  }
};

/// An all-reduce or broadcast of a tensor with no elements moves nothing.
template <typename OpT> struct ForwardEmptyCollective : OpRewritePattern<OpT> {
  using OpRewritePattern<OpT>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpT op,
                                PatternRewriter &rewriter) const override {
    auto type = cast<RankedTensorType>(op.getInput().getType());
    if (!llvm::is_contained(type.getShape(), 0))
      return rewriter.notifyMatchFailure(op, "tensor has elements");
    rewriter.replaceOp(op, op.getInput());
    return success();
  }
};
} // namespace

//===----------------------------------------------------------------------===//
// AllGatherOp
//===----------------------------------------------------------------------===//

LogicalResult AllGatherOp::verify() {
  return verifyShardedCollective(*this, /*scatter=*/false);
}

std::optional<ReductionKind> AllGatherOp::getReduction() {
  return std::nullopt;
}

int64_t AllGatherOp::getFullBytes(int64_t groupSize) {
  return getShardedFullBytes(getInput().getType(), getResult().getType(),
                             groupSize);
}

int64_t AllGatherOp::getBytesSent(int64_t groupSize) {
  return getShardedBytesSent(getInput().getType(), getResult().getType(),
                             groupSize);
}

void AllGatherOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                              MLIRContext *context) {
  results.add<ForwardSingleRankCollective<AllGatherOp>>(context);
}

//===----------------------------------------------------------------------===//
// ReduceScatterOp
//===----------------------------------------------------------------------===//

LogicalResult ReduceScatterOp::verify() {
  return verifyShardedCollective(*this, /*scatter=*/true);
}

std::optional<ReductionKind> ReduceScatterOp::getReduction() {
  return getReductionKind();
}

int64_t ReduceScatterOp::getFullBytes(int64_t groupSize) {
  return getShardedFullBytes(getResult().getType(), getInput().getType(),
                             groupSize);
}

int64_t ReduceScatterOp::getBytesSent(int64_t groupSize) {
  return getShardedBytesSent(getResult().getType(), getInput().getType(),
                             groupSize);
}

void ReduceScatterOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                                  MLIRContext *context) {
  results.add<ForwardSingleRankCollective<ReduceScatterOp>>(context);
}

//===----------------------------------------------------------------------===//
// AllReduceOp
//===----------------------------------------------------------------------===//

LogicalResult AllReduceOp::verify() { return verifyCollective(*this); }

std::optional<ReductionKind> AllReduceOp::getReduction() {
  return getReductionKind();
}

int64_t AllReduceOp::getFullBytes(int64_t) {
  return getTensorBytes(getInput().getType());
}

int64_t AllReduceOp::getBytesSent(int64_t groupSize) {
  if (groupSize <= 1)
    return 0;
  // 2(n - 1)/n of the buffer; multiply before dividing.
  return 2 * (groupSize - 1) * getTensorBytes(getInput().getType()) / groupSize;
}

void AllReduceOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                              MLIRContext *context) {
  results.add<ForwardSingleRankCollective<AllReduceOp>,
              ForwardEmptyCollective<AllReduceOp>>(context);
}

//===----------------------------------------------------------------------===//
// BroadcastOp
//===----------------------------------------------------------------------===//

LogicalResult BroadcastOp::verify() {
  if (failed(verifyCollective(*this)))
    return failure();
  if (std::optional<int64_t> n = knownGroupSize(*this, getGroup()))
    if (static_cast<int64_t>(getRoot()) >= *n)
      return emitOpError("root ")
             << getRoot() << " is out of range for group "
             << stringifyGroup(getGroup()) << " of size " << *n;
  return success();
}

std::optional<ReductionKind> BroadcastOp::getReduction() {
  return std::nullopt;
}

int64_t BroadcastOp::getFullBytes(int64_t) {
  return getTensorBytes(getInput().getType());
}

int64_t BroadcastOp::getBytesSent(int64_t groupSize) {
  if (groupSize <= 1)
    return 0;
  return getTensorBytes(getInput().getType());
}

void BroadcastOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                              MLIRContext *context) {
  results.add<ForwardSingleRankCollective<BroadcastOp>,
              ForwardEmptyCollective<BroadcastOp>>(context);
}

//===----------------------------------------------------------------------===//
// BarrierOp
//===----------------------------------------------------------------------===//

LogicalResult BarrierOp::verify() { return verifyCollective(*this); }

std::optional<ReductionKind> BarrierOp::getReduction() { return std::nullopt; }

int64_t BarrierOp::getFullBytes(int64_t) { return 0; }

int64_t BarrierOp::getBytesSent(int64_t) { return 0; }

void BarrierOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<EraseSingleRankBarrier>(context);
}
