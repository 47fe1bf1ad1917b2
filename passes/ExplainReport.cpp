//===- ExplainReport.cpp - what mdc --explain reports ---------------------===//

#include "dialect/MdDiscardableAttrs.h"
#include "passes/ExplainReport.h"
#include "dialect/ParamGroups.h"
#include "dialect/PlanOptions.h"
#include "passes/analysis/StepProgram.h"
#include "runtime/plan/MemoryFormat.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <array>
#include <cstdio>
#include <map>

using namespace mlir;
using namespace md;

static std::string typeName(Type type) {
  std::string out;
  llvm::raw_string_ostream os(out);
  type.print(os);
  return out;
}

/// Bytes one rank sends in `op` at world size `worldSize`.
static int64_t bytesSent(ModelOp model, CollectiveOpInterface op,
                         int64_t worldSize) {
  int64_t n = getGroupSize(model, op.getCollectiveGroup(), worldSize);
  int64_t bytes = op.getBytesSent(n);
  if (bytes != 0 || n <= 1 || !isa<AllReduceOp, BroadcastOp>(op))
    return bytes;
  // An all-reduce or broadcast of a shard: its size comes from the buffer
  // it is a shard of.
  FailureOr<int64_t> shard = getValueBytes(model, op->getOperand(0), worldSize);
  if (failed(shard))
    return 0;
  return isa<AllReduceOp>(op) ? 2 * (n - 1) * *shard / n : *shard;
}

/// The plan options kept beside #md.plan that `model`'s plan sets.
static LogicalResult addPlanOptions(ModelOp model, int64_t worldSize,
                                    ExplainReport &report) {
  if (auto link = getPlanInterconnect(model))
    report.interconnect = {link->first, link->second.alphaUs,
                           link->second.betaGBps};
  Block *step = getStepBlock(model);
  if (std::optional<int64_t> limit = getPlanMaxInflightAllGathers(model)) {
    ExplainReport::InflightLimit inflight{*limit, 0};
    if (step)
      step->walk([&](AllGatherOp gather) {
        FailureOr<int64_t> bytes =
            getValueBytes(model, gather.getResult(), worldSize);
        if (succeeded(bytes))
          inflight.largestGatherBytes =
              std::max(inflight.largestGatherBytes, *bytes);
      });
    for (size_t index : report.memory.liveAtPeak) {
      const BufferInterval &buffer = report.memory.buffers[index];
      if (!buffer.op || !isa<AllGatherOp>(buffer.op))
        continue;
      ++inflight.gatheredAtPeak;
      inflight.gatheredBytesAtPeak += buffer.bytes;
    }
    report.inflightAllGathers = inflight;
  }
  if (!hasShardedGradAccumulation(model))
    return success();
  ExplainReport::ShardedAccumulation sharded;
  for (StateOp state : model.getBody().front().getOps<StateOp>()) {
    if (state.getRole() != StateRole::grad_acc)
      continue;
    int64_t elementBytes = state.getTensorType().getElementTypeBitWidth() / 8;
    std::optional<int64_t> numel;
    if (std::optional<uint64_t> shard = state.getShard())
      numel = static_cast<int64_t>(*shard);
    if (!numel) {
      // A full accumulator: one rank, where sharded is local.
      numel = state.getTensorType().getNumElements();
      sharded.shardedBytes += *numel * elementBytes;
    } else {
      int64_t n = getGroupSize(model, *state.getGroup(), worldSize);
      sharded.shardedBytes += (*numel + n - 1) / n * elementBytes;
    }
    sharded.localBytes += *numel * elementBytes;
  }
  // Without accumulation there is no accumulator and nothing added.
  if (report.accumulationSteps <= 1)
    sharded.localBytes = sharded.shardedBytes = 0;
  if (step)
    step->walk([&](ReduceScatterOp scatter) {
      if (!scatter->getParentOfType<MicroStepsOp>())
        return;
      sharded.addedBytesSent +=
          bytesSent(model, scatter, worldSize) * (report.accumulationSteps - 1);
      sharded.addedCollectives += report.accumulationSteps - 1;
    });
  report.shardedAccumulation = sharded;
  return success();
}

