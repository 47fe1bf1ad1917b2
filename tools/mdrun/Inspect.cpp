//===- Inspect.cpp - mdrun --inspect: what a plan will do ---------------===//
//
// Both forms read the same facts: the loaded plan and plan::Summarize at
// the chosen world size. JSON is built as an ordered tree of keys, so its
// keys always come in the same order; text lays the facts out for reading.
//
//===----------------------------------------------------------------------===//

#include "tools/mdrun/Inspect.h"

#include <cstdlib>
#include <memory>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/exec/ArenaLayout.h"
#include "runtime/exec/OptimizerGroups.h"
#include "runtime/exec/StreamOrder.h"
#include "runtime/cpu/CpuBackend.h"
#include "runtime/cpu/Gemm.h"
#include "runtime/cpu/VecMath.h"
#include "runtime/data/Sampler.h"
#include "runtime/plan/Loader.h"
#include "runtime/plan/Memory.h"
#include "runtime/plan/MemoryFormat.h"
#include "runtime/plan/Schema.h"
#include "runtime/plan/Summary.h"

namespace md::mdrun {
namespace {

using fb::Plan;

/// JSON text written by another formatter, copied as it is.
struct RawJson {
  std::string text;
};

/// A JSON-like value: null, bool, integer, float, string, list, object
/// (keys in insertion order) or raw JSON text.
struct Value {
  struct Object;
  using List = std::vector<Value>;
  std::variant<std::monostate, bool, int64_t, double, std::string, List,
               std::shared_ptr<Object>, RawJson>
      v;
  Value() = default;
  Value(bool b) : v(b) {}
  Value(int64_t i) : v(i) {}
  Value(int32_t i) : v(static_cast<int64_t>(i)) {}
  Value(uint32_t i) : v(static_cast<int64_t>(i)) {}
  Value(double d) : v(d) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(const char *s) : v(std::string(s)) {}
  Value(absl::string_view s) : v(std::string(s)) {}
  Value(List l) : v(std::move(l)) {}
  Value(std::shared_ptr<Object> o) : v(std::move(o)) {}
  Value(RawJson raw) : v(std::move(raw)) {}
};
struct Value::Object {
  std::vector<std::pair<std::string, Value>> fields;
  Object &add(std::string key, Value value) {
    fields.emplace_back(std::move(key), std::move(value));
    return *this;
  }
};
using Object = Value::Object;
std::shared_ptr<Object> object() { return std::make_shared<Object>(); }

/// Escapes a string for JSON (bytes outside ASCII as \u00XX: plan names
/// are not guaranteed to be UTF-8).
std::string jsonString(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (c < 0x20 || c >= 0x7f)
        absl::StrAppendFormat(&out, "\\u%04x", c);
      else
        out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

/// A string as text: control bytes escaped so a name cannot break a line.
std::string printable(absl::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f)
      absl::StrAppendFormat(&out, "\\x%02x", c);
    else
      out += static_cast<char>(c);
  }
  return out;
}

/// The shortest decimal that reads back as `d` (0.1, not 0.10000000000000001).
std::string number(double d) {
  for (int precision = 15; precision < 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, d);
    if (std::strtod(text.c_str(), nullptr) == d)
      return text;
  }
  return absl::StrFormat("%.17g", d);
}

void writeJson(const Value &value, int indent, std::string &out) {
  std::string pad(indent + 2, ' '), closePad(indent, ' ');
  if (std::holds_alternative<std::monostate>(value.v)) {
    out += "null";
  } else if (auto *b = std::get_if<bool>(&value.v)) {
    out += *b ? "true" : "false";
  } else if (auto *i = std::get_if<int64_t>(&value.v)) {
    absl::StrAppend(&out, *i);
  } else if (auto *d = std::get_if<double>(&value.v)) {
    out += number(*d);
  } else if (auto *s = std::get_if<std::string>(&value.v)) {
    out += jsonString(*s);
  } else if (auto *raw = std::get_if<RawJson>(&value.v)) {
    out += raw->text;
  } else if (auto *l = std::get_if<Value::List>(&value.v)) {
    if (l->empty()) {
      out += "[]";
      return;
    }
    out += "[\n";
    for (size_t k = 0; k < l->size(); ++k) {
      out += pad;
      writeJson((*l)[k], indent + 2, out);
      out += k + 1 < l->size() ? ",\n" : "\n";
    }
    out += closePad + "]";
  } else {
    const Object &o = *std::get<std::shared_ptr<Object>>(value.v);
    if (o.fields.empty()) {
      out += "{}";
      return;
    }
    out += "{\n";
    for (size_t k = 0; k < o.fields.size(); ++k) {
      out += pad + jsonString(o.fields[k].first) + ": ";
      writeJson(o.fields[k].second, indent + 2, out);
      out += k + 1 < o.fields.size() ? ",\n" : "\n";
    }
    out += closePad + "}";
  }
}

