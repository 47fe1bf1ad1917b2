//===- Executor.cpp - runs a plan on one rank -----------------------------===//
//
// Executor::Impl holds a rank's whole run: the arenas and a pointer and a
// TensorRef per plan buffer, the data feeds, the step counters. Instructions
// are interpreted one at a time by Impl::execute, a switch over the opcode
// whose cases read the layouts plan.fbs gives next to each opcode. The
// loader has verified every index, arity and operand type, so nothing here
// re-checks them; kernels still check shapes (OpChecks) and return errors.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Executor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/core/KernelDispatch.h"
#include "runtime/core/Random.h"
#include "runtime/core/Safetensors.h"
#include "runtime/core/Status.h"
#include "runtime/core/StreamOrder.h"
#include "runtime/cpu/Bf16.h"
#include "runtime/data/Dataset.h"
#include "runtime/data/Sampler.h"
#include "runtime/plan/Schema.h"

namespace md::runtime {

RunObserver::~RunObserver() = default;

namespace {

using Clock = std::chrono::steady_clock;

template <typename T> uint32_t count(const flatbuffers::Vector<T> *v) {
  return v ? v->size() : 0;
}
std::string str(const flatbuffers::String *s) {
  return s ? std::string(s->c_str(), s->size()) : std::string();
}

/// The runtime element type of a plan dtype; F64 and Bool are host scalars
/// that no kernel sees.
std::optional<DType> kernelDType(fb::DType t) {
  switch (t) {
  case fb::DType::F32:
    return DType::f32;
  case fb::DType::BF16:
    return DType::bf16;
  case fb::DType::F16:
    return DType::f16;
  case fb::DType::I32:
    return DType::i32;
  case fb::DType::I64:
    return DType::i64;
  default:
    return std::nullopt;
  }
}

bool isFloatPlanDType(fb::DType t) {
  return t == fb::DType::F32 || t == fb::DType::BF16 || t == fb::DType::F16 ||
         t == fb::DType::F64;
}

/// A host scalar: a float or an integer (bools are integers 0 and 1).
struct Scalar {
  bool isFloat = false;
  double f = 0;
  int64_t i = 0;
  static Scalar Float(double v) { return {true, v, 0}; }
  static Scalar Int(int64_t v) { return {false, 0, v}; }
  double asDouble() const { return isFloat ? f : static_cast<double>(i); }
};

/// Little-endian bytes of `v` as one element of `t`.
void encodeScalar(fb::DType t, const Scalar &v, uint8_t *out) {
  switch (t) {
  case fb::DType::F32: {
    float x = static_cast<float>(v.asDouble());
    std::memcpy(out, &x, 4);
    break;
  }
  case fb::DType::F64: {
    double x = v.asDouble();
    std::memcpy(out, &x, 8);
    break;
  }
  case fb::DType::BF16: {
    uint16_t x = cpu::f32ToBf16(static_cast<float>(v.asDouble()));
    std::memcpy(out, &x, 2);
    break;
  }
  case fb::DType::F16: {
    uint16_t x = cpu::f32ToF16(static_cast<float>(v.asDouble()));
    std::memcpy(out, &x, 2);
    break;
  }
  case fb::DType::I32: {
    int32_t x =
        static_cast<int32_t>(v.isFloat ? static_cast<int64_t>(v.f) : v.i);
    std::memcpy(out, &x, 4);
    break;
  }
  case fb::DType::I64: {
    int64_t x = v.isFloat ? static_cast<int64_t>(v.f) : v.i;
    std::memcpy(out, &x, 8);
    break;
  }
  case fb::DType::Bool:
    out[0] = (v.isFloat ? v.f != 0 : v.i != 0) ? 1 : 0;
    break;
  default:
    break;
  }
}

Scalar decodeScalar(fb::DType t, const uint8_t *in) {
  switch (t) {
  case fb::DType::F32: {
    float x;
    std::memcpy(&x, in, 4);
    return Scalar::Float(x);
  }
  case fb::DType::F64: {
    double x;
    std::memcpy(&x, in, 8);
    return Scalar::Float(x);
  }
  case fb::DType::BF16: {
    uint16_t x;
    std::memcpy(&x, in, 2);
    return Scalar::Float(cpu::bf16ToF32(x));
  }
  case fb::DType::F16: {
    uint16_t x;
    std::memcpy(&x, in, 2);
    return Scalar::Float(cpu::f16ToF32(x));
  }
  case fb::DType::I32: {
    int32_t x;
    std::memcpy(&x, in, 4);
    return Scalar::Int(x);
  }
  case fb::DType::I64: {
    int64_t x;
    std::memcpy(&x, in, 8);
    return Scalar::Int(x);
  }
  case fb::DType::Bool:
    return Scalar::Int(in[0] != 0 ? 1 : 0);
  default:
    return Scalar::Int(0);
  }
}

std::string formatValue(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15)
    return absl::StrFormat("%d", static_cast<int64_t>(v));
  return absl::StrFormat("%.6g", v);
}

absl::Status annotate(const absl::Status &s, const std::string &where) {
  return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
}

const char *safetensorsDType(fb::DType t) {
  switch (t) {
  case fb::DType::F32:
    return "F32";
  case fb::DType::BF16:
    return "BF16";
  case fb::DType::F16:
    return "F16";
  case fb::DType::I32:
    return "I32";
  case fb::DType::I64:
    return "I64";
  case fb::DType::F64:
    return "F64";
  case fb::DType::Bool:
    return "BOOL";
  default:
    return "?";
  }
}

/// Synthetic data is endless; an evaluation that asks for "all" of it reads
/// this many samples (docs/runtime.md).
constexpr int64_t kSyntheticEvalSamples = 1024;

} // namespace

//===----------------------------------------------------------------------===//
// Impl
//===----------------------------------------------------------------------===//

class Executor::Impl {
public:
  Impl(const plan::LoadedPlan &plan, Backend &backend, Comm &comm,
       const ExecutorOptions &options)
      : loaded_(plan), plan_(loaded_.plan()), backend_(backend), comm_(comm),
        options_(options), start_(Clock::now()) {
    const char *verify = std::getenv("MD_VERIFY_HOST_SCALARS");
    verifyHostScalars_ = verify != nullptr && std::string(verify) == "1";
  }

  absl::Status init(int64_t worldSize);
  absl::Status step();
  absl::Status run();
  absl::StatusOr<std::vector<NamedTensor>> gatherParameters();
  absl::Status saveFull(const std::string &path);
  absl::StatusOr<std::vector<uint8_t>> readBuffer(int32_t buffer);

  RunInfo info_;
  ArenaLayout layout_;
  int64_t step_ = 0, steps_ = 0;
  bool stop_ = false;
  double lastLoss_ = std::nan("");

private:
  /// A data source read batch by batch: one per training dataset, and one
  /// per evaluation while it runs.
  struct Feed {
    std::unique_ptr<data::Dataset> dataset;
    std::unique_ptr<data::BatchStream> stream;
    int64_t batch = 0; // samples per batch on this rank
    std::vector<std::vector<uint8_t>> staging;
    std::vector<Buffer> convert; // f32 device staging for bf16/f16 inputs
  };

  // --- setup ---------------------------------------------------------------
  absl::Status checkComm();
  absl::Status allocate();
  absl::Status initState();
  absl::Status initTrainData();
  absl::StatusOr<std::vector<data::Field>>
  batchFields(const fb::Instruction &batch, int64_t *batchSize);
  int64_t indexBound(int32_t buffer) const;
  absl::StatusOr<std::unique_ptr<Feed>>
  openFeed(int32_t dataset, const fb::Instruction &batch, bool training);
  void fillInfo();
  /// Values of elements [begin, begin + n) of unit `unit`'s flat buffer.
  std::vector<float> flatInit(int32_t unit, int64_t begin, int64_t n) const;
  double initValue(uint32_t param, int64_t element) const;

