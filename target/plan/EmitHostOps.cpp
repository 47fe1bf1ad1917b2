//===- EmitHostOps.cpp - the step's state ops, host scalars and io -------===//
//
// The emitter's ops that run on the host or touch the step's state
// (Emitter.h): state loads and stores, batches and gradient accumulation;
// the values of the run (step, epoch, lr, ...); arith on host scalars;
// log, print, save and exit.
//
//===----------------------------------------------------------------------===//

#include "target/plan/Emitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/TypeSwitch.h"

#include <optional>

namespace md::emitter {

namespace {

/// The comparisons a plan has, one row each with the arith.cmpi and
/// arith.cmpf predicates that lower to it (signed for integers; ordered for
/// floats, but unordered for `!=`).
struct CompareRow {
  arith::CmpIPredicate integer;
  arith::CmpFPredicate real;
  fb::CompareKind kind;
};
constexpr CompareRow kCompares[] = {
    {arith::CmpIPredicate::eq, arith::CmpFPredicate::OEQ, fb::CompareKind::Eq},
    {arith::CmpIPredicate::ne, arith::CmpFPredicate::UNE, fb::CompareKind::Ne},
    {arith::CmpIPredicate::slt, arith::CmpFPredicate::OLT, fb::CompareKind::Lt},
    {arith::CmpIPredicate::sle, arith::CmpFPredicate::OLE, fb::CompareKind::Le},
    {arith::CmpIPredicate::sgt, arith::CmpFPredicate::OGT, fb::CompareKind::Gt},
    {arith::CmpIPredicate::sge, arith::CmpFPredicate::OGE,
     fb::CompareKind::Ge}};

/// The plan's comparison of an arith.cmpi or arith.cmpf, if it has one.
std::optional<fb::CompareKind> compareKindOf(Operation *cmp) {
  auto i = dyn_cast<arith::CmpIOp>(cmp);
  auto f = dyn_cast<arith::CmpFOp>(cmp);
  for (const CompareRow &row : kCompares)
    if (i ? i.getPredicate() == row.integer : f.getPredicate() == row.real)
      return row.kind;
  return std::nullopt;
}

/// The plan's arithmetic of one of the arith ops emitHostOp lists.
fb::ArithKind arithKindOf(Operation *arith) {
  return llvm::TypeSwitch<Operation *, fb::ArithKind>(arith)
      .Case<arith::AddIOp, arith::AddFOp>(
          [](auto) { return fb::ArithKind::Add; })
      .Case<arith::SubIOp, arith::SubFOp>(
          [](auto) { return fb::ArithKind::Sub; })
      .Case<arith::MulIOp, arith::MulFOp>(
          [](auto) { return fb::ArithKind::Mul; })
      .Case<arith::DivSIOp, arith::DivFOp>(
          [](auto) { return fb::ArithKind::Div; })
      .Case<arith::RemSIOp, arith::RemFOp>(
          [](auto) { return fb::ArithKind::Rem; })
      .Case([](arith::NegFOp) { return fb::ArithKind::Neg; })
      .Case([](arith::AndIOp) { return fb::ArithKind::And; })
      .Case([](arith::OrIOp) { return fb::ArithKind::Or; })
      .Case([](arith::XOrIOp) { return fb::ArithKind::Xor; })
      .Case<arith::MinSIOp, arith::MinimumFOp>(
          [](auto) { return fb::ArithKind::Min; })
      .Default([](Operation *) { return fb::ArithKind::Max; });
}

} // namespace

LogicalResult Emitter::emitStepOp(Operation &op, Context ctx, bool &handled) {
  handled = true;
  int32_t block = ctx.block;
  if (auto load = dyn_cast<StateLoadOp>(op)) {
    FailureOr<int32_t> s = state(load.getState(), &op);
    FailureOr<SmallVector<int32_t>> out = results(op);
    if (failed(s) || failed(out))
      return failure();
    add(ctx, &op, fb::Opcode::StateLoad, {*s}, {(*out)[0]});
    loadedFrom_[(*out)[0]] = *s;
    return success();
  }
  // An op that writes `value` into state `name`: the value in, the state out.
  auto intoState = [&](fb::Opcode opcode, StringRef name,
                       Value value) -> LogicalResult {
    FailureOr<int32_t> s = state(name, &op);
    FailureOr<int32_t> in = use(value, block, &op);
    if (failed(s) || failed(in))
      return failure();
    add(ctx, &op, opcode, {*in}, {*s});
    return success();
  };
  if (auto store = dyn_cast<StateStoreOp>(op))
    return intoState(fb::Opcode::StateStore, store.getState(),
                     store.getValue());
  if (auto batch = dyn_cast<BatchOp>(op)) {
    FailureOr<SmallVector<int32_t>> out = results(op);
    if (failed(out))
      return failure();
    plan::attrs::Batch a;
    a.dataset = int64_t{dataset(train_.getData())};
    return encode(&op, a,
                  add(ctx, &op, fb::Opcode::Batch, {},
                      std::vector<int32_t>(out->begin(), out->end())));
  }
  if (auto acc = dyn_cast<GradAccumulateOp>(op))
    return intoState(fb::Opcode::GradAccumulate, acc.getAcc(), acc.getGrad());
  if (auto total = dyn_cast<GradTotalOp>(op)) {
    FailureOr<int32_t> s = state(total.getAcc(), &op);
    FailureOr<int32_t> g = use(total.getGrad(), block, &op);
    FailureOr<SmallVector<int32_t>> out = results(op);
    if (failed(s) || failed(g) || failed(out))
      return failure();
    add(ctx, &op, fb::Opcode::GradTotal, {*g, *s}, {(*out)[0]});
    return success();
  }
  handled = false;
  return success();
}

LogicalResult Emitter::emitHostOp(Operation &op, Context ctx, bool &handled) {
  handled = true;
  int32_t block = ctx.block;
  auto simple = [&](fb::Opcode opcode) -> FailureOr<fb::InstructionT *> {
    FailureOr<SmallVector<int32_t>> in = uses(op.getOperands(), block, &op);
    if (failed(in))
      return failure();
    FailureOr<SmallVector<int32_t>> out = results(op);
    if (failed(out))
      return failure();
    return &add(ctx, &op, opcode, std::vector<int32_t>(in->begin(), in->end()),
                std::vector<int32_t>(out->begin(), out->end()));
  };
  auto io = [&](fb::Opcode opcode, llvm::StringRef text,
                bool rank0) -> LogicalResult {
    FailureOr<fb::InstructionT *> inst = simple(opcode);
    if (failed(inst))
      return failure();
    (*inst)->strings = {text.str()};
    (*inst)->rank0_only = ctx.rank0Only || rank0;
    return success();
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
      .Case([&](StepOp) { return LogicalResult(simple(fb::Opcode::Step)); })
      .Case([&](EpochOp) { return LogicalResult(simple(fb::Opcode::Epoch)); })
      .Case([&](WorldSizeOp) {
        return LogicalResult(simple(fb::Opcode::WorldSize));
      })
      .Case([&](LrOp) { return LogicalResult(simple(fb::Opcode::Lr)); })
      .Case([&](LossOp) { return LogicalResult(simple(fb::Opcode::Loss)); })
      .Case([&](WallTimeOp) {
        return LogicalResult(simple(fb::Opcode::WallTime));
      })
      .Case([&](FileExistsOp exists) -> LogicalResult {
        FailureOr<fb::InstructionT *> inst = simple(fb::Opcode::FileExists);
        if (failed(inst))
          return failure();
        (*inst)->strings = {exists.getPath().str()};
        return success();
      })
      .Case([&](AccumScaleOp) {
        return LogicalResult(simple(fb::Opcode::AccumScale));
      })
      .Case([&](RecordLossOp) {
        return LogicalResult(simple(fb::Opcode::RecordLoss));
      })
      .Case([&](LogOp log) {
        return io(fb::Opcode::Log, log.getTag(), log.getRank0Only());
      })
      .Case([&](PrintOp print) {
        return io(fb::Opcode::Print, print.getMessage(), print.getRank0Only());
      })
      .Case([&](SaveOp save) -> LogicalResult {
        FailureOr<fb::InstructionT *> inst = simple(fb::Opcode::Save);
        if (failed(inst))
          return failure();
        plan::attrs::Save a;
        a.format = static_cast<fb::CheckpointFormat>(save.getFormat());
        if (std::optional<uint64_t> keep = save.getKeep())
          a.keep = static_cast<int64_t>(*keep);
        if (failed(encode(&op, a, **inst)))
          return failure();
        if (save.getPath())
          (*inst)->strings = {save.getPath()->str()};
        return success();
      })
      .Case([&](ExitOp exit) -> LogicalResult {
        FailureOr<fb::InstructionT *> inst = simple(fb::Opcode::Exit);
        if (failed(inst))
          return failure();
        plan::attrs::Exit a;
        if (exit.getFailure())
          a.failed = true;
        if (failed(encode(&op, a, **inst)))
          return failure();
        if (exit.getReason())
          (*inst)->strings = {exit.getReason()->str()};
        return success();
      })
      .Case([&](tensor::ExtractOp extract) -> LogicalResult {
        // The one element of a 0-d tensor is the same scalar buffer.
        if (extract.getTensor().getType().getRank() != 0)
          return op.emitError("only a 0-d tensor's element can be extracted "
                              "in a plan");
        FailureOr<int32_t> x = use(extract.getTensor(), block, &op);
        if (failed(x))
          return failure();
        buffers_[extract.getResult()] = *x;
        return success();
      })
      .Case([&](tensor::FromElementsOp from) -> LogicalResult {
        // A 0-d tensor of one scalar is that scalar's buffer, as for
        // tensor.extract above: the frontend wraps a recipe number so that
        // it can be all-reduced.
        if (from.getType().getRank() != 0 ||
            from.getType().getElementType() !=
                from.getElements().front().getType())
          return op.emitError("only a scalar can become a 0-d tensor of its "
                              "own type in a plan");
        FailureOr<int32_t> x = use(from.getElements().front(), block, &op);
        if (failed(x))
          return failure();
        buffers_[from.getResult()] = *x;
        return success();
      })
      .Case<arith::CmpIOp, arith::CmpFOp>([&](Operation *cmp) -> LogicalResult {
        std::optional<fb::CompareKind> kind = compareKindOf(cmp);
        if (!kind)
          return op.emitError("unsupported comparison predicate in a plan");
        FailureOr<fb::InstructionT *> inst = simple(fb::Opcode::ScalarCompare);
        if (failed(inst))
          return failure();
        plan::attrs::ScalarCompare a;
        a.kind = *kind;
        return encode(&op, a, **inst);
      })
      .Case<arith::AddIOp, arith::AddFOp, arith::SubIOp, arith::SubFOp,
            arith::MulIOp, arith::MulFOp, arith::DivSIOp, arith::DivFOp,
            arith::RemSIOp, arith::RemFOp, arith::NegFOp, arith::AndIOp,
            arith::OrIOp, arith::XOrIOp, arith::MinSIOp, arith::MaxSIOp,
            arith::MinimumFOp, arith::MaximumFOp>(
          [&](Operation *arith) -> LogicalResult {
            FailureOr<fb::InstructionT *> inst =
                simple(fb::Opcode::ScalarArith);
            if (failed(inst))
              return failure();
            plan::attrs::ScalarArith a;
            a.kind = arithKindOf(arith);
            return encode(&op, a, **inst);
          })
      .Case<arith::ExtFOp, arith::TruncFOp, arith::SIToFPOp, arith::FPToSIOp,
            arith::ExtSIOp, arith::ExtUIOp, arith::TruncIOp,
            arith::IndexCastOp>([&](Operation *) {
        return LogicalResult(simple(fb::Opcode::ScalarConvert));
      })
      .Default([&](Operation *) {
        handled = false;
        return success();
      });
}

} // namespace md::emitter