/// A FLOP count with an SI prefix: "57.5 kFLOP", "1.23 GFLOP".
std::string flopsText(int64_t flops) {
  const char *units[] = {"FLOP",  "kFLOP", "MFLOP", "GFLOP",
                         "TFLOP", "PFLOP", "EFLOP"};
  double v = static_cast<double>(flops);
  int u = 0;
  while (v >= 1000 && u < 6) {
    v /= 1000;
    ++u;
  }
  return u == 0 ? absl::StrCat(flops, " FLOP")
                : absl::StrFormat("%.3g %s", v, units[u]);
}

std::string str(const flatbuffers::String *s) {
  return s ? std::string(s->c_str(), s->size()) : std::string();
}

std::vector<std::string> strings(
    const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>> *v) {
  std::vector<std::string> out;
  for (uint32_t i = 0; v && i < v->size(); ++i)
    out.push_back(str(v->Get(i)));
  return out;
}

Value list(const std::vector<std::string> &items) {
  Value::List l;
  for (const std::string &s : items)
    l.emplace_back(s);
  return l;
}

std::string lower(const char *name) { return absl::AsciiStrToLower(name); }

/// An object per item of `items`, made by `toObject`.
template <typename T, typename F>
Value listOf(const std::vector<T> &items, F toObject) {
  Value::List l;
  for (const T &item : items)
    l.emplace_back(toObject(item));
  return l;
}

//===----------------------------------------------------------------------===//
// The JSON form: one object per section, in the order of the text form
//===----------------------------------------------------------------------===//

/// How the plan was compiled: its options, precisions and prefetching.
std::shared_ptr<Object> planJson(const fb::Header &h) {
  const fb::PlanOptions &o = *h.options();
  auto precision = object();
  precision->add("param", plan::DTypeName(o.param_dtype()))
      .add("reduce", plan::DTypeName(o.reduce_dtype()))
      .add("buffer", plan::DTypeName(o.buffer_dtype()))
      .add("master", plan::DTypeName(o.master_dtype()));
  auto prefetch = object();
  prefetch->add("forward", o.prefetch_forward())
      .add("backward",
           lower(fb::EnumNamePrefetchBackward(o.prefetch_backward())));
  auto planObj = object();
  planObj->add("name", str(h.plan_name()))
      .add("preset", str(h.preset()))
      .add("shard", lower(fb::EnumNameShardKind(o.shard())))
      .add("shard_group_size", h.shard_group_size())
      .add("wrap", lower(fb::EnumNameWrapKind(o.wrap())))
      .add("wrap_blocks", list(strings(o.wrap_blocks())))
      .add("wrap_min_params", o.wrap_min_params())
      .add("precision", precision)
      .add("bucket_cap", o.bucket_cap())
      .add("prefetch", prefetch)
      .add("reshard_after_forward", o.reshard_after_forward())
      .add("checkpoint_activations", list(strings(o.checkpoint_activations())))
      .add("pinned_world_size", h.world_size());
  return planObj;
}

/// The step program's size, where its transient memory peaks, and whether
/// its streams are ordered.
std::shared_ptr<Object> programJson(const Plan &p,
                                    const plan::PlanSummary &summary,
                                    const std::string &streamOrder) {
  const plan::MemoryReport &m = summary.memory;
  auto peakAt = object();
  peakAt->add("block", m.peakBlock).add("instruction", m.peakInstruction);
  auto program = object();
  program->add("blocks", p.blocks()->size())
      .add("step_instructions", summary.stepInstructions)
      .add("hook_instructions", summary.hookInstructions)
      .add("persistent_buffers", summary.persistentBuffers)
      .add("transient_buffers", summary.transientBuffers)
      .add("buffer_categories", m.compilerCategories ? "compiler" : "by role")
      .add("transient_peak_at", peakAt)
      .add("events", p.events() ? p.events()->size() : 0u)
      .add("stream_order", streamOrder);
  return program;
}