  // --- running ---------------------------------------------------------------
  absl::Status runBlock(int32_t block);
  absl::Status execute(const fb::Instruction &inst);
  absl::Status executeCollective(const fb::Instruction &inst);
  absl::Status executeScalar(const fb::Instruction &inst);
  absl::Status readBatch(const fb::Instruction &inst);
  absl::Status evaluate(const fb::Instruction &inst);
  absl::Status save(const fb::Instruction &inst);
  absl::Status saveSharded(const std::string &dir);
  absl::Status report();
  std::string where(int32_t block, uint32_t index) const;
  /// The bucket of a collective the comm may launch in a group with its
  /// neighbours of the same bucket, or -1.
  int64_t groupableBucket(const fb::Instruction &inst) const;
  /// The end of the group of collectives starting at instruction `i`
  /// (i itself when there is none to form).
  uint32_t groupEnd(const fb::Block &block, uint32_t i) const;
  /// "step 3" or "hooks after step 2": where an error in `block` happened.
  std::string blockPrefix(const fb::Block &block) const;
  absl::Status runGroup(const fb::Block &block, uint32_t begin, uint32_t end);

  // --- memory
  // ------------------------------------------------------------------
  const fb::Buffer &buf(int32_t x) const { return *plan_.buffers()->Get(x); }
  int64_t esize(int32_t x) const { return plan::DTypeSize(buf(x).dtype()); }
  int64_t bytes(int32_t x) const {
    return layout_.buffers[x].elements * esize(x);
  }
  const TensorRef &ref(int32_t x) const { return refs_[x]; }
  absl::Status toHost(void *dst, int32_t x, int64_t offset, int64_t n);
  absl::Status fromHost(int32_t x, const void *src, int64_t offset, int64_t n);
  absl::StatusOr<Scalar> readScalar(int32_t x, int64_t element = 0);
  absl::Status writeScalar(int32_t x, const Scalar &v);
  absl::StatusOr<std::vector<double>> readValues(int32_t x);
  absl::Status copyBuffer(int32_t dst, int32_t src, Stream stream);
  /// Keeps a host copy of the one-element buffer x, whose bytes the host
  /// has just written (`encoded`), for readScalar.
  void rememberScalar(int32_t x, const uint8_t *encoded);
  /// Drops the host copies of scalars in bytes [lo, hi).
  void forgetScalarsIn(const char *lo, const char *hi);
  /// Drops the host copies that `inst` is about to overwrite.
  void forgetScalarsWrittenBy(const fb::Instruction &inst);
  /// Copies or casts `n` f32 host values into buffer x (any float dtype).
  absl::Status storeFloats(int32_t x, const float *values, int64_t n);
  const Group &group(int64_t kind) const { return groups_[kind]; }

  plan::LoadedPlan loaded_;
  const fb::Plan &plan_;
  Backend &backend_;
  Comm &comm_;
  ExecutorOptions options_;
  plan::WorldBinding world_;
  LrSchedule schedule_;
  uint64_t seed_ = 0, samplerSeed_ = 0;
  Group groups_[3];

  Buffer persistent_, transient_, scratch_, control_;
  std::vector<char *> ptrs_;
  std::vector<TensorRef> refs_;
  /// Scalars the host wrote (the learning rate, the step, constants, scalar
  /// arithmetic) with their values, so that reading one back needs no wait
  /// for the device. An entry goes as soon as an instruction writes any of
  /// its bytes (views and reused arena bytes included). With
  /// MD_VERIFY_HOST_SCALARS=1 every hit is checked against the device.
  struct HostScalar {
    const char *lo = nullptr, *hi = nullptr;
    fb::DType dtype = fb::DType::F32;
    Scalar value;
  };
  std::vector<HostScalar> hostScalars_;
  bool verifyHostScalars_ = false;
  std::vector<Event> events_;

  std::unique_ptr<Feed> train_;
  Feed *eval_ = nullptr; // the feed of the evaluation running, if any

  // Per step.
  int64_t micro_ = 0; // micro-steps done in this step
  double lossSum_ = 0;
  int64_t lossCount_ = 0;
  std::optional<double> gradNorm_;
  int64_t epoch_ = 0;

  // Progress reports.
  Clock::time_point start_;
  Clock::time_point lastReport_;
  int64_t lastReportStep_ = 0;
  std::map<const fb::Instruction *, Clock::time_point> everyFired_;
  std::string stopReason_;
};

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
  MD_RETURN_IF_ERROR(initTrainData());
  MD_RETURN_IF_ERROR(initState());
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
    if (param->unit() != unit || !param->trainable() || param->offset() < 0)
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
    if ((b.role() != fb::StateRole::Master &&
         b.role() != fb::StateRole::Params) ||
        b.unit() < 0)
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

int64_t Executor::Impl::indexBound(int32_t start) const {
  // Follow the buffer through reshapes, transposes and views to the ops
  // that index with it.
  int64_t bound = 0;
  std::vector<int32_t> work{start};
  std::vector<bool> seen(count(plan_.buffers()), false);
  seen[start] = true;
  auto note = [&](int64_t b) {
    if (b > 0)
      bound = bound == 0 ? b : std::min(bound, b);
  };
  while (!work.empty()) {
    int32_t x = work.back();
    work.pop_back();
    for (uint32_t bl = 0; bl < count(plan_.blocks()); ++bl) {
      const fb::Block *block = plan_.blocks()->Get(bl);
      for (uint32_t i = 0; i < count(block->instructions()); ++i) {
        const fb::Instruction *inst = block->instructions()->Get(i);
        for (uint32_t k = 0; k < count(inst->inputs()); ++k) {
          if (inst->inputs()->Get(k) != x)
            continue;
          switch (inst->opcode()) {
          case fb::Opcode::Embedding:
            if (k == 1)
              note(buf(inst->inputs()->Get(0)).shape()->Get(0));
            break;
          case fb::Opcode::EmbeddingGrad:
            if (k == 1)
              note(inst->ints()->Get(0));
            break;
          case fb::Opcode::CrossEntropy:
          case fb::Opcode::CrossEntropyGrad: {
            uint32_t base = inst->opcode() == fb::Opcode::CrossEntropy ? 0 : 1;
            if (k == base + 1) {
              const fb::Buffer &logits = buf(inst->inputs()->Get(base));
              note(logits.shape()->Get(count(logits.shape()) - 1));
            }
            break;
          }
          case fb::Opcode::Reshape:
          case fb::Opcode::Transpose:
          case fb::Opcode::View: {
            int32_t y = inst->outputs()->Get(0);
            if (!seen[y]) {
              seen[y] = true;
              work.push_back(y);
            }
            break;
          }
          default:
            break;
          }
        }
      }
    }
  }
  return bound;
}

absl::StatusOr<std::vector<data::Field>>
Executor::Impl::batchFields(const fb::Instruction &batch, int64_t *batchSize) {
  std::vector<data::Field> fields;
  *batchSize = -1;
  for (uint32_t k = 0; k < count(batch.outputs()); ++k) {
    int32_t x = batch.outputs()->Get(k);
    const fb::Buffer &b = buf(x);
    if (count(b.shape()) < 1)
      return absl::InvalidArgumentError(absl::StrFormat(
          "batch output %d ('%s') has no batch dim", k, str(b.name())));
    int64_t bs = b.shape()->Get(0);
    if (*batchSize >= 0 && bs != *batchSize)
      return absl::InvalidArgumentError(
          absl::StrFormat("batch outputs disagree on the batch size: %d and %d",
                          *batchSize, bs));
    *batchSize = bs;
    data::Field f;
    f.name = str(b.name());
    for (uint32_t d = 1; d < count(b.shape()); ++d)
      f.shape.push_back(b.shape()->Get(d));
    switch (b.dtype()) {
    case fb::DType::F32:
    case fb::DType::BF16:
    case fb::DType::F16:
      f.dtype = DType::f32;
      break;
    case fb::DType::I32:
      f.dtype = DType::i32;
      f.bound = indexBound(x);
      break;
    case fb::DType::I64:
      f.dtype = DType::i64;
      f.bound = indexBound(x);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "batch output '%s' is %s; data are float or integer tensors", f.name,
          plan::DTypeName(b.dtype())));
    }
    fields.push_back(std::move(f));
  }
  if (*batchSize < 1)
    return absl::InvalidArgumentError("a batch of no samples");
  return fields;
}

