//===- Loader.cpp - load and verify a plan.fb ---------------------------===//
//
// Stage (a) is CheckPlanStructure; stage (b) is SemanticVerifier, which
// checks the tables in dependency order (header, datasets and recipe, units
// and params, events and locations, the block tree, buffers, instructions on
// their own and then in place, program order and uniformity over the block
// tree) so that every later check may index what an earlier one proved in
// range. Nothing here recurses deeper than the block tree, whose depth is
// capped before anything walks it.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/plan/Schema.h"
#include "runtime/plan/VerifyInternal.h"

namespace md::plan {
namespace {

using detail::count;
using detail::inRange;
using detail::kMaxRank;
using detail::str;

/// Blocks nest at most this deep (the step block and its micro-steps body
/// are depths 0 and 1).
constexpr int32_t kMaxBlockDepth = 16;
/// The largest world size a plan binds to.
constexpr int64_t kMaxWorldSize = int64_t{1} << 24;

absl::Status invalid(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

template <typename... Args>
absl::Status invalidf(const absl::FormatSpec<Args...> &format,
                      const Args &...args) {
  return absl::InvalidArgumentError(absl::StrFormat(format, args...));
}

std::string arityText(Arity arity) {
  if (arity.min == arity.max)
    return absl::StrCat(arity.min);
  if (arity.max == Arity::kMany)
    return absl::StrCat("at least ", arity.min);
  return absl::StrCat(arity.min, " to ", arity.max);
}

/// The identifier bytes as text, with anything unprintable escaped.
std::string printable(const uint8_t *bytes, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (bytes[i] >= 0x20 && bytes[i] < 0x7f && bytes[i] != '\\' &&
        bytes[i] != '\'')
      out += static_cast<char>(bytes[i]);
    else
      absl::StrAppendFormat(&out, "\\x%02x", bytes[i]);
  }
  return out;
}

/// Checks a shape (dims >= 0, rank <= kMaxRank) and returns its element
/// count, refusing one that overflows int64.
absl::Status checkShape(const flatbuffers::Vector<int64_t> *shape,
                        absl::string_view path, int64_t *numel) {
  if (count(shape) > kMaxRank)
    return invalidf("%s: rank %d is more than %d dims", path, count(shape),
                    kMaxRank);
  int64_t n = 1;
  for (uint32_t i = 0; i < count(shape); ++i) {
    int64_t dim = shape->Get(i);
    if (dim < 0)
      return invalidf("%s[%d]: negative dim %d", path, i, dim);
    if (__builtin_mul_overflow(n, dim, &n))
      return invalidf("%s: element count overflows 64 bits", path);
  }
  *numel = n;
  return absl::OkStatus();
}

absl::Status checkFinite(double value, absl::string_view path) {
  if (!std::isfinite(value))
    return invalidf("%s: %g is not a finite number", path, value);
  return absl::OkStatus();
}

/// Stage (a), the part FlatBuffers 2.0.8's Verifier leaves out: it checks
/// that a vector's length is 4-byte aligned, not that 8-byte elements are
/// 8-byte aligned, and reading a misaligned one is undefined behaviour.
/// `base` is the start of the buffer (itself aligned for any scalar).
template <typename T>
absl::Status checkAligned(const flatbuffers::Vector<T> *v, const uint8_t *base,
                          const std::string &path) {
  static_assert(sizeof(T) == 8,
                "only 8-byte elements need more than the verifier checks");
  if (v && (reinterpret_cast<const uint8_t *>(v->Data()) - base) % 8 != 0)
    return invalidf("malformed plan file: %s is not 8-byte aligned", path);
  return absl::OkStatus();
}

absl::Status checkVectorAlignment(const fb::Plan &plan, const uint8_t *base) {
  for (uint32_t i = 0; i < count(plan.params()); ++i) {
    const fb::Param *param = plan.params()->Get(i);
    MD_RETURN_IF_ERROR(checkAligned(param->shape(), base,
                                    absl::StrCat("params[", i, "].shape")));
    if (param->init())
      MD_RETURN_IF_ERROR(
          checkAligned(param->init()->args(), base,
                       absl::StrCat("params[", i, "].init.args")));
  }
  for (uint32_t i = 0; i < count(plan.buffers()); ++i)
    MD_RETURN_IF_ERROR(checkAligned(plan.buffers()->Get(i)->shape(), base,
                                    absl::StrCat("buffers[", i, "].shape")));
  for (uint32_t b = 0; b < count(plan.blocks()); ++b) {
    const fb::Block *block = plan.blocks()->Get(b);
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      std::string path = absl::StrFormat("blocks[%d].instructions[%d]", b, i);
      MD_RETURN_IF_ERROR(checkAligned(inst->ints(), base, path + ".ints"));
      MD_RETURN_IF_ERROR(checkAligned(inst->floats(), base, path + ".floats"));
    }
  }
  return absl::OkStatus();
}

/// The semantic verifier (stage b).
class SemanticVerifier {
public:
  explicit SemanticVerifier(const fb::Plan &plan) : plan_(plan) {}

  absl::Status run() {
    MD_RETURN_IF_ERROR(checkHeader());
    MD_RETURN_IF_ERROR(checkDatasetsAndRecipe());
    MD_RETURN_IF_ERROR(checkUnitsAndParams());
    MD_RETURN_IF_ERROR(checkEventsAndLocations());
    MD_RETURN_IF_ERROR(checkBlockTree());
    MD_RETURN_IF_ERROR(checkBuffers());
    MD_RETURN_IF_ERROR(checkInstructions());
    MD_RETURN_IF_ERROR(checkProgramOrder());
    MD_RETURN_IF_ERROR(checkUniformity());
    return absl::OkStatus();
  }

  std::vector<BlockSite> takeSites() { return std::move(sites_); }

private:
  // --- header, recipe, tables ------------------------------------------

  absl::Status checkHeader() {
    const fb::Header *header = plan_.header();
    if (!header)
      return invalid("header: missing");
    if (str(header->model()).empty())
      return invalid("header.model: missing");
    const fb::PlanOptions *options = header->options();
    if (!options)
      return invalid("header.options: missing");
    if (!inRange(options->shard()))
      return invalidf("header.options.shard: unknown shard kind %d",
                      static_cast<int>(options->shard()));
    if (!inRange(options->wrap()))
      return invalidf("header.options.wrap: unknown wrap kind %d",
                      static_cast<int>(options->wrap()));
    if (!inRange(options->prefetch_backward()))
      return invalidf("header.options.prefetch_backward: unknown value %d",
                      static_cast<int>(options->prefetch_backward()));
    struct {
      const char *name;
      fb::DType dtype;
    } precisions[] = {{"param_dtype", options->param_dtype()},
                      {"reduce_dtype", options->reduce_dtype()},
                      {"buffer_dtype", options->buffer_dtype()},
                      {"master_dtype", options->master_dtype()}};
    for (const auto &p : precisions) {
      if (p.dtype != fb::DType::F32 && p.dtype != fb::DType::BF16 &&
          p.dtype != fb::DType::F16)
        return invalidf("header.options.%s: %s is not bf16, f16 or f32", p.name,
                        DTypeName(p.dtype));
    }
    if (options->bucket_cap() <= 0)
      return invalidf("header.options.bucket_cap: %d bytes is not positive",
                      options->bucket_cap());
    if (options->wrap() == fb::WrapKind::Size &&
        options->wrap_min_params() <= 0)
      return invalidf(
          "header.options.wrap_min_params: %d is not positive for a size wrap",
          options->wrap_min_params());
    if (header->world_size() < 0 || header->world_size() > kMaxWorldSize)
      return invalidf(
          "header.world_size: %d is not 0 (any) or a world size of at most %d",
          header->world_size(), kMaxWorldSize);
    hybrid_ = options->shard() == fb::ShardKind::Hybrid;
    if (hybrid_ && header->shard_group_size() < 2)
      return invalidf("header.shard_group_size: a hybrid plan needs a shard "
                      "group of at least "
                      "2 ranks, not %d",
                      header->shard_group_size());
    if (!hybrid_ && header->shard_group_size() != 0)
      return invalidf("header.shard_group_size: %d on a plan that is not "
                      "hybrid (must be 0)",
                      header->shard_group_size());
    if (hybrid_ && header->world_size() > 0 &&
        header->world_size() % header->shard_group_size() != 0)
      return invalidf("header.shard_group_size: %d does not divide the pinned "
                      "world size %d",
                      header->shard_group_size(), header->world_size());
    return absl::OkStatus();
  }