FailureOr<ExplainReport> md::computeExplainReport(ModelOp model,
                                                  int64_t worldSize) {
  ExplainReport report;
  report.model = model.getSymName().str();
  if (PlanAttr plan = model.getPlanAttr())
    report.plan = plan.getName().str();
  report.worldSize = worldSize;
  if (worldSize < 1)
    return model.emitError("world size must be >= 1, got ") << worldSize;
  for (ParamOp param : model.getBody().getOps<ParamOp>()) {
    ExplainReport::ParamCount &count =
        param.getFrozen() ? report.frozen : report.trainable;
    ++count.tensors;
    count.elements += param.getTensorType().getNumElements();
  }

  if (TrainOp train = model.getTrain()) {
    FailureOr<int64_t> steps = getAccumulationSteps(model, worldSize);
    if (failed(steps))
      return failure();
    report.globalBatch = train.getGlobalBatch();
    report.microBatch = train.getMicroBatch();
    report.accumulationSteps = *steps;
    report.effectiveBatch = report.microBatch * *steps * worldSize;
    if (getOptimizerGroups(train.getOptimizer()))
      for (const ParamGroupInfo &info :
           assignParamGroups(model, train.getOptimizer()).groups)
        report.optimizerGroups.push_back(
            {info.attr ? info.attr.describe() : "default", info.members,
             info.numel, info.weightDecay, info.lrScale});
  }

  FailureOr<MemoryReport> memory = computeMemory(model, worldSize);
  if (failed(memory))
    return failure();
  report.memory = std::move(*memory);

  std::map<std::pair<std::string, std::string>, int64_t> casts;
  if (Block *step = getStepBlock(model)) {
    step->walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (auto cast = dyn_cast<CastOp>(op)) {
        ++casts[{typeName(cast.getInput().getType().getElementType()),
                 typeName(cast.getResult().getType().getElementType())}];
        return;
      }
      auto collective = dyn_cast<CollectiveOpInterface>(op);
      if (!collective)
        return;
      ExplainReport::Collective row;
      row.kind = stringifyCollectiveKind(collective.getCollectiveKind()).str();
      row.group = stringifyGroup(collective.getCollectiveGroup()).str();
      if (op->getNumOperands() != 0)
        row.dtype = typeName(cast<RankedTensorType>(op->getOperand(0).getType())
                                 .getElementType());
      row.bucket = collective.getBucketId();
      row.bytesSent = bytesSent(model, collective, worldSize);
      row.perStep = op->getParentOfType<MicroStepsOp>()
                        ? report.accumulationSteps - 1
                        : 1;
      CollectiveKind kind = collective.getCollectiveKind();
      if (kind != CollectiveKind::barrier)
        report.bytesByKind[static_cast<size_t>(kind)] +=
            row.bytesSent * row.perStep;
      report.collectives.push_back(std::move(row));
    });
  }
  for (auto &[types, count] : casts)
    report.casts.push_back({types.first, types.second, count});

  if (auto table = mark::bucketTable(model)) {
    for (auto entry : table.getAsRange<DictionaryAttr>()) {
      ExplainReport::Bucket bucket;
      if (auto id = entry.getAs<IntegerAttr>("id"))
        bucket.id = id.getInt();
      if (auto kind = entry.getAs<StringAttr>("kind"))
        bucket.kind = kind.str();
      if (auto group = entry.getAs<StringAttr>("group"))
        bucket.group = group.str();
      if (auto dtype = entry.getAs<TypeAttr>("dtype"))
        bucket.dtype = typeName(dtype.getValue());
      if (auto members = entry.getAs<ArrayAttr>("members"))
        for (auto member : members.getAsRange<StringAttr>())
          bucket.members.push_back(member.str());
      if (auto bytes = entry.getAs<IntegerAttr>("bytes"))
        bucket.bytes = bytes.getInt();
      if (auto exposed = entry.getAs<FloatAttr>("exposed_us"))
        bucket.exposedUs = exposed.getValueAsDouble();
      report.buckets.push_back(std::move(bucket));
    }
  }
  if (failed(addPlanOptions(model, worldSize, report)))
    return failure();
  return report;
}

