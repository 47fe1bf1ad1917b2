//===- VerifyTables.cpp - verify the plan's tables ------------------------===//
//
// Stage (b) of loading a plan, its first checks: the header against the
// schema and the options it pins, the datasets and the recipe that reads
// them, the units and params with their initialisers, and the event and
// location tables. Later stages index what these proved in range.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/SemanticVerifier.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace md::plan::detail {

absl::Status SemanticVerifier::checkHeader() {
  const fb::Header *header = plan_.header();
  if (!header)
    return invalid("header: missing");
  if (str(header->model()).empty())
    return invalid("header.model: missing");
  const fb::PlanOptions *options = header->options();
  if (!options)
    return invalid("header.options: missing");
  MD_RETURN_IF_ERROR(
      checkEnum(options->shard(), "header.options.shard", "shard kind"));
  MD_RETURN_IF_ERROR(
      checkEnum(options->wrap(), "header.options.wrap", "wrap kind"));
  MD_RETURN_IF_ERROR(checkEnum(options->prefetch_backward(),
                               "header.options.prefetch_backward", "value"));
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
  if (options->wrap() == fb::WrapKind::Size && options->wrap_min_params() <= 0)
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

absl::Status SemanticVerifier::checkDatasetsAndRecipe() {
  numDatasets_ = count(plan_.datasets());
  for (auto [i, data, path] : entries(plan_.datasets(), "datasets")) {
    MD_RETURN_IF_ERROR(
        checkEnum(data->kind(), absl::StrCat(path, ".kind"), "data kind"));
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
    return invalidf("recipe.train_data: dataset %d out of range (%d datasets)",
                    recipe->train_data(), numDatasets_);
  MD_RETURN_IF_ERROR(checkFiniteNonNegative(recipe->clip_grad_norm(),
                                            "recipe.clip_grad_norm"));

  const fb::Optimizer *opt = recipe->optimizer();
  if (!opt)
    return invalid("recipe.optimizer: missing");
  MD_RETURN_IF_ERROR(
      checkEnum(opt->kind(), "recipe.optimizer.kind", "optimizer"));
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
  // PyTorch's optimizers accept lr = 0 (the weights stay where they are).
  MD_RETURN_IF_ERROR(checkFiniteNonNegative(opt->lr(), "recipe.optimizer.lr"));
  MD_RETURN_IF_ERROR(checkFiniteNonNegative(opt->weight_decay(),
                                            "recipe.optimizer.weight_decay"));
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
    MD_RETURN_IF_ERROR(
        checkFiniteNonNegative(opt->momentum(), "recipe.optimizer.momentum"));
    if (opt->nesterov() && (opt->momentum() <= 0 || opt->dampening() != 0))
      return invalid(
          "recipe.optimizer.nesterov: needs momentum > 0 and dampening = 0");
  }
  if (count(opt->groups()) > 0 &&
      plan_.schema_version() < kParamGroupsSchemaVersion)
    return invalidf("recipe.optimizer.groups: parameter groups need "
                    "schema_version %d, the plan says %d",
                    kParamGroupsSchemaVersion, plan_.schema_version());
  for (auto [g, group, path] :
       entries(opt->groups(), "recipe.optimizer.groups")) {
    if (str(group->name()).empty())
      return invalidf("%s.name: missing", path);
    MD_RETURN_IF_ERROR(checkFiniteNonNegative(
        group->weight_decay(), absl::StrCat(path, ".weight_decay")));
    MD_RETURN_IF_ERROR(checkFiniteNonNegative(group->lr_scale(),
                                              absl::StrCat(path, ".lr_scale")));
  }

  const fb::Schedule *schedule = recipe->schedule();
  if (!schedule)
    return invalid("recipe.schedule: missing");
  MD_RETURN_IF_ERROR(
      checkEnum(schedule->kind(), "recipe.schedule.kind", "schedule"));
  if (schedule->warmup() < 0)
    return invalidf("recipe.schedule.warmup: %d is negative",
                    schedule->warmup());
  if (schedule->steps() < schedule->warmup())
    return invalidf(
        "recipe.schedule.steps: %d is fewer than the %d warmup steps",
        schedule->steps(), schedule->warmup());
  MD_RETURN_IF_ERROR(
      checkFiniteNonNegative(schedule->min_lr(), "recipe.schedule.min_lr"));

  const fb::Sampler *sampler = recipe->sampler();
  if (!sampler)
    return invalid("recipe.sampler: missing");
  MD_RETURN_IF_ERROR(
      checkEnum(sampler->tail(), "recipe.sampler.tail", "tail policy"));
  return absl::OkStatus();
}

absl::Status SemanticVerifier::checkUnitsAndParams() {
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
  // Per unit: 0 no parameter in its buffer yet, 1 trainable, 2 frozen.
  std::vector<int8_t> unitKind(numUnits_, 0);
  for (auto [i, param, path] : entries(plan_.params(), "params")) {
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
    if (param->unit() < 0 || static_cast<uint32_t>(param->unit()) >= numUnits_)
      return invalidf("%s.unit: unit %d out of range (%d units)", path,
                      param->unit(), numUnits_);
    // Group 0 is the default group; without groups every parameter is in it.
    const fb::Optimizer *opt = plan_.recipe()->optimizer();
    uint32_t groups = std::max<uint32_t>(count(opt->groups()), 1);
    if (param->group() < 0 || static_cast<uint32_t>(param->group()) >= groups ||
        (!param->trainable() && param->group() != 0))
      return invalidf("%s.group: %d is not a group of the optimizer (%d "
                      "group%s; a frozen parameter is in group 0)",
                      path, param->group(), groups, groups == 1 ? "" : "s");
    // A frozen parameter is in a unit of frozen parameters (its `frozen`
    // state holds it), or, at offset -1, in no buffer: its initialiser's
    // values are all it has.
    if (!param->trainable() && param->offset() == -1)
      continue;
    int8_t &kind = unitKind[param->unit()];
    int8_t mine = param->trainable() ? 1 : 2;
    if (kind != 0 && kind != mine)
      return invalidf("%s.trainable: unit %d holds trainable and frozen "
                      "parameters; md keeps them in separate units",
                      path, param->unit());
    kind = mine;
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

absl::Status SemanticVerifier::checkInit(const fb::Init *init,
                                         const std::string &path) {
  if (!init)
    return invalidf("%s: missing", path);
  MD_RETURN_IF_ERROR(
      checkEnum(init->kind(), absl::StrCat(path, ".kind"), "initialiser"));
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

absl::Status SemanticVerifier::checkEventsAndLocations() {
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

} // namespace md::plan::detail
