//===- DataFeeds.cpp - the data a plan's batch instructions read ----------===//
//
// Fields from batch outputs, data sets and samplers opened for a rank, and
// batches copied to the device (DataFeeds.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/DataFeeds.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "runtime/exec/PlanAccess.h"
#include "runtime/core/Random.h"
#include "runtime/core/Status.h"

namespace md::runtime {

using plan_access::count;
using plan_access::planInstructions;
using plan_access::str;

/// A data source read batch by batch: one per training dataset, and one
/// per evaluation while it runs.
struct DataFeeds::Feed {
  std::unique_ptr<data::Dataset> dataset;
  std::unique_ptr<data::BatchStream> stream;
  int64_t batch = 0; // samples per batch on this rank
  std::vector<std::vector<uint8_t>> staging;
  std::vector<Buffer> convert; // f32 device staging for bf16/f16 inputs
};

DataFeeds::DataFeeds(const fb::Plan &plan, int64_t worldSize, int rank,
                     uint64_t samplerSeed)
    : plan_(plan), worldSize_(worldSize), rank_(rank),
      samplerSeed_(samplerSeed) {}

DataFeeds::~DataFeeds() = default;

int64_t DataFeeds::indexBound(int32_t start) const {
  auto buf = [&](int32_t x) -> const fb::Buffer & {
    return *plan_.buffers()->Get(x);
  };
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
  // What input k of `inst`, which reads the buffer followed, tells.
  auto visit = [&](const fb::Instruction &inst, uint32_t k) {
    switch (inst.opcode()) {
    case fb::Opcode::Embedding:
      if (k == 1)
        note(buf(inst.inputs()->Get(0)).shape()->Get(0));
      break;
    case fb::Opcode::EmbeddingGrad:
      if (k == 1)
        note(inst.ints()->Get(0));
      break;
    case fb::Opcode::CrossEntropy:
    case fb::Opcode::CrossEntropyGrad: {
      uint32_t base = inst.opcode() == fb::Opcode::CrossEntropy ? 0 : 1;
      if (k == base + 1) {
        const fb::Buffer &logits = buf(inst.inputs()->Get(base));
        note(logits.shape()->Get(count(logits.shape()) - 1));
      }
      break;
    }
    case fb::Opcode::Reshape:
    case fb::Opcode::Transpose:
    case fb::Opcode::View: {
      int32_t y = inst.outputs()->Get(0);
      if (!seen[y]) {
        seen[y] = true;
        work.push_back(y);
      }
      break;
    }
    default:
      break;
    }
  };
  while (!work.empty()) {
    int32_t x = work.back();
    work.pop_back();
    for (const fb::Instruction *inst : planInstructions(plan_))
      for (uint32_t k = 0; k < count(inst->inputs()); ++k)
        if (inst->inputs()->Get(k) == x)
          visit(*inst, k);
  }
  return bound;
}

absl::StatusOr<std::vector<data::Field>>
DataFeeds::batchFields(const fb::Instruction &batch, int64_t *batchSize) const {
  std::vector<data::Field> fields;
  *batchSize = -1;
  for (uint32_t k = 0; k < count(batch.outputs()); ++k) {
    int32_t x = batch.outputs()->Get(k);
    const fb::Buffer &b = *plan_.buffers()->Get(x);
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

absl::StatusOr<std::unique_ptr<DataFeeds::Feed>>
DataFeeds::open(int32_t dataset, const fb::Instruction &batch,
                bool training) const {
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
  so.worldSize = worldSize_;
  so.rank = rank_;
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
          std::max(kSyntheticEvalSamples, worldSize_ * feed->batch);
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

absl::Status DataFeeds::openTraining() {
  int32_t dataset = plan_.recipe()->train_data();
  auto buf = [&](int32_t x) -> const fb::Buffer & {
    return *plan_.buffers()->Get(x);
  };
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
  MD_ASSIGN_OR_RETURN(train_, open(dataset, *first, true));
  if (train_->batch != plan_.recipe()->micro_batch())
    return absl::InvalidArgumentError(
        absl::StrFormat("the batch instruction reads %d samples, the recipe's "
                        "micro batch is %d",
                        train_->batch, plan_.recipe()->micro_batch()));
  return absl::OkStatus();
}

absl::Status DataFeeds::checkSources(bool training) {
  if (training)
    MD_RETURN_IF_ERROR(openTraining());
  if (train_)
    MD_RETURN_IF_ERROR(train_->dataset->checkContents());
  std::vector<bool> checked(count(plan_.datasets()), false);
  if (int32_t t = plan_.recipe()->train_data(); t >= 0 && train_)
    checked[t] = true;
  for (const fb::Instruction *inst :
       planInstructions(plan_, fb::Opcode::Evaluate)) {
    const int32_t dataset = static_cast<int32_t>(inst->ints()->Get(0));
    if (dataset < 0 || static_cast<size_t>(dataset) >= checked.size() ||
        checked[dataset])
      continue;
    const fb::Block *block = plan_.blocks()->Get(inst->blocks()->Get(0));
    const fb::Instruction *batch = nullptr;
    for (uint32_t i = 0; i < count(block->instructions()); ++i)
      if (block->instructions()->Get(i)->opcode() == fb::Opcode::Batch)
        batch = block->instructions()->Get(i);
    if (batch == nullptr)
      continue;
    MD_ASSIGN_OR_RETURN(std::unique_ptr<Feed> feed,
                        open(dataset, *batch, /*training=*/false));
    MD_RETURN_IF_ERROR(feed->dataset->checkContents());
    checked[dataset] = true;
  }
  train_.reset();
  return absl::OkStatus();
}

void DataFeeds::describe(RunInfo &info) const {
  if (!train_) {
    info.data = "none";
    return;
  }
  info.data = train_->dataset->describe();
  const data::SamplerOptions &so = train_->stream->sampler().options();
  int64_t perEpoch = train_->stream->sampler().batchesPerEpoch();
  if (perEpoch < 0)
    info.sampler = absl::StrFormat(
        "endless; rank r reads samples r, r + %d, ...", so.worldSize);
  else
    // Only token files are not shuffled: their samples are windows at
    // offsets drawn from (seed, epoch, index) (docs/runtime.md).
    info.sampler = absl::StrFormat(
        "seed %d, %s; %d batches per rank per epoch", so.seed,
        data::DescribeOrder(so.shuffle, so.reshuffleEachEpoch, so.tail),
        perEpoch);
  const data::Field &f0 = train_->dataset->fields()[0];
  if (f0.dtype != DType::f32)
    info.tokensPerSample = f0.numel();
}

absl::Status DataFeeds::read(absl::Span<const TensorRef> outs,
                             Backend &backend) {
  Feed *feed = eval_ != nullptr ? eval_ : train_.get();
  if (feed == nullptr)
    return absl::FailedPreconditionError("a batch instruction without data");
  data::BatchStream::Next next = feed->stream->next();
  std::vector<void *> staged;
  for (auto &s : feed->staging)
    staged.push_back(s.data());
  MD_RETURN_IF_ERROR(feed->dataset->read(next.epoch, next.indices, staged));
  if (feed == train_.get())
    epoch_ = next.epoch;
  const std::vector<data::Field> &fields = feed->dataset->fields();
  for (size_t k = 0; k < outs.size(); ++k) {
    const TensorRef &out = outs[k];
    int64_t n = out.numel();
    if (fields[k].dtype != DType::f32 || out.dtype == DType::f32) {
      MD_RETURN_IF_ERROR(backend.copy(out.data, feed->staging[k].data(),
                                      n * dtypeSize(out.dtype),
                                      kComputeStream));
      continue;
    }
    if (!feed->convert[k]) {
      MD_ASSIGN_OR_RETURN(feed->convert[k], backend.allocate(n * 4));
    }
    MD_RETURN_IF_ERROR(backend.copy(feed->convert[k].data(),
                                    feed->staging[k].data(), n * 4,
                                    kComputeStream));
    CastArgs cast;
    cast.x = TensorRef(feed->convert[k].data(), DType::f32, out.shape);
    cast.out = out;
    MD_RETURN_IF_ERROR(backend.cast(cast));
  }
  return absl::OkStatus();
}

DataFeeds::Position DataFeeds::position() const {
  Position p;
  if (train_) {
    p.epoch = train_->stream->epoch();
    p.batchesInEpoch = train_->stream->batchesInEpoch();
    p.batchesRead = train_->stream->batchesRead();
  }
  return p;
}

void DataFeeds::resume(const Position &pos, int64_t savedSamplesPerBatch) {
  epoch_ = pos.epoch;
  if (!train_)
    return;
  const int64_t perBatch = worldSize_ * train_->batch;
  int64_t inEpoch = pos.batchesInEpoch, read = pos.batchesRead;
  if (savedSamplesPerBatch != perBatch && perBatch > 0) {
    inEpoch = pos.batchesInEpoch * savedSamplesPerBatch / perBatch;
    read = pos.batchesRead * savedSamplesPerBatch / perBatch;
    int64_t perEpoch = train_->stream->sampler().batchesPerEpoch();
    if (perEpoch > 0)
      inEpoch = std::min(inEpoch, perEpoch);
  }
  train_->stream->seek(pos.epoch, inEpoch, read);
}

absl::StatusOr<double>
DataFeeds::evaluate(int32_t dataset, const fb::Instruction *batch,
                    int64_t batches,
                    absl::FunctionRef<absl::StatusOr<double>()> runBody) {
  if (batch == nullptr) {
    // A body that reads no data: run it once.
    return runBody();
  }
  MD_ASSIGN_OR_RETURN(std::unique_ptr<Feed> feed, open(dataset, *batch, false));
  if (batches <= 0)
    batches = feed->stream->sampler().batchesPerEpoch();
  // Batches come from this feed until the evaluation ends, however it ends.
  struct Using {
    Feed *&slot;
    ~Using() { slot = nullptr; }
  } using_{eval_};
  eval_ = feed.get();
  double sum = 0;
  int64_t n = 0;
  for (int64_t k = 0; k < batches; ++k) {
    MD_ASSIGN_OR_RETURN(double loss, runBody());
    sum += loss;
    ++n;
  }
  return n > 0 ? sum / static_cast<double>(n) : std::nan("");
}

} // namespace md::runtime
