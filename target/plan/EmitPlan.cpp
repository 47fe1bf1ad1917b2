//===- EmitPlan.cpp - the step program of a model as a plan.fb -----------===//
//
// See EmitPlan.h. The emitter walks the step and hooks regions of md.train
// in order and appends one instruction per op to the block it is in;
// liveness is left to PlanBuilder::inferLiveness, which applies the rule
// md's memory analysis uses (docs/memory.md, "Liveness").
//
//===----------------------------------------------------------------------===//

#include "target/plan/EmitPlan.h"

#include "passes/analysis/MemoryAnalysis.h"
#include "passes/analysis/StepProgram.h"
#include "runtime/plan/Aliasing.h"
#include "runtime/plan/Loader.h"
#include "runtime/plan/OpAttrs.h"
#include "runtime/plan/PlanBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>
#include <tuple>

using namespace mlir;
using namespace md;
namespace fb = md::fb;
using md::plan::PlanBuilder;

namespace {

/// The plan's element type of an MLIR type, or Invalid.
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
  for (size_t i = 0; i + 1 < x.size() && i + 1 < y.size() && x[i] == y[i];
       ++i)
    prefix += (prefix.empty() ? "" : ".") + x[i].str();
  return prefix;
}

/// Whether `cond` is `md.rank == 0` (either way round).
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

class Emitter {
public:
  Emitter(ModelOp model, const EmitPlanOptions &options)
      : model_(model), options_(options) {}

  FailureOr<std::vector<uint8_t>> run();

private:
  /// Where the instructions of a region go.
  struct Context {
    int32_t block = -1;
    /// io runs on rank 0 alone (`if rank == 0 { ... }`, every rank0_only).
    bool rank0Only = false;
  };

  LogicalResult emitHeader();
  LogicalResult emitParamsAndState();
  LogicalResult emitRecipe();
  LogicalResult emitRegion(Region &region, Context ctx);
  LogicalResult emitOp(Operation &op, Context ctx);
  LogicalResult emitControl(Operation &op, Context ctx, bool &handled);
  LogicalResult emitStepOp(Operation &op, Context ctx, bool &handled);
  LogicalResult emitHostOp(Operation &op, Context ctx, bool &handled);
  LogicalResult emitComputeOp(Operation &op, Context ctx);
  LogicalResult emitEvaluate(EvaluateOp op, Context ctx);
  LogicalResult emitForwardBody(Block &body, ArrayRef<int32_t> args,
                                int32_t block, SmallVectorImpl<int32_t> &out,
                                Operation *at);

  /// A new transient buffer for `value`.
  FailureOr<int32_t> newBuffer(Value value, llvm::StringRef name,
                               Operation *at);
  /// The buffers of `op`'s results, new.
  FailureOr<SmallVector<int32_t>> results(Operation &op);
  /// The buffer of `value` where `user` (in `block`) reads it.
  FailureOr<int32_t> use(Value value, int32_t block, Operation *user);
  FailureOr<SmallVector<int32_t>> uses(ValueRange values, int32_t block,
                                       Operation *user);
  /// Appends an instruction for `op` with its stream, events and location.
  fb::InstructionT &add(Context ctx, Operation *op, fb::Opcode opcode,
                        std::vector<int32_t> inputs,
                        std::vector<int32_t> outputs);
  int32_t event(int64_t id);
  int32_t location(Location loc);
  int32_t dataset(DataAttr data);
  FailureOr<int32_t> state(llvm::StringRef symbol, Operation *user);

  ModelOp model_;
  TrainOp train_;
  const EmitPlanOptions &options_;
  PlanBuilder b_;

  llvm::DenseMap<Value, int32_t> buffers_;
  /// Constants are materialised in each block that reads them.
  llvm::DenseMap<std::pair<Value, int32_t>, int32_t> constants_;
  llvm::StringMap<int32_t> states_;
  llvm::DenseMap<int64_t, int32_t> events_;
  std::map<std::tuple<std::string, unsigned, unsigned>, int32_t> locations_;
  llvm::DenseMap<Attribute, int32_t> datasets_;
  /// The state a buffer was loaded from (md.state_load), for in-place
  /// updates.
  llvm::DenseMap<int32_t, int32_t> loadedFrom_;
  /// md's memory categories of the step's values (computed at W = 1, where
  /// the micro-step body runs whenever it can run at all).
  llvm::DenseMap<Value, MemoryCategory> categories_;
  /// Per unit: its flat parameter state for evaluation, and its params.
  struct UnitInfo {
    int32_t master = -1;
    bool sharded = false;
    Group group = Group::world;
    int64_t numel = 0;
    Type elementType;
  };
  std::vector<UnitInfo> units_;
  llvm::StringMap<ParamOp> params_;
};