/// The collectives and the GEMM-class FLOPs of one optimizer step.
std::shared_ptr<Object> collectivesJson(const plan::PlanSummary &summary) {
  auto tally = [](const plan::CollectiveTally &t) {
    auto o = object();
    o->add("count", t.count).add("bytes", t.bytes).add("bus_bytes", t.busBytes);
    return o;
  };
  auto collectives = object();
  for (const plan::CollectiveTally &t : summary.perStep)
    collectives->add(t.kind, tally(t));
  collectives->add("total", tally(summary.perStepTotal))
      .add("conditional", summary.conditionalCollectives);
  return collectives;
}

std::shared_ptr<Object> flopsJson(const plan::PlanSummary &summary) {
  auto flops = object();
  for (const plan::FlopTally &t : summary.flops) {
    auto o = object();
    o->add("count", t.count).add("flops", t.flops);
    flops->add(t.kind, o);
  }
  flops->add("per_rank", summary.flopsPerRank)
      .add("all_ranks", summary.flopsAllRanks)
      .add("conditional", summary.conditionalFlopInstructions);
  return flops;
}

/// The training recipe: batches, optimizer, schedule.
std::shared_ptr<Object> recipeJson(const fb::Plan &p, const fb::Recipe &r,
                                   const plan::WorldBinding &w) {
  const fb::Optimizer &opt = *r.optimizer();
  auto optimizer = object();
  optimizer->add("kind", lower(fb::EnumNameOptimizerKind(opt.kind())))
      .add("lr", opt.lr());
  if (opt.kind() == fb::OptimizerKind::AdamW)
    optimizer->add("beta1", opt.beta1())
        .add("beta2", opt.beta2())
        .add("eps", opt.eps());
  else
    optimizer->add("momentum", opt.momentum())
        .add("dampening", opt.dampening())
        .add("nesterov", opt.nesterov());
  optimizer->add("weight_decay", opt.weight_decay());
  std::vector<runtime::OptimizerGroupSummary> groups =
      runtime::SummarizeOptimizerGroups(p);
  if (!groups.empty())
    optimizer->add("groups",
                   listOf(groups, [](const runtime::OptimizerGroupSummary &g) {
                     auto o = object();
                     o->add("name", g.name)
                         .add("params", g.members)
                         .add("elements", g.numel)
                         .add("weight_decay", g.weightDecay)
                         .add("lr_scale", g.lrScale);
                     return o;
                   }));
  const fb::Schedule &sched = *r.schedule();
  auto schedule = object();
  schedule->add("kind", lower(fb::EnumNameScheduleKind(sched.kind())))
      .add("warmup", sched.warmup())
      .add("steps", sched.steps())
      .add("min_lr", sched.min_lr());
  auto recipe = object();
  recipe->add("global_batch", r.global_batch())
      .add("micro_batch", r.micro_batch())
      .add("accumulation_steps", w.accumulationSteps)
      .add("optimizer", optimizer)
      .add("schedule", schedule)
      .add("clip_grad_norm", r.clip_grad_norm())
      .add("seed", r.seed())
      .add("sync_batch_norm", r.sync_batch_norm());
  return recipe;
}

/// The training data and how it is sampled.
std::shared_ptr<Object> dataJson(const Plan &p, const fb::Recipe &r) {
  const fb::DataSpec &d = *p.datasets()->Get(r.train_data());
  auto sampler = object();
  sampler->add("seed", r.sampler()->seed())
      .add("reshuffle_each_epoch", r.sampler()->reshuffle_each_epoch())
      .add("tail", lower(fb::EnumNameTailPolicy(r.sampler()->tail())));
  auto data = object();
  data->add("kind", lower(fb::EnumNameDataKind(d.kind())))
      .add("path", str(d.path()))
      .add("seed", d.seed())
      .add("sampler", sampler);
  return data;
}

