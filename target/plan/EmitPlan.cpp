//===- EmitPlan.cpp - the step program of a model as a plan.fb -----------===//
//
// See EmitPlan.h. The emitter walks the step and hooks regions of md.train
// in order and appends one instruction per op to the block it is in;
// liveness is left to PlanBuilder::inferLiveness, which applies the rule
// md's memory analysis uses (docs/memory.md, "Liveness"). This file holds
// the run, the plan's tables (header, parameters and state, the data
// recipe), its buffers, events and locations, and the walk over regions;
// the ops themselves are emitted by the files Emitter.h names.
//
//===----------------------------------------------------------------------===//

#include "dialect/MdDiscardableAttrs.h"
#include "target/plan/EmitPlan.h"
#include "target/plan/Emitter.h"

#include "dialect/ParamGroups.h"

#include "passes/analysis/MemoryAnalysis.h"
#include "passes/analysis/RankVariance.h"
#include "passes/analysis/StepProgram.h"
#include "runtime/plan/Aliasing.h"
#include "runtime/plan/Loader.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;

namespace md::emitter {

fb::DType getDType(Type type) {
  if (auto tensor = dyn_cast<RankedTensorType>(type))
    type = tensor.getElementType();
  if (type.isF32())
    return fb::DType::F32;
  if (type.isBF16())
    return fb::DType::BF16;
  if (type.isF16())
    return fb::DType::F16;
  if (type.isF64())
    return fb::DType::F64;
  if (type.isInteger(1))
    return fb::DType::Bool;
  if (type.isInteger(32))
    return fb::DType::I32;
  if (type.isInteger(64) || type.isIndex())
    return fb::DType::I64;
  return fb::DType::Invalid;
}

namespace {

fb::StateRole getPlanRole(StateRole role) {
  switch (role) {
  case StateRole::master:
    return fb::StateRole::Master;
  case StateRole::params:
    return fb::StateRole::Params;
  case StateRole::exp_avg:
    return fb::StateRole::ExpAvg;
  case StateRole::exp_avg_sq:
    return fb::StateRole::ExpAvgSq;
  case StateRole::momentum:
    return fb::StateRole::Momentum;
  case StateRole::grad_acc:
    return fb::StateRole::GradAcc;
  case StateRole::frozen:
    return fb::StateRole::Frozen;
  }
  return fb::StateRole::None;
}

/// The first file:line:col a location holds.
std::optional<FileLineColLoc> getFileLoc(Location loc) {
  std::optional<FileLineColLoc> found;
  loc->walk([&](Location inner) {
    if (auto file = dyn_cast<FileLineColLoc>(inner)) {
      found = file;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return found;
}

/// `a` and `b` name the same dotted path up to their first difference:
/// "h.0.attn.q.weight" and "h.0.mlp.fc.bias" share "h.0".
std::string commonPrefix(llvm::StringRef a, llvm::StringRef b) {
  llvm::SmallVector<llvm::StringRef> x, y;
  a.split(x, '.');
  b.split(y, '.');
  std::string prefix;
  for (size_t i = 0; i + 1 < x.size() && i + 1 < y.size() && x[i] == y[i]; ++i)
    prefix += (prefix.empty() ? "" : ".") + x[i].str();
  return prefix;
}

} // namespace

bool isRankZeroTest(Value cond) {
  auto cmp = cond.getDefiningOp<arith::CmpIOp>();
  if (!cmp || cmp.getPredicate() != arith::CmpIPredicate::eq)
    return false;
  auto isZero = [](Value v) {
    llvm::APInt value;
    auto constant = v.getDefiningOp<arith::ConstantOp>();
    if (!constant)
      return false;
    auto attr = dyn_cast<IntegerAttr>(constant.getValue());
    return attr && attr.getValue().isZero();
  };
  auto isRank = [](Value v) { return v.getDefiningOp<RankOp>() != nullptr; };
  return (isRank(cmp.getLhs()) && isZero(cmp.getRhs())) ||
         (isRank(cmp.getRhs()) && isZero(cmp.getLhs()));
}

void foldRankArithmetic(Region &hooks) {
  // The ops computed from a rank, in program order (operands first).
  llvm::DenseSet<Operation *> fromRank;
  SmallVector<Operation *> candidates;
  hooks.walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (isa<RankOp, LocalRankOp>(op)) {
      fromRank.insert(op);
      return;
    }
    if (op->getNumRegions() != 0 ||
        op->getDialect()->getNamespace() !=
            arith::ArithDialect::getDialectNamespace())
      return;
    if (llvm::any_of(op->getOperands(), [&](Value v) {
          return fromRank.contains(v.getDefiningOp());
        })) {
      fromRank.insert(op);
      candidates.push_back(op);
    }
  });
  for (Operation *op : candidates) {
    OpBuilder b(op);
    Type type = op->getResult(0).getType();
    auto constant = [&](int64_t v) -> Value {
      return arith::ConstantOp::create(b, op->getLoc(),
                                       b.getIntegerAttr(type, v));
    };
    Value replacement;
    if (std::optional<bool> decided = decideByRankRanges(op))
      replacement = constant(*decided);
    else if (std::optional<int64_t> same = foldSameNumber(op))
      replacement = constant(*same);
    else {
      SmallVector<Attribute> operands;
      for (Value v : op->getOperands()) {
        Attribute attr;
        operands.push_back(matchPattern(v, m_Constant(&attr)) ? attr
                                                              : Attribute());
      }
      SmallVector<OpFoldResult> folded;
      if (op->getNumResults() != 1 || failed(op->fold(operands, folded)) ||
          folded.size() != 1)
        continue;
      if (auto value = dyn_cast<Value>(folded[0]))
        replacement = value;
      else if (auto typed = dyn_cast<TypedAttr>(cast<Attribute>(folded[0])))
        replacement = arith::ConstantOp::create(b, op->getLoc(), typed);
    }
    if (!replacement || replacement == op->getResult(0))
      continue;
    op->getResult(0).replaceAllUsesWith(replacement);
  }
  // What no longer has a user (arith ops have no effects).
  for (Operation *op : llvm::reverse(candidates))
    if (op->use_empty())
      op->erase();
}

void markUniformPrints(ModelOp model, Region &hooks) {
  RankVariance variance(model);
  if (!variance.succeeded())
    return; // every print stays per rank: shown by each rank that runs it
  hooks.walk([&](PrintOp print) {
    if (print.getRank0Only() || variance.getNonUniformControl(print))
      return;
    for (Value value : print.getValues())
      if (variance.isVarying(value))
        return;
    // Whether it runs: an enclosing op with a varying operand (an md.if on
    // `rank`, even one whose arms communicate alike, an md.for to `rank`)
    // runs it on some ranks only.
    for (Operation *parent = print->getParentOp();
         parent && !isa<TrainOp>(parent); parent = parent->getParentOp())
      for (Value operand : parent->getOperands())
        if (variance.isVarying(operand))
          return;
    print.setRank0Only(true);
  });
}

bool isRankZeroIo(IfOp ifOp) {
  if (!isRankZeroTest(ifOp.getCondition()) || ifOp.getNumResults() != 0 ||
      !ifOp.getElseRegion().empty())
    return false;
  WalkResult walk = ifOp.getThenRegion().walk([](Operation *op) {
    OpAccess access = getAccess(op);
    return access.communicates || access.holdsCommunication || isa<ExitOp>(op)
               ? WalkResult::interrupt()
               : WalkResult::advance();
  });
  return !walk.wasInterrupted();
}

FailureOr<std::vector<uint8_t>> Emitter::run() {
  for (auto train : model_.getBody().getOps<TrainOp>())
    train_ = train;
  if (!train_)
    return model_.emitError("model '")
           << model_.getSymName()
           << "' has no train block: there is nothing to run, so no plan";
  // Values computed from a rank that are the same on every rank (`rank *
  // 0`, `rank >= 0`, `rank - rank`) become constants, as the desync check
  // reasons, so that the loader sees them uniform too.
  foldRankArithmetic(train_.getHooks());
  // A print that every rank makes alike is shown once, by rank 0.
  markUniformPrints(model_, train_.getHooks());
  FailureOr<MemoryReport> memory = computeMemory(model_, 1);
  if (failed(memory))
    return failure();
  for (const BufferInterval &buffer : memory->buffers)
    if (buffer.value)
      categories_[buffer.value] = buffer.category;

  if (failed(emitHeader()) || failed(emitParamsAndState()) ||
      failed(emitRecipe()))
    return failure();

  // W must divide global_batch / micro_batch (and be a multiple of a hybrid
  // plan's shard group): say so now if no W can.
  int64_t global = train_.getGlobalBatch(), micro = train_.getMicroBatch();
  int64_t group = model_.getShardGroupSize().value_or(1);
  if (global % micro != 0 || (global / micro) % group != 0)
    train_.emitWarning("no world size can run this plan: W must divide "
                       "global_batch / micro_batch = ")
        << global << " / " << micro
        << (group > 1 ? " and be a multiple of the shard group of " : "")
        << (group > 1 ? std::to_string(group) : std::string()) << " ranks";

  int32_t step = b_.addBlock(fb::BlockKind::Step);
  b_.setStepBlock(step);
  if (failed(emitRegion(train_.getStep(), {step, false})))
    return failure();
  int32_t hooks = b_.addBlock(fb::BlockKind::Hooks);
  b_.setHooksBlock(hooks);
  if (failed(emitRegion(train_.getHooks(), {hooks, false})))
    return failure();

  if (absl::Status status = b_.inferLiveness(); !status.ok())
    return train_.emitError("internal error: the plan's liveness: ")
           << status.ToString();
  std::vector<uint8_t> bytes = b_.finish();

  // The loader is the one judge of a plan: refuse to write what mdrun would
  // refuse, and check that every state load shares its state's bytes, as
  // md's memory analysis assumes.
  absl::StatusOr<plan::LoadedPlan> loaded = plan::LoadPlan(bytes);
  if (!loaded.ok())
    return train_.emitError("internal error: the emitted plan does not "
                            "verify: ")
           << loaded.status().message().data();
  const fb::Plan &fbPlan = loaded->plan();
  std::vector<int32_t> aliased =
      plan::AliasedStateLoads(fbPlan, plan::ProgramOrder::Of(fbPlan));
  for (auto [x, state] : loadedFrom_)
    if (aliased[x] != state)
      return train_.emitError("internal error: a state is written while a "
                              "load of it (buffer ")
             << x << ", '" << b_.plan().buffers[x]->name
             << "') is live; the load would be a copy";
  return bytes;
}

//===----------------------------------------------------------------------===//
// Tables
//===----------------------------------------------------------------------===//

LogicalResult Emitter::emitHeader() {
  fb::HeaderT &h = b_.header();
  h.model = model_.getSymName().str();
  h.world_size = model_.getWorldSize().value_or(0);
  h.shard_group_size = model_.getShardGroupSize().value_or(0);
  h.source_file = options_.sourceFile;
  h.source_hash = plan::SourceHash(options_.sourceText);
  h.compiler_version = options_.compilerVersion;
  PlanAttr planAttr = model_.getPlanAttr();
  if (!planAttr)
    return model_.emitError("no parallelism plan was applied: compile with "
                            "--plan NAME");
  h.plan_name = planAttr.getName().str();
  h.preset = planAttr.getPreset().str();
  fb::PlanOptionsT &o = *h.options;
  o.shard = static_cast<fb::ShardKind>(planAttr.getShard());
  o.wrap = static_cast<fb::WrapKind>(planAttr.getWrap());
  for (StringAttr name : planAttr.getWrapBlocks())
    o.wrap_blocks.push_back(name.str());
  o.wrap_min_params = planAttr.getWrapMinParams().value_or(0);
  o.param_dtype = getDType(planAttr.getParamDtype());
  o.reduce_dtype = getDType(planAttr.getReduceDtype());
  o.buffer_dtype = getDType(planAttr.getBufferDtype());
  o.master_dtype = getDType(planAttr.getMasterDtype());
  o.bucket_cap = planAttr.getBucketCap();
  o.prefetch_forward = planAttr.getPrefetchForward();
  o.prefetch_backward =
      static_cast<fb::PrefetchBackward>(planAttr.getPrefetchBackward());
  o.reshard_after_forward = planAttr.getReshardAfterForward();
  for (StringAttr name : planAttr.getCheckpointActivations())
    o.checkpoint_activations.push_back(name.str());
  return success();
}

LogicalResult Emitter::emitParamsAndState() {
  // Units: their flat size from their states (padding included), else from
  // their parameters; their name is their parameters' common prefix.
  llvm::SmallVector<std::string> names;
  llvm::SmallVector<bool> named;
  auto unitSlot = [&](int64_t unit) {
    if (static_cast<size_t>(unit) >= units_.size()) {
      units_.resize(unit + 1);
      names.resize(unit + 1);
      named.resize(unit + 1, false);
    }
    return unit;
  };
  for (ParamOp param : model_.getBody().getOps<ParamOp>()) {
    params_[param.getSymName()] = param;
    std::optional<int64_t> unit = param.getUnit();
    if (!unit)
      return param.emitError("parameter '")
             << param.getSymName() << "' is in no unit (run md-apply-plan first)";
    UnitInfo &info = units_[unitSlot(*unit)];
    auto type = cast<RankedTensorType>(param.getType());
    info.numel = std::max<int64_t>(info.numel, param.getOffset().value_or(0) +
                                                   type.getNumElements());
    info.elementType = type.getElementType();
    std::string name = param.getSymName().str();
    if (!named[*unit]) {
      names[*unit] = name.substr(0, name.rfind('.'));
      named[*unit] = true;
    } else {
      names[*unit] = commonPrefix(names[*unit] + ".x", name);
    }
  }
  for (StateOp state : model_.getBody().getOps<StateOp>()) {
    if (!state.getUnit())
      continue;
    UnitInfo &info = units_[unitSlot(*state.getUnit())];
    info.numel = std::max(info.numel, state.getFlatNumel());
  }
  for (size_t u = 0; u < units_.size(); ++u)
    b_.addUnit(names[u], units_[u].numel);

  // Each trainable parameter's optimizer group (0, the default, is not
  // written, so a plan without groups is unchanged).
  ParamGroupAssignment groups =
      assignParamGroups(model_, train_.getOptimizer());
  for (ParamOp param : model_.getBody().getOps<ParamOp>()) {
    auto type = cast<RankedTensorType>(param.getType());
    InitAttr init = param.getInit();
    std::vector<double> args;
    for (const llvm::APFloat &arg : init.getArgs())
      args.push_back(arg.convertToDouble());
    fb::DType dtype = getDType(type);
    if (dtype == fb::DType::Invalid)
      return param.emitError("unsupported parameter type ") << type;
    int32_t index = b_.addParam(
        param.getSymName().str(),
        std::vector<int64_t>(type.getShape().begin(), type.getShape().end()),
        dtype, static_cast<int32_t>(*param.getUnit()),
        param.getOffset().value_or(0),
        static_cast<fb::InitKind>(init.getKind()), std::move(args),
        /*trainable=*/!param.getFrozen());
    b_.plan().params[index]->group =
        static_cast<int32_t>(groups.groupOf.lookup(param));
  }

  for (StateOp state : model_.getBody().getOps<StateOp>()) {
    auto type = cast<RankedTensorType>(state.getType());
    fb::DType dtype = getDType(type);
    fb::BufferT buffer =
        state.getShard()
            ? PlanBuilder::shard(state.getSymName().str(), dtype,
                                 state.getFlatNumel(),
                                 static_cast<fb::Group>(*state.getGroup()))
            : PlanBuilder::full(state.getSymName().str(), dtype,
                                std::vector<int64_t>(type.getShape().begin(),
                                                     type.getShape().end()));
    fb::StateRole role = getPlanRole(state.getRole());
    int32_t unit =
        state.getUnit() ? static_cast<int32_t>(*state.getUnit()) : -1;
    buffer = PlanBuilder::state(std::move(buffer), role, unit,
                                role == fb::StateRole::GradAcc);
    switch (state.getRole()) {
    case StateRole::master:
    case StateRole::params:
    case StateRole::frozen:
      buffer.category = fb::MemoryCategory::Params;
      break;
    case StateRole::grad_acc:
      buffer.category = fb::MemoryCategory::GradAcc;
      break;
    default:
      buffer.category = fb::MemoryCategory::Optimizer;
      break;
    }
    int32_t index = b_.addBuffer(std::move(buffer));
    states_[state.getSymName()] = index;
    // The buffer a unit's parameters are read from: its master weights, or
    // a frozen unit's only state.
    if ((state.getRole() == StateRole::master ||
         state.getRole() == StateRole::frozen) &&
        unit >= 0) {
      if (state.getRole() == StateRole::frozen)
        b_.plan().schema_version =
            std::max(b_.plan().schema_version, plan::kFrozenSchemaVersion);
      UnitInfo &info = units_[unit];
      info.master = index;
      info.sharded = state.getShard().has_value();
      info.group = state.getGroup().value_or(Group::world);
      info.elementType = type.getElementType();
    }
  }
  return success();
}

int32_t Emitter::dataset(DataAttr data) {
  auto it = datasets_.find(data);
  if (it != datasets_.end())
    return it->second;
  int32_t index = b_.addDataset(static_cast<fb::DataKind>(data.getKind()),
                                data.getPath().str(), data.getSeed());
  datasets_[data] = index;
  return index;
}

LogicalResult Emitter::emitRecipe() {
  fb::RecipeT &r = b_.recipe();
  r.global_batch = train_.getGlobalBatch();
  r.micro_batch = train_.getMicroBatch();
  r.seed = train_.getSeed();
  if (std::optional<llvm::APFloat> clip = train_.getClipGradNorm())
    r.clip_grad_norm = clip->convertToDouble();
  r.sync_batch_norm = train_.getSyncBatchNorm();
  r.train_data = dataset(train_.getData());
  r.sampler->seed = train_.getSeed();
  r.sampler->reshuffle_each_epoch = true;
  r.sampler->tail = fb::TailPolicy::Drop;
  fb::OptimizerT &o = *r.optimizer;
  Attribute optimizer = train_.getOptimizer();
  if (auto adamw = dyn_cast<AdamWAttr>(optimizer)) {
    o.kind = fb::OptimizerKind::AdamW;
    o.lr = adamw.getLr().convertToDouble();
    o.beta1 = adamw.getBeta1().convertToDouble();
    o.beta2 = adamw.getBeta2().convertToDouble();
    o.eps = adamw.getEps().convertToDouble();
    o.weight_decay = adamw.getWeightDecay().convertToDouble();
  } else if (auto sgd = dyn_cast<SGDAttr>(optimizer)) {
    o.kind = fb::OptimizerKind::Sgd;
    o.lr = sgd.getLr().convertToDouble();
    o.momentum = sgd.getMomentum().convertToDouble();
    o.dampening = sgd.getDampening().convertToDouble();
    o.weight_decay = sgd.getWeightDecay().convertToDouble();
    o.nesterov = sgd.getNesterov();
  } else {
    return train_.emitError("unsupported optimizer ") << optimizer;
  }
  if (getOptimizerGroups(optimizer)) {
    // groups[0] is the default group: the optimizer's own values.
    for (const ParamGroupInfo &info :
         assignParamGroups(model_, optimizer).groups) {
      auto group = std::make_unique<fb::OptimizerGroupT>();
      group->name = info.attr ? info.attr.describe() : "default";
      group->weight_decay = info.weightDecay;
      group->lr_scale = info.lrScale;
      o.groups.push_back(std::move(group));
    }
    b_.plan().schema_version =
        std::max(b_.plan().schema_version, plan::kParamGroupsSchemaVersion);
  }
  ScheduleAttr schedule = train_.getSchedule();
  fb::ScheduleT &s = *r.schedule;
  s.kind = static_cast<fb::ScheduleKind>(schedule.getKind());
  s.warmup = schedule.getWarmup();
  s.steps = schedule.getSteps();
  s.min_lr = schedule.getMinLr().convertToDouble();
  return success();
}

//===----------------------------------------------------------------------===//
// Buffers, events, locations
//===----------------------------------------------------------------------===//

FailureOr<int32_t> Emitter::newBuffer(Value value, llvm::StringRef name,
                                      Operation *at) {
  Type type = value.getType();
  fb::DType dtype = getDType(type);
  if (dtype == fb::DType::Invalid)
    return at->emitError("cannot emit a value of type ")
           << type << " into a plan";
  fb::BufferT buffer;
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor) {
    buffer = PlanBuilder::full(name.str(), dtype, {});
    buffer.category = fb::MemoryCategory::Host;
  } else if (tensor.hasStaticShape()) {
    buffer = PlanBuilder::full(name.str(), dtype,
                               std::vector<int64_t>(tensor.getShape().begin(),
                                                    tensor.getShape().end()));
  } else {
    std::optional<ShardInfo> shard = getShardInfo(value);
    if (!shard || tensor.getRank() != 1)
      return at->emitError("cannot size result of type ")
             << type << ": a dynamic size must be the shard of a flat buffer";
    buffer = PlanBuilder::shard(name.str(), dtype, shard->numel,
                                static_cast<fb::Group>(shard->group));
  }
  if (tensor) {
    auto it = categories_.find(value);
    buffer.category =
        it != categories_.end() ? it->second : fb::MemoryCategory::Activations;
  }
  int32_t index = b_.addBuffer(std::move(buffer));
  buffers_[value] = index;
  return index;
}

FailureOr<SmallVector<int32_t>> Emitter::results(Operation &op) {
  SmallVector<int32_t> out;
  std::string base = op.getName().stripDialect().str();
  for (auto [i, result] : llvm::enumerate(op.getResults())) {
    std::string name =
        op.getNumResults() > 1 ? base + "#" + std::to_string(i) : base;
    FailureOr<int32_t> x = newBuffer(result, name, &op);
    if (failed(x))
      return failure();
    out.push_back(*x);
  }
  return out;
}

FailureOr<int32_t> Emitter::use(Value value, int32_t block, Operation *user) {
  auto it = buffers_.find(value);
  if (it != buffers_.end())
    return it->second;
  if (auto constant = value.getDefiningOp<arith::ConstantOp>()) {
    auto key = std::make_pair(value, block);
    auto cached = constants_.find(key);
    if (cached != constants_.end())
      return cached->second;
    fb::DType dtype = getDType(value.getType());
    if (dtype == fb::DType::Invalid)
      return user->emitError("cannot emit a constant of type ")
             << value.getType();
    fb::BufferT buffer = PlanBuilder::full("constant", dtype, {});
    buffer.category = fb::MemoryCategory::Host;
    int32_t x = b_.addBuffer(std::move(buffer));
    fb::InstructionT &inst = b_.add(block, fb::Opcode::Constant, {}, {x});
    inst.loc = location(constant.getLoc());
    Attribute attr = constant.getValue();
    plan::attrs::Constant a;
    if (auto i = dyn_cast<IntegerAttr>(attr))
      // An i1 is a bool, 0 or 1 in a plan; sign-extending `true` would give
      // -1.
      a.intValues = {i.getType().isInteger(1)
                         ? static_cast<int64_t>(i.getValue().getZExtValue())
                         : i.getValue().getSExtValue()};
    else if (auto f = dyn_cast<FloatAttr>(attr))
      a.floatValues = {f.getValueAsDouble()};
    else
      return user->emitError("cannot emit the constant ")
             << attr << ": only scalars";
    if (failed(encode(user, a, inst)))
      return failure();
    constants_[key] = x;
    return x;
  }
  if (value.getDefiningOp<RankOp>() || value.getDefiningOp<LocalRankOp>()) {
    // Each rank's executor resolves its own number where it is read.
    auto key = std::make_pair(value, block);
    auto cached = constants_.find(key);
    if (cached != constants_.end())
      return cached->second;
    bool local = value.getDefiningOp<LocalRankOp>() != nullptr;
    fb::BufferT buffer =
        PlanBuilder::full(local ? "local_rank" : "rank", fb::DType::I64, {});
    buffer.category = fb::MemoryCategory::Host;
    int32_t x = b_.addBuffer(std::move(buffer));
    fb::InstructionT &inst = b_.add(
        block, local ? fb::Opcode::LocalRank : fb::Opcode::Rank, {}, {x});
    inst.loc = location(value.getLoc());
    constants_[key] = x;
    return x;
  }
  return user->emitError("internal error: an operand has no buffer");
}

FailureOr<SmallVector<int32_t>> Emitter::uses(ValueRange values, int32_t block,
                                              Operation *user) {
  SmallVector<int32_t> out;
  for (Value value : values) {
    FailureOr<int32_t> x = use(value, block, user);
    if (failed(x))
      return failure();
    out.push_back(*x);
  }
  return out;
}

int32_t Emitter::event(int64_t id) {
  auto it = events_.find(id);
  if (it != events_.end())
    return it->second;
  int32_t index = b_.addEvent("e" + std::to_string(id));
  events_[id] = index;
  return index;
}

int32_t Emitter::location(Location loc) {
  std::optional<FileLineColLoc> file = getFileLoc(loc);
  if (!file)
    return -1;
  auto key = std::make_tuple(file->getFilename().str(), file->getLine(),
                             file->getColumn());
  auto it = locations_.find(key);
  if (it != locations_.end())
    return it->second;
  int32_t index =
      b_.addLocation(std::get<0>(key), static_cast<int32_t>(file->getLine()),
                     static_cast<int32_t>(file->getColumn()));
  locations_[key] = index;
  return index;
}

FailureOr<int32_t> Emitter::state(llvm::StringRef symbol, Operation *user) {
  auto it = states_.find(symbol);
  if (it == states_.end())
    return user->emitError("no md.state @") << symbol;
  return it->second;
}

fb::InstructionT &Emitter::add(Context ctx, Operation *op, fb::Opcode opcode,
                               std::vector<int32_t> inputs,
                               std::vector<int32_t> outputs) {
  fb::InstructionT &inst =
      b_.add(ctx.block, opcode, std::move(inputs), std::move(outputs));
  if (std::optional<int64_t> stream = mark::stream(op))
    inst.stream = static_cast<uint8_t>(*stream);
  if (std::optional<int64_t> record = mark::record(op))
    inst.record = event(*record);
  if (std::optional<ArrayRef<int64_t>> waits = mark::waits(op))
    for (int64_t id : *waits)
      inst.waits.push_back(event(id));
  inst.loc = location(op->getLoc());
  return inst;
}

//===----------------------------------------------------------------------===//
// Regions and ops
//===----------------------------------------------------------------------===//

LogicalResult Emitter::emitRegion(Region &region, Context ctx) {
  for (Block &block : region)
    for (Operation &op : block)
      if (failed(emitOp(op, ctx)))
        return failure();
  return success();
}

LogicalResult Emitter::emitOp(Operation &op, Context ctx) {
  // Materialised where they are read; the rank test of a rank-0 `if` is
  // folded into the io it gates.
  if (isa<arith::ConstantOp, RankOp, LocalRankOp>(op))
    return success();
  if (isa<arith::CmpIOp>(op) && isRankZeroTest(op.getResult(0)) &&
      llvm::all_of(op.getUsers(), [](Operation *u) {
        auto ifOp = dyn_cast<IfOp>(u);
        return ifOp && isRankZeroIo(ifOp);
      }))
    return success();
  if (ctx.rank0Only) {
    OpAccess access = getAccess(&op);
    if (access.communicates || access.holdsCommunication || isa<ExitOp>(op))
      return op.emitError("'")
             << op.getName()
             << "' cannot run on rank 0 alone: every rank must run it "
                "(collectives, evaluations, saves and exits are uniform)";
  }
  bool handled = false;
  for (auto emit :
       {&Emitter::emitControl, &Emitter::emitStepOp, &Emitter::emitHostOp}) {
    if (failed((this->*emit)(op, ctx, handled)))
      return failure();
    if (handled)
      return success();
  }
  return emitComputeOp(op, ctx);
}

} // namespace md::emitter

FailureOr<std::vector<uint8_t>> md::emitPlan(ModelOp model,
                                             const EmitPlanOptions &options) {
  return emitter::Emitter(model, options).run();
}