//===----------------------------------------------------------------------===//
// Rendering
//===----------------------------------------------------------------------===//

/// A named count both renderings print: the text's label, the JSON's key.
struct Row {
  StringRef name;
  int64_t value;
};

/// ZeRO's model states, with their total.
static std::array<Row, 4> modelStateRows(const MemoryReport &memory) {
  return {{{"params", memory.modelStateParams},
           {"grads", memory.modelStateGrads},
           {"optimizer", memory.modelStateOptimizer},
           {"total", memory.modelStates()}}};
}

/// Bytes one rank sends per step, by kind of collective.
static std::array<Row, 4> communicationRows(const ExplainReport &report) {
  static_assert(static_cast<size_t>(CollectiveKind::barrier) ==
                    std::tuple_size_v<decltype(report.bytesByKind)>,
                "one count per kind of collective but the barrier");
  std::array<Row, 4> rows;
  for (size_t k = 0; k < rows.size(); ++k)
    rows[k] = {stringifyCollectiveKind(static_cast<CollectiveKind>(k)),
               report.bytesByKind[k]};
  return rows;
}

static std::string formatUs(double us) {
  return llvm::formatv("{0:F2}", us).str();
}

void md::printExplainText(const ExplainReport &report, raw_ostream &os) {
  os << "model @" << report.model << ", plan "
     << (report.plan.empty() ? std::string("(none)") : report.plan)
     << ", world size " << report.worldSize << "\n";
  os << "batch: global " << report.globalBatch << ", micro "
     << report.microBatch << " per rank, " << report.accumulationSteps
     << " accumulation step" << (report.accumulationSteps == 1 ? "" : "s")
     << ", effective batch " << report.effectiveBatch << "\n";
  os << "parameters: " << report.trainable.elements << " trainable in "
     << report.trainable.tensors << " tensor"
     << (report.trainable.tensors == 1 ? "" : "s") << ", "
     << report.frozen.elements << " frozen in " << report.frozen.tensors
     << " tensor" << (report.frozen.tensors == 1 ? "" : "s")
     << " (no gradient, no optimizer state)\n";

  const MemoryReport &memory = report.memory;
  // The same bytes as mdrun --inspect's memory section (MemoryFormat.h).
  os << "\n" << plan::FormatMemoryText(memory, report.worldSize);
  auto lines = [&](ArrayRef<Row> rows) {
    for (const Row &row : rows)
      os << llvm::formatv("  {0,-16}{1,16}\n", row.name, row.value);
  };
  os << "\nmodel states per rank after the backward (bytes; ZeRO's count):\n";
  lines(modelStateRows(memory));
  os << "\ncommunication per step per rank (bytes sent):\n";
  lines(communicationRows(report));

  os << "\nbuckets:";
  if (report.buckets.empty())
    os << " none";
  os << "\n";
  if (!report.buckets.empty())
    os << llvm::formatv("  {0,-4}{1,-16}{2,-10}{3,-6}{4,14}{5,12}  {6}\n", "id",
                        "kind", "group", "dtype", "bytes", "exposed_us",
                        "members");
  for (const ExplainReport::Bucket &bucket : report.buckets)
    os << llvm::formatv("  {0,-4}{1,-16}{2,-10}{3,-6}{4,14}{5,12}  {6}\n",
                        bucket.id, bucket.kind, bucket.group, bucket.dtype,
                        bucket.bytes, formatUs(bucket.exposedUs),
                        llvm::join(bucket.members, " "));

  os << "\nprecision:\n  casts:";
  if (report.casts.empty())
    os << " none";
  os << "\n";
  for (const ExplainReport::CastCount &cast : report.casts)
    os << "    " << cast.from << " -> " << cast.to << " x" << cast.count
       << "\n";
  os << "  collectives:";
  if (report.collectives.empty())
    os << " none";
  os << "\n";
  for (const ExplainReport::Collective &collective : report.collectives) {
    os << "    " << collective.kind << " " << collective.group;
    if (!collective.dtype.empty())
      os << " " << collective.dtype;
    if (collective.bucket)
      os << " bucket " << *collective.bucket;
    os << ": " << collective.bytesSent << " bytes sent, x" << collective.perStep
       << " per step\n";
  }

  if (report.interconnect)
    os << "\ninterconnect: " << report.interconnect->name << " (alpha "
       << llvm::formatv("{0}", report.interconnect->alphaUs) << " us, beta "
       << llvm::formatv("{0}", report.interconnect->betaGBps)
       << " GB/s per rank)\n";
  if (const auto &inflight = report.inflightAllGathers)
    os << "\nmax_inflight_allgathers: " << inflight->limit << " gathered unit"
       << (inflight->limit == 1 ? "" : "s")
       << " live at once when prefetching; each holds up to "
       << inflight->largestGatherBytes << " bytes; at the peak "
       << inflight->gatheredAtPeak << " gathered unit"
       << (inflight->gatheredAtPeak == 1 ? " holds " : "s hold ")
       << inflight->gatheredBytesAtPeak << " bytes\n";
  if (const auto &sharded = report.shardedAccumulation)
    os << "\ngradient accumulation: sharded (reduce-scatter every "
          "micro-step)\n"
       << llvm::formatv("  {0,-16}{1,16}\n", "grad_acc local",
                        sharded->localBytes)
       << llvm::formatv("  {0,-16}{1,16}\n", "grad_acc sharded",
                        sharded->shardedBytes)
       << llvm::formatv("  {0,-16}{1,16}\n", "saved",
                        sharded->localBytes - sharded->shardedBytes)
       << llvm::formatv(
              "  {0,-16}{1,16}  ({2} more reduce-scatter{3} a step)\n",
              "bytes sent added", sharded->addedBytesSent,
              sharded->addedCollectives,
              sharded->addedCollectives == 1 ? "" : "s");
  // Only a recipe with groups has the section, so other reports keep
  // their bytes.
  if (!report.optimizerGroups.empty()) {
    os << "\noptimizer groups (the first that matches a parameter holds "
          "it):\n";
    os << llvm::formatv("  {0,-32}{1,8}{2,14}{3,14}{4,10}\n", "group", "params",
                        "elements", "weight_decay", "lr_scale");
    // %g: a decay of 1e-4 must not print as 0.00.
    auto number = [](double v) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", v);
      return std::string(text);
    };
    for (const ExplainReport::OptimizerGroup &group : report.optimizerGroups)
      os << llvm::formatv("  {0,-32}{1,8}{2,14}{3,14}{4,10}\n", group.name,
                          group.members, group.numel, number(group.weightDecay),
                          number(group.lrScale));
  }
}