  absl::Status checkDatasetsAndRecipe() {
    numDatasets_ = count(plan_.datasets());
    for (uint32_t i = 0; i < numDatasets_; ++i) {
      const fb::DataSpec *data = plan_.datasets()->Get(i);
      std::string path = absl::StrCat("datasets[", i, "]");
      if (!inRange(data->kind()))
        return invalidf("%s.kind: unknown data kind %d", path,
                        static_cast<int>(data->kind()));
      bool synthetic = data->kind() == fb::DataKind::Synthetic;
      if (synthetic != str(data->path()).empty())
        return invalidf("%s.path: %s", path,
                        synthetic ? "synthetic data has no path"
                                  : "missing for a data file");
    }
    const fb::Recipe *recipe = plan_.recipe();
    if (!recipe)
      return invalid("recipe: missing");
    if (recipe->global_batch() <= 0)
      return invalidf("recipe.global_batch: %d is not positive",
                      recipe->global_batch());
    if (recipe->micro_batch() <= 0)
      return invalidf("recipe.micro_batch: %d is not positive",
                      recipe->micro_batch());
    if (recipe->global_batch() % recipe->micro_batch() != 0)
      return invalidf(
          "recipe.global_batch: %d is not a multiple of micro_batch %d",
          recipe->global_batch(), recipe->micro_batch());
    if (recipe->train_data() < 0 ||
        static_cast<uint32_t>(recipe->train_data()) >= numDatasets_)
      return invalidf(
          "recipe.train_data: dataset %d out of range (%d datasets)",
          recipe->train_data(), numDatasets_);
    MD_RETURN_IF_ERROR(
        checkFinite(recipe->clip_grad_norm(), "recipe.clip_grad_norm"));
    if (recipe->clip_grad_norm() < 0)
      return invalidf("recipe.clip_grad_norm: %g is negative",
                      recipe->clip_grad_norm());

    const fb::Optimizer *opt = recipe->optimizer();
    if (!opt)
      return invalid("recipe.optimizer: missing");
    if (!inRange(opt->kind()))
      return invalidf("recipe.optimizer.kind: unknown optimizer %d",
                      static_cast<int>(opt->kind()));
    const std::pair<const char *, double> hyper[] = {
        {"lr", opt->lr()},
        {"beta1", opt->beta1()},
        {"beta2", opt->beta2()},
        {"eps", opt->eps()},
        {"weight_decay", opt->weight_decay()},
        {"momentum", opt->momentum()},
        {"dampening", opt->dampening()}};
    for (const auto &[name, value] : hyper)
      MD_RETURN_IF_ERROR(
          checkFinite(value, absl::StrCat("recipe.optimizer.", name)));
    if (opt->lr() <= 0)
      return invalidf("recipe.optimizer.lr: %g is not positive", opt->lr());
    if (opt->weight_decay() < 0)
      return invalidf("recipe.optimizer.weight_decay: %g is negative",
                      opt->weight_decay());
    if (opt->kind() == fb::OptimizerKind::AdamW) {
      if (opt->beta1() < 0 || opt->beta1() >= 1)
        return invalidf("recipe.optimizer.beta1: %g is not in [0, 1)",
                        opt->beta1());
      if (opt->beta2() < 0 || opt->beta2() >= 1)
        return invalidf("recipe.optimizer.beta2: %g is not in [0, 1)",
                        opt->beta2());
      if (opt->eps() <= 0)
        return invalidf("recipe.optimizer.eps: %g is not positive", opt->eps());
    } else {
      if (opt->momentum() < 0)
        return invalidf("recipe.optimizer.momentum: %g is negative",
                        opt->momentum());
      if (opt->nesterov() && (opt->momentum() <= 0 || opt->dampening() != 0))
        return invalid(
            "recipe.optimizer.nesterov: needs momentum > 0 and dampening = 0");
    }

    const fb::Schedule *schedule = recipe->schedule();
    if (!schedule)
      return invalid("recipe.schedule: missing");
    if (!inRange(schedule->kind()))
      return invalidf("recipe.schedule.kind: unknown schedule %d",
                      static_cast<int>(schedule->kind()));
    if (schedule->warmup() < 0)
      return invalidf("recipe.schedule.warmup: %d is negative",
                      schedule->warmup());
    if (schedule->steps() < schedule->warmup())
      return invalidf(
          "recipe.schedule.steps: %d is fewer than the %d warmup steps",
          schedule->steps(), schedule->warmup());
    MD_RETURN_IF_ERROR(
        checkFinite(schedule->min_lr(), "recipe.schedule.min_lr"));
    if (schedule->min_lr() < 0)
      return invalidf("recipe.schedule.min_lr: %g is negative",
                      schedule->min_lr());

    const fb::Sampler *sampler = recipe->sampler();
    if (!sampler)
      return invalid("recipe.sampler: missing");
    if (!inRange(sampler->tail()))
      return invalidf("recipe.sampler.tail: unknown tail policy %d",
                      static_cast<int>(sampler->tail()));
    return absl::OkStatus();
  }

  absl::Status checkUnitsAndParams() {
    numUnits_ = count(plan_.units());
    for (uint32_t u = 0; u < numUnits_; ++u) {
      const fb::Unit *unit = plan_.units()->Get(u);
      if (unit->id() != static_cast<int32_t>(u))
        return invalidf("units[%d].id: %d, but a unit's id is its index", u,
                        unit->id());
      if (unit->numel() < 0)
        return invalidf("units[%d].numel: %d is negative", u, unit->numel());
    }
    // Trainable parameters of each unit, as (offset, end, param), to find
    // overlaps.
    std::vector<std::vector<std::tuple<int64_t, int64_t, uint32_t>>> packed(
        numUnits_);
    absl::flat_hash_set<absl::string_view> names;
    for (uint32_t i = 0; i < count(plan_.params()); ++i) {
      const fb::Param *param = plan_.params()->Get(i);
      std::string path = absl::StrCat("params[", i, "]");
      absl::string_view name = str(param->name());
      if (name.empty())
        return invalidf("%s.name: missing", path);
      if (!names.insert(name).second)
        return invalidf("%s.name: '%s' names two parameters", path,
                        detail::printable(name));
      int64_t numel = 0;
      MD_RETURN_IF_ERROR(
          checkShape(param->shape(), absl::StrCat(path, ".shape"), &numel));
      if (DTypeSize(param->dtype()) == 0)
        return invalidf("%s.dtype: %s is not an element type", path,
                        absl::StrCat(static_cast<int>(param->dtype())));
      int64_t bytes = 0;
      if (__builtin_mul_overflow(numel, DTypeSize(param->dtype()), &bytes))
        return invalidf("%s: byte size overflows 64 bits", path);
      MD_RETURN_IF_ERROR(checkInit(param->init(), absl::StrCat(path, ".init")));
      if (param->unit() < 0 ||
          static_cast<uint32_t>(param->unit()) >= numUnits_)
        return invalidf("%s.unit: unit %d out of range (%d units)", path,
                        param->unit(), numUnits_);
      if (!param->trainable()) {
        if (param->offset() != -1)
          return invalidf(
              "%s.offset: %d, but a frozen parameter is not in its unit's flat "
              "buffer (must be -1)",
              path, param->offset());
        continue;
      }
      int64_t end = 0;
      const fb::Unit *unit = plan_.units()->Get(param->unit());
      if (param->offset() < 0 ||
          __builtin_add_overflow(param->offset(), numel, &end) ||
          end > unit->numel())
        return invalidf("%s.offset: elements [%d, %d + %d) do not fit in unit "
                        "%d of %d elements",
                        path, param->offset(), param->offset(), numel,
                        param->unit(), unit->numel());
      packed[param->unit()].emplace_back(param->offset(), end, i);
    }
    for (uint32_t u = 0; u < numUnits_; ++u) {
      auto &list = packed[u];
      std::sort(list.begin(), list.end());
      for (size_t k = 1; k < list.size(); ++k) {
        if (std::get<0>(list[k]) < std::get<1>(list[k - 1]))
          return invalidf("params[%d].offset: overlaps params[%d] in unit %d",
                          std::get<2>(list[k]), std::get<2>(list[k - 1]), u);
      }
    }
    return absl::OkStatus();
  }

