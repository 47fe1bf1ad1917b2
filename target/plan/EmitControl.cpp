//===- EmitControl.cpp - control flow and evaluation in a plan -----------===//
//
// The emitter's control ops (Emitter.h): md.micro_steps, md.every, md.if
// (and the `if rank == 0` that gates io), md.for, each a nested block, and
// md.evaluate, whose block holds a copy of the model's forward over the
// master weights.
//
//===----------------------------------------------------------------------===//

#include "target/plan/Emitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/SymbolTable.h"

namespace md::emitter {

LogicalResult Emitter::emitControl(Operation &op, Context ctx, bool &handled) {
  handled = true;
  if (auto micro = dyn_cast<MicroStepsOp>(op)) {
    int32_t body = b_.addBlock(fb::BlockKind::MicroSteps);
    add(ctx, &op, fb::Opcode::MicroSteps, {}, {}).blocks = {body};
    return emitRegion(micro.getBody(), {body, ctx.rank0Only});
  }
  if (auto every = dyn_cast<EveryOp>(op)) {
    int32_t body = b_.addBlock(fb::BlockKind::Every);
    fb::InstructionT &inst = add(ctx, &op, fb::Opcode::Every, {}, {});
    plan::attrs::Every a;
    a.period = static_cast<int64_t>(every.getPeriod());
    a.unit = static_cast<fb::PeriodUnit>(every.getUnit());
    if (failed(encode(&op, a, inst)))
      return failure();
    inst.blocks = {body};
    return emitRegion(every.getBody(),
                      {body, ctx.rank0Only || every.getRank0Only()});
  }
  if (auto ifOp = dyn_cast<IfOp>(op)) {
    if (isRankZeroIo(ifOp)) {
      for (Operation &nested : ifOp.getThenRegion().front())
        if (!isa<YieldOp>(nested) &&
            failed(emitOp(nested, {ctx.block, /*rank0Only=*/true})))
          return failure();
      return success();
    }
    FailureOr<int32_t> cond = use(ifOp.getCondition(), ctx.block, &op);
    if (failed(cond))
      return failure();
    FailureOr<SmallVector<int32_t>> out = results(op);
    if (failed(out))
      return failure();
    fb::InstructionT &inst =
        add(ctx, &op, fb::Opcode::If, {*cond},
            std::vector<int32_t>(out->begin(), out->end()));
    std::vector<int32_t> blocks;
    for (auto [region, kind] : {std::pair<Region *, fb::BlockKind>{
                                    &ifOp.getThenRegion(), fb::BlockKind::Then},
                                {&ifOp.getElseRegion(), fb::BlockKind::Else}}) {
      if (region->empty())
        continue;
      int32_t block = b_.addBlock(kind);
      blocks.push_back(block);
      for (Operation &nested : region->front()) {
        if (auto yield = dyn_cast<YieldOp>(nested)) {
          if (yield.getNumOperands() == 0)
            continue;
          FailureOr<SmallVector<int32_t>> values =
              uses(yield.getOperands(), block, &nested);
          if (failed(values))
            return failure();
          add({block, ctx.rank0Only}, &nested, fb::Opcode::Yield,
              std::vector<int32_t>(values->begin(), values->end()), {});
          continue;
        }
        if (failed(emitOp(nested, {block, ctx.rank0Only})))
          return failure();
      }
    }
    inst.blocks = blocks; // PlanBuilder keeps `inst` where it is
    return success();
  }
  if (auto forOp = dyn_cast<ForOp>(op)) {
    FailureOr<SmallVector<int32_t>> bounds =
        uses(forOp->getOperands(), ctx.block, &op);
    if (failed(bounds))
      return failure();
    Block &bodyBlock = forOp.getBody().front();
    if (bodyBlock.getNumArguments() != 1)
      return op.emitError("internal error: md.for without an induction "
                          "variable");
    FailureOr<int32_t> iv = newBuffer(bodyBlock.getArgument(0), "for.iv", &op);
    if (failed(iv))
      return failure();
    int32_t body = b_.addBlock(fb::BlockKind::ForBody);
    add(ctx, &op, fb::Opcode::For,
        std::vector<int32_t>(bounds->begin(), bounds->end()), {*iv})
        .blocks = {body};
    for (Operation &nested : bodyBlock)
      if (!isa<YieldOp>(nested) &&
          failed(emitOp(nested, {body, ctx.rank0Only})))
        return failure();
    return success();
  }
  if (auto evaluate = dyn_cast<EvaluateOp>(op))
    return emitEvaluate(evaluate, ctx);
  if (isa<YieldOp>(op))
    return success(); // the end of a region emitted above
  handled = false;
  return success();
}

//===----------------------------------------------------------------------===//
// Evaluation
//===----------------------------------------------------------------------===//

/// md.evaluate runs the model's forward on held-out data. The step program
/// has no copy of it (md-apply-plan builds the training step only), so the
/// emitter writes its body here: this rank's batch; per unit, its master
/// weights (all-gathered over their group when sharded, cast to the
/// parameters' dtype when it differs), read through views; the forward's
/// ops in the parameters' own dtype; the loss yielded. Every rank runs the
/// same gathers in the same order, and the Evaluate instruction averages
/// the loss over the world.
LogicalResult Emitter::emitEvaluate(EvaluateOp op, Context ctx) {
  auto forward = dyn_cast_or_null<ForwardOp>(
      SymbolTable::lookupSymbolIn(model_, op.getForwardAttr()));
  if (!forward)
    return op.emitError("no md.forward @") << op.getForward();
  int32_t body = b_.addBlock(fb::BlockKind::EvalBody);
  Block &entry = forward.getBody().front();
  std::vector<int32_t> args;
  int32_t data = dataset(op.getData());
  for (BlockArgument arg : entry.getArguments()) {
    FailureOr<int32_t> x = newBuffer(arg, "eval.batch", op);
    if (failed(x))
      return failure();
    args.push_back(*x);
  }
  fb::InstructionT &batch = b_.add(body, fb::Opcode::Batch, {}, args);
  plan::attrs::Batch batchAttrs;
  batchAttrs.dataset = int64_t{data};
  if (failed(encode(op, batchAttrs, batch)))
    return failure();
  batch.loc = location(op.getLoc());
  SmallVector<int32_t> out;
  if (failed(emitForwardBody(entry, args, body, out, op)))
    return failure();
  if (out.empty())
    return op.emitError("the forward returns no loss to evaluate");
  b_.add(body, fb::Opcode::Yield, {out.front()}, {});
  FailureOr<SmallVector<int32_t>> result = results(*op);
  if (failed(result))
    return failure();
  fb::InstructionT &inst =
      add(ctx, op, fb::Opcode::Evaluate, {}, {(*result)[0]});
  plan::attrs::Evaluate a;
  a.dataset = int64_t{data};
  a.batches = static_cast<int64_t>(op.getBatches().value_or(0));
  if (failed(encode(op, a, inst)))
    return failure();
  inst.blocks = {body};
  return success();
}

LogicalResult Emitter::emitForwardBody(Block &body, ArrayRef<int32_t> args,
                                       int32_t block,
                                       SmallVectorImpl<int32_t> &out,
                                       Operation *at) {
  for (auto [arg, x] : llvm::zip(body.getArguments(), args))
    buffers_[arg] = x;
  // The gathered flat buffer of each unit, made on first use.
  llvm::DenseMap<int64_t, int32_t> flat;
  auto unitFlat = [&](int64_t unit, Operation *user) -> FailureOr<int32_t> {
    auto it = flat.find(unit);
    if (it != flat.end())
      return it->second;
    const UnitInfo &info = units_[unit];
    if (info.master < 0)
      return user->emitError("unit ") << unit << " has no master weights";
    const fb::BufferT &master = *b_.plan().buffers[info.master];
    auto transient = [&](fb::BufferT buffer) {
      buffer.category = fb::MemoryCategory::Params;
      return b_.addBuffer(std::move(buffer));
    };
    int32_t x;
    if (info.sharded) {
      int32_t shard = transient(PlanBuilder::shard(
          "eval.master.shard", master.dtype, master.numel, master.group));
      b_.add(block, fb::Opcode::StateLoad, {info.master}, {shard});
      loadedFrom_[shard] = info.master;
      x = transient(
          PlanBuilder::full("eval.params", master.dtype, {master.numel}));
      // The whole unit in one gather: no bucket, along the flat axis.
      plan::attrs::AllGather a;
      a.group = static_cast<fb::Group>(info.group);
      a.bucket = int64_t{-1};
      a.axis = int64_t{0};
      if (failed(encode(user, a,
                        b_.add(block, fb::Opcode::AllGather, {shard}, {x}))))
        return failure();
    } else {
      x = transient(
          PlanBuilder::full("eval.params", master.dtype, master.shape));
      b_.add(block, fb::Opcode::StateLoad, {info.master}, {x});
      loadedFrom_[x] = info.master;
    }
    flat[unit] = x;
    return x;
  };

  for (Operation &op : body) {
    if (auto ret = dyn_cast<ReturnOp>(op)) {
      FailureOr<SmallVector<int32_t>> values =
          uses(ret.getOperands(), block, &op);
      if (failed(values))
        return failure();
      out.assign(values->begin(), values->end());
      return success();
    }
    if (auto ref = dyn_cast<ParamRefOp>(op)) {
      ParamOp param = params_.lookup(ref.getParam());
      if (!param)
        return op.emitError("no md.param @") << ref.getParam();
      FailureOr<int32_t> source = unitFlat(*param.getUnit(), &op);
      if (failed(source))
        return failure();
      auto type = cast<RankedTensorType>(ref.getType());
      fb::DType dtype = getDType(type);
      int32_t from = *source;
      if (b_.plan().buffers[from]->dtype != dtype) {
        // Master weights in another dtype: cast the whole unit once.
        fb::BufferT cast = PlanBuilder::full("eval.params.cast", dtype,
                                             {b_.plan().buffers[from]->numel});
        cast.category = fb::MemoryCategory::Params;
        int32_t c = b_.addBuffer(std::move(cast));
        b_.add(block, fb::Opcode::Cast, {from}, {c});
        flat[*param.getUnit()] = c;
        from = c;
      }
      fb::BufferT view = PlanBuilder::full(
          param.getSymName().str(), dtype,
          std::vector<int64_t>(type.getShape().begin(), type.getShape().end()));
      view.category = fb::MemoryCategory::Params;
      int32_t v = b_.addBuffer(std::move(view));
      plan::attrs::View a;
      a.offset = static_cast<int64_t>(param.getOffset().value_or(0));
      if (failed(encode(&op, a, b_.add(block, fb::Opcode::View, {from}, {v}))))
        return failure();
      buffers_[ref.getResult()] = v;
      continue;
    }
    if (auto call = dyn_cast<CallOp>(op)) {
      auto callee = dyn_cast_or_null<FuncOp>(
          SymbolTable::lookupSymbolIn(model_, call.getCalleeAttr()));
      if (!callee)
        return op.emitError("no md.func @") << call.getCallee();
      FailureOr<SmallVector<int32_t>> operands =
          uses(call.getOperands(), block, &op);
      if (failed(operands))
        return failure();
      SmallVector<int32_t> results;
      if (failed(emitForwardBody(callee.getBody().front(), *operands, block,
                                 results, &op)))
        return failure();
      for (auto [result, x] : llvm::zip(call.getResults(), results))
        buffers_[result] = x;
      continue;
    }
    if (failed(emitOp(op, {block, false})))
      return failure();
  }
  return at->emitError("internal error: a forward body without md.return");
}

} // namespace md::emitter