absl::StatusOr<std::unique_ptr<Executor::Impl::Feed>>
Executor::Impl::openFeed(int32_t dataset, const fb::Instruction &batch,
                         bool training) {
  const fb::DataSpec *spec = plan_.datasets()->Get(dataset);
  auto feed = std::make_unique<Feed>();
  MD_ASSIGN_OR_RETURN(std::vector<data::Field> fields,
                      batchFields(batch, &feed->batch));
  data::DataSource source;
  source.path = str(spec->path());
  switch (spec->kind()) {
  case fb::DataKind::Synthetic:
    source.kind = data::DataKind::Synthetic;
    source.seed = static_cast<uint64_t>(spec->seed());
    break;
  case fb::DataKind::Npy:
    source.kind = data::DataKind::Npy;
    break;
  case fb::DataKind::Tokens:
    source.kind = data::DataKind::Tokens;
    // Training windows follow the sampling seed; held-out windows are
    // fixed by the data set's own seed.
    source.seed =
        training ? HashKey(samplerSeed_, static_cast<uint64_t>(spec->seed()))
                 : static_cast<uint64_t>(spec->seed());
    break;
  }
  MD_ASSIGN_OR_RETURN(feed->dataset, data::OpenDataset(source, fields));
  data::SamplerOptions so;
  so.datasetSize = feed->dataset->size();
  so.worldSize = world_.worldSize;
  so.rank = options_.rank;
  so.batchSize = feed->batch;
  so.seed = samplerSeed_;
  const fb::Sampler *sampler = plan_.recipe()->sampler();
  if (training) {
    // Token windows are drawn at random offsets already.
    so.shuffle = spec->kind() != fb::DataKind::Tokens;
    so.reshuffleEachEpoch = sampler ? sampler->reshuffle_each_epoch() : true;
    so.tail = sampler && sampler->tail() == fb::TailPolicy::Pad
                  ? data::Tail::Pad
                  : data::Tail::Drop;
  } else {
    so.shuffle = false;
    so.tail = data::Tail::Drop;
    if (so.datasetSize < 0)
      so.datasetSize =
          std::max(kSyntheticEvalSamples, world_.worldSize * feed->batch);
  }
  MD_ASSIGN_OR_RETURN(data::DistributedSampler s,
                      data::DistributedSampler::Create(so));
  feed->stream = std::make_unique<data::BatchStream>(std::move(s));
  for (const data::Field &f : feed->dataset->fields())
    feed->staging.emplace_back(
        static_cast<size_t>(f.numel() * feed->batch * dtypeSize(f.dtype)));
  feed->convert.resize(feed->dataset->fields().size());
  return feed;
}

absl::Status Executor::Impl::initTrainData() {
  int32_t dataset = plan_.recipe()->train_data();
  const fb::Instruction *first = nullptr;
  for (uint32_t bl = 0; bl < count(plan_.blocks()); ++bl) {
    const fb::Block *block = plan_.blocks()->Get(bl);
    if (block->kind() != fb::BlockKind::Step &&
        block->kind() != fb::BlockKind::MicroSteps)
      continue;
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      if (inst->opcode() != fb::Opcode::Batch)
        continue;
      if (first == nullptr) {
        first = inst;
        continue;
      }
      // Every training batch must read the same tensors.
      for (uint32_t k = 0; k < count(inst->outputs()); ++k) {
        const fb::Buffer &a = buf(first->outputs()->Get(k));
        const fb::Buffer &b = buf(inst->outputs()->Get(k));
        bool same =
            a.dtype() == b.dtype() && count(a.shape()) == count(b.shape());
        for (uint32_t d = 0; same && d < count(a.shape()); ++d)
          same = a.shape()->Get(d) == b.shape()->Get(d);
        if (!same || count(inst->outputs()) != count(first->outputs()))
          return absl::InvalidArgumentError(absl::StrFormat(
              "blocks[%d].instructions[%d]: this batch reads other tensors "
              "than the step's first batch",
              bl, i));
      }
    }
  }
  if (first == nullptr || dataset < 0)
    return absl::OkStatus();
  MD_ASSIGN_OR_RETURN(train_, openFeed(dataset, *first, true));
  if (train_->batch != plan_.recipe()->micro_batch())
    return absl::InvalidArgumentError(
        absl::StrFormat("the batch instruction reads %d samples, the recipe's "
                        "micro batch is %d",
                        train_->batch, plan_.recipe()->micro_batch()));
  return absl::OkStatus();
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
  if (train_) {
    info_.data = train_->dataset->describe();
    const data::SamplerOptions &so = train_->stream->sampler().options();
    int64_t perEpoch = train_->stream->sampler().batchesPerEpoch();
    if (perEpoch < 0)
      info_.sampler = absl::StrFormat(
          "endless; rank r reads samples r, r + %d, ...", so.worldSize);
    else
      info_.sampler = absl::StrFormat(
          "seed %d, %s, tail %s; %d batches per rank per epoch", so.seed,
          !so.shuffle             ? "in order"
          : so.reshuffleEachEpoch ? "reshuffled each epoch"
                                  : "shuffled once",
          so.tail == data::Tail::Drop ? "dropped" : "padded", perEpoch);
    const data::Field &f0 = train_->dataset->fields()[0];
    if (f0.dtype != DType::f32)
      info_.tokensPerSample = f0.numel();
  } else {
    info_.data = "none";
  }
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

absl::StatusOr<Scalar> Executor::Impl::readScalar(int32_t x, int64_t element) {
  const char *at = ptrs_[x] + element * esize(x);
  for (const HostScalar &h : hostScalars_) {
    if (h.lo != at || h.hi - h.lo != esize(x) || h.dtype != buf(x).dtype())
      continue;
    if (verifyHostScalars_) {
      uint8_t device[8] = {}, host[8] = {};
      MD_RETURN_IF_ERROR(toHost(device, x, element * esize(x), esize(x)));
      encodeScalar(h.dtype, h.value, host);
      if (std::memcmp(device, host, static_cast<size_t>(esize(x))) != 0)
        return absl::InternalError(absl::StrFormat(
            "buffer %d ('%s'): the host's copy of the scalar (%g) is stale: "
            "the device holds %g",
            x, str(buf(x).name()), h.value.asDouble(),
            decodeScalar(h.dtype, device).asDouble()));
    }
    return h.value;
  }
  uint8_t bytes[8] = {};
  MD_RETURN_IF_ERROR(toHost(bytes, x, element * esize(x), esize(x)));
  return decodeScalar(buf(x).dtype(), bytes);
}

absl::Status Executor::Impl::writeScalar(int32_t x, const Scalar &v) {
  uint8_t bytes[8] = {};
  encodeScalar(buf(x).dtype(), v, bytes);
  MD_RETURN_IF_ERROR(fromHost(x, bytes, 0, esize(x)));
  rememberScalar(x, bytes);
  return absl::OkStatus();
}

void Executor::Impl::forgetScalarsIn(const char *lo, const char *hi) {
  hostScalars_.erase(std::remove_if(hostScalars_.begin(), hostScalars_.end(),
                                    [&](const HostScalar &h) {
                                      return h.lo < hi && lo < h.hi;
                                    }),
                     hostScalars_.end());
}

void Executor::Impl::rememberScalar(int32_t x, const uint8_t *encoded) {
  const char *lo = ptrs_[x], *hi = ptrs_[x] + esize(x);
  forgetScalarsIn(lo, hi);
  // The value as the device holds it (rounded to the buffer's type).
  hostScalars_.push_back({lo, hi, buf(x).dtype(),
                          decodeScalar(buf(x).dtype(), encoded)});
}