/// Every fact of the report, as the JSON form's object.
std::shared_ptr<Object> buildReport(const std::string &path,
                                    const plan::LoadedPlan &loaded,
                                    const plan::PlanSummary &summary,
                                    const std::string &streamOrder) {
  const Plan &p = loaded.plan();
  const fb::Header &h = *p.header();
  const plan::WorldBinding &w = summary.world;
  auto source = object();
  source->add("file", str(h.source_file()))
      .add("hash", absl::StrFormat("0x%016x", h.source_hash()))
      .add("compiler", str(h.compiler_version()));
  auto world = object();
  world->add("world_size", w.worldSize)
      .add("shard_group", w.shardGroupSize)
      .add("replicate_group", w.replicateGroupSize)
      .add("accumulation_steps", w.accumulationSteps);
  auto params = object();
  params->add("count", summary.paramCount)
      .add("elements", summary.paramElements)
      .add("trainable_elements", summary.trainableElements)
      .add("bytes", summary.paramBytes);
  Value units = listOf(summary.units, [](const plan::UnitSummary &u) {
    auto unit = object();
    unit->add("id", u.id)
        .add("name", u.name)
        .add("numel", u.numel)
        .add("params", u.params);
    return unit;
  });
  Value buckets = listOf(summary.buckets, [](const plan::BucketSummary &b) {
    auto bucket = object();
    bucket->add("id", b.id)
        .add("collectives", b.collectives)
        .add("bytes", b.bytes)
        .add("kinds", list(b.kinds));
    return bucket;
  });
  Value hooks = listOf(summary.hooks, [](const plan::HookSummary &hk) {
    auto hook = object();
    hook->add("every", hk.period)
        .add("unit", hk.unit)
        .add("actions", list(hk.actions))
        .add("communicates", hk.communicates);
    return hook;
  });

  auto report = object();
  report->add("file", path)
      .add("file_bytes", static_cast<int64_t>(loaded.bytes().size()))
      .add("identifier", fb::PlanIdentifier())
      .add("schema_version", p.schema_version())
      .add("checksum", loaded.checksum()
                           ? absl::StrFormat("%016x", *loaded.checksum())
                           : std::string())
      .add("model", str(h.model()))
      .add("plan", planJson(h))
      .add("source", source)
      .add("world", world)
      .add("params", params)
      .add("units", units)
      .add("program", programJson(p, summary, streamOrder))
      .add("buckets", buckets)
      // The same bytes as mdc --explain's "memory" (MemoryFormat.h).
      .add("memory_per_rank",
           RawJson{plan::FormatMemoryJson(summary.memory, /*indent=*/2)})
      .add("collectives_per_step", collectivesJson(summary))
      .add("flops_per_step", flopsJson(summary))
      .add("recipe", recipeJson(p, *p.recipe(), w))
      .add("data", dataJson(p, *p.recipe()))
      .add("hooks", hooks);
  const cpu::GemmPaths &g = cpu::gemmPaths();
  auto gemm = object();
  gemm->add("f32", g.f32.text).add("bf16", g.bf16.text).add("f16", g.f16.text);
  auto cpuBackend = object();
  cpuBackend->add("isa", g.isa)
      .add("vector_math", std::string(cpu::VecMathVariant()))
      .add("gemm", gemm);
  report->add("cpu_backend", cpuBackend);
  return report;
}

//===----------------------------------------------------------------------===//
// The text form: the same facts, laid out for reading
//===----------------------------------------------------------------------===//

/// The text being written, a line at a time.
struct Text {
  std::string out;
  template <typename... Parts> void line(const Parts &...parts) {
    absl::StrAppend(&out, parts..., "\n");
  }
};