  absl::Status checkInit(const fb::Init *init, const std::string &path) {
    if (!init)
      return invalidf("%s: missing", path);
    if (!inRange(init->kind()))
      return invalidf("%s.kind: unknown initialiser %d", path,
                      static_cast<int>(init->kind()));
    uint32_t expected = 0;
    switch (init->kind()) {
    case fb::InitKind::Zeros:
    case fb::InitKind::Ones:
      expected = 0;
      break;
    case fb::InitKind::Constant:
      expected = 1;
      break;
    case fb::InitKind::Normal:
    case fb::InitKind::Uniform:
      expected = 2;
      break;
    }
    if (count(init->args()) != expected)
      return invalidf("%s.args: %s takes %d arguments, has %d", path,
                      fb::EnumNameInitKind(init->kind()), expected,
                      count(init->args()));
    for (uint32_t k = 0; k < expected; ++k)
      MD_RETURN_IF_ERROR(checkFinite(init->args()->Get(k),
                                     absl::StrCat(path, ".args[", k, "]")));
    if (init->kind() == fb::InitKind::Normal && init->args()->Get(1) < 0)
      return invalidf("%s.args[1]: standard deviation %g is negative", path,
                      init->args()->Get(1));
    if (init->kind() == fb::InitKind::Uniform &&
        init->args()->Get(0) > init->args()->Get(1))
      return invalidf("%s.args: low %g is above high %g", path,
                      init->args()->Get(0), init->args()->Get(1));
    return absl::OkStatus();
  }

  absl::Status checkEventsAndLocations() {
    numEvents_ = count(plan_.events());
    numLocations_ = count(plan_.locations());
    for (uint32_t i = 0; i < numLocations_; ++i) {
      const fb::SourceLocation *loc = plan_.locations()->Get(i);
      if (loc->line() < 1 || loc->col() < 1)
        return invalidf(
            "locations[%d]: line %d, column %d: both must be at least 1", i,
            loc->line(), loc->col());
    }
    return absl::OkStatus();
  }

  // --- the block tree ---------------------------------------------------

  absl::Status checkBlockTree() {
    numBlocks_ = count(plan_.blocks());
    sites_.assign(numBlocks_, BlockSite{});
    std::vector<bool> hasParent(numBlocks_, false);
    auto checkRoot = [&](int32_t block, const char *field,
                         fb::BlockKind kind) -> absl::Status {
      if (block < 0 || static_cast<uint32_t>(block) >= numBlocks_)
        return invalidf("%s: block %d out of range (%d blocks)", field, block,
                        numBlocks_);
      if (plan_.blocks()->Get(block)->kind() != kind)
        return invalidf("%s: blocks[%d] is a '%s' block, not a '%s' block",
                        field, block,
                        BlockKindName(plan_.blocks()->Get(block)->kind()),
                        BlockKindName(kind));
      hasParent[block] = true;
      return absl::OkStatus();
    };
    MD_RETURN_IF_ERROR(
        checkRoot(plan_.step_block(), "step_block", fb::BlockKind::Step));
    if (plan_.hooks_block() != -1) {
      if (plan_.hooks_block() == plan_.step_block())
        return invalidf("hooks_block: block %d is also the step block",
                        plan_.hooks_block());
      MD_RETURN_IF_ERROR(
          checkRoot(plan_.hooks_block(), "hooks_block", fb::BlockKind::Hooks));
    }
    // Each block is run from exactly one place.
    for (uint32_t b = 0; b < numBlocks_; ++b) {
      const fb::Block *block = plan_.blocks()->Get(b);
      if (!inRange(block->kind()))
        return invalidf("blocks[%d].kind: unknown block kind %d", b,
                        static_cast<int>(block->kind()));
      for (uint32_t i = 0; i < count(block->instructions()); ++i) {
        const fb::Instruction *inst = block->instructions()->Get(i);
        for (uint32_t k = 0; k < count(inst->blocks()); ++k) {
          int32_t child = inst->blocks()->Get(k);
          std::string path = absl::StrFormat(
              "blocks[%d].instructions[%d].blocks[%d]", b, i, k);
          if (child < 0 || static_cast<uint32_t>(child) >= numBlocks_)
            return invalidf("%s: block %d out of range (%d blocks)", path,
                            child, numBlocks_);
          if (hasParent[child]) {
            if (child == plan_.step_block() || child == plan_.hooks_block())
              return invalidf("%s: block %d is the %s block", path, child,
                              child == plan_.step_block() ? "step" : "hooks");
            return invalidf(
                "%s: block %d is already run by blocks[%d].instructions[%d]",
                path, child, sites_[child].parentBlock,
                sites_[child].parentInstruction);
          }
          hasParent[child] = true;
          sites_[child].parentBlock = static_cast<int32_t>(b);
          sites_[child].parentInstruction = static_cast<int32_t>(i);
        }
      }
    }
    for (uint32_t b = 0; b < numBlocks_; ++b) {
      if (!hasParent[b])
        return invalidf("blocks[%d]: no instruction runs it", b);
    }
    // Depths by a walk from the roots; a block it does not reach sits on a
    // cycle of blocks running each other.
    std::vector<bool> reached(numBlocks_, false);
    std::vector<int32_t> queue;
    queue.push_back(plan_.step_block());
    if (plan_.hooks_block() != -1)
      queue.push_back(plan_.hooks_block());
    for (int32_t root : queue)
      reached[root] = true;
    for (size_t head = 0; head < queue.size(); ++head) {
      int32_t b = queue[head];
      const fb::Block *block = plan_.blocks()->Get(b);
      for (uint32_t i = 0; i < count(block->instructions()); ++i) {
        const fb::Instruction *inst = block->instructions()->Get(i);
        for (uint32_t k = 0; k < count(inst->blocks()); ++k) {
          int32_t child = inst->blocks()->Get(k);
          sites_[child].depth = sites_[b].depth + 1;
          if (sites_[child].depth > kMaxBlockDepth)
            return invalidf("blocks[%d]: nested %d blocks deep, more than %d",
                            child, sites_[child].depth, kMaxBlockDepth);
          reached[child] = true;
          queue.push_back(child);
        }
      }
    }
    for (uint32_t b = 0; b < numBlocks_; ++b) {
      if (!reached[b])
        return invalidf("blocks[%d]: not reachable from the step or hooks "
                        "block (blocks that "
                        "run each other form a cycle)",
                        b);
    }
    // Which tree each block belongs to.
    inHooks_.assign(numBlocks_, false);
    for (int32_t b : queue) {
      const BlockSite &site = sites_[b];
      inHooks_[b] = b == plan_.hooks_block() ||
                    (site.parentBlock >= 0 && inHooks_[site.parentBlock]);
    }
    return absl::OkStatus();
  }