void Executor::Impl::forgetScalarsWrittenBy(const fb::Instruction &inst) {
  if (hostScalars_.empty() || inst.outputs() == nullptr)
    return;
  for (int32_t x : *inst.outputs()) {
    if (ptrs_[x] == nullptr)
      continue;
    forgetScalarsIn(ptrs_[x], ptrs_[x] + std::max<int64_t>(
                                             layout_.buffers[x].capacity,
                                             bytes(x)));
  }
}

absl::StatusOr<std::vector<double>> Executor::Impl::readValues(int32_t x) {
  int64_t n = layout_.buffers[x].elements;
  std::vector<uint8_t> raw(static_cast<size_t>(n * esize(x)));
  MD_RETURN_IF_ERROR(toHost(raw.data(), x, 0, n * esize(x)));
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back(
        decodeScalar(buf(x).dtype(), raw.data() + i * esize(x)).asDouble());
  return out;
}

absl::Status Executor::Impl::copyBuffer(int32_t dst, int32_t src,
                                        Stream stream) {
  if (ptrs_[dst] == ptrs_[src])
    return absl::OkStatus();
  return backend_.copy(ptrs_[dst], ptrs_[src], bytes(src), stream);
}

absl::StatusOr<std::vector<uint8_t>> Executor::Impl::readBuffer(int32_t x) {
  if (x < 0 || static_cast<uint32_t>(x) >= count(plan_.buffers()))
    return absl::InvalidArgumentError(absl::StrFormat("no buffer %d", x));
  std::vector<uint8_t> out(static_cast<size_t>(bytes(x)));
  MD_RETURN_IF_ERROR(toHost(out.data(), x, 0, bytes(x)));
  return out;
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

absl::Status Executor::Impl::run() {
  while (step_ < steps_ && !stop_)
    MD_RETURN_IF_ERROR(step());
  return absl::OkStatus();
}

absl::Status Executor::Impl::step() {
  micro_ = 0;
  lossSum_ = 0;
  lossCount_ = 0;
  gradNorm_.reset();
  if (plan_.step_block() >= 0)
    MD_RETURN_IF_ERROR(runBlock(plan_.step_block()));
  lastLoss_ = lossCount_ > 0 ? lossSum_ / static_cast<double>(lossCount_)
                             : std::nan("");
  ++step_;
  if (plan_.hooks_block() >= 0)
    MD_RETURN_IF_ERROR(runBlock(plan_.hooks_block()));
  MD_RETURN_IF_ERROR(report());
  if (stop_ && options_.rank == 0 && options_.observer)
    options_.observer->onExit(step_, stopReason_);
  return absl::OkStatus();
}

absl::Status Executor::Impl::report() {
  int64_t every = options_.logEvery;
  if (every <= 0)
    return absl::OkStatus();
  bool last = step_ >= steps_ || stop_;
  if (step_ % every != 0 && !last && step_ != 1)
    return absl::OkStatus();
  // The mean of the ranks' losses: every rank takes part.
  float local = static_cast<float>(lastLoss_);
  MD_RETURN_IF_ERROR(backend_.copy(control_.data(), &local, 4, kCommStream));
  MD_RETURN_IF_ERROR(comm_.allReduce(control_.data(), control_.data(), 1,
                                     DType::f32, ReduceOp::avg, group(0)));
  float mean = 0;
  MD_RETURN_IF_ERROR(backend_.copy(&mean, control_.data(), 4, kCommStream));
  MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
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
    p.elapsedSeconds = std::chrono::duration<double>(now - start_).count();
    p.epoch = epoch_;
    options_.observer->onProgress(p);
  }
  lastReport_ = now;
  lastReportStep_ = step_;
  return absl::OkStatus();
}

int64_t Executor::Impl::groupableBucket(const fb::Instruction &inst) const {
  if (inst.stream() != kCommStream.id || inst.blocks() != nullptr ||
      count(inst.ints()) < 3)
    return -1;
  int64_t bucket = -1;
  switch (inst.opcode()) {
  case fb::Opcode::AllGather:
  case fb::Opcode::ReduceScatter: {
    bool gather = inst.opcode() == fb::Opcode::AllGather;
    bucket = inst.ints()->Get(gather ? 1 : 2);
    int32_t part = gather ? inst.inputs()->Get(0) : inst.outputs()->Get(0);
    int32_t whole = gather ? inst.outputs()->Get(0) : inst.inputs()->Get(0);
    if (buf(part).size_kind() == fb::SizeKind::Shard) {
      // Only in place: through the scratch buffer a copy must follow the
      // collective, which a group has not launched yet.
      const BufferLayout &wl = layout_.buffers[whole];
      int64_t padded = layout_.buffers[part].elements *
                       group(inst.ints()->Get(0)).size();
      if (wl.placement != Placement::Transient ||
          wl.capacity < padded * esize(whole))
        return -1;
    } else if (count(inst.ints()) < (gather ? 3u : 4u) ||
               inst.ints()->Get(gather ? 2 : 3) != 0) {
      return -1; // along an inner axis: a transpose through the scratch
    }
    break;
  }
  case fb::Opcode::AllReduce:
    bucket = inst.ints()->Get(2);
    break;
  case fb::Opcode::Broadcast:
    bucket = inst.ints()->Get(1);
    break;
  default:
    return -1;
  }
  return bucket;
}

std::string Executor::Impl::blockPrefix(const fb::Block &block) const {
  return block.kind() == fb::BlockKind::Step ||
                 block.kind() == fb::BlockKind::MicroSteps
             ? absl::StrFormat("step %d", step_ + 1)
             : absl::StrFormat("hooks after step %d", step_);
}

uint32_t Executor::Impl::groupEnd(const fb::Block &block, uint32_t i) const {
  if (!comm_.groupsCollectives() || !comm_.streamOrdered())
    return i;
  const fb::Instruction &first = *block.instructions()->Get(i);
  int64_t bucket = groupableBucket(first);
  if (bucket < 0)
    return i;
  std::vector<int32_t> recorded;
  if (first.record() >= 0)
    recorded.push_back(first.record());
  uint32_t end = i + 1;
  for (; end < count(block.instructions()); ++end) {
    const fb::Instruction &next = *block.instructions()->Get(end);
    if (groupableBucket(next) != bucket)
      break;
    // Its waits move before the group: none may wait for a member.
    bool waitsOnMember = false;
    for (uint32_t w = 0; w < count(next.waits()); ++w)
      waitsOnMember = waitsOnMember ||
                      std::find(recorded.begin(), recorded.end(),
                                next.waits()->Get(w)) != recorded.end();
    if (waitsOnMember)
      break;
    if (next.record() >= 0)
      recorded.push_back(next.record());
  }
  return end;
}