/// The file, the model, how the plan was compiled and the world it binds.
void writeHeader(Text &t, const std::string &path,
                 const plan::LoadedPlan &loaded, const plan::WorldBinding &w) {
  const Plan &p = loaded.plan();
  const fb::Header &h = *p.header();
  const fb::PlanOptions &o = *h.options();
  t.line("plan file     ", printable(path), " (", loaded.bytes().size(),
         " bytes, ", fb::PlanIdentifier(), " schema ", p.schema_version(), ")");
  // The loader checked it; an older mdc's plan has none to check.
  if (std::optional<uint64_t> sum = loaded.checksum())
    t.line("checksum      ", absl::StrFormat("XXH3-64 %016x, verified", *sum));
  else
    t.line("checksum      none (an older mdc wrote the plan: its bytes are "
           "not checked)");
  t.line("model         ", printable(str(h.model())));
  std::string wrap = lower(fb::EnumNameWrapKind(o.wrap()));
  if (o.wrap() == fb::WrapKind::Blocks)
    absl::StrAppend(&wrap, "(",
                    printable(absl::StrJoin(strings(o.wrap_blocks()), ", ")),
                    ")");
  else if (o.wrap() == fb::WrapKind::Size)
    absl::StrAppend(&wrap, "(min_params = ", o.wrap_min_params(), ")");
  std::string shard = lower(fb::EnumNameShardKind(o.shard()));
  if (o.shard() == fb::ShardKind::Hybrid)
    absl::StrAppend(&shard, "(shard_group = ", h.shard_group_size(), ")");
  t.line("plan          ", printable(str(h.plan_name())), " (preset ",
         printable(str(h.preset())), "): shard ", shard, ", wrap ", wrap);
  t.line("              precision {param = ", plan::DTypeName(o.param_dtype()),
         ", reduce = ", plan::DTypeName(o.reduce_dtype()),
         ", buffer = ", plan::DTypeName(o.buffer_dtype()),
         ", master = ", plan::DTypeName(o.master_dtype()), "}, bucket_cap ",
         plan::BytesText(o.bucket_cap()));
  std::string checkpoint =
      absl::StrJoin(strings(o.checkpoint_activations()), ", ");
  t.line("              prefetch {forward = ",
         o.prefetch_forward() ? "true" : "false", ", backward = ",
         lower(fb::EnumNamePrefetchBackward(o.prefetch_backward())),
         "}, reshard_after_forward ",
         o.reshard_after_forward() ? "true" : "false",
         ", checkpoint_activations ",
         checkpoint.empty() ? "none" : printable(checkpoint));
  t.line("source        ", printable(str(h.source_file())), " (hash ",
         absl::StrFormat("0x%016x", h.source_hash()), "), compiled by ",
         printable(str(h.compiler_version())));
  t.line("world size    ", w.worldSize,
         h.world_size() ? " (pinned by the plan)"
                        : " (any; pass --world-size to choose)",
         ": groups world ", w.worldSize, ", shard ", w.shardGroupSize,
         ", replicate ", w.replicateGroupSize);
}

/// The parameters, units, program (with where transient memory peaks), the
/// stream-order check and the buckets.
void writeProgram(Text &t, const Plan &p, const plan::PlanSummary &s,
                  const std::string &streamOrder) {
  t.line("params        ", s.paramCount, " tensors, ", s.paramElements,
         " elements (", s.trainableElements, " trainable), ",
         plan::BytesText(s.paramBytes));
  t.line("units         ", s.units.size());
  for (const plan::UnitSummary &u : s.units)
    t.line(absl::StrFormat("  %-4d %-24s %12d elements, %d params", u.id,
                           u.name.empty() ? "(root)" : printable(u.name),
                           u.numel, u.params));
  t.line("program       ", p.blocks()->size(), " blocks; step ",
         s.stepInstructions, " instructions, hooks ", s.hookInstructions,
         "; buffers ", s.persistentBuffers, " persistent, ", s.transientBuffers,
         " transient; ", p.events() ? p.events()->size() : 0, " events");
  if (s.memory.peakBlock >= 0)
    t.line("              transient peak at blocks[", s.memory.peakBlock,
           "].instructions[", s.memory.peakInstruction, "]");
  t.line("stream order  ", streamOrder);
  t.line("buckets       ", s.buckets.size());
  for (const plan::BucketSummary &b : s.buckets)
    t.line(absl::StrFormat("  %-4s %3d collectives %12s  %s",
                           b.id < 0 ? "none" : absl::StrCat(b.id),
                           b.collectives, plan::BytesText(b.bytes),
                           absl::StrJoin(b.kinds, ", ")));
}

/// The collectives of one optimizer step by kind.
void writeCollectives(Text &t, const plan::PlanSummary &s) {
  const plan::WorldBinding &w = s.world;
  t.line("collectives per step at W = ", w.worldSize, " (accumulation steps ",
         w.accumulationSteps, ")");
  t.line(absl::StrFormat("  %-15s %6s %14s %14s", "kind", "count", "bytes",
                         "bus bytes"));
  auto row = [&](const std::string &kind, const plan::CollectiveTally &tally) {
    t.line(absl::StrFormat("  %-15s %6d %14s %14s", kind, tally.count,
                           plan::BytesText(tally.bytes),
                           plan::BytesText(tally.busBytes)));
  };
  for (const plan::CollectiveTally &tally : s.perStep)
    row(tally.kind, tally);
  row("total", s.perStepTotal);
  if (s.conditionalCollectives > 0)
    t.line("  and ", s.conditionalCollectives,
           " inside an if or for of the step (not counted)");
}