  // --- buffers ----------------------------------------------------------

  absl::Status checkBuffers() {
    numBuffers_ = count(plan_.buffers());
    for (uint32_t i = 0; i < numBuffers_; ++i) {
      const fb::Buffer *buffer = plan_.buffers()->Get(i);
      std::string path = absl::StrCat("buffers[", i, "]");
      if (DTypeSize(buffer->dtype()) == 0)
        return invalidf("%s.dtype: %d is not an element type", path,
                        static_cast<int>(buffer->dtype()));
      if (!inRange(buffer->size_kind()))
        return invalidf("%s.size_kind: unknown size kind %d", path,
                        static_cast<int>(buffer->size_kind()));
      if (buffer->numel() < 0)
        return invalidf("%s.numel: %d is negative", path, buffer->numel());
      if (buffer->size_kind() == fb::SizeKind::Full) {
        int64_t numel = 0;
        MD_RETURN_IF_ERROR(
            checkShape(buffer->shape(), absl::StrCat(path, ".shape"), &numel));
        if (numel != buffer->numel())
          return invalidf("%s.numel: %d, but its shape has %d elements", path,
                          buffer->numel(), numel);
      } else {
        if (count(buffer->shape()) != 0)
          return invalidf(
              "%s.shape: a shard has no static shape (%d dims given)", path,
              count(buffer->shape()));
        if (!inRange(buffer->group()))
          return invalidf("%s.group: unknown group %d", path,
                          static_cast<int>(buffer->group()));
      }
      int64_t bytes = 0;
      if (__builtin_mul_overflow(buffer->numel(), DTypeSize(buffer->dtype()),
                                 &bytes))
        return invalidf("%s: %d elements of %s overflow 64-bit byte counts",
                        path, buffer->numel(), DTypeName(buffer->dtype()));
      if (!inRange(buffer->role()))
        return invalidf("%s.role: unknown state role %d", path,
                        static_cast<int>(buffer->role()));
      if (!inRange(buffer->category()))
        return invalidf("%s.category: unknown memory category %d", path,
                        static_cast<int>(buffer->category()));
      if (buffer->category() == fb::MemoryCategory::Host &&
          (buffer->size_kind() != fb::SizeKind::Full || buffer->numel() != 1))
        return invalidf("%s.category: host, but not a scalar (%d elements)",
                        path, buffer->numel());
      if (buffer->role() != fb::StateRole::None) {
        if (buffer->unit() < -1 ||
            buffer->unit() >= static_cast<int64_t>(numUnits_))
          return invalidf("%s.unit: unit %d out of range (%d units)", path,
                          buffer->unit(), numUnits_);
        if (buffer->block() != -1 || buffer->first() != -1 ||
            buffer->last() != -1)
          return invalidf("%s: persistent (%s) but has a liveness interval",
                          path, StateRoleName(buffer->role()));
        continue;
      }
      // Transient.
      if (buffer->unit() != -1)
        return invalidf("%s.unit: %d on a transient buffer (must be -1)", path,
                        buffer->unit());
      if (buffer->only_when_accumulating())
        return invalidf("%s.only_when_accumulating: set on a transient buffer",
                        path);
      if (buffer->block() < 0 ||
          static_cast<uint32_t>(buffer->block()) >= numBlocks_)
        return invalidf("%s.block: block %d out of range (%d blocks)", path,
                        buffer->block(), numBlocks_);
      uint32_t size =
          count(plan_.blocks()->Get(buffer->block())->instructions());
      if (buffer->first() < 0 || buffer->last() < buffer->first() ||
          static_cast<uint32_t>(buffer->last()) >= size)
        return invalidf("%s: liveness interval [%d, %d] is not within the %d "
                        "instructions of "
                        "blocks[%d]",
                        path, buffer->first(), buffer->last(), size,
                        buffer->block());
    }
    return absl::OkStatus();
  }

  // --- instructions, each on its own -----------------------------------

  absl::Status checkInstructions() {
    // First each instruction on its own, so that the placement and type
    // checks below may read any instruction's attributes and blocks.
    for (uint32_t b = 0; b < numBlocks_; ++b) {
      const fb::Block *block = plan_.blocks()->Get(b);
      for (uint32_t i = 0; i < count(block->instructions()); ++i)
        MD_RETURN_IF_ERROR(checkInstruction(
            *block->instructions()->Get(i),
            absl::StrFormat("blocks[%d].instructions[%d]", b, i)));
    }
    for (uint32_t b = 0; b < numBlocks_; ++b) {
      const fb::Block *block = plan_.blocks()->Get(b);
      uint32_t size = count(block->instructions());
      uint32_t microSteps = 0;
      for (uint32_t i = 0; i < size; ++i) {
        const fb::Instruction *inst = block->instructions()->Get(i);
        std::string path = absl::StrFormat("blocks[%d].instructions[%d]", b, i);
        MD_RETURN_IF_ERROR(checkPlacement(*inst, b, i, size, path));
        if (inst->opcode() == fb::Opcode::MicroSteps && ++microSteps > 1)
          return invalidf("%s: a second micro_steps in the step block", path);
        MD_RETURN_IF_ERROR(detail::CheckOperandTypes(
            plan_, *inst, *GetOpcodeInfo(inst->opcode()), path));
      }
    }
    // Each transient buffer is written before it is read in its interval.
    // The interval may start earlier than the first write (a comm-stream
    // output is reserved from the moment the instruction can start). One
    // pass over the operands: a buffer's uses in its own block, in order.
    struct Use {
      int32_t at;
      bool reads, writes;
    };
    std::vector<std::vector<Use>> uses(numBuffers_);
    for (uint32_t b = 0; b < numBlocks_; ++b) {
      const fb::Block *block = plan_.blocks()->Get(b);
      for (uint32_t i = 0; i < count(block->instructions()); ++i) {
        const fb::Instruction *inst = block->instructions()->Get(i);
        auto note = [&](const flatbuffers::Vector<int32_t> *list, bool write) {
          for (uint32_t k = 0; k < count(list); ++k) {
            int32_t x = list->Get(k);
            const fb::Buffer *buffer = plan_.buffers()->Get(x);
            if (buffer->role() != fb::StateRole::None ||
                buffer->block() != static_cast<int32_t>(b))
              continue;
            std::vector<Use> &u = uses[x];
            if (u.empty() || u.back().at != static_cast<int32_t>(i))
              u.push_back({static_cast<int32_t>(i), false, false});
            (write ? u.back().writes : u.back().reads) = true;
          }
        };
        note(inst->inputs(), false);
        note(inst->outputs(), true);
      }
    }
    for (uint32_t x = 0; x < numBuffers_; ++x) {
      const fb::Buffer *buffer = plan_.buffers()->Get(x);
      if (buffer->role() != fb::StateRole::None)
        continue;
      bool written = false;
      for (const Use &u : uses[x]) {
        if (u.at < buffer->first() || u.at > buffer->last())
          continue;
        if (u.writes) {
          written = true;
          break;
        }
        if (u.reads)
          return invalidf("buffers[%d]: blocks[%d].instructions[%d] reads it "
                          "before anything in its liveness interval [%d, %d] "
                          "writes it",
                          x, buffer->block(), u.at, buffer->first(),
                          buffer->last());
      }
      if (!written)
        return invalidf("buffers[%d]: nothing in its liveness interval "
                        "[%d, %d] of blocks[%d] writes it",
                        x, buffer->first(), buffer->last(), buffer->block());
    }
    // A view aliases its source, which must outlive it.
    for (uint32_t b = 0; b < numBlocks_; ++b) {
      const fb::Block *block = plan_.blocks()->Get(b);
      for (uint32_t i = 0; i < count(block->instructions()); ++i) {
        const fb::Instruction *inst = block->instructions()->Get(i);
        if (inst->opcode() != fb::Opcode::View)
          continue;
        const fb::Buffer *source = plan_.buffers()->Get(inst->inputs()->Get(0));
        const fb::Buffer *view = plan_.buffers()->Get(inst->outputs()->Get(0));
        if (source->block() != view->block() || source->last() < view->last())
          return invalidf("blocks[%d].instructions[%d]: view buffer %d lives "
                          "until instruction "
                          "%d of blocks[%d], but its source, buffer %d, only "
                          "until instruction %d "
                          "of blocks[%d]",
                          b, i, inst->outputs()->Get(0), view->last(),
                          view->block(), inst->inputs()->Get(0), source->last(),
                          source->block());
      }
    }
    return absl::OkStatus();
  }