void md::printExplainJson(const ExplainReport &report, raw_ostream &os) {
  llvm::json::OStream json(os, /*IndentSize=*/2);
  json.object([&] {
    json.attribute("model", report.model);
    if (report.plan.empty())
      json.attribute("plan", nullptr);
    else
      json.attribute("plan", report.plan);
    json.attribute("world_size", report.worldSize);
    json.attributeObject("batch", [&] {
      json.attribute("global", report.globalBatch);
      json.attribute("micro", report.microBatch);
      json.attribute("accumulation_steps", report.accumulationSteps);
      json.attribute("effective", report.effectiveBatch);
    });
    json.attributeObject("parameters", [&] {
      for (auto [key, count] :
           {std::pair{"trainable", report.trainable},
            std::pair{"frozen", report.frozen}})
        json.attributeObject(key, [&] {
          json.attribute("tensors", count.tensors);
          json.attribute("elements", count.elements);
        });
    });
    const MemoryReport &memory = report.memory;
    // The same bytes as mdrun --inspect's memory_per_rank (MemoryFormat.h),
    // at the depth of a top-level member.
    json.attributeBegin("memory");
    json.rawValue(plan::FormatMemoryJson(memory, /*indent=*/2));
    json.attributeEnd();
    auto rows = [&](StringRef key, ArrayRef<Row> rows) {
      json.attributeObject(key, [&] {
        for (const Row &row : rows)
          json.attribute(row.name, row.value);
      });
    };
    rows("model_states", modelStateRows(memory));
    rows("communication", communicationRows(report));
    json.attributeArray("buckets", [&] {
      for (const ExplainReport::Bucket &bucket : report.buckets)
        json.object([&] {
          json.attribute("id", bucket.id);
          json.attribute("kind", bucket.kind);
          json.attribute("group", bucket.group);
          json.attribute("dtype", bucket.dtype);
          json.attributeArray("members", [&] {
            for (const std::string &member : bucket.members)
              json.value(member);
          });
          json.attribute("bytes", bucket.bytes);
          json.attributeBegin("exposed_us");
          json.rawValue(formatUs(bucket.exposedUs));
          json.attributeEnd();
        });
    });
    json.attributeObject("precision", [&] {
      json.attributeArray("casts", [&] {
        for (const ExplainReport::CastCount &cast : report.casts)
          json.object([&] {
            json.attribute("from", cast.from);
            json.attribute("to", cast.to);
            json.attribute("count", cast.count);
          });
      });
      json.attributeArray("collectives", [&] {
        for (const ExplainReport::Collective &collective : report.collectives)
          json.object([&] {
            json.attribute("kind", collective.kind);
            json.attribute("group", collective.group);
            json.attribute("dtype", collective.dtype);
            if (collective.bucket)
              json.attribute("bucket", *collective.bucket);
            else
              json.attribute("bucket", nullptr);
            json.attribute("bytes_sent", collective.bytesSent);
            json.attribute("per_step", collective.perStep);
          });
      });
    });
    if (report.interconnect)
      json.attributeObject("interconnect", [&] {
        json.attribute("name", report.interconnect->name);
        json.attribute("alpha_us", report.interconnect->alphaUs);
        json.attribute("beta_gbps", report.interconnect->betaGBps);
      });
    if (report.inflightAllGathers)
      json.attributeObject("max_inflight_allgathers", [&] {
        json.attribute("limit", report.inflightAllGathers->limit);
        json.attribute("largest_gather_bytes",
                       report.inflightAllGathers->largestGatherBytes);
        json.attribute("gathered_at_peak",
                       report.inflightAllGathers->gatheredAtPeak);
        json.attribute("gathered_bytes_at_peak",
                       report.inflightAllGathers->gatheredBytesAtPeak);
      });
    if (const auto &sharded = report.shardedAccumulation)
      json.attributeObject("grad_accumulation", [&] {
        json.attribute("mode", "sharded");
        json.attribute("local_bytes", sharded->localBytes);
        json.attribute("sharded_bytes", sharded->shardedBytes);
        json.attribute("saved_bytes",
                       sharded->localBytes - sharded->shardedBytes);
        json.attribute("added_bytes_sent", sharded->addedBytesSent);
        json.attribute("added_collectives", sharded->addedCollectives);
      });
    if (!report.optimizerGroups.empty())
      json.attributeArray("optimizer_groups", [&] {
        for (const ExplainReport::OptimizerGroup &group :
             report.optimizerGroups)
          json.object([&] {
            json.attribute("name", group.name);
            json.attribute("params", group.members);
            json.attribute("elements", group.numel);
            json.attribute("weight_decay", group.weightDecay);
            json.attribute("lr_scale", group.lrScale);
          });
      });
  });
  os << "\n";
}

void md::printMemoryBuffers(const MemoryReport &memory, raw_ostream &os) {
  os << "buffers (positions of " << memory.positions << ", peak at "
     << memory.peakPosition << "):\n";
  llvm::DenseSet<size_t> live(memory.liveAtPeak.begin(),
                              memory.liveAtPeak.end());
  for (auto [index, buffer] : llvm::enumerate(memory.buffers)) {
    std::string what;
    if (auto state = dyn_cast<StateOp>(buffer.op))
      what = ("md.state @" + state.getSymName()).str();
    else
      what = buffer.op->getName().getStringRef().str();
    std::string interval =
        buffer.persistent
            ? std::string("persistent")
            : llvm::formatv("{0}-{1}", buffer.start, buffer.end).str();
    os << llvm::formatv(
        "  {0} {1,-12}{2,10}  {3,-13}{4}\n", live.contains(index) ? "*" : " ",
        interval, buffer.bytes, stringifyMemoryCategory(buffer.category), what);
  }
}