/// The GEMM-class FLOPs of one optimizer step by opcode.
void writeFlops(Text &t, const plan::PlanSummary &s) {
  const plan::WorldBinding &w = s.world;
  t.line("flops per step at W = ", w.worldSize,
         " (GEMM-class ops, accumulation steps ", w.accumulationSteps, ")");
  t.line(absl::StrFormat("  %-22s %6s %20s", "op", "count", "flops"));
  int64_t flopInstructions = 0;
  for (const plan::FlopTally &tally : s.flops) {
    t.line(absl::StrFormat("  %-22s %6d %20d", tally.kind, tally.count,
                           tally.flops));
    flopInstructions += tally.count;
  }
  t.line(absl::StrFormat("  %-22s %6d %20d  %s", "per rank", flopInstructions,
                         s.flopsPerRank, flopsText(s.flopsPerRank)));
  t.line(absl::StrFormat(
      "  %-29s %20d  %s",
      absl::StrCat("all ", w.worldSize, w.worldSize == 1 ? " rank" : " ranks"),
      s.flopsAllRanks, flopsText(s.flopsAllRanks)));
  if (s.conditionalFlopInstructions > 0)
    t.line("  and ", s.conditionalFlopInstructions,
           " inside an if or for of the step (not counted)");
}

/// The recipe, the data and the hooks.
void writeRecipe(Text &t, const Plan &p, const plan::PlanSummary &s) {
  const fb::Recipe &r = *p.recipe();
  const plan::WorldBinding &w = s.world;
  const fb::Optimizer &opt = *r.optimizer();
  std::string optimizer =
      opt.kind() == fb::OptimizerKind::AdamW
          ? absl::StrFormat(
                "adamw(lr = %g, betas = (%g, %g), eps = %g, weight_decay = %g)",
                opt.lr(), opt.beta1(), opt.beta2(), opt.eps(),
                opt.weight_decay())
          : absl::StrFormat("sgd(lr = %g, momentum = %g, dampening = %g, "
                            "weight_decay = %g%s)",
                            opt.lr(), opt.momentum(), opt.dampening(),
                            opt.weight_decay(),
                            opt.nesterov() ? ", nesterov" : "");
  const fb::Schedule &sched = *r.schedule();
  t.line("recipe        global_batch ", r.global_batch(), ", micro_batch ",
         r.micro_batch(), ", accumulation steps ", w.accumulationSteps,
         " at W = ", w.worldSize);
  t.line("              optimizer ", optimizer);
  for (const runtime::OptimizerGroupSummary &g :
       runtime::SummarizeOptimizerGroups(p))
    t.line("              optimizer group ", g.str());
  t.line("              schedule ",
         lower(fb::EnumNameScheduleKind(sched.kind())),
         "(warmup = ", sched.warmup(), ", steps = ", sched.steps(),
         ", min_lr = ", absl::StrFormat("%g", sched.min_lr()), ")");
  t.line("              clip_grad_norm ",
         r.clip_grad_norm() > 0 ? absl::StrFormat("%g", r.clip_grad_norm())
                                : std::string("none"),
         ", seed ", r.seed(), r.sync_batch_norm() ? ", sync_batch_norm" : "");
  const fb::DataSpec &d = *p.datasets()->Get(r.train_data());
  t.line("data          ", lower(fb::EnumNameDataKind(d.kind())),
         d.kind() == fb::DataKind::Synthetic
             ? absl::StrCat(" (seed ", d.seed(), ")")
             : absl::StrCat(" \"", printable(str(d.path())), "\""),
         "; sampler seed ", r.sampler()->seed(), ", ",
         // As the banner says it (DataFeeds.cpp): token windows are drawn
         // at random offsets each epoch, whatever the flag.
         data::DescribeOrder(d.kind() != fb::DataKind::Tokens,
                             r.sampler()->reshuffle_each_epoch(),
                             r.sampler()->tail() == fb::TailPolicy::Pad
                                 ? data::Tail::Pad
                                 : data::Tail::Drop));
  t.line("hooks         ",
         s.hooks.empty() ? std::string("none") : absl::StrCat(s.hooks.size()));
  for (const plan::HookSummary &hk : s.hooks) {
    std::string when = hk.period == 0
                           ? "after every step"
                           : absl::StrCat("every ", hk.period, " ", hk.unit);
    t.line("  ", when, ": ", printable(absl::StrJoin(hk.actions, "; ")),
           hk.communicates ? "  [communicates]" : "");
  }
}