  absl::Status checkArity(absl::string_view path, const char *field,
                          const OpcodeInfo &info, Arity arity, uint32_t n) {
    if (!arity.contains(n))
      return invalidf("%s.%s: %s takes %s, has %d", path, field, info.name,
                      arityText(arity), n);
    return absl::OkStatus();
  }

  absl::Status checkBufferList(const flatbuffers::Vector<int32_t> *list,
                               absl::string_view path, const char *field) {
    for (uint32_t k = 0; k < count(list); ++k) {
      int32_t x = list->Get(k);
      if (x < 0 || static_cast<uint32_t>(x) >= numBuffers_)
        return invalidf("%s.%s[%d]: buffer %d out of range (%d buffers)", path,
                        field, k, x, numBuffers_);
    }
    return absl::OkStatus();
  }

  absl::Status checkIntAttr(IntAttr kind, int64_t v, absl::string_view path) {
    auto enumValue = [&](const char *what, int64_t max) -> absl::Status {
      if (v < 0 || v > max)
        return invalidf("%s: %d is not a %s (0 to %d)", path, v, what, max);
      return absl::OkStatus();
    };
    switch (kind) {
    case IntAttr::Any:
      return absl::OkStatus();
    case IntAttr::Bool:
      return enumValue("flag", 1);
    case IntAttr::Positive:
      if (v <= 0)
        return invalidf("%s: %d is not positive", path, v);
      return absl::OkStatus();
    case IntAttr::NonNegative:
      if (v < 0)
        return invalidf("%s: %d is negative", path, v);
      return absl::OkStatus();
    case IntAttr::Bucket:
      if (v < -1)
        return invalidf("%s: bucket %d is neither a bucket id nor -1", path, v);
      return absl::OkStatus();
    case IntAttr::Group:
      return enumValue("group", static_cast<int64_t>(fb::Group::MAX));
    case IntAttr::Reduction:
      return enumValue("reduction", static_cast<int64_t>(fb::Reduction::MAX));
    case IntAttr::PeriodUnit:
      return enumValue("period unit",
                       static_cast<int64_t>(fb::PeriodUnit::MAX));
    case IntAttr::CheckpointFormat:
      return enumValue("checkpoint format",
                       static_cast<int64_t>(fb::CheckpointFormat::MAX));
    case IntAttr::ArithKind:
      return enumValue("scalar arithmetic kind",
                       static_cast<int64_t>(fb::ArithKind::MAX));
    case IntAttr::CompareKind:
      return enumValue("comparison kind",
                       static_cast<int64_t>(fb::CompareKind::MAX));
    case IntAttr::Dataset:
      if (v < 0 || v >= static_cast<int64_t>(numDatasets_))
        return invalidf("%s: dataset %d out of range (%d datasets)", path, v,
                        numDatasets_);
      return absl::OkStatus();
    }
    return invalidf("%s: unknown attribute kind", path);
  }

  absl::Status checkInstruction(const fb::Instruction &inst,
                                const std::string &path) {
    const OpcodeInfo *found = GetOpcodeInfo(inst.opcode());
    if (!found)
      return invalidf("%s.opcode: unknown opcode %d", path,
                      static_cast<int>(inst.opcode()));
    const OpcodeInfo &info = *found;
    MD_RETURN_IF_ERROR(
        checkArity(path, "inputs", info, info.inputs, count(inst.inputs())));
    MD_RETURN_IF_ERROR(
        checkArity(path, "outputs", info, info.outputs, count(inst.outputs())));
    MD_RETURN_IF_ERROR(
        checkArity(path, "ints", info, info.ints, count(inst.ints())));
    MD_RETURN_IF_ERROR(
        checkArity(path, "floats", info, info.floats, count(inst.floats())));
    MD_RETURN_IF_ERROR(
        checkArity(path, "strings", info, info.strings, count(inst.strings())));
    MD_RETURN_IF_ERROR(
        checkArity(path, "blocks", info, info.blocks, count(inst.blocks())));
    MD_RETURN_IF_ERROR(checkBufferList(inst.inputs(), path, "inputs"));
    MD_RETURN_IF_ERROR(checkBufferList(inst.outputs(), path, "outputs"));
    for (uint32_t k = 0; k < count(inst.ints()); ++k)
      MD_RETURN_IF_ERROR(checkIntAttr(info.intKind(k), inst.ints()->Get(k),
                                      absl::StrCat(path, ".ints[", k, "]")));
    for (uint32_t k = 0; k < count(inst.floats()); ++k)
      MD_RETURN_IF_ERROR(checkFinite(inst.floats()->Get(k),
                                     absl::StrCat(path, ".floats[", k, "]")));

    // Arity that depends on another list.
    uint32_t ins = count(inst.inputs()), outs = count(inst.outputs());
    switch (inst.opcode()) {
    case fb::Opcode::Clip:
      if (outs != ins - 1)
        return invalidf("%s.outputs: clip of %d gradients has %d results", path,
                        ins - 1, outs);
      break;
    case fb::Opcode::SgdUpdate:
      if ((ins == 5) != (outs == 2))
        return invalidf(
            "%s: sgd_update has a momentum buffer among its %s only", path,
            ins == 5 ? "inputs" : "outputs");
      break;
    case fb::Opcode::ScalarArith: {
      auto kind = static_cast<fb::ArithKind>(inst.ints()->Get(0));
      uint32_t want =
          kind == fb::ArithKind::Neg || kind == fb::ArithKind::Not ? 1 : 2;
      if (ins != want)
        return invalidf("%s.inputs: scalar_arith %s takes %d inputs, has %d",
                        path, fb::EnumNameArithKind(kind), want, ins);
      break;
    }
    case fb::Opcode::Log:
      if (count(inst.strings()) != 1 && count(inst.strings()) != 1 + ins)
        return invalidf("%s.strings: log takes its tag and either no value "
                        "names or one per "
                        "value (%d values), has %d strings",
                        path, ins, count(inst.strings()));
      break;
    default:
      break;
    }

    if (inst.stream() > 1)
      return invalidf("%s.stream: %d is not a stream (0 compute, 1 comm)", path,
                      inst.stream());
    for (uint32_t k = 0; k < count(inst.waits()); ++k) {
      int32_t e = inst.waits()->Get(k);
      if (e < 0 || static_cast<uint32_t>(e) >= numEvents_)
        return invalidf("%s.waits[%d]: event %d out of range (%d events)", path,
                        k, e, numEvents_);
    }
    if (inst.record() < -1 || inst.record() >= static_cast<int64_t>(numEvents_))
      return invalidf("%s.record: event %d out of range (%d events)", path,
                      inst.record(), numEvents_);
    if (inst.loc() < -1 || inst.loc() >= static_cast<int64_t>(numLocations_))
      return invalidf("%s.loc: location %d out of range (%d locations)", path,
                      inst.loc(), numLocations_);
    if (inst.rank0_only()) {
      if (info.is(kCollective))
        return invalidf(
            "%s: rank0_only on %s, which communicates: every rank must run it",
            path, info.name);
      if (!info.is(kIo) || inst.opcode() == fb::Opcode::Exit)
        return invalidf(
            "%s: rank0_only on %s, which is not io that rank 0 may do alone",
            path, info.name);
    }
    // The kinds of nested blocks the opcode runs.
    for (uint32_t k = 0; k < count(inst.blocks()); ++k) {
      fb::BlockKind want = fb::BlockKind::Step;
      switch (inst.opcode()) {
      case fb::Opcode::If:
        want = k == 0 ? fb::BlockKind::Then : fb::BlockKind::Else;
        break;
      case fb::Opcode::Every:
        want = fb::BlockKind::Every;
        break;
      case fb::Opcode::For:
        want = fb::BlockKind::ForBody;
        break;
      case fb::Opcode::MicroSteps:
        want = fb::BlockKind::MicroSteps;
        break;
      case fb::Opcode::Evaluate:
        want = fb::BlockKind::EvalBody;
        break;
      default:
        break;
      }
      fb::BlockKind kind = plan_.blocks()->Get(inst.blocks()->Get(k))->kind();
      if (kind != want)
        return invalidf(
            "%s.blocks[%d]: blocks[%d] is a '%s' block; %s runs a '%s' block",
            path, k, inst.blocks()->Get(k), BlockKindName(kind), info.name,
            BlockKindName(want));
    }
    return absl::OkStatus();
  }