FailureOr<std::vector<uint8_t>> Emitter::run() {
  for (auto train : model_.getBody().getOps<TrainOp>())
    train_ = train;
  if (!train_)
    return model_.emitError("model '")
           << model_.getSymName()
           << "' has no train block: there is nothing to run, so no plan";
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
        << (group > 1 ? std::to_string(group) : std::string())
        << " ranks";

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
    if (!unit || param.getFrozen())
      return param.emitError("parameter '")
             << param.getSymName()
             << "' is frozen or in no unit: plans do not carry frozen "
                "parameters yet";
    UnitInfo &info = units_[unitSlot(*unit)];
    auto type = cast<RankedTensorType>(param.getType());
    info.numel = std::max<int64_t>(
        info.numel, param.getOffset().value_or(0) + type.getNumElements());
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

  for (ParamOp param : model_.getBody().getOps<ParamOp>()) {
    auto type = cast<RankedTensorType>(param.getType());
    InitAttr init = param.getInit();
    std::vector<double> args;
    for (const llvm::APFloat &arg : init.getArgs())
      args.push_back(arg.convertToDouble());
    fb::DType dtype = getDType(type);
    if (dtype == fb::DType::Invalid)
      return param.emitError("unsupported parameter type ") << type;
    b_.addParam(param.getSymName().str(),
                std::vector<int64_t>(type.getShape().begin(),
                                     type.getShape().end()),
                dtype, static_cast<int32_t>(*param.getUnit()),
                param.getOffset().value_or(0),
                static_cast<fb::InitKind>(init.getKind()), std::move(args));
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
    int32_t unit = state.getUnit() ? static_cast<int32_t>(*state.getUnit()) : -1;
    buffer = PlanBuilder::state(std::move(buffer), role, unit,
                                role == fb::StateRole::GradAcc);
    switch (state.getRole()) {
    case StateRole::master:
    case StateRole::params:
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
    if (state.getRole() == StateRole::master && unit >= 0) {
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
    if (auto i = dyn_cast<IntegerAttr>(attr))
      inst.ints = {i.getValue().getSExtValue()};
    else if (auto f = dyn_cast<FloatAttr>(attr))
      inst.floats = {f.getValueAsDouble()};
    else
      return user->emitError("cannot emit the constant ")
             << attr << ": only scalars";
    constants_[key] = x;
    return x;
  }
  if (value.getDefiningOp<RankOp>() || value.getDefiningOp<LocalRankOp>())
    return user->emitError(
        "a plan has no per-rank values: md.rank may only gate io, as in "
        "`if rank == 0 { print(...) }`");
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
  if (auto stream = op->getAttrOfType<IntegerAttr>("md.stream"))
    inst.stream = static_cast<uint8_t>(stream.getInt());
  if (auto record = op->getAttrOfType<IntegerAttr>("md.record"))
    inst.record = event(record.getInt());
  if (auto waits = op->getAttrOfType<DenseI64ArrayAttr>("md.wait"))
    for (int64_t id : waits.asArrayRef())
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
      llvm::all_of(op.getUsers(), [](Operation *u) { return isa<IfOp>(u); }))
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
  for (auto emit : {&Emitter::emitControl, &Emitter::emitStepOp,
                    &Emitter::emitHostOp}) {
    if (failed((this->*emit)(op, ctx, handled)))
      return failure();
    if (handled)
      return success();
  }
  return emitComputeOp(op, ctx);
}

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
    inst.ints = {every.getPeriod(), static_cast<int64_t>(every.getUnit())};
    inst.blocks = {body};
    return emitRegion(every.getBody(),
                      {body, ctx.rank0Only || every.getRank0Only()});
  }
  if (auto ifOp = dyn_cast<IfOp>(op)) {
    if (isRankZeroTest(ifOp.getCondition())) {
      if (ifOp.getNumResults() != 0 || !ifOp.getElseRegion().empty())
        return op.emitError("`if rank == 0` may only gate io, with no "
                            "else and no results: a plan has no "
                            "rank-dependent control flow");
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
    fb::InstructionT &inst = add(ctx, &op, fb::Opcode::If, {*cond},
                                 std::vector<int32_t>(out->begin(), out->end()));
    std::vector<int32_t> blocks;
    for (auto [region, kind] :
         {std::pair<Region *, fb::BlockKind>{&ifOp.getThenRegion(),
                                             fb::BlockKind::Then},
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
    FailureOr<int32_t> iv =
        newBuffer(bodyBlock.getArgument(0), "for.iv", &op);
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
  if (auto store = dyn_cast<StateStoreOp>(op)) {
    FailureOr<int32_t> s = state(store.getState(), &op);
    FailureOr<int32_t> value = use(store.getValue(), block, &op);
    if (failed(s) || failed(value))
      return failure();
    add(ctx, &op, fb::Opcode::StateStore, {*value}, {*s});
    return success();
  }
  if (auto batch = dyn_cast<BatchOp>(op)) {
    FailureOr<SmallVector<int32_t>> out = results(op);
    if (failed(out))
      return failure();
    add(ctx, &op, fb::Opcode::Batch, {},
        std::vector<int32_t>(out->begin(), out->end()))
        .ints = {dataset(train_.getData())};
    return success();
  }
  if (auto acc = dyn_cast<GradAccumulateOp>(op)) {
    FailureOr<int32_t> s = state(acc.getAcc(), &op);
    FailureOr<int32_t> g = use(acc.getGrad(), block, &op);
    if (failed(s) || failed(g))
      return failure();
    add(ctx, &op, fb::Opcode::GradAccumulate, {*g}, {*s});
    return success();
  }
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
        (*inst)->ints = {static_cast<int64_t>(save.getFormat())};
        if (save.getPath())
          (*inst)->strings = {save.getPath()->str()};
        return success();
      })
      .Case([&](ExitOp exit) -> LogicalResult {
        FailureOr<fb::InstructionT *> inst = simple(fb::Opcode::Exit);
        if (failed(inst))
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
      .Case<arith::CmpIOp, arith::CmpFOp>([&](Operation *cmp) -> LogicalResult {
        std::optional<fb::CompareKind> kind;
        if (auto i = dyn_cast<arith::CmpIOp>(cmp)) {
          switch (i.getPredicate()) {
          case arith::CmpIPredicate::eq: kind = fb::CompareKind::Eq; break;
          case arith::CmpIPredicate::ne: kind = fb::CompareKind::Ne; break;
          case arith::CmpIPredicate::slt: kind = fb::CompareKind::Lt; break;
          case arith::CmpIPredicate::sle: kind = fb::CompareKind::Le; break;
          case arith::CmpIPredicate::sgt: kind = fb::CompareKind::Gt; break;
          case arith::CmpIPredicate::sge: kind = fb::CompareKind::Ge; break;
          default: break;
          }
        } else {
          switch (cast<arith::CmpFOp>(cmp).getPredicate()) {
          case arith::CmpFPredicate::OEQ: kind = fb::CompareKind::Eq; break;
          case arith::CmpFPredicate::UNE: kind = fb::CompareKind::Ne; break;
          case arith::CmpFPredicate::OLT: kind = fb::CompareKind::Lt; break;
          case arith::CmpFPredicate::OLE: kind = fb::CompareKind::Le; break;
          case arith::CmpFPredicate::OGT: kind = fb::CompareKind::Gt; break;
          case arith::CmpFPredicate::OGE: kind = fb::CompareKind::Ge; break;
          default: break;
          }
        }
        if (!kind)
          return op.emitError("unsupported comparison predicate in a plan");
        FailureOr<fb::InstructionT *> inst = simple(fb::Opcode::ScalarCompare);
        if (failed(inst))
          return failure();
        (*inst)->ints = {static_cast<int64_t>(*kind)};
        return success();
      })
      .Case<arith::AddIOp, arith::AddFOp, arith::SubIOp, arith::SubFOp,
            arith::MulIOp, arith::MulFOp, arith::DivSIOp, arith::DivFOp,
            arith::RemSIOp, arith::RemFOp, arith::NegFOp, arith::AndIOp,
            arith::OrIOp, arith::XOrIOp, arith::MinSIOp, arith::MaxSIOp,
            arith::MinimumFOp, arith::MaximumFOp>(
          [&](Operation *arith) -> LogicalResult {
            fb::ArithKind kind =
                llvm::TypeSwitch<Operation *, fb::ArithKind>(arith)
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
            FailureOr<fb::InstructionT *> inst = simple(fb::Opcode::ScalarArith);
            if (failed(inst))
              return failure();
            (*inst)->ints = {static_cast<int64_t>(kind)};
            return success();
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

LogicalResult Emitter::emitComputeOp(Operation &op, Context ctx) {
  int32_t block = ctx.block;
  if (op.getDialect() != model_->getDialect())
    return op.emitError("'") << op.getName() << "' cannot be emitted into a plan";
  FailureOr<SmallVector<int32_t>> in = uses(op.getOperands(), block, &op);
  if (failed(in))
    return failure();
  std::vector<int32_t> inputs(in->begin(), in->end());

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
      updated = std::array<Value, 3>{adamw.getParam(), adamw.getM(),
                                     adamw.getV()}[i];
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

  // Each case fills the attribute struct of its opcode by slot name
  // (runtime/plan/OpAttrs.h, from Opcodes.def); the struct's type gives the
  // opcode, and Encode writes the slots where plan.fbs puts them.
  auto emit = [&](const auto &attrs) -> LogicalResult {
    using Attrs = std::decay_t<decltype(attrs)>;
    fb::InstructionT &inst = add(ctx, &op, Attrs::kOpcode, inputs, outputs);
    if (absl::Status s = plan::Encode(attrs, inst); !s.ok())
      return op.emitError(std::string(s.message()));
    return success();
  };
  namespace A = plan::attrs;
  auto i64 = [](auto v) { return static_cast<int64_t>(v); };
  auto eps = [](auto n) { return n.getEps().convertToDouble(); };
  auto bucketOf = [](std::optional<uint64_t> bucket) -> int64_t {
    return bucket ? static_cast<int64_t>(*bucket) : -1;
  };
  auto group = [](auto c) { return static_cast<fb::Group>(c.getGroup()); };
  auto reduction = [](auto c) {
    return static_cast<fb::Reduction>(c.getReductionKind());
  };
  auto ignore = [](std::optional<uint64_t> index) -> std::optional<int64_t> {
    if (!index)
      return std::nullopt;
    return static_cast<int64_t>(*index);
  };
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
    a.ignoreIndex = ignore(c.getIgnoreIndex());
    return emit(a);
  };
  // Every collective names its group and bucket.
  auto onGroup = [&](auto a, auto c) {
    a.group = group(c);
    a.bucket = bucketOf(c.getBucket());
    return a;
  };

  return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
      .Case([&](MatmulOp m) { return withTransposes(A::Matmul(), m); })
      .Case([&](MatmulGradOp m) { return withTransposes(A::MatmulGrad(), m); })
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
      .Case([&](AccumulateOp) { return emit(A::Accumulate()); })
      .Case([&](AdamWUpdateOp u) {
        A::AdamWUpdate a;
        a.beta1 = u.getBeta1().convertToDouble();
        a.beta2 = u.getBeta2().convertToDouble();
        a.eps = eps(u);
        a.weightDecay = u.getWeightDecay().convertToDouble();
        return emit(a);
      })
      .Case([&](SGDUpdateOp u) {
        A::SgdUpdate a;
        a.nesterov = u.getNesterov();
        a.momentum = u.getMomentum().convertToDouble();
        a.dampening = u.getDampening().convertToDouble();
        a.weightDecay = u.getWeightDecay().convertToDouble();
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
      .Default([&](Operation *) {
        return op.emitError("'") << op.getName()
                                 << "' cannot be emitted into a plan";
      });
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
  batch.ints = {data};
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
  inst.ints = {data, static_cast<int64_t>(op.getBatches().value_or(0))};
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
    fb::InstructionT *inst;
    if (info.sharded) {
      int32_t shard = transient(PlanBuilder::shard(
          "eval.master.shard", master.dtype, master.numel, master.group));
      b_.add(block, fb::Opcode::StateLoad, {info.master}, {shard});
      loadedFrom_[shard] = info.master;
      x = transient(
          PlanBuilder::full("eval.params", master.dtype, {master.numel}));
      inst = &b_.add(block, fb::Opcode::AllGather, {shard}, {x});
      inst->ints = {static_cast<int64_t>(info.group), -1, 0};
    } else {
      x = transient(PlanBuilder::full("eval.params", master.dtype,
                                      master.shape));
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
        fb::BufferT cast = PlanBuilder::full(
            "eval.params.cast", dtype, {b_.plan().buffers[from]->numel});
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
      b_.add(block, fb::Opcode::View, {from}, {v}).ints = {
          param.getOffset().value_or(0)};
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

} // namespace

FailureOr<std::vector<uint8_t>> md::emitPlan(ModelOp model,
                                             const EmitPlanOptions &options) {
  return Emitter(model, options).run();
}