/// How this machine's CPU backend would run the plan: its instruction set
/// and the GEMM path of each operand type (CpuIsa.h, Gemm.h).
void writeCpuBackend(Text &t) {
  const cpu::GemmPaths &g = cpu::gemmPaths();
  t.line("cpu backend   on this machine: isa ", g.isa, "; vector math ",
         cpu::VecMathVariant());
  t.line("  gemm f32    ", g.f32.text);
  t.line("  gemm bf16   ", g.bf16.text);
  t.line("  gemm f16    ", g.f16.text);
  for (const std::string &w : cpu::CpuBackend::isaWarnings())
    t.line("  warning     ", w);
}

/// The text form: the sections, a blank line between them.
std::string formatText(const std::string &path, const plan::LoadedPlan &loaded,
                       const plan::PlanSummary &s,
                       const std::string &streamOrder) {
  Text t;
  writeHeader(t, path, loaded, s.world);
  t.line("");
  writeProgram(t, loaded.plan(), s, streamOrder);
  t.line("");
  // The same bytes as mdc --explain's memory section (MemoryFormat.h).
  t.out += plan::FormatMemoryText(s.memory, s.world.worldSize);
  t.line("");
  writeCollectives(t, s);
  t.line("");
  writeFlops(t, s);
  t.line("");
  writeRecipe(t, loaded.plan(), s);
  t.line("");
  writeCpuBackend(t);
  return t.out;
}

} // namespace

absl::Status Inspect(const InspectOptions &options, std::string &out) {
  plan::LoadOptions load;
  load.worldSize = options.worldSize;
  absl::StatusOr<plan::LoadedPlan> loaded =
      plan::LoadPlanFile(options.planPath, load);
  if (!loaded.ok())
    return loaded.status();
  // Without --world-size: the pinned W, else 2, else the smallest W that
  // the plan's batch and groups fit (a hybrid plan of groups of 8 at 8).
  int64_t worldSize = loaded->bound() ? loaded->world().worldSize : 2;
  absl::StatusOr<plan::PlanSummary> summary =
      plan::Summarize(*loaded, worldSize);
  constexpr int64_t kMaxSearched = 4096;
  for (int64_t w = 1; !summary.ok() && !loaded->bound() && w <= kMaxSearched;
       ++w) {
    if (w == 2)
      continue;
    absl::StatusOr<plan::PlanSummary> at = plan::Summarize(*loaded, w);
    if (at.ok()) {
      worldSize = w;
      summary = std::move(at);
    }
  }
  if (!summary.ok())
    return absl::Status(
        summary.status().code(),
        absl::StrCat(options.planPath, ": at world size ", worldSize, ": ",
                     summary.status().message(),
                     loaded->bound() || options.worldSize
                         ? ""
                         : absl::StrCat(" (and no world size from 1 to ",
                                        kMaxSearched, " fits the plan)")));
  // Whether a GPU, running the streams concurrently, computes what the CPU
  // does (StreamOrder.h).
  std::string streamOrder = "ok: events order every cross-stream conflict";
  absl::StatusOr<plan::WorldBinding> binding =
      plan::BindWorldSize(*loaded, worldSize);
  absl::StatusOr<runtime::ArenaLayout> layout =
      binding.ok() ? runtime::LayOutArenas(*loaded, *binding)
                   : absl::StatusOr<runtime::ArenaLayout>(binding.status());
  absl::Status order = layout.ok() ? runtime::CheckStreamOrder(*loaded, *layout)
                                   : layout.status();
  if (!order.ok())
    streamOrder = absl::StrCat(
        order.code() == absl::StatusCode::kFailedPrecondition ? "UNORDERED: "
                                                              : "not checked: ",
        order.message());
  if (options.format == InspectFormat::Json) {
    out.clear();
    writeJson(buildReport(options.planPath, *loaded, *summary, streamOrder), 0,
              out);
    out += "\n";
  } else {
    out = formatText(options.planPath, *loaded, *summary, streamOrder);
  }
  return absl::OkStatus();
}

} // namespace md::mdrun