  /// Where an opcode may appear, given the block holding it.
  absl::Status checkPlacement(const fb::Instruction &inst, uint32_t b,
                              uint32_t i, uint32_t size,
                              const std::string &path) {
    const OpcodeInfo &info = *GetOpcodeInfo(inst.opcode());
    fb::BlockKind kind = plan_.blocks()->Get(b)->kind();
    bool stepTree = !inHooks_[b];
    auto refuse = [&](const char *where) {
      return invalidf("%s: %s %s; it is in a '%s' block", path, info.name,
                      where, BlockKindName(kind));
    };
    if (info.is(kHooksOnly) && stepTree)
      return refuse("runs only in the hooks");
    switch (inst.opcode()) {
    case fb::Opcode::MicroSteps:
      if (kind != fb::BlockKind::Step)
        return refuse("runs only in the step block");
      break;
    case fb::Opcode::GradAccumulate:
      if (kind != fb::BlockKind::MicroSteps)
        return refuse("runs only in the micro-steps body");
      break;
    case fb::Opcode::GradTotal:
      if (kind != fb::BlockKind::Step)
        return refuse("runs only in the step block");
      break;
    case fb::Opcode::RecordLoss:
    case fb::Opcode::AccumScale:
      if (kind != fb::BlockKind::Step && kind != fb::BlockKind::MicroSteps)
        return refuse("runs only in the step block or its micro-steps body");
      break;
    case fb::Opcode::Every:
      if (kind != fb::BlockKind::Hooks)
        return refuse("runs only in the hooks block");
      break;
    case fb::Opcode::Batch: {
      int64_t dataset = inst.ints()->Get(0);
      if (kind == fb::BlockKind::Step || kind == fb::BlockKind::MicroSteps) {
        if (dataset != plan_.recipe()->train_data())
          return invalidf(
              "%s.ints[0]: a training batch reads dataset %d, not the recipe's "
              "train_data %d",
              path, dataset, plan_.recipe()->train_data());
      } else if (kind == fb::BlockKind::EvalBody) {
        const BlockSite &site = sites_[b];
        const fb::Instruction *eval = plan_.blocks()
                                          ->Get(site.parentBlock)
                                          ->instructions()
                                          ->Get(site.parentInstruction);
        if (dataset != eval->ints()->Get(0))
          return invalidf(
              "%s.ints[0]: an evaluation batch reads dataset %d, not its "
              "evaluate's dataset %d",
              path, dataset, eval->ints()->Get(0));
      } else {
        return refuse(
            "runs only in the step, the micro-steps or an evaluation body");
      }
      break;
    }
    case fb::Opcode::Yield: {
      if (kind != fb::BlockKind::Then && kind != fb::BlockKind::Else &&
          kind != fb::BlockKind::EvalBody)
        return refuse("ends only 'then', 'else' and 'eval' blocks");
      if (i + 1 != size)
        return invalidf("%s: yield is not the last instruction of its block",
                        path);
      break;
    }
    default:
      break;
    }
    // The blocks this instruction runs end as their parent needs.
    if (inst.opcode() == fb::Opcode::If) {
      uint32_t results = count(inst.outputs());
      if (results > 0 && count(inst.blocks()) != 2)
        return invalidf("%s.blocks: an if with results needs an else block",
                        path);
      for (uint32_t k = 0; k < count(inst.blocks()); ++k) {
        MD_RETURN_IF_ERROR(checkYield(inst.blocks()->Get(k), results,
                                      results > 0,
                                      absl::StrCat(path, ".blocks[", k, "]")));
      }
    } else if (inst.opcode() == fb::Opcode::Evaluate) {
      MD_RETURN_IF_ERROR(checkYield(inst.blocks()->Get(0), 1, true,
                                    absl::StrCat(path, ".blocks[0]")));
    }
    return absl::OkStatus();
  }

  /// Block `b` ends with a yield of `values` values (required or optional).
  absl::Status checkYield(int32_t b, uint32_t values, bool required,
                          const std::string &path) {
    const fb::Block *block = plan_.blocks()->Get(b);
    uint32_t size = count(block->instructions());
    const fb::Instruction *last =
        size ? block->instructions()->Get(size - 1) : nullptr;
    if (!last || last->opcode() != fb::Opcode::Yield) {
      if (required)
        return invalidf("%s: blocks[%d] does not end with a yield of %d values",
                        path, b, values);
      return absl::OkStatus();
    }
    if (count(last->inputs()) != values)
      return invalidf("%s: blocks[%d] yields %d values, its parent expects %d",
                      path, b, count(last->inputs()), values);
    return absl::OkStatus();
  }

  // --- program order: liveness and events -------------------------------

  absl::Status checkProgramOrder() {
    recorded_.assign(numEvents_, false);
    stack_.clear();
    MD_RETURN_IF_ERROR(walk(plan_.step_block()));
    std::fill(recorded_.begin(), recorded_.end(), false);
    if (plan_.hooks_block() != -1)
      MD_RETURN_IF_ERROR(walk(plan_.hooks_block()));
    return absl::OkStatus();
  }

  /// Walks block `b` in program order. stack_ holds (block, instruction) of
  /// the enclosing control instructions. Events recorded inside a nested
  /// block do not count after it (it may run zero times).
  absl::Status walk(int32_t b) {
    const fb::Block *block = plan_.blocks()->Get(b);
    std::vector<int32_t> recordedHere;
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      stack_.push_back({b, static_cast<int32_t>(i)});
      std::string path;
      auto pathOf = [&] {
        if (path.empty())
          path = absl::StrFormat("blocks[%d].instructions[%d]", b, i);
        return path;
      };
      for (uint32_t k = 0; k < count(inst->waits()); ++k) {
        int32_t e = inst->waits()->Get(k);
        if (!recorded_[e])
          return invalidf("%s.waits[%d]: event %d is waited on before any "
                          "instruction records it",
                          pathOf(), k, e);
      }
      MD_RETURN_IF_ERROR(checkLive(inst->inputs(), "inputs", pathOf));
      MD_RETURN_IF_ERROR(checkLive(inst->outputs(), "outputs", pathOf));
      for (uint32_t k = 0; k < count(inst->blocks()); ++k)
        MD_RETURN_IF_ERROR(walk(inst->blocks()->Get(k)));
      stack_.pop_back();
      if (inst->record() >= 0 && !recorded_[inst->record()]) {
        recorded_[inst->record()] = true;
        recordedHere.push_back(inst->record());
      }
    }
    for (int32_t e : recordedHere)
      recorded_[e] = false;
    return absl::OkStatus();
  }

