//===- Executor.cpp - runs a plan on one rank -----------------------------===//
//
// The executor's core: setting up a rank (the comm's groups, the arenas,
// the initial state), the memory helpers, running blocks and the step, and
// Impl::execute, a switch over the opcode that routes each family (kernels,
// state and the step, values of the run, io, control) to a helper reading
// the layouts plan.fbs gives next to each opcode. Collectives, checkpoints,
// the host scalars and the data feeds have files of their own
// (ExecutorImpl.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Executor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/exec/ExecutorImpl.h"
#include "runtime/exec/KernelDispatch.h"
#include "runtime/core/Random.h"
#include "runtime/core/RankPath.h"
#include "runtime/core/Status.h"
#include "runtime/exec/StreamOrder.h"
#include "runtime/plan/Schema.h"

namespace md::runtime {

RunObserver::~RunObserver() = default;

using namespace plan_access;

namespace {

absl::Status annotate(const absl::Status &s, const std::string &where) {
  return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
}

/// What execute answers for an opcode no helper implements.
absl::Status unimplemented(const fb::Instruction &inst) {
  return absl::UnimplementedError(
      absl::StrFormat("opcode %s is not implemented by the executor",
                      plan::OpcodeName(inst.opcode())));
}
} // namespace

Executor::Impl::Impl(const plan::LoadedPlan &plan, Backend &backend, Comm &comm,
                     const ExecutorOptions &options)
    : loaded_(plan), plan_(loaded_.plan()), backend_(backend), comm_(comm),
      options_(options), hostScalars_(options.verifyHostScalars),
      start_(Clock::now()) {}

std::string Executor::Impl::where(int32_t block, uint32_t index) const {
  const fb::Instruction *inst =
      plan_.blocks()->Get(block)->instructions()->Get(index);
  std::string s =
      absl::StrFormat("%s at blocks[%d].instructions[%d]",
                      plan::OpcodeName(inst->opcode()), block, index);
  if (inst->loc() >= 0) {
    const fb::SourceLocation *loc = plan_.locations()->Get(inst->loc());
    absl::StrAppend(&s, " (", str(loc->file()), ":", loc->line(), ":",
                    loc->col(), ")");
  }
  return s;
}

//===----------------------------------------------------------------------===//
// Setup
//===----------------------------------------------------------------------===//

absl::Status Executor::Impl::init(int64_t worldSize) {
  MD_ASSIGN_OR_RETURN(world_, plan::BindWorldSize(loaded_, worldSize));
  MD_RETURN_IF_ERROR(checkComm());

  const fb::Recipe &recipe = *plan_.recipe();
  seed_ = static_cast<uint64_t>(options_.seed ? *options_.seed : recipe.seed());
  samplerSeed_ = static_cast<uint64_t>(
      options_.seed
          ? *options_.seed
          : (recipe.sampler() ? recipe.sampler()->seed() : recipe.seed()));
  const fb::Optimizer *opt = recipe.optimizer();
  const fb::Schedule *sched = recipe.schedule();
  schedule_.lr = opt ? opt->lr() : 0.0;
  if (sched) {
    switch (sched->kind()) {
    case fb::ScheduleKind::Constant:
      schedule_.kind = LrSchedule::Kind::Constant;
      break;
    case fb::ScheduleKind::Linear:
      schedule_.kind = LrSchedule::Kind::Linear;
      break;
    case fb::ScheduleKind::Cosine:
      schedule_.kind = LrSchedule::Kind::Cosine;
      break;
    }
    schedule_.warmup = sched->warmup();
    schedule_.steps = sched->steps();
    schedule_.minLr = sched->min_lr();
  }
  MD_ASSIGN_OR_RETURN(steps_, StepsToRun(plan_, options_.steps));

  MD_ASSIGN_OR_RETURN(layout_, LayOutArenas(loaded_, world_));
  MD_RETURN_IF_ERROR(findUpdateSegments());
  // On a backend whose streams run concurrently, only the plan's events
  // order them: a conflict they leave open would make the result depend
  // on timing.
  if (backend_.concurrentStreams()) {
    absl::Status order = CheckStreamOrder(loaded_, layout_);
    if (!order.ok())
      return absl::FailedPreconditionError(absl::StrCat(
          "the plan cannot run on the ", backend_.name(),
          " backend, whose streams run concurrently: ", order.message()));
  }
  MD_RETURN_IF_ERROR(allocate());
  for (uint32_t e = 0; e < count(plan_.events()); ++e) {
    MD_ASSIGN_OR_RETURN(Event ev, backend_.createEvent());
    events_.push_back(ev);
  }
  // A checkpoint to resume from: its seeds draw the data and the frozen
  // parameters, so its meta.json is read before the feeds open.
  std::optional<ShardedMeta> meta;
  MD_ASSIGN_OR_RETURN(std::string resume, resolveResume(&meta));
  if (meta) {
    if (options_.seed && *options_.seed != meta->seed)
      return absl::InvalidArgumentError(absl::StrFormat(
          "--seed %d: the checkpoint %s was trained with seed %d, which a "
          "resumed run keeps",
          *options_.seed, resume, meta->seed));
    seed_ = static_cast<uint64_t>(meta->seed);
    samplerSeed_ = static_cast<uint64_t>(meta->samplerSeed);
  }
  feeds_ = std::make_unique<DataFeeds>(plan_, world_.worldSize, options_.rank,
                                       samplerSeed_);
  MD_RETURN_IF_ERROR(feeds_->openTraining());
  MD_RETURN_IF_ERROR(initState());
  if (meta)
    MD_RETURN_IF_ERROR(loadSharded(resume, *meta));
  if (!options_.init.empty()) {
    // --init seeds a first start; with --resume auto (a requeued or
    // restarted job run with the same command line) a checkpoint, once
    // there is one, supersedes it. A named checkpoint and --init conflict.
    if (meta && options_.resume != "auto")
      return absl::InvalidArgumentError(absl::StrCat(
          "--init ", options_.init, " and --resume ", resume,
          ": a resumed run takes its weights from the checkpoint"));
    if (!meta)
      MD_RETURN_IF_ERROR(loadWeights(options_.init));
  }
  fillInfo();
  lastReport_ = Clock::now();
  return absl::OkStatus();
}

absl::Status Executor::Impl::checkComm() {
  if (comm_.worldSize() != world_.worldSize)
    return absl::FailedPreconditionError(absl::StrFormat(
        "the comm has %d ranks, but the plan runs at world size %d",
        comm_.worldSize(), world_.worldSize));
  if (comm_.rank() != options_.rank)
    return absl::FailedPreconditionError(
        absl::StrFormat("the comm is rank %d, the executor rank %d",
                        comm_.rank(), options_.rank));
  const GroupKind kinds[3] = {GroupKind::world, GroupKind::shard,
                              GroupKind::replicate};
  for (int k = 0; k < 3; ++k) {
    MD_ASSIGN_OR_RETURN(groups_[k], comm_.group(kinds[k]));
    int64_t want = world_.groupSize(static_cast<fb::Group>(k));
    if (groups_[k].size() != want)
      return absl::FailedPreconditionError(absl::StrFormat(
          "the comm's %s group has %d ranks, but the plan's has %d at world "
          "size %d (start the comm with the plan's shard group size)",
          groupKindName(kinds[k]), groups_[k].size(), want, world_.worldSize));
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::allocate() {
  MD_ASSIGN_OR_RETURN(persistent_, backend_.allocate(std::max<int64_t>(
                                       layout_.persistentBytes, 1)));
  MD_ASSIGN_OR_RETURN(transient_, backend_.allocate(std::max<int64_t>(
                                      layout_.transientBytes, 1)));
  if (layout_.scratchBytes > 0) {
    MD_ASSIGN_OR_RETURN(scratch_,
                        backend_.allocate(AlignUp(layout_.scratchBytes)));
  }
  MD_ASSIGN_OR_RETURN(control_, backend_.allocate(kAllocAlignment));
  const uint32_t n = count(plan_.buffers());
  ptrs_.assign(n, nullptr);
  refs_.resize(n);
  for (uint32_t x = 0; x < n; ++x) {
    const BufferLayout &l = layout_.buffers[x];
    char *base = nullptr;
    switch (l.placement) {
    case Placement::Persistent:
      base = static_cast<char *>(persistent_.data()) + l.offset;
      break;
    case Placement::Transient:
      base = static_cast<char *>(transient_.data()) + l.offset;
      break;
    default:
      break;
    }
    ptrs_[x] = base;
  }
  for (uint32_t x = 0; x < n; ++x) {
    const BufferLayout &l = layout_.buffers[x];
    if (l.placement == Placement::Alias && ptrs_[l.aliasOf] != nullptr)
      ptrs_[x] = ptrs_[l.aliasOf] + l.offset;
    const fb::Buffer &b = buf(static_cast<int32_t>(x));
    Shape shape;
    if (b.size_kind() == fb::SizeKind::Shard) {
      shape.push_back(l.elements);
    } else {
      for (uint32_t d = 0; d < count(b.shape()); ++d)
        shape.push_back(b.shape()->Get(d));
    }
    refs_[x] = TensorRef(ptrs_[x], kernelDType(b.dtype()).value_or(DType::f32),
                         std::move(shape));
  }
  return absl::OkStatus();
}

double Executor::Impl::initValue(uint32_t p, int64_t element) const {
  const fb::Param *param = plan_.params()->Get(p);
  const fb::Init *init = param->init();
  if (init == nullptr)
    return 0.0;
  auto arg = [&](uint32_t k) {
    return k < count(init->args()) ? init->args()->Get(k) : 0.0;
  };
  uint64_t key = HashKey(seed_, NameKey(str(param->name())));
  switch (init->kind()) {
  case fb::InitKind::Zeros:
    return 0.0;
  case fb::InitKind::Ones:
    return 1.0;
  case fb::InitKind::Constant:
    return arg(0);
  case fb::InitKind::Normal:
    return arg(0) +
           arg(1) * StandardNormal(key, static_cast<uint64_t>(element));
  case fb::InitKind::Uniform:
    return arg(0) + (arg(1) - arg(0)) *
                        UnitInterval(Draw(key, static_cast<uint64_t>(element)));
  }
  return 0.0;
}

std::vector<float> Executor::Impl::flatInit(int32_t unit, int64_t begin,
                                            int64_t n) const {
  std::vector<float> values(static_cast<size_t>(n), 0.0f);
  for (uint32_t p = 0; p < count(plan_.params()); ++p) {
    const fb::Param *param = plan_.params()->Get(p);
    // (A frozen parameter at offset -1 is in no buffer.)
    if (param->unit() != unit || param->offset() < 0)
      continue;
    int64_t numel = 1;
    for (uint32_t d = 0; d < count(param->shape()); ++d)
      numel *= param->shape()->Get(d);
    int64_t lo = std::max(begin, param->offset());
    int64_t hi = std::min(begin + n, param->offset() + numel);
    for (int64_t j = lo; j < hi; ++j)
      values[j - begin] = static_cast<float>(initValue(p, j - param->offset()));
  }
  return values;
}

absl::Status Executor::Impl::storeFloats(int32_t x, const float *values,
                                         int64_t n) {
  if (n == 0)
    return absl::OkStatus();
  if (buf(x).dtype() == fb::DType::F32)
    return backend_.copy(ptrs_[x], values, n * 4, kComputeStream);
  MD_ASSIGN_OR_RETURN(Buffer tmp, backend_.allocate(n * 4));
  MD_RETURN_IF_ERROR(backend_.copy(tmp.data(), values, n * 4, kComputeStream));
  CastArgs cast;
  cast.x = TensorRef(tmp.data(), DType::f32, {n});
  cast.out = TensorRef(ptrs_[x], ref(x).dtype, {n});
  MD_RETURN_IF_ERROR(backend_.cast(cast));
  return backend_.synchronize(kComputeStream);
}

absl::Status Executor::Impl::initState() {
  for (uint32_t i = 0; i < count(plan_.buffers()); ++i) {
    int32_t x = static_cast<int32_t>(i);
    const fb::Buffer &b = buf(x);
    const BufferLayout &l = layout_.buffers[x];
    if (l.placement != Placement::Persistent)
      continue;
    MD_RETURN_IF_ERROR(
        backend_.zero(ptrs_[x], AlignUp(l.capacity), kComputeStream));
    if (!HoldsParameters(b))
      continue;
    int64_t begin = 0;
    if (b.size_kind() == fb::SizeKind::Shard)
      begin = group(static_cast<int64_t>(b.group())).index * l.elements;
    std::vector<float> values = flatInit(b.unit(), begin, l.elements);
    // Elements past the unit's flat buffer are padding: zero.
    int64_t unitNumel = plan_.units()->Get(b.unit())->numel();
    for (int64_t j = 0; j < l.elements; ++j)
      if (begin + j >= unitNumel || begin + j >= b.numel())
        values[j] = 0.0f;
    MD_RETURN_IF_ERROR(storeFloats(x, values.data(), l.elements));
  }
  return backend_.synchronize(kComputeStream);
}

void Executor::Impl::fillInfo() {
  const fb::Header *h = plan_.header();
  const fb::Recipe &r = *plan_.recipe();
  info_.model = str(h->model());
  info_.planName = str(h->plan_name());
  info_.preset = str(h->preset());
  info_.worldSize = world_.worldSize;
  info_.backend = backend_.name();
  info_.comm = comm_.name();
  info_.microBatch = r.micro_batch();
  info_.accumulationSteps = world_.accumulationSteps;
  info_.globalBatch = r.global_batch();
  if (const fb::Optimizer *o = r.optimizer()) {
    if (o->kind() == fb::OptimizerKind::AdamW)
      info_.optimizer = absl::StrFormat(
          "adamw(lr = %g, betas = (%g, %g), eps = %g, weight_decay = %g)",
          o->lr(), o->beta1(), o->beta2(), o->eps(), o->weight_decay());
    else
      info_.optimizer = absl::StrFormat(
          "sgd(lr = %g, momentum = %g, dampening = %g, weight_decay = %g%s)",
          o->lr(), o->momentum(), o->dampening(), o->weight_decay(),
          o->nesterov() ? ", nesterov" : "");
  }
  for (const OptimizerGroupSummary &g : SummarizeOptimizerGroups(plan_))
    info_.optimizerGroups.push_back(g.str());
  info_.schedule = schedule_;
  info_.clipGradNorm = r.clip_grad_norm();
  info_.seed = static_cast<int64_t>(seed_);
  for (uint32_t p = 0; p < count(plan_.params()); ++p) {
    const fb::Param *param = plan_.params()->Get(p);
    int64_t numel = 1;
    for (uint32_t d = 0; d < count(param->shape()); ++d)
      numel *= param->shape()->Get(d);
    ++info_.paramCount;
    info_.paramElements += numel;
    if (param->trainable())
      info_.trainableElements += numel;
  }
  absl::StatusOr<plan::MemoryReport> memory =
      plan::PerRankMemory(loaded_, world_.worldSize);
  if (memory.ok())
    info_.memory = *memory;
  info_.persistentArenaBytes = layout_.persistentBytes;
  info_.transientArenaBytes = layout_.transientBytes;
  info_.steps = steps_;
  feeds_->describe(info_);
}

//===----------------------------------------------------------------------===//
// Memory helpers
//===----------------------------------------------------------------------===//

absl::Status Executor::Impl::toHost(void *dst, int32_t x, int64_t offset,
                                    int64_t n) {
  if (ptrs_[x] == nullptr)
    return absl::InternalError(absl::StrFormat(
        "buffer %d ('%s') is not allocated", x, str(buf(x).name())));
  MD_RETURN_IF_ERROR(backend_.copy(dst, ptrs_[x] + offset, n, kComputeStream));
  return backend_.synchronize(kComputeStream);
}

absl::Status Executor::Impl::fromHost(int32_t x, const void *src,
                                      int64_t offset, int64_t n) {
  if (ptrs_[x] == nullptr)
    return absl::InternalError(absl::StrFormat(
        "buffer %d ('%s') is not allocated", x, str(buf(x).name())));
  return backend_.copy(ptrs_[x] + offset, src, n, kComputeStream);
}

absl::Status Executor::Impl::copyBuffer(int32_t dst, int32_t src,
                                        Stream stream) {
  if (ptrs_[dst] == ptrs_[src])
    return absl::OkStatus();
  return backend_.copy(ptrs_[dst], ptrs_[src], bytes(src), stream);
}

absl::Status Executor::Impl::waitForComm() {
  MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
  // A stream-ordered comm's collectives the recorder filed as queued are
  // done now (those the comm stamps itself already are).
  if (options_.recorder != nullptr)
    options_.recorder->completeQueued();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> Executor::Impl::readBuffer(int32_t x) {
  if (x < 0 || static_cast<uint32_t>(x) >= count(plan_.buffers()))
    return absl::InvalidArgumentError(absl::StrFormat("no buffer %d", x));
  std::vector<uint8_t> out(static_cast<size_t>(bytes(x)));
  // The buffer's last writer may be a collective still on the comm stream.
  MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
  MD_RETURN_IF_ERROR(toHost(out.data(), x, 0, bytes(x)));
  return out;
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

absl::Status Executor::Impl::run() {
  while (step_ < steps_ && !stop_)
    MD_RETURN_IF_ERROR(step());
  // The run ends when its last collective has: a caller may read any
  // buffer next, or free them.
  return waitForComm();
}

Executor::Impl::~Impl() {
  // Work still queued on a concurrent comm stream (after an error) uses the
  // arenas freed next; its error, if any, was reported already.
  (void)backend_.synchronize(kCommStream);
}

void Executor::Impl::enterFlight(int64_t step, int32_t micro) {
  flightStep_ = step;
  flightMicro_ = micro;
  if (options_.recorder != nullptr)
    options_.recorder->enter(step, micro);
}

absl::Status Executor::Impl::step() {
  const int64_t stepBegin = options_.trace ? MonotonicNs() : 0;
  micro_ = 0;
  enterFlight(step_ + 1, 1);
  lossSum_ = 0;
  lossCount_ = 0;
  gradNorm_.reset();
  if (plan_.step_block() >= 0)
    MD_RETURN_IF_ERROR(runBlock(plan_.step_block()));
  lastLoss_ = lossCount_ > 0 ? lossSum_ / static_cast<double>(lossCount_)
                             : std::nan("");
  ++step_;
  if (options_.recorder != nullptr)
    options_.recorder->stepDone(step_);
  const int64_t hooksBegin = options_.trace ? MonotonicNs() : 0;
  if (options_.trace)
    options_.trace->slice(absl::StrCat("step ", step_), "step",
                          TraceRecorder::Host, stepBegin, hooksBegin);
  enterFlight(step_, 0);
  if (plan_.hooks_block() >= 0)
    MD_RETURN_IF_ERROR(runBlock(plan_.hooks_block()));
  if (options_.trace)
    options_.trace->slice(absl::StrCat("hooks after step ", step_), "step",
                          TraceRecorder::Host, hooksBegin, MonotonicNs());
  MD_RETURN_IF_ERROR(report());
  MD_RETURN_IF_ERROR(checkPreemption());
  if (options_.rank == 0 && options_.observer)
    options_.observer->onStepEnd(step_);
  if (stop_ && !failed_ && options_.rank == 0 && options_.observer)
    options_.observer->onExit(step_, stopReason_);
  return absl::OkStatus();
}

absl::Status Executor::Impl::report() {
  const int64_t lines = options_.logEvery, records = options_.metricsEvery;
  const bool edge = step_ >= steps_ || stop_ || step_ == 1;
  const bool line = lines > 0 && (edge || step_ % lines == 0);
  const bool record = records > 0 && (edge || step_ % records == 0);
  if (!line && !record)
    return absl::OkStatus();
  // The mean of the ranks' losses: every rank takes part.
  float local = static_cast<float>(lastLoss_);
  MD_RETURN_IF_ERROR(backend_.copy(control_.data(), &local, 4, kCommStream));
  MD_RETURN_IF_ERROR(recorded(
      flightCall(Collective::all_reduce, group(0), DType::f32, 4), [&] {
        return comm_.allReduce(control_.data(), control_.data(), 1, DType::f32,
                               ReduceOp::avg, group(0));
      }));
  float mean = 0;
  MD_RETURN_IF_ERROR(backend_.copy(&mean, control_.data(), 4, kCommStream));
  MD_RETURN_IF_ERROR(waitForComm());
  Clock::time_point now = Clock::now();
  if (options_.rank == 0 && options_.observer) {
    Progress p;
    p.step = step_;
    p.steps = steps_;
    p.loss = mean;
    p.lr = static_cast<float>(schedule_.at(step_ - 1));
    p.gradNorm = gradNorm_;
    double seconds = std::chrono::duration<double>(now - lastReport_).count();
    int64_t stepsSince = step_ - lastReportStep_;
    if (seconds > 0 && stepsSince > 0) {
      double samples =
          static_cast<double>(plan_.recipe()->global_batch() * stepsSince);
      p.samplesPerSecond = samples / seconds;
      p.tokensPerSecond =
          p.samplesPerSecond * static_cast<double>(info_.tokensPerSample);
      p.stepSeconds = seconds / static_cast<double>(stepsSince);
    }
    p.stepsSince = stepsSince;
    p.elapsedSeconds = std::chrono::duration<double>(now - start_).count();
    p.epoch = epoch_;
    p.line = line;
    p.record = record;
    options_.observer->onProgress(p);
  }
  lastReport_ = now;
  lastReportStep_ = step_;
  return absl::OkStatus();
}

std::string Executor::Impl::blockPrefix(const fb::Block &block) const {
  return block.kind() == fb::BlockKind::Step ||
                 block.kind() == fb::BlockKind::MicroSteps
             ? absl::StrFormat("step %d", step_ + 1)
             : absl::StrFormat("hooks after step %d", step_);
}

absl::Status Executor::Impl::runBlock(int32_t b) {
  const fb::Block *block = plan_.blocks()->Get(b);
  for (uint32_t i = 0; i < count(block->instructions()); ++i) {
    const fb::Instruction *inst = block->instructions()->Get(i);
    const int64_t traceBegin = options_.trace ? MonotonicNs() : 0;
    // The consecutive collectives of one bucket go to the comm as a group.
    if (uint32_t end = groupEnd(*block, i); end > i + 1) {
      absl::Status s = runGroup(*block, i, end);
      if (!s.ok())
        return annotate(s,
                        absl::StrCat(blockPrefix(*block), ": ", where(b, i)));
      if (options_.trace)
        traceInstruction(*inst, traceBegin, MonotonicNs(), end - i);
      i = end - 1;
      continue;
    }
    Stream stream{static_cast<int>(inst->stream())};
    absl::Status s;
    for (uint32_t w = 0; w < count(inst->waits()) && s.ok(); ++w)
      s = backend_.waitEvent(stream, events_[inst->waits()->Get(w)]);
    if (s.ok()) {
      forgetScalarsWrittenBy(*inst);
      // A library's exception ends here as this instruction's error.
      s = StatusOfCall([&] { return execute(*inst); },
                       [&] { return plan::OpcodeName(inst->opcode()); });
    }
    if (s.ok() && inst->record() >= 0)
      s = backend_.recordEvent(stream, events_[inst->record()]);
    if (!s.ok()) {
      // The launcher's analysis names the instruction that failed (the
      // innermost: the recorder keeps the first); a collective's failure
      // is in its own entry.
      if (const plan::OpcodeInfo *info = plan::GetOpcodeInfo(inst->opcode());
          options_.recorder != nullptr && info != nullptr &&
          !info->is(plan::kCollective))
        options_.recorder->failedAt({static_cast<int32_t>(inst->opcode()), b,
                                     static_cast<int32_t>(i), inst->loc()});
      // An error from a nested block already says where it happened.
      std::string prefix = blockPrefix(*block);
      if (s.message().rfind(prefix, 0) == 0)
        return s;
      return annotate(s, absl::StrCat(prefix, ": ", where(b, i)));
    }
    if (options_.trace)
      traceInstruction(*inst, traceBegin, MonotonicNs());
  }
  return absl::OkStatus();
}

void Executor::Impl::traceInstruction(const fb::Instruction &inst,
                                      int64_t beginNs, int64_t endNs,
                                      uint32_t members) {
  using Op = fb::Opcode;
  TraceRecorder &trace = *options_.trace;
  std::string name = plan::OpcodeName(inst.opcode());
  if (members > 1)
    name = absl::StrCat("group of ", members, " collectives from ", name);
  if (inst.loc() >= 0) {
    const fb::SourceLocation *loc = plan_.locations()->Get(inst.loc());
    absl::StrAppend(&name, " (", str(loc->file()), ":", loc->line(), ":",
                    loc->col(), ")");
  }
  // What the host does itself (a block it runs, data, checkpoints, output)
  // goes on the host track; kernels and collectives on their stream's.
  const char *cat = "kernel";
  int track = inst.stream() == kCommStream.id ? TraceRecorder::Comm
                                              : TraceRecorder::Compute;
  std::string args;
  switch (inst.opcode()) {
  case Op::AllGather:
  case Op::ReduceScatter:
  case Op::AllReduce:
  case Op::Broadcast:
  case Op::Barrier: {
    cat = "collective";
    FlightCall c = describeCollective(inst);
    args = absl::StrFormat(
        "\"dtype\": \"%s\", \"bytes\": %d, \"bucket\": %d, \"group\": "
        "\"%s of %d\"",
        dtypeName(c.dtype), c.bytes, c.bucket, groupKindName(c.group),
        c.groupSize);
    break;
  }
  case Op::Batch:
    cat = "data";
    track = TraceRecorder::Host;
    break;
  case Op::Save:
    cat = "checkpoint";
    track = TraceRecorder::Host;
    break;
  case Op::Evaluate:
    cat = "evaluation";
    track = TraceRecorder::Host;
    break;
  default:
    if (inst.blocks() != nullptr || inst.opcode() == Op::Log ||
        inst.opcode() == Op::Print || inst.opcode() == Op::Exit) {
      cat = "host";
      track = TraceRecorder::Host;
    }
    break;
  }
  trace.slice(std::move(name), cat, track, beginNs, endNs, std::move(args));
  // Arrows from the instruction whose event this one waited for, when it
  // ran on another track.
  if (traceRecords_.size() != events_.size())
    traceRecords_.assign(events_.size(), {-1, 0});
  for (uint32_t w = 0; w < count(inst.waits()); ++w) {
    const auto &[from, at] = traceRecords_[inst.waits()->Get(w)];
    if (from >= 0 && from != track)
      trace.flow(from, at, track, beginNs);
  }
  if (inst.record() >= 0)
    traceRecords_[inst.record()] = {track, beginNs};
}

//===----------------------------------------------------------------------===//
// Data and evaluation
//===----------------------------------------------------------------------===//

absl::Status Executor::Impl::readBatch(const fb::Instruction &inst) {
  std::vector<TensorRef> outs;
  for (uint32_t k = 0; k < count(inst.outputs()); ++k)
    outs.push_back(ref(inst.outputs()->Get(k)));
  MD_RETURN_IF_ERROR(feeds_->read(outs, backend_));
  epoch_ = feeds_->epoch();
  return absl::OkStatus();
}

absl::Status Executor::Impl::evaluate(const fb::Instruction &inst) {
  int32_t dataset = static_cast<int32_t>(inst.ints()->Get(0));
  int64_t batches = inst.ints()->Get(1);
  int32_t body = inst.blocks()->Get(0);
  const fb::Block *block = plan_.blocks()->Get(body);
  const fb::Instruction *batch = nullptr;
  for (uint32_t i = 0; i < count(block->instructions()); ++i)
    if (block->instructions()->Get(i)->opcode() == fb::Opcode::Batch)
      batch = block->instructions()->Get(i);
  const fb::Instruction *yield =
      block->instructions()->Get(count(block->instructions()) - 1);
  int32_t loss = yield->inputs()->Get(0);
  MD_ASSIGN_OR_RETURN(double mean,
                      feeds_->evaluate(dataset, batch, batches,
                                       [&]() -> absl::StatusOr<double> {
                                         MD_RETURN_IF_ERROR(runBlock(body));
                                         MD_ASSIGN_OR_RETURN(Scalar v,
                                                             readScalar(loss));
                                         return v.asDouble();
                                       }));
  float meanF = static_cast<float>(mean);
  int32_t out = inst.outputs()->Get(0);
  MD_RETURN_IF_ERROR(fromHost(out, &meanF, 0, 4));
  MD_RETURN_IF_ERROR(recorded(
      flightCall(Collective::all_reduce, group(0), DType::f32, 4), [&] {
        return comm_.allReduce(ptrs_[out], ptrs_[out], 1, DType::f32,
                               ReduceOp::avg, group(0));
      }));
  // The host reads the mean next (readScalar reads through the compute
  // stream): a stream-ordered comm's all-reduce must have run.
  return comm_.streamOrdered() ? waitForComm() : absl::OkStatus();
}

absl::StatusOr<std::vector<Evaluation>> Executor::Impl::evaluateAll() {
  std::vector<Evaluation> out;
  for (const fb::Instruction *inst :
       planInstructions(plan_, fb::Opcode::Evaluate)) {
    forgetScalarsWrittenBy(*inst);
    MD_RETURN_IF_ERROR(evaluate(*inst));
    MD_ASSIGN_OR_RETURN(Scalar loss, readScalar(inst->outputs()->Get(0)));
    Evaluation e;
    e.loss = loss.asDouble();
    if (inst->loc() >= 0) {
      const fb::SourceLocation *loc = plan_.locations()->Get(inst->loc());
      e.where =
          absl::StrCat(str(loc->file()), ":", loc->line(), ":", loc->col());
    }
    const fb::DataSpec *d =
        plan_.datasets()->Get(static_cast<uint32_t>(inst->ints()->Get(0)));
    switch (d->kind()) {
    case fb::DataKind::Synthetic:
      e.dataset = absl::StrFormat("synthetic(seed = %d)", d->seed());
      break;
    case fb::DataKind::Npy:
      e.dataset = absl::StrFormat("npy(%s)", str(d->path()));
      break;
    case fb::DataKind::Tokens:
      e.dataset = absl::StrFormat("tokens(%s)", str(d->path()));
      break;
    }
    out.push_back(std::move(e));
  }
  if (out.empty())
    return absl::InvalidArgumentError(
        "the plan's recipe has no evaluate(...) to run");
  return out;
}

//===----------------------------------------------------------------------===//
// The instruction switch
//===----------------------------------------------------------------------===//

absl::Status Executor::Impl::execute(const fb::Instruction &inst) {
  using Op = fb::Opcode;
  // clang-format cannot see the case labels the table expands to below.
  // clang-format off
  switch (inst.opcode()) {
  // --- compute: every kernel row of runtime/core/Opcodes.def -----------------
#define MD_KERNEL(Name, ...) case Op::Name:
#include "runtime/core/Opcodes.def"
    return executeKernel(inst);
  // clang-format on
  case Op::Sqrt:
  case Op::Rsqrt:
    return executeHostElementwise(inst);

  // --- buffers ---------------------------------------------------------------
  case Op::View:
    return absl::OkStatus(); // the output aliases its source (ArenaLayout)
  case Op::ShardSlice:
    return shardSlice(inst);

  // --- collectives -----------------------------------------------------------
  case Op::AllGather:
  case Op::ReduceScatter:
  case Op::AllReduce:
  case Op::Broadcast:
  case Op::Barrier:
    // A host comm reads the operands now; a stream-ordered one waits for
    // the plan's events on the comm stream (checked at creation).
    if (!comm_.streamOrdered())
      MD_RETURN_IF_ERROR(backend_.synchronize(kComputeStream));
    MD_RETURN_IF_ERROR(executeCollective(inst));
    // A stream-ordered comm runs every collective on the comm stream; one
    // the plan put on the compute stream (no events around it) must be
    // done before the compute after it runs.
    if (comm_.streamOrdered() && inst.stream() == kComputeStream.id) {
      MD_RETURN_IF_ERROR(waitForComm());
    }
    return absl::OkStatus();

  // --- state and the step ----------------------------------------------------
  case Op::StateLoad:
  case Op::StateStore:
  case Op::Batch:
  case Op::AccumScale:
  case Op::RecordLoss:
  case Op::GradAccumulate:
  case Op::GradTotal:
    return executeStateOp(inst);

  // --- values of the run -----------------------------------------------------
  case Op::Step:
  case Op::Epoch:
  case Op::WorldSize:
  case Op::Lr:
  case Op::Loss:
  case Op::WallTime:
  case Op::FileExists:
    return executeRunValue(inst);

  // --- host scalars ----------------------------------------------------------
  case Op::Constant:
  case Op::ScalarArith:
  case Op::ScalarCompare:
  case Op::ScalarConvert:
  case Op::Rank:
  case Op::LocalRank:
    return executeScalar(inst);

  // --- io --------------------------------------------------------------------
  case Op::Log:
  case Op::Print:
    return executeOutput(inst);
  case Op::Evaluate:
    return evaluate(inst);
  case Op::Save:
    return save(inst);
  case Op::Exit: {
    stop_ = true;
    std::string reason =
        count(inst.strings()) > 0 ? str(inst.strings()->Get(0)) : "";
    // A failure outranks a stop in the same step: the run failed.
    if (count(inst.ints()) > 0 && inst.ints()->Get(0) != 0) {
      if (!failed_) {
        failed_ = true;
        failReason_ = std::move(reason);
      }
    } else {
      stopReason_ = std::move(reason);
    }
    return absl::OkStatus();
  }

  // --- control ---------------------------------------------------------------
  case Op::If:
  case Op::Every:
  case Op::For:
  case Op::MicroSteps:
    return executeControl(inst);
  case Op::Yield:
    return absl::OkStatus(); // the If or Evaluate that ran the block reads it
  case Op::Invalid:
    break;
  }
  return unimplemented(inst);
}

absl::Status Executor::Impl::executeKernel(const fb::Instruction &inst) {
  using Op = fb::Opcode;
  auto I = [&](uint32_t k) { return inst.inputs()->Get(k); };
  auto O = [&](uint32_t k) { return inst.outputs()->Get(k); };
  const Stream stream{static_cast<int>(inst.stream())};
  // The executor's own part of two kernels: a cast to the same type is a
  // copy, and the clip norm is the step's gradient norm for the report.
  if (inst.opcode() == Op::Cast && buf(I(0)).dtype() == buf(O(0)).dtype())
    return copyBuffer(O(0), I(0), stream);
  if (inst.opcode() == Op::Clip) {
    MD_ASSIGN_OR_RETURN(Scalar norm, readScalar(I(count(inst.inputs()) - 1)));
    gradNorm_ = norm.asDouble();
  }
  auto readFloat = [&](int32_t x) -> absl::StatusOr<double> {
    MD_ASSIGN_OR_RETURN(Scalar v, readScalar(x));
    return v.asDouble();
  };
  auto readInt = [&](int32_t x) -> absl::StatusOr<int64_t> {
    MD_ASSIGN_OR_RETURN(Scalar v, readScalar(x));
    return v.isFloat ? static_cast<int64_t>(v.f) : v.i;
  };
  KernelContext ctx{backend_, refs_, readFloat, readInt};
  if (!updateSegments_.empty()) {
    auto it = updateSegments_.find(&inst);
    if (it != updateSegments_.end())
      ctx.optimizerSegments = &it->second;
  }
  return DispatchKernel(ctx, inst);
}

absl::Status Executor::Impl::findUpdateSegments() {
  unitSegments_ = UnitOptimizerSegments(plan_);
  if (unitSegments_.empty())
    return absl::OkStatus();
  // Every update that names its unit, wherever it sits in the blocks.
  for (const fb::Block *block : *plan_.blocks()) {
    if (!block->instructions())
      continue;
    for (const fb::Instruction *inst : *block->instructions()) {
      if ((inst->opcode() != fb::Opcode::AdamWUpdate &&
           inst->opcode() != fb::Opcode::SgdUpdate) ||
          !inst->ints())
        continue;
      // The unit slot follows the fixed int slots (none; SGD's nesterov).
      uint32_t fixed = inst->opcode() == fb::Opcode::SgdUpdate ? 1 : 0;
      if (inst->ints()->size() <= fixed)
        continue;
      int64_t unit = inst->ints()->Get(fixed);
      if (unit < 0 || unit >= static_cast<int64_t>(unitSegments_.size()))
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: unit %d out of range %d", plan::OpcodeName(inst->opcode()),
            unit, unitSegments_.size()));
      // The operands are the unit's flat buffer or this rank's shard of it.
      int32_t param = inst->inputs()->Get(0);
      int64_t length = layout_.buffers[param].elements, offset = 0;
      if (buf(param).size_kind() == fb::SizeKind::Shard)
        offset = group(static_cast<int64_t>(buf(param).group())).index * length;
      updateSegments_[inst] =
          ShardOptimizerSegments(unitSegments_[unit], offset, length);
    }
  }
  return absl::OkStatus();
}

absl::Status
Executor::Impl::executeHostElementwise(const fb::Instruction &inst) {
  // Elementwise on the host, in f32, rounded to the element type: the
  // clip norm's square root, SyncBatchNorm's 1 / sqrt(var + eps).
  const bool rsqrt = inst.opcode() == fb::Opcode::Rsqrt;
  const float eps = rsqrt ? static_cast<float>(inst.floats()->Get(0)) : 0.0f;
  int32_t x = inst.inputs()->Get(0), y = inst.outputs()->Get(0);
  int64_t n = layout_.buffers[x].elements;
  std::vector<uint8_t> raw(static_cast<size_t>(n * esize(x)));
  MD_RETURN_IF_ERROR(toHost(raw.data(), x, 0, n * esize(x)));
  for (int64_t i = 0; i < n; ++i) {
    uint8_t *e = raw.data() + i * esize(x);
    float v = static_cast<float>(decodeScalar(buf(x).dtype(), e).asDouble());
    float r = rsqrt ? 1.0f / std::sqrt(v + eps) : std::sqrt(v);
    encodeScalar(buf(y).dtype(), Scalar::Float(r), e);
  }
  MD_RETURN_IF_ERROR(fromHost(y, raw.data(), 0, n * esize(y)));
  if (n == 1)
    rememberScalar(y, raw.data());
  return absl::OkStatus();
}

absl::Status Executor::Impl::shardSlice(const fb::Instruction &inst) {
  const Stream stream{static_cast<int>(inst.stream())};
  int32_t full = inst.inputs()->Get(0), shard = inst.outputs()->Get(0);
  const Group &g = group(inst.ints()->Get(0));
  int64_t s = layout_.buffers[shard].elements;
  int64_t n = layout_.buffers[full].elements;
  int64_t begin = g.index * s;
  int64_t valid = std::clamp<int64_t>(n - begin, 0, s);
  int64_t es = esize(full);
  if (valid > 0)
    MD_RETURN_IF_ERROR(backend_.copy(ptrs_[shard], ptrs_[full] + begin * es,
                                     valid * es, stream));
  if (valid < s)
    MD_RETURN_IF_ERROR(
        backend_.zero(ptrs_[shard] + valid * es, (s - valid) * es, stream));
  return absl::OkStatus();
}

absl::Status Executor::Impl::executeStateOp(const fb::Instruction &inst) {
  using Op = fb::Opcode;
  auto I = [&](uint32_t k) { return inst.inputs()->Get(k); };
  auto O = [&](uint32_t k) { return inst.outputs()->Get(k); };
  auto in = [&](uint32_t k) -> const TensorRef & { return ref(I(k)); };
  auto out = [&](uint32_t k) -> const TensorRef & { return ref(O(k)); };
  const Stream stream{static_cast<int>(inst.stream())};
  // grad_accumulate and grad_total write g, copied or cast to the output's
  // dtype, or the sum of an accumulator and g.
  auto copyOrCast = [&]() -> absl::Status {
    if (buf(I(0)).dtype() == buf(O(0)).dtype())
      return copyBuffer(O(0), I(0), stream);
    CastArgs a;
    a.x = in(0);
    a.out = out(0);
    a.stream = stream;
    return backend_.cast(a);
  };
  auto accumulate = [&](const TensorRef &acc) -> absl::Status {
    AccumulateArgs a;
    a.acc = acc;
    a.g = in(0);
    a.out = out(0);
    a.stream = stream;
    return backend_.accumulate(a);
  };
  switch (inst.opcode()) {
  case Op::StateLoad:
  case Op::StateStore:
    return copyBuffer(O(0), I(0), stream);
  case Op::Batch:
    return readBatch(inst);
  case Op::AccumScale:
    return writeScalar(
        O(0), Scalar::Float(static_cast<float>(
                  1.0 / static_cast<double>(world_.accumulationSteps))));
  case Op::RecordLoss: {
    MD_ASSIGN_OR_RETURN(Scalar loss, readScalar(I(0)));
    if (!std::isfinite(loss.asDouble()))
      return absl::InvalidArgumentError(
          absl::StrFormat("the loss is %s on rank %d (micro-step %d of %d)",
                          formatValue(loss.asDouble()), options_.rank,
                          micro_ + 1, world_.accumulationSteps));
    lossSum_ += loss.asDouble();
    ++lossCount_;
    return absl::OkStatus();
  }
  case Op::GradAccumulate:
    // The first micro-step starts the sum, the others add to it.
    if (micro_ == 0)
      return copyOrCast();
    return accumulate(out(0));
  case Op::GradTotal:
    // With accumulation the total is acc + g; without, g itself.
    if (world_.accumulationSteps > 1)
      return accumulate(in(1));
    return copyOrCast();
  default:
    return unimplemented(inst);
  }
}

absl::Status Executor::Impl::executeRunValue(const fb::Instruction &inst) {
  using Op = fb::Opcode;
  auto I = [&](uint32_t k) { return inst.inputs()->Get(k); };
  auto O = [&](uint32_t k) { return inst.outputs()->Get(k); };
  switch (inst.opcode()) {
  case Op::Step:
    return writeScalar(O(0), Scalar::Int(step_));
  case Op::Epoch:
    return writeScalar(O(0), Scalar::Int(epoch_));
  case Op::WorldSize:
    return writeScalar(O(0), Scalar::Int(world_.worldSize));
  case Op::Lr: {
    MD_ASSIGN_OR_RETURN(Scalar it, readScalar(I(0)));
    return writeScalar(O(0), Scalar::Float(schedule_.at(it.i)));
  }
  case Op::Loss:
    return writeScalar(O(0), Scalar::Float(lastLoss_));
  case Op::WallTime:
    return writeScalar(
        O(0),
        Scalar::Float(
            std::chrono::duration<double>(Clock::now() - start_).count()));
  case Op::FileExists: {
    // The path may name a file per rank (runtime/core/RankPath.h).
    std::string path = str(inst.strings()->Get(0));
    if (std::optional<std::string> bad = UnknownRankPlaceholder(path))
      return absl::InvalidArgumentError(absl::StrFormat(
          "file_exists: the path \"%s\" has '%s'; a brace names a "
          "placeholder: {rank}, {local_rank} or {world_size}",
          path, *bad));
    RankValues values{options_.rank,
                      options_.localRank >= 0 ? options_.localRank
                                              : options_.rank,
                      world_.worldSize};
    return writeScalar(
        O(0),
        Scalar::Int(::access(ExpandRankPath(path, values).c_str(), F_OK) == 0));
  }
  default:
    return unimplemented(inst);
  }
}

/// log and print: the observer gets rank 0's logs, and the prints of every
/// rank that runs them (a print the same on every rank is rank0_only).
absl::Status Executor::Impl::executeOutput(const fb::Instruction &inst) {
  const bool shown = inst.opcode() == fb::Opcode::Print
                         ? options_.rank == 0 || !inst.rank0_only()
                         : options_.rank == 0;
  if (!shown || options_.observer == nullptr)
    return absl::OkStatus();
  auto I = [&](uint32_t k) { return inst.inputs()->Get(k); };
  const uint32_t ins = count(inst.inputs());
  if (inst.opcode() == fb::Opcode::Log) {
    std::string tag = str(inst.strings()->Get(0));
    std::vector<std::pair<std::string, double>> values;
    for (uint32_t k = 0; k < ins; ++k) {
      MD_ASSIGN_OR_RETURN(std::vector<double> v, readValues(I(k)));
      std::string name = count(inst.strings()) > 1
                             ? str(inst.strings()->Get(k + 1))
                         : ins == 1 ? tag
                                    : absl::StrCat(tag, ".", k);
      for (size_t e = 0; e < v.size(); ++e)
        values.emplace_back(
            v.size() == 1 ? name : absl::StrCat(name, "[", e, "]"), v[e]);
    }
    options_.observer->onLog(step_, tag, values);
    return absl::OkStatus();
  }
  std::string line =
      count(inst.strings()) > 0 ? str(inst.strings()->Get(0)) : "";
  for (uint32_t k = 0; k < ins; ++k) {
    MD_ASSIGN_OR_RETURN(std::vector<double> v, readValues(I(k)));
    for (double e : v)
      absl::StrAppend(&line, " ", formatValue(e));
  }
  options_.observer->onPrint(step_, line, !inst.rank0_only());
  return absl::OkStatus();
}

absl::Status Executor::Impl::executeControl(const fb::Instruction &inst) {
  using Op = fb::Opcode;
  auto I = [&](uint32_t k) { return inst.inputs()->Get(k); };
  auto O = [&](uint32_t k) { return inst.outputs()->Get(k); };
  const uint32_t outs = count(inst.outputs());
  const Stream stream{static_cast<int>(inst.stream())};
  switch (inst.opcode()) {
  case Op::If: {
    MD_ASSIGN_OR_RETURN(Scalar cond, readScalar(I(0)));
    int32_t branch = -1;
    if (cond.i != 0)
      branch = inst.blocks()->Get(0);
    else if (count(inst.blocks()) > 1)
      branch = inst.blocks()->Get(1);
    if (branch < 0)
      return absl::OkStatus();
    MD_RETURN_IF_ERROR(runBlock(branch));
    if (outs > 0) {
      const fb::Block *block = plan_.blocks()->Get(branch);
      const fb::Instruction *yield =
          block->instructions()->Get(count(block->instructions()) - 1);
      for (uint32_t k = 0; k < outs; ++k)
        MD_RETURN_IF_ERROR(copyBuffer(O(k), yield->inputs()->Get(k), stream));
    }
    return absl::OkStatus();
  }
  case Op::Every: {
    int64_t period = inst.ints()->Get(0);
    auto unit = static_cast<fb::PeriodUnit>(inst.ints()->Get(1));
    bool due = false;
    if (unit == fb::PeriodUnit::Steps) {
      due = step_ % period == 0;
    } else {
      // Rank 0's clock decides, and every rank follows it.
      Clock::time_point now = Clock::now();
      auto it = everyFired_.find(&inst);
      Clock::time_point last = it == everyFired_.end() ? start_ : it->second;
      double seconds = static_cast<double>(period) *
                       (unit == fb::PeriodUnit::Minutes ? 60.0 : 1.0);
      int64_t flag =
          std::chrono::duration<double>(now - last).count() >= seconds ? 1 : 0;
      MD_RETURN_IF_ERROR(backend_.copy(control_.data(), &flag, 8, kCommStream));
      MD_RETURN_IF_ERROR(recorded(
          flightCall(Collective::broadcast, group(0), DType::i64, 8), [&] {
            return comm_.broadcast(control_.data(), control_.data(), 1,
                                   DType::i64, 0, group(0));
          }));
      MD_RETURN_IF_ERROR(backend_.copy(&flag, control_.data(), 8, kCommStream));
      MD_RETURN_IF_ERROR(waitForComm());
      due = flag != 0;
      if (due)
        everyFired_[&inst] = now;
    }
    if (!due)
      return absl::OkStatus();
    return runBlock(inst.blocks()->Get(0));
  }
  case Op::For: {
    MD_ASSIGN_OR_RETURN(Scalar lb, readScalar(I(0)));
    MD_ASSIGN_OR_RETURN(Scalar ub, readScalar(I(1)));
    for (int64_t iv = lb.i; iv < ub.i; ++iv) {
      MD_RETURN_IF_ERROR(writeScalar(O(0), Scalar::Int(iv)));
      MD_RETURN_IF_ERROR(runBlock(inst.blocks()->Get(0)));
    }
    return absl::OkStatus();
  }
  case Op::MicroSteps: {
    for (int64_t k = 0; k + 1 < world_.accumulationSteps; ++k) {
      const int64_t microBegin = options_.trace ? MonotonicNs() : 0;
      MD_RETURN_IF_ERROR(runBlock(inst.blocks()->Get(0)));
      if (options_.trace)
        options_.trace->slice(absl::StrCat("micro-step ", k + 1), "step",
                              TraceRecorder::Host, microBegin, MonotonicNs());
      ++micro_;
      enterFlight(step_ + 1, static_cast<int32_t>(micro_ + 1));
    }
    return absl::OkStatus();
  }
  default:
    return unimplemented(inst);
  }
}

//===----------------------------------------------------------------------===//
// Executor
//===----------------------------------------------------------------------===//

absl::StatusOr<int64_t> StepsToRun(const fb::Plan &plan, int64_t steps) {
  if (steps >= 0)
    return steps;
  const fb::Schedule *s = plan.recipe() ? plan.recipe()->schedule() : nullptr;
  if (s == nullptr || s->kind() == fb::ScheduleKind::Constant ||
      s->steps() <= 0 || s->steps() >= (int64_t(1) << 53))
    return absl::InvalidArgumentError(
        "the recipe's schedule does not say how many steps to train (a "
        "constant schedule has no end): pass the step count (mdrun --steps N)");
  return s->steps();
}

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executor::~Executor() = default;

absl::StatusOr<std::string>
Executor::UnorderedStreams(const plan::LoadedPlan &plan, int64_t worldSize) {
  MD_ASSIGN_OR_RETURN(plan::WorldBinding world,
                      plan::BindWorldSize(plan, worldSize));
  MD_ASSIGN_OR_RETURN(ArenaLayout layout, LayOutArenas(plan, world));
  absl::Status order = CheckStreamOrder(plan, layout);
  return order.ok() ? std::string() : std::string(order.message());
}

absl::StatusOr<std::unique_ptr<Executor>>
Executor::Create(const plan::LoadedPlan &plan, int64_t worldSize,
                 Backend &backend, Comm &comm, const ExecutorOptions &options) {
  auto impl = std::make_unique<Impl>(plan, backend, comm, options);
  MD_RETURN_IF_ERROR(impl->init(worldSize));
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

absl::Status Executor::Run() { return impl_->run(); }
absl::Status Executor::Step() { return impl_->step(); }
int64_t Executor::stepsDone() const { return impl_->step_; }
int64_t Executor::stepsToRun() const { return impl_->steps_; }
bool Executor::stopped() const { return impl_->stop_; }
bool Executor::preempted() const { return impl_->preempted_; }
std::optional<std::string> Executor::failure() const {
  if (!impl_->failed_)
    return std::nullopt;
  return impl_->failReason_;
}
double Executor::lastLoss() const { return impl_->lastLoss_; }
const RunInfo &Executor::info() const { return impl_->info_; }
const ArenaLayout &Executor::layout() const { return impl_->layout_; }
absl::StatusOr<std::vector<NamedTensor>> Executor::GatherParameters() {
  return impl_->gatherParameters();
}
absl::Status Executor::SaveFull(const std::string &path) {
  return impl_->saveFull(path);
}
absl::StatusOr<std::vector<Evaluation>> Executor::Evaluate() {
  return impl_->evaluateAll();
}
absl::StatusOr<std::vector<uint8_t>> Executor::ReadBuffer(int32_t buffer) {
  return impl_->readBuffer(buffer);
}

} // namespace md::runtime