absl::Status Executor::Impl::runGroup(const fb::Block &block, uint32_t begin,
                                      uint32_t end) {
  // Every member's waits, then the members between beginGroup and
  // endGroup, then their records: until endGroup the collectives may not
  // be queued, so an event recorded earlier would not follow them.
  for (uint32_t i = begin; i < end; ++i) {
    const fb::Instruction &inst = *block.instructions()->Get(i);
    for (uint32_t w = 0; w < count(inst.waits()); ++w)
      MD_RETURN_IF_ERROR(
          backend_.waitEvent(kCommStream, events_[inst.waits()->Get(w)]));
  }
  MD_RETURN_IF_ERROR(comm_.beginGroup());
  absl::Status s;
  for (uint32_t i = begin; i < end && s.ok(); ++i) {
    const fb::Instruction &inst = *block.instructions()->Get(i);
    forgetScalarsWrittenBy(inst);
    s = executeCollective(inst);
  }
  absl::Status ended = comm_.endGroup();
  MD_RETURN_IF_ERROR(s);
  MD_RETURN_IF_ERROR(ended);
  for (uint32_t i = begin; i < end; ++i) {
    const fb::Instruction &inst = *block.instructions()->Get(i);
    if (inst.record() >= 0)
      MD_RETURN_IF_ERROR(
          backend_.recordEvent(kCommStream, events_[inst.record()]));
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::runBlock(int32_t b) {
  const fb::Block *block = plan_.blocks()->Get(b);
  for (uint32_t i = 0; i < count(block->instructions()); ++i) {
    const fb::Instruction *inst = block->instructions()->Get(i);
    // The consecutive collectives of one bucket go to the comm as a group.
    if (uint32_t end = groupEnd(*block, i); end > i + 1) {
      absl::Status s = runGroup(*block, i, end);
      if (!s.ok())
        return annotate(s, absl::StrCat(blockPrefix(*block), ": ", where(b, i)));
      i = end - 1;
      continue;
    }
    Stream stream{static_cast<int>(inst->stream())};
    absl::Status s;
    for (uint32_t w = 0; w < count(inst->waits()) && s.ok(); ++w)
      s = backend_.waitEvent(stream, events_[inst->waits()->Get(w)]);
    if (s.ok()) {
      forgetScalarsWrittenBy(*inst);
      s = execute(*inst);
    }
    if (s.ok() && inst->record() >= 0)
      s = backend_.recordEvent(stream, events_[inst->record()]);
    if (!s.ok()) {
      // An error from a nested block already says where it happened.
      std::string prefix = blockPrefix(*block);
      if (s.message().rfind(prefix, 0) == 0)
        return s;
      return annotate(s, absl::StrCat(prefix, ": ", where(b, i)));
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::readBatch(const fb::Instruction &inst) {
  Feed *feed = eval_ != nullptr ? eval_ : train_.get();
  if (feed == nullptr)
    return absl::FailedPreconditionError("a batch instruction without data");
  data::BatchStream::Next next = feed->stream->next();
  std::vector<void *> out;
  for (auto &s : feed->staging)
    out.push_back(s.data());
  MD_RETURN_IF_ERROR(feed->dataset->read(next.epoch, next.indices, out));
  if (feed == train_.get())
    epoch_ = next.epoch;
  const std::vector<data::Field> &fields = feed->dataset->fields();
  for (uint32_t k = 0; k < count(inst.outputs()); ++k) {
    int32_t x = inst.outputs()->Get(k);
    int64_t n = layout_.buffers[x].elements;
    if (fields[k].dtype != DType::f32 || buf(x).dtype() == fb::DType::F32) {
      MD_RETURN_IF_ERROR(backend_.copy(ptrs_[x], feed->staging[k].data(),
                                       bytes(x), kComputeStream));
      continue;
    }
    if (!feed->convert[k]) {
      MD_ASSIGN_OR_RETURN(feed->convert[k], backend_.allocate(n * 4));
    }
    MD_RETURN_IF_ERROR(backend_.copy(feed->convert[k].data(),
                                     feed->staging[k].data(), n * 4,
                                     kComputeStream));
    CastArgs cast;
    cast.x = TensorRef(feed->convert[k].data(), DType::f32, ref(x).shape);
    cast.out = ref(x);
    MD_RETURN_IF_ERROR(backend_.cast(cast));
  }
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
  double sum = 0;
  int64_t n = 0;
  if (batch != nullptr) {
    MD_ASSIGN_OR_RETURN(std::unique_ptr<Feed> feed,
                        openFeed(dataset, *batch, false));
    if (batches <= 0)
      batches = feed->stream->sampler().batchesPerEpoch();
    eval_ = feed.get();
    for (int64_t k = 0; k < batches; ++k) {
      absl::Status s = runBlock(body);
      if (!s.ok()) {
        eval_ = nullptr;
        return s;
      }
      MD_ASSIGN_OR_RETURN(Scalar v, readScalar(loss));
      sum += v.asDouble();
      ++n;
    }
    eval_ = nullptr;
  } else {
    // A body that reads no data: run it once.
    MD_RETURN_IF_ERROR(runBlock(body));
    MD_ASSIGN_OR_RETURN(Scalar v, readScalar(loss));
    sum = v.asDouble();
    n = 1;
  }
  float mean =
      n > 0 ? static_cast<float>(sum / static_cast<double>(n)) : std::nanf("");
  int32_t out = inst.outputs()->Get(0);
  MD_RETURN_IF_ERROR(fromHost(out, &mean, 0, 4));
  return comm_.allReduce(ptrs_[out], ptrs_[out], 1, DType::f32, ReduceOp::avg,
                         group(0));
}

absl::Status Executor::Impl::executeCollective(const fb::Instruction &inst) {
  const int64_t kind = inst.ints()->Get(0);
  const Group &g = group(kind);
  const int64_t gs = g.size();
  auto dtypeOf = [&](int32_t x) -> absl::StatusOr<DType> {
    std::optional<DType> t = kernelDType(buf(x).dtype());
    if (!t)
      return absl::InvalidArgumentError(
          absl::StrFormat("collectives move f32, bf16, f16, i32 or i64, not %s",
                          plan::DTypeName(buf(x).dtype())));
    return *t;
  };
  switch (inst.opcode()) {
  case fb::Opcode::AllGather:
  case fb::Opcode::ReduceScatter: {
    bool gather = inst.opcode() == fb::Opcode::AllGather;
    int32_t part = gather ? inst.inputs()->Get(0) : inst.outputs()->Get(0);
    int32_t whole = gather ? inst.outputs()->Get(0) : inst.inputs()->Get(0);
    MD_ASSIGN_OR_RETURN(DType t, dtypeOf(whole));
    const int64_t es = esize(whole);
    const int64_t partN = layout_.buffers[part].elements;
    const int64_t wholeN = layout_.buffers[whole].elements;
    const Group &gr = g;
    if (buf(part).size_kind() == fb::SizeKind::Shard) {
      // The flat form: pad the whole to |G| * ceil(N / |G|) elements.
      int64_t padded = partN * gs;
      const BufferLayout &wl = layout_.buffers[whole];
      bool inPlace =
          wl.placement == Placement::Transient && wl.capacity >= padded * es;
      char *full = ptrs_[whole];
      if (!inPlace) {
        if (scratch_.bytes() < padded * es)
          return absl::InternalError("collective scratch buffer too small");
        full = static_cast<char *>(scratch_.data());
      }
      if (gather) {
        MD_RETURN_IF_ERROR(comm_.allGather(ptrs_[part], full, partN, t, gr));
        if (!inPlace)
          MD_RETURN_IF_ERROR(
              backend_.copy(ptrs_[whole], full, wholeN * es, kCommStream));
        return absl::OkStatus();
      }
      if (!inPlace)
        MD_RETURN_IF_ERROR(
            backend_.copy(full, ptrs_[whole], wholeN * es, kCommStream));
      if (padded > wholeN)
        MD_RETURN_IF_ERROR(backend_.zero(full + wholeN * es,
                                         (padded - wholeN) * es, kCommStream));
      // A host comm reads `full` now; a stream-ordered one after the copy
      // and the zeroing on the same stream.
      if (!comm_.streamOrdered())
        MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
      auto op = static_cast<ReduceOp>(inst.ints()->Get(1));
      return comm_.reduceScatter(full, ptrs_[part], partN, t, op, gr);
    }
    // The tensor form along `axis`.
    int64_t axis = inst.ints()->Get(gather ? 2 : 3);
    const Shape &p = ref(part).shape;
    if (axis == 0) {
      if (gather)
        return comm_.allGather(ptrs_[part], ptrs_[whole], partN, t, gr);
      auto op = static_cast<ReduceOp>(inst.ints()->Get(1));
      return comm_.reduceScatter(ptrs_[whole], ptrs_[part], partN, t, op, gr);
    }
    if (scratch_.bytes() < wholeN * es)
      return absl::InternalError("collective scratch buffer too small");
    // stacked: [G, p...]; split: p with dim `axis` split into [G, p[axis]].
    Shape stacked{gs}, split;
    stacked.insert(stacked.end(), p.begin(), p.end());
    for (int64_t d = 0; d < static_cast<int64_t>(p.size()); ++d) {
      if (d == axis)
        split.push_back(gs);
      split.push_back(p[d]);
    }
    TransposeArgs tr;
    tr.stream = kCommStream;
    if (gather) {
      MD_RETURN_IF_ERROR(
          comm_.allGather(ptrs_[part], scratch_.data(), partN, t, gr));
      tr.x = TensorRef(scratch_.data(), t, stacked);
      tr.out = TensorRef(ptrs_[whole], t, split);
      for (int64_t d = 0; d < static_cast<int64_t>(split.size()); ++d)
        tr.perm.push_back(d < axis ? d + 1 : d == axis ? 0 : d);
      return backend_.transpose(tr);
    }
    tr.x = TensorRef(ptrs_[whole], t, split);
    tr.out = TensorRef(scratch_.data(), t, stacked);
    for (int64_t d = 0; d < static_cast<int64_t>(stacked.size()); ++d)
      tr.perm.push_back(d == 0 ? axis : d <= axis ? d - 1 : d);
    MD_RETURN_IF_ERROR(backend_.transpose(tr));
    if (!comm_.streamOrdered())
      MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
    auto op = static_cast<ReduceOp>(inst.ints()->Get(1));
    return comm_.reduceScatter(scratch_.data(), ptrs_[part], partN, t, op, gr);
  }
  case fb::Opcode::AllReduce: {
    int32_t x = inst.inputs()->Get(0), y = inst.outputs()->Get(0);
    MD_ASSIGN_OR_RETURN(DType t, dtypeOf(x));
    return comm_.allReduce(ptrs_[x], ptrs_[y], layout_.buffers[x].elements, t,
                           static_cast<ReduceOp>(inst.ints()->Get(1)), g);
  }
  case fb::Opcode::Broadcast: {
    int32_t x = inst.inputs()->Get(0), y = inst.outputs()->Get(0);
    MD_ASSIGN_OR_RETURN(DType t, dtypeOf(x));
    return comm_.broadcast(ptrs_[x], ptrs_[y], layout_.buffers[x].elements, t,
                           static_cast<int>(inst.ints()->Get(2)), g);
  }
  case fb::Opcode::Barrier:
    return comm_.barrier(g);
  default:
    return absl::InternalError("not a collective");
  }
}

absl::Status Executor::Impl::executeScalar(const fb::Instruction &inst) {
  switch (inst.opcode()) {
  case fb::Opcode::Constant: {
    int32_t y = inst.outputs()->Get(0);
    int64_t n = layout_.buffers[y].elements;
    std::vector<uint8_t> raw(static_cast<size_t>(n * esize(y)));
    bool isF = isFloatPlanDType(buf(y).dtype());
    for (int64_t i = 0; i < n; ++i) {
      Scalar v =
          isF ? Scalar::Float(inst.floats()->Get(static_cast<uint32_t>(i)))
              : Scalar::Int(inst.ints()->Get(static_cast<uint32_t>(i)));
      encodeScalar(buf(y).dtype(), v, raw.data() + i * esize(y));
    }
    return fromHost(y, raw.data(), 0, n * esize(y));
  }
  case fb::Opcode::ScalarArith: {
    int32_t y = inst.outputs()->Get(0);
    MD_ASSIGN_OR_RETURN(Scalar a, readScalar(inst.inputs()->Get(0)));
    Scalar b = Scalar::Int(0);
    if (count(inst.inputs()) > 1) {
      MD_ASSIGN_OR_RETURN(b, readScalar(inst.inputs()->Get(1)));
    }
    auto kind = static_cast<fb::ArithKind>(inst.ints()->Get(0));
    fb::DType t = buf(y).dtype();
    if (isFloatPlanDType(t)) {
      double x = a.asDouble(), z = b.asDouble(), r = 0;
      switch (kind) {
      case fb::ArithKind::Add:
        r = x + z;
        break;
      case fb::ArithKind::Sub:
        r = x - z;
        break;
      case fb::ArithKind::Mul:
        r = x * z;
        break;
      case fb::ArithKind::Div:
        r = x / z;
        break;
      case fb::ArithKind::Rem:
        r = std::fmod(x, z);
        break;
      case fb::ArithKind::Neg:
        r = -x;
        break;
      case fb::ArithKind::Min:
        r = std::isnan(x) || std::isnan(z) ? NAN : std::min(x, z);
        break;
      case fb::ArithKind::Max:
        r = std::isnan(x) || std::isnan(z) ? NAN : std::max(x, z);
        break;
      default:
        return absl::InvalidArgumentError("a logical operation on floats");
      }
      if (t == fb::DType::F32)
        r = static_cast<float>(r);
      return writeScalar(y, Scalar::Float(r));
    }
    int64_t x = a.i, z = b.i, r = 0;
    bool overflow = false;
    switch (kind) {
    case fb::ArithKind::Add:
      overflow = __builtin_add_overflow(x, z, &r);
      break;
    case fb::ArithKind::Sub:
      overflow = __builtin_sub_overflow(x, z, &r);
      break;
    case fb::ArithKind::Mul:
      overflow = __builtin_mul_overflow(x, z, &r);
      break;
    case fb::ArithKind::Div:
    case fb::ArithKind::Rem:
      if (z == 0)
        return absl::InvalidArgumentError(absl::StrFormat(
            "integer %s by zero",
            kind == fb::ArithKind::Div ? "division" : "remainder"));
      if (x == INT64_MIN && z == -1)
        r = kind == fb::ArithKind::Div ? INT64_MIN : 0;
      else
        r = kind == fb::ArithKind::Div ? x / z : x % z;
      break;
    case fb::ArithKind::Neg:
      r = x == INT64_MIN ? x : -x;
      break;
    case fb::ArithKind::And:
      r = x & z;
      break;
    case fb::ArithKind::Or:
      r = x | z;
      break;
    case fb::ArithKind::Xor:
      r = x ^ z;
      break;
    case fb::ArithKind::Not:
      r = t == fb::DType::Bool ? !x : ~x;
      break;
    case fb::ArithKind::Min:
      r = std::min(x, z);
      break;
    case fb::ArithKind::Max:
      r = std::max(x, z);
      break;
    }
    (void)overflow; // integers wrap around, as arith's do
    if (t == fb::DType::I32)
      r = static_cast<int32_t>(static_cast<uint32_t>(r));
    if (t == fb::DType::Bool)
      r &= 1;
    return writeScalar(y, Scalar::Int(r));
  }
  case fb::Opcode::ScalarCompare: {
    MD_ASSIGN_OR_RETURN(Scalar a, readScalar(inst.inputs()->Get(0)));
    MD_ASSIGN_OR_RETURN(Scalar b, readScalar(inst.inputs()->Get(1)));
    auto kind = static_cast<fb::CompareKind>(inst.ints()->Get(0));
    bool r = false;
    if (a.isFloat || b.isFloat) {
      double x = a.asDouble(), z = b.asDouble();
      switch (kind) {
      case fb::CompareKind::Eq:
        r = x == z;
        break;
      case fb::CompareKind::Ne:
        r = !(x == z);
        break;
      case fb::CompareKind::Lt:
        r = x < z;
        break;
      case fb::CompareKind::Le:
        r = x <= z;
        break;
      case fb::CompareKind::Gt:
        r = x > z;
        break;
      case fb::CompareKind::Ge:
        r = x >= z;
        break;
      }
    } else {
      switch (kind) {
      case fb::CompareKind::Eq:
        r = a.i == b.i;
        break;
      case fb::CompareKind::Ne:
        r = a.i != b.i;
        break;
      case fb::CompareKind::Lt:
        r = a.i < b.i;
        break;
      case fb::CompareKind::Le:
        r = a.i <= b.i;
        break;
      case fb::CompareKind::Gt:
        r = a.i > b.i;
        break;
      case fb::CompareKind::Ge:
        r = a.i >= b.i;
        break;
      }
    }
    return writeScalar(inst.outputs()->Get(0), Scalar::Int(r ? 1 : 0));
  }
  case fb::Opcode::ScalarConvert: {
    int32_t y = inst.outputs()->Get(0);
    MD_ASSIGN_OR_RETURN(Scalar a, readScalar(inst.inputs()->Get(0)));
    fb::DType t = buf(y).dtype();
    if (isFloatPlanDType(t))
      return writeScalar(y, Scalar::Float(a.asDouble()));
    if (t == fb::DType::Bool)
      return writeScalar(y, Scalar::Int(a.asDouble() != 0 ? 1 : 0));
    if (a.isFloat) {
      double v = std::trunc(a.f);
      double lo = t == fb::DType::I32 ? -2147483648.0 : -9223372036854775808.0;
      double hi = t == fb::DType::I32 ? 2147483648.0 : 9223372036854775808.0;
      if (!(v >= lo && v < hi))
        return absl::OutOfRangeError(absl::StrFormat(
            "%g does not convert to %s", a.f, plan::DTypeName(t)));
      return writeScalar(y, Scalar::Int(static_cast<int64_t>(v)));
    }
    int64_t v = a.i;
    if (t == fb::DType::I32)
      v = static_cast<int32_t>(static_cast<uint32_t>(v));
    return writeScalar(y, Scalar::Int(v));
  }
  default:
    return absl::InternalError("not a scalar op");
  }
}

absl::Status Executor::Impl::execute(const fb::Instruction &inst) {
  using Op = fb::Opcode;
  auto I = [&](uint32_t k) { return inst.inputs()->Get(k); };
  auto O = [&](uint32_t k) { return inst.outputs()->Get(k); };
  auto in = [&](uint32_t k) -> const TensorRef & { return ref(I(k)); };
  auto out = [&](uint32_t k) -> const TensorRef & { return ref(O(k)); };
  auto intAttr = [&](uint32_t k) { return inst.ints()->Get(k); };
  auto floatAttr = [&](uint32_t k) { return inst.floats()->Get(k); };
  const uint32_t ins = count(inst.inputs()), outs = count(inst.outputs());
  const Stream stream{static_cast<int>(inst.stream())};

  // clang-format cannot see the case labels the table expands to below.
  // clang-format off
  switch (inst.opcode()) {
  // --- compute: every kernel row of runtime/plan/Opcodes.def -----------------
#define MD_KERNEL(Name, ...) case Op::Name:
#include "runtime/plan/Opcodes.def"
  {
    // The executor's own part of two kernels: a cast to the same type is a
    // copy, and the clip norm is the step's gradient norm for the report.
    if (inst.opcode() == Op::Cast && buf(I(0)).dtype() == buf(O(0)).dtype())
      return copyBuffer(O(0), I(0), stream);
    if (inst.opcode() == Op::Clip) {
      MD_ASSIGN_OR_RETURN(Scalar norm, readScalar(I(ins - 1)));
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
    return DispatchKernel({backend_, refs_, readFloat, readInt}, inst);
  }
  // clang-format on
  case Op::Sqrt:
  case Op::Rsqrt: {
    // Elementwise on the host, in f32, rounded to the element type: the
    // clip norm's square root, SyncBatchNorm's 1 / sqrt(var + eps).
    const bool rsqrt = inst.opcode() == Op::Rsqrt;
    const float eps = rsqrt ? static_cast<float>(floatAttr(0)) : 0.0f;
    int32_t x = I(0), y = O(0);
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

  // --- buffers ---------------------------------------------------------------
  case Op::View:
    return absl::OkStatus(); // the output aliases its source (ArenaLayout)
  case Op::ShardSlice: {
    int32_t full = I(0), shard = O(0);
    const Group &g = group(intAttr(0));
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
    return executeCollective(inst);

  // --- state and the step ----------------------------------------------------
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
  case Op::GradAccumulate: {
    int32_t g = I(0), acc = O(0);
    if (micro_ == 0) {
      if (buf(g).dtype() == buf(acc).dtype())
        return copyBuffer(acc, g, stream);
      CastArgs a;
      a.x = in(0);
      a.out = out(0);
      a.stream = stream;
      return backend_.cast(a);
    }
    AccumulateArgs a;
    a.acc = out(0);
    a.g = in(0);
    a.out = out(0);
    a.stream = stream;
    return backend_.accumulate(a);
  }
  case Op::GradTotal: {
    int32_t g = I(0), total = O(0);
    if (world_.accumulationSteps > 1) {
      AccumulateArgs a;
      a.acc = in(1);
      a.g = in(0);
      a.out = out(0);
      a.stream = stream;
      return backend_.accumulate(a);
    }
    if (buf(g).dtype() == buf(total).dtype())
      return copyBuffer(total, g, stream);
    CastArgs a;
    a.x = in(0);
    a.out = out(0);
    a.stream = stream;
    return backend_.cast(a);
  }

  // --- values of the run -----------------------------------------------------
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
  case Op::FileExists:
    return writeScalar(
        O(0),
        Scalar::Int(::access(str(inst.strings()->Get(0)).c_str(), F_OK) == 0));

  // --- host scalars
  // ------------------------------------------------------------
  case Op::Constant:
  case Op::ScalarArith:
  case Op::ScalarCompare:
  case Op::ScalarConvert:
    return executeScalar(inst);

  // --- io
  // ------------------------------------------------------------------------
  case Op::Log: {
    if (options_.rank != 0 || options_.observer == nullptr)
      return absl::OkStatus();
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
  case Op::Print: {
    if (options_.rank != 0 || options_.observer == nullptr)
      return absl::OkStatus();
    std::string line =
        count(inst.strings()) > 0 ? str(inst.strings()->Get(0)) : "";
    for (uint32_t k = 0; k < ins; ++k) {
      MD_ASSIGN_OR_RETURN(std::vector<double> v, readValues(I(k)));
      for (double e : v)
        absl::StrAppend(&line, " ", formatValue(e));
    }
    options_.observer->onPrint(step_, line);
    return absl::OkStatus();
  }
  case Op::Evaluate:
    return evaluate(inst);
  case Op::Save:
    return save(inst);
  case Op::Exit:
    stop_ = true;
    stopReason_ = count(inst.strings()) > 0 ? str(inst.strings()->Get(0)) : "";
    return absl::OkStatus();

  // --- control
  // -------------------------------------------------------------------
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
    int64_t period = intAttr(0);
    auto unit = static_cast<fb::PeriodUnit>(intAttr(1));
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
      MD_RETURN_IF_ERROR(comm_.broadcast(control_.data(), control_.data(), 1,
                                         DType::i64, 0, group(0)));
      MD_RETURN_IF_ERROR(backend_.copy(&flag, control_.data(), 8, kCommStream));
      MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
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
      MD_RETURN_IF_ERROR(runBlock(inst.blocks()->Get(0)));
      ++micro_;
    }
    return absl::OkStatus();
  }
  case Op::Yield:
    return absl::OkStatus(); // the If or Evaluate that ran the block reads it
  case Op::Invalid:
    break;
  }
  return absl::UnimplementedError(
      absl::StrFormat("opcode %s is not implemented by the executor",
                      plan::OpcodeName(inst.opcode())));
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

absl::StatusOr<std::vector<NamedTensor>> Executor::Impl::gatherParameters() {
  std::vector<std::vector<float>> units(count(plan_.units()));
  std::vector<bool> haveUnit(count(plan_.units()), false);
  for (uint32_t i = 0; i < count(plan_.buffers()); ++i) {
    int32_t x = static_cast<int32_t>(i);
    const fb::Buffer &b = buf(x);
    if (b.role() != fb::StateRole::Master || b.unit() < 0 ||
        layout_.buffers[x].placement != Placement::Persistent)
      continue;
    if (b.dtype() != fb::DType::F32)
      return absl::UnimplementedError(
          absl::StrFormat("master weights '%s' are %s; md saves f32 masters",
                          str(b.name()), plan::DTypeName(b.dtype())));
    int64_t n = b.numel();
    std::vector<float> &host = units[b.unit()];
    host.assign(static_cast<size_t>(n), 0.0f);
    if (b.size_kind() == fb::SizeKind::Shard) {
      const Group &g = group(static_cast<int64_t>(b.group()));
      int64_t s = layout_.buffers[x].elements;
      MD_ASSIGN_OR_RETURN(Buffer tmp, backend_.allocate(s * g.size() * 4));
      MD_RETURN_IF_ERROR(backend_.synchronize(kComputeStream));
      MD_RETURN_IF_ERROR(
          comm_.allGather(ptrs_[x], tmp.data(), s, DType::f32, g));
      MD_RETURN_IF_ERROR(
          backend_.copy(host.data(), tmp.data(), n * 4, kCommStream));
      MD_RETURN_IF_ERROR(backend_.synchronize(kCommStream));
    } else {
      MD_RETURN_IF_ERROR(toHost(host.data(), x, 0, n * 4));
    }
    haveUnit[b.unit()] = true;
  }
  std::vector<NamedTensor> out;
  for (uint32_t p = 0; p < count(plan_.params()); ++p) {
    const fb::Param *param = plan_.params()->Get(p);
    NamedTensor t;
    t.name = str(param->name());
    int64_t numel = 1;
    for (uint32_t d = 0; d < count(param->shape()); ++d) {
      t.shape.push_back(param->shape()->Get(d));
      numel *= param->shape()->Get(d);
    }
    if (param->trainable() && param->offset() >= 0 && param->unit() >= 0 &&
        haveUnit[param->unit()]) {
      const std::vector<float> &u = units[param->unit()];
      t.values.assign(u.begin() + param->offset(),
                      u.begin() + param->offset() + numel);
    } else {
      // Frozen parameters never change: their initial values.
      t.values.resize(static_cast<size_t>(numel));
      for (int64_t e = 0; e < numel; ++e)
        t.values[e] = static_cast<float>(initValue(p, e));
    }
    out.push_back(std::move(t));
  }
  return out;
}

absl::Status Executor::Impl::saveFull(const std::string &path) {
  MD_ASSIGN_OR_RETURN(std::vector<NamedTensor> params, gatherParameters());
  if (options_.rank != 0)
    return absl::OkStatus();
  std::vector<SafetensorsTensor> tensors;
  for (NamedTensor &p : params) {
    SafetensorsTensor t;
    t.name = p.name;
    t.dtype = "F32";
    t.shape = p.shape;
    t.data.resize(p.values.size() * 4);
    std::memcpy(t.data.data(), p.values.data(), t.data.size());
    tensors.push_back(std::move(t));
  }
  std::map<std::string, std::string> meta = {
      {"format", "pt"},
      {"model", str(plan_.header()->model())},
      {"plan", str(plan_.header()->plan_name())},
      {"step", absl::StrCat(step_)},
      {"world_size", absl::StrCat(world_.worldSize)}};
  MD_RETURN_IF_ERROR(WriteSafetensors(path, tensors, meta));
  if (options_.observer)
    options_.observer->onSave(step_, path);
  return absl::OkStatus();
}

absl::Status Executor::Impl::saveSharded(const std::string &dir) {
  const Group &world = group(0);
  std::string tmp = dir + ".tmp";
  if (options_.rank == 0)
    MD_RETURN_IF_ERROR(MakeDirectories(tmp));
  MD_RETURN_IF_ERROR(comm_.barrier(world));
  std::vector<SafetensorsTensor> tensors;
  for (uint32_t i = 0; i < count(plan_.buffers()); ++i) {
    int32_t x = static_cast<int32_t>(i);
    if (layout_.buffers[x].placement != Placement::Persistent)
      continue;
    SafetensorsTensor t;
    t.name = str(buf(x).name());
    if (t.name.empty())
      t.name = absl::StrCat("buffer.", x);
    t.dtype = safetensorsDType(buf(x).dtype());
    t.shape = {layout_.buffers[x].elements};
    MD_ASSIGN_OR_RETURN(t.data, readBuffer(x));
    tensors.push_back(std::move(t));
  }
  std::map<std::string, std::string> meta = {
      {"rank", absl::StrCat(options_.rank)},
      {"world_size", absl::StrCat(world_.worldSize)},
      {"step", absl::StrCat(step_)},
      {"epoch", absl::StrCat(epoch_)}};
  MD_RETURN_IF_ERROR(WriteSafetensors(
      absl::StrFormat("%s/rank_%05d.safetensors", tmp, options_.rank), tensors,
      meta));
  MD_RETURN_IF_ERROR(comm_.barrier(world));
  if (options_.rank == 0) {
    std::string json = absl::StrFormat(
        "{\"format\": \"md-sharded\", \"version\": 1, \"model\": %s, \"plan\": "
        "%s, "
        "\"world_size\": %d, \"shard_group_size\": %d, \"step\": %d, "
        "\"epoch\": %d, "
        "\"seed\": %d}\n",
        JsonQuote(str(plan_.header()->model())),
        JsonQuote(str(plan_.header()->plan_name())), world_.worldSize,
        world_.shardGroupSize, step_, epoch_, static_cast<int64_t>(seed_));
    MD_RETURN_IF_ERROR(WriteFileAtomically(tmp + "/meta.json", [&](int fd) {
      return WriteAll(fd, json.data(), json.size());
    }));
    // Replace an older checkpoint of the same step, then publish.
    if (::access(dir.c_str(), F_OK) == 0) {
      for (int r = 0;; ++r) {
        std::string f = absl::StrFormat("%s/rank_%05d.safetensors", dir, r);
        if (::unlink(f.c_str()) != 0)
          break;
      }
      ::unlink((dir + "/meta.json").c_str());
      if (::rmdir(dir.c_str()) != 0)
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s: exists and holds other files; not replacing it", dir));
    }
    if (::rename(tmp.c_str(), dir.c_str()) != 0)
      return absl::InternalError(absl::StrFormat(
          "%s: cannot rename %s: %s", dir, tmp, std::strerror(errno)));
    size_t slash = dir.find_last_of('/');
    MD_RETURN_IF_ERROR(
        SyncDirectory(slash == std::string::npos ? "." : dir.substr(0, slash)));
    if (options_.observer)
      options_.observer->onSave(step_, dir);
  }
  return comm_.barrier(world);
}

absl::Status Executor::Impl::save(const fb::Instruction &inst) {
  auto format = static_cast<fb::CheckpointFormat>(inst.ints()->Get(0));
  std::string dir =
      count(inst.strings()) > 0 ? str(inst.strings()->Get(0)) : "";
  if (dir.empty())
    dir = "checkpoints";
  if (format == fb::CheckpointFormat::Full)
    return saveFull(absl::StrFormat("%s/step_%08d.safetensors", dir, step_));
  return saveSharded(absl::StrFormat("%s/step_%08d", dir, step_));
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
double Executor::lastLoss() const { return impl_->lastLoss_; }
const RunInfo &Executor::info() const { return impl_->info_; }
const ArenaLayout &Executor::layout() const { return impl_->layout_; }
absl::StatusOr<std::vector<NamedTensor>> Executor::GatherParameters() {
  return impl_->gatherParameters();
}
absl::Status Executor::SaveFull(const std::string &path) {
  return impl_->saveFull(path);
}
absl::StatusOr<std::vector<uint8_t>> Executor::ReadBuffer(int32_t buffer) {
  return impl_->readBuffer(buffer);
}

} // namespace md::runtime