  template <typename PathFn>
  absl::Status checkLive(const flatbuffers::Vector<int32_t> *list,
                         const char *field, PathFn &pathOf) {
    for (uint32_t k = 0; k < count(list); ++k) {
      int32_t x = list->Get(k);
      const fb::Buffer *buffer = plan_.buffers()->Get(x);
      if (buffer->role() != fb::StateRole::None)
        continue;
      auto at = std::find_if(stack_.begin(), stack_.end(),
                             [&](const std::pair<int32_t, int32_t> &s) {
                               return s.first == buffer->block();
                             });
      if (at == stack_.end())
        return invalidf(
            "%s.%s[%d]: buffer %d ('%s') lives in blocks[%d], which does not "
            "contain this instruction",
            pathOf(), field, k, x, detail::printable(str(buffer->name())),
            buffer->block());
      if (at->second < buffer->first() || at->second > buffer->last())
        return invalidf("%s.%s[%d]: buffer %d ('%s') is used at instruction %d "
                        "of blocks[%d], "
                        "outside its liveness interval [%d, %d]",
                        pathOf(), field, k, x,
                        detail::printable(str(buffer->name())), at->second,
                        buffer->block(), buffer->first(), buffer->last());
    }
    return absl::OkStatus();
  }

  // --- uniformity: no collective under a condition that varies ---------

  /// Which buffers may hold different values on different ranks, and which
  /// blocks run on some ranks only; then refuses a collective or an exit in
  /// such a block (not in a plan pinned to W = 1). Linear: each instruction is revisited only when one of
  /// its inputs or its block turns varying, which happens once each.
  absl::Status checkUniformity() {
    // A plan pinned to one rank has no other rank to disagree with.
    if (plan_.header()->world_size() == 1)
      return absl::OkStatus();
    // Flat instruction ids.
    std::vector<uint32_t> first(numBlocks_ + 1, 0);
    for (uint32_t b = 0; b < numBlocks_; ++b)
      first[b + 1] = first[b] + count(plan_.blocks()->Get(b)->instructions());
    const uint32_t total = first[numBlocks_];
    std::vector<int32_t> blockOf(total);
    for (uint32_t b = 0; b < numBlocks_; ++b)
      std::fill(blockOf.begin() + first[b], blockOf.begin() + first[b + 1],
                static_cast<int32_t>(b));
    auto instAt = [&](uint32_t t) {
      return plan_.blocks()
          ->Get(blockOf[t])
          ->instructions()
          ->Get(t - first[blockOf[t]]);
    };
    // Readers of each buffer (CSR).
    std::vector<uint32_t> readStart(numBuffers_ + 1, 0);
    for (uint32_t t = 0; t < total; ++t) {
      const fb::Instruction *inst = instAt(t);
      for (uint32_t k = 0; k < count(inst->inputs()); ++k)
        ++readStart[inst->inputs()->Get(k) + 1];
    }
    for (uint32_t x = 0; x < numBuffers_; ++x)
      readStart[x + 1] += readStart[x];
    std::vector<uint32_t> readers(readStart[numBuffers_]);
    std::vector<uint32_t> fill(readStart.begin(), readStart.end() - 1);
    for (uint32_t t = 0; t < total; ++t) {
      const fb::Instruction *inst = instAt(t);
      for (uint32_t k = 0; k < count(inst->inputs()); ++k)
        readers[fill[inst->inputs()->Get(k)]++] = t;
    }

    std::vector<bool> varyingBuffer(numBuffers_, false);
    std::vector<bool> varyingBlock(numBlocks_, false);
    std::vector<uint32_t> work;
    auto taintBuffer = [&](int32_t x) {
      if (varyingBuffer[x])
        return;
      varyingBuffer[x] = true;
      for (uint32_t r = readStart[x]; r < readStart[x + 1]; ++r)
        work.push_back(readers[r]);
    };
    auto taintOutputs = [&](const fb::Instruction *inst) {
      for (uint32_t k = 0; k < count(inst->outputs()); ++k)
        taintBuffer(inst->outputs()->Get(k));
    };
    auto taintBlock = [&](int32_t b) {
      if (varyingBlock[b])
        return;
      varyingBlock[b] = true;
      for (uint32_t t = first[b]; t < first[b + 1]; ++t)
        work.push_back(t);
    };
    auto anyInputVarying = [&](const fb::Instruction *inst) {
      for (uint32_t k = 0; k < count(inst->inputs()); ++k)
        if (varyingBuffer[inst->inputs()->Get(k)])
          return true;
      return false;
    };
    auto process = [&](uint32_t t) {
      const fb::Instruction *inst = instAt(t);
      const OpcodeInfo &info = *GetOpcodeInfo(inst->opcode());
      int32_t b = blockOf[t];
      fb::Opcode op = inst->opcode();
      // The blocks of an if or a for on a varying condition, and every block
      // run from a varying block, run on some ranks only. (Every block
      // nested in those is reached through its own control instruction.)
      bool conditional = op == fb::Opcode::If || op == fb::Opcode::For;
      if (varyingBlock[b] || (conditional && anyInputVarying(inst))) {
        for (uint32_t k = 0; k < count(inst->blocks()); ++k)
          taintBlock(inst->blocks()->Get(k));
      }
      bool varies =
          varyingBlock[b] || info.is(kVaryingResult) ||
          op == fb::Opcode::ReduceScatter; // each rank gets another shard
      if (!varies && !info.is(kUniformResult) && !collectiveMakesUniform(*inst))
        varies = anyInputVarying(inst);
      if (!varies)
        return;
      taintOutputs(inst);
      // A yield hands its values to the results of the if that runs its block.
      if (op == fb::Opcode::Yield &&
          plan_.blocks()->Get(b)->kind() != fb::BlockKind::EvalBody) {
        const BlockSite &site = sites_[b];
        taintOutputs(plan_.blocks()
                         ->Get(site.parentBlock)
                         ->instructions()
                         ->Get(site.parentInstruction));
      }
    };
    for (uint32_t t = 0; t < total; ++t)
      process(t);
    while (!work.empty()) {
      uint32_t t = work.back();
      work.pop_back();
      process(t);
    }

    for (uint32_t t = 0; t < total; ++t) {
      int32_t b = blockOf[t];
      if (!varyingBlock[b])
        continue;
      const fb::Instruction *inst = instAt(t);
      const OpcodeInfo &info = *GetOpcodeInfo(inst->opcode());
      if (!info.is(kCollective) && inst->opcode() != fb::Opcode::Exit &&
          inst->opcode() != fb::Opcode::MicroSteps)
        continue;
      // The outermost control instruction whose condition varies.
      int32_t cb = b;
      BlockSite site = sites_[cb];
      while (site.parentBlock >= 0 && varyingBlock[site.parentBlock]) {
        cb = site.parentBlock;
        site = sites_[cb];
      }
      return invalidf(
          "blocks[%d].instructions[%d]: %s runs only on the ranks where the "
          "condition of blocks[%d].instructions[%d] holds, and that condition "
          "varies between ranks: %s",
          b, t - first[b], info.name, site.parentBlock, site.parentInstruction,
          inst->opcode() == fb::Opcode::Exit
              ? "the other ranks would wait in the next step's collectives"
              : "the other ranks would wait for it forever");
    }
    return absl::OkStatus();
  }

  /// A collective whose result is the same on every rank of the world.
  bool collectiveMakesUniform(const fb::Instruction &inst) const {
    switch (inst.opcode()) {
    case fb::Opcode::AllReduce:
    case fb::Opcode::Broadcast:
    case fb::Opcode::AllGather: {
      auto group = static_cast<fb::Group>(inst.ints()->Get(0));
      return group == fb::Group::World ||
             (group == fb::Group::Shard && !hybrid_);
    }
    default:
      return false;
    }
  }

  const fb::Plan &plan_;
  bool hybrid_ = false;
  uint32_t numDatasets_ = 0, numUnits_ = 0, numBuffers_ = 0, numEvents_ = 0,
           numLocations_ = 0, numBlocks_ = 0;
  std::vector<BlockSite> sites_;
  std::vector<bool> inHooks_;
  std::vector<bool> recorded_;
  std::vector<std::pair<int32_t, int32_t>> stack_;
};

} // namespace

absl::Status CheckPlanStructure(absl::Span<const uint8_t> bytes,
                                const LoadOptions &options) {
  const size_t limit =
      std::min<size_t>(options.maxBytes, FLATBUFFERS_MAX_BUFFER_SIZE - 1);
  if (bytes.size() > limit)
    return invalidf("plan of %d bytes is larger than the limit of %d bytes",
                    bytes.size(), limit);
  if (bytes.size() < 8)
    return invalidf("not a plan file: %d bytes is too short for a FlatBuffer",
                    bytes.size());
  const char *expected = fb::PlanIdentifier();
  if (std::memcmp(bytes.data() + 4, expected, 4) != 0) {
    std::string found = printable(bytes.data() + 4, 4);
    if (std::memcmp(bytes.data() + 4, expected, 3) == 0)
      return invalidf("plan file of another format generation: identifier "
                      "'%s', this runtime "
                      "reads '%s'",
                      found, expected);
    return invalidf("not a plan file: file identifier '%s', expected '%s'",
                    found, expected);
  }
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0)
    return absl::InternalError(
        "plan bytes must start at an 8-byte aligned address");
  flatbuffers::Verifier::Options verifierOptions;
  verifierOptions.max_depth = options.maxDepth;
  verifierOptions.max_tables = options.maxTables;
  verifierOptions.check_alignment = true;
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), verifierOptions);
  if (!fb::VerifyPlanBuffer(verifier))
    return invalidf(
        "malformed plan file: the FlatBuffers verifier refuses it (truncated, "
        "corrupt, or over the limits of %d nested tables and %d tables)",
        options.maxDepth, options.maxTables);
  const fb::Plan &plan = *fb::GetPlan(bytes.data());
  MD_RETURN_IF_ERROR(checkVectorAlignment(plan, bytes.data()));
  if (plan.schema_version() == 0)
    return invalid("schema_version: 0 is not a version (the first is 1)");
  if (plan.schema_version() > kSchemaVersion)
    return invalidf("schema_version: plan version %d is newer than this "
                    "runtime's %d; use the "
                    "mdrun that matches the mdc that wrote it",
                    plan.schema_version(), kSchemaVersion);
  return absl::OkStatus();
}

absl::StatusOr<LoadedPlan> LoadPlan(absl::Span<const uint8_t> bytes,
                                    const LoadOptions &options) {
  // Stage (a), on a copy: aligned, and owned by the LoadedPlan.
  const size_t limit =
      std::min<size_t>(options.maxBytes, FLATBUFFERS_MAX_BUFFER_SIZE - 1);
  if (bytes.size() > limit) // before copying it
    return invalidf("plan of %d bytes is larger than the limit of %d bytes",
                    bytes.size(), limit);
  LoadedPlan loaded;
  loaded.bytes_.assign(bytes.begin(), bytes.end());
  MD_RETURN_IF_ERROR(CheckPlanStructure(loaded.bytes_, options));
  const fb::Plan &plan = loaded.plan();

  // Stage (b).
  SemanticVerifier semantic(plan);
  MD_RETURN_IF_ERROR(semantic.run());
  loaded.sites_ = semantic.takeSites();

  int64_t worldSize = options.worldSize;
  if (worldSize == 0)
    worldSize = plan.header()->world_size();
  if (worldSize != 0) {
    absl::StatusOr<WorldBinding> world = BindWorldSize(loaded, worldSize);
    if (!world.ok())
      return world.status();
    loaded.world_ = *world;
  }
  return loaded;
}

absl::StatusOr<LoadedPlan> LoadPlanFile(const std::string &path,
                                        const LoadOptions &options) {
  auto withPath = [&](const absl::Status &status) {
    return absl::Status(status.code(),
                        absl::StrCat(path, ": ", status.message()));
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    int err = S_ISDIR(st.st_mode) ? EISDIR : errno;
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read: ", std::strerror(err)));
  }
  if (S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) > options.maxBytes) {
    ::close(fd);
    return withPath(
        invalidf("plan of %d bytes is larger than the limit of %d bytes",
                 static_cast<int64_t>(st.st_size), options.maxBytes));
  }
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": cannot read: ", std::strerror(err)));
    }
    if (n == 0)
      break;
    bytes.insert(bytes.end(), chunk, chunk + n);
    if (bytes.size() > options.maxBytes) {
      ::close(fd);
      return withPath(invalidf("plan is larger than the limit of %d bytes",
                               options.maxBytes));
    }
  }
  ::close(fd);
  absl::StatusOr<LoadedPlan> loaded = LoadPlan(bytes, options);
  if (!loaded.ok())
    return withPath(loaded.status());
  return loaded;
}

absl::StatusOr<WorldBinding> BindWorldSize(const LoadedPlan &loaded,
                                           int64_t worldSize) {
  const fb::Plan &plan = loaded.plan();
  const fb::Header &header = *plan.header();
  if (worldSize < 1 || worldSize > kMaxWorldSize)
    return invalidf("world size %d is not between 1 and %d", worldSize,
                    kMaxWorldSize);
  if (header.world_size() != 0 && header.world_size() != worldSize)
    return invalidf(
        "the plan is pinned to world size %d and cannot run at %d; recompile "
        "with mdc --world-size %d",
        header.world_size(), worldSize, worldSize);
  const bool hybrid = header.options()->shard() == fb::ShardKind::Hybrid;
  const int64_t group = hybrid ? header.shard_group_size() : 0;
  std::optional<mesh::GroupSizes> sizes = mesh::groupSizes(worldSize, group);
  if (!sizes)
    return invalidf(
        "hybrid shard group of %d ranks does not divide world size %d", group,
        worldSize);
  WorldBinding world;
  world.worldSize = worldSize;
  world.shardGroupSize = sizes->shard;
  world.replicateGroupSize = sizes->replicate;
  const fb::Recipe &recipe = *plan.recipe();
  int64_t perStep = 0;
  if (__builtin_mul_overflow(recipe.micro_batch(), worldSize, &perStep) ||
      recipe.global_batch() % perStep != 0)
    return invalidf(
        "global_batch %d is not a multiple of micro_batch %d x world size %d: "
        "the accumulation steps would not be a whole number",
        recipe.global_batch(), recipe.micro_batch(), worldSize);
  world.accumulationSteps = recipe.global_batch() / perStep;

  for (uint32_t b = 0; b < count(plan.blocks()); ++b) {
    const fb::Block *block = plan.blocks()->Get(b);
    for (uint32_t i = 0; i < count(block->instructions()); ++i) {
      const fb::Instruction *inst = block->instructions()->Get(i);
      if (!GetOpcodeInfo(inst->opcode())->is(kCollective))
        continue;
      MD_RETURN_IF_ERROR(detail::CheckWorldTypes(
          plan, *inst, world,
          absl::StrFormat("blocks[%d].instructions[%d]", b, i)));
    }
  }
  return world;
}

} // namespace md::plan
