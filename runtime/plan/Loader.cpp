//===- Loader.cpp - load and verify a plan.fb ---------------------------===//
//
// Stage (a) of loading a plan, CheckPlanStructure (the identifier, the
// plan's own checksum, the FlatBuffers Verifier with explicit limits, whose
// refusal is located by verifying the plan's parts one at a time, vector
// alignment), then LoadPlan and
// LoadPlanFile, which run stage (b) (the SemanticVerifier of
// SemanticVerifier.h), and BindWorldSize, which binds a verified plan to a
// world size.
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
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/plan/Checksum.h"
#include "runtime/plan/Schema.h"
#include "runtime/plan/SemanticVerifier.h"

namespace md::plan {

using detail::count;
using detail::invalid;
using detail::invalidf;
using detail::kMaxWorldSize;

namespace {

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

/// Where the FlatBuffers verifier stops in a plan it refuses, found by
/// verifying the root table's parts one at a time, each with a fresh
/// verifier (so that the part that fails alone is the one named): a field
/// path as the semantic verifier's messages have, "blocks[2].instructions
/// [40].ints (opcode add)", and the byte offset of the table it is in; ""
/// when every part verifies alone (the file is then over the limits).
std::string locateRefusal(absl::Span<const uint8_t> bytes,
                          const flatbuffers::Verifier::Options &options) {
  using flatbuffers::Table;
  using flatbuffers::Verifier;
  const uint8_t *base = bytes.data();
  auto at = [&](const void *p) {
    return static_cast<int64_t>(reinterpret_cast<const uint8_t *>(p) - base);
  };
  auto table = [](const void *p) { return reinterpret_cast<const Table *>(p); };
  auto where = [&](const std::string &path, const void *t) {
    return absl::StrFormat("%s (the table at byte %d)", path, at(t));
  };
  // Whether `check` holds of table `t` on a fresh verifier, after its start.
  auto holds = [&](const void *t, const auto &check) {
    Verifier v(base, bytes.size(), options);
    return table(t)->VerifyTableStart(v) && check(v);
  };
  auto whole = [&](const auto *t) {
    Verifier v(base, bytes.size(), options);
    return v.VerifyTable(t);
  };
  // The first of `fields` (a name and its check) that fails in table `t`.
  using Check = std::function<bool(const Table &, Verifier &)>;
  auto firstField =
      [&](const void *t,
          std::initializer_list<std::pair<const char *, Check>> fields)
      -> const char * {
    for (const auto &field : fields) // (no structured binding: C++17
                                      // lambdas cannot capture one)
      if (!holds(t, [&](Verifier &v) { return field.second(*table(t), v); }))
        return field.first;
    return nullptr;
  };
  auto offset = [](flatbuffers::voffset_t f) {
    return [f](const Table &t, Verifier &v) { return t.VerifyOffset(v, f); };
  };
  auto scalar = [](flatbuffers::voffset_t f, size_t size) {
    return [f, size](const Table &t, Verifier &v) {
      switch (size) {
      case 1:
        return t.VerifyField<uint8_t>(v, f, 1);
      case 2:
        return t.VerifyField<uint16_t>(v, f, 2);
      case 4:
        return t.VerifyField<uint32_t>(v, f, 4);
      default:
        return t.VerifyField<uint64_t>(v, f, 8);
      }
    };
  };

  const auto root = flatbuffers::ReadScalar<flatbuffers::uoffset_t>(base);
  if (root < 8 || root > bytes.size() - 4)
    return absl::StrFormat("the root offset (byte 0: %d, of a file of %d "
                           "bytes)",
                           root, bytes.size());
  const fb::Plan *plan = fb::GetPlan(base);
  if (!holds(plan, [](Verifier &) { return true; }))
    return where("the root table (its vtable)", plan);
  using P = fb::Plan;
  // A vector of tables (`get` reads the field, once its offset verified):
  // the vector itself, then each element alone.
  auto tables = [&](const char *name, flatbuffers::voffset_t f,
                    const auto &get) -> std::optional<std::string> {
    if (!holds(plan, [&](Verifier &v) {
          return table(plan)->VerifyOffset(v, f) && v.VerifyVector(get());
        }))
      return where(name, plan);
    const auto *vec = get();
    for (uint32_t i = 0; vec && i < vec->size(); ++i)
      if (!whole(vec->Get(i)))
        return where(absl::StrFormat("%s[%d]", name, i), vec->Get(i));
    return std::nullopt;
  };
  if (const char *f = firstField(
          plan, {{"schema_version", scalar(P::VT_SCHEMA_VERSION, 4)},
                 {"header", offset(P::VT_HEADER)},
                 {"step_block", scalar(P::VT_STEP_BLOCK, 4)},
                 {"hooks_block", scalar(P::VT_HOOKS_BLOCK, 4)},
                 {"recipe", offset(P::VT_RECIPE)},
                 {"checksum", scalar(P::VT_CHECKSUM, 8)}}))
    return where(f, plan);
  if (!whole(plan->header()))
    return where("header", plan->header());
  if (!whole(plan->recipe()))
    return where("recipe", plan->recipe());
  for (auto found :
       {tables("params", P::VT_PARAMS, [&] { return plan->params(); }),
        tables("units", P::VT_UNITS, [&] { return plan->units(); }),
        tables("buffers", P::VT_BUFFERS, [&] { return plan->buffers(); }),
        tables("events", P::VT_EVENTS, [&] { return plan->events(); }),
        tables("locations", P::VT_LOCATIONS,
               [&] { return plan->locations(); }),
        tables("datasets", P::VT_DATASETS, [&] { return plan->datasets(); })})
    if (found)
      return *found;
  if (!holds(plan, [&](Verifier &v) {
        return table(plan)->VerifyOffset(v, P::VT_BLOCKS) &&
               v.VerifyVector(plan->blocks());
      }))
    return where("blocks", plan);
  using I = fb::Instruction;
  for (uint32_t b = 0; plan->blocks() && b < plan->blocks()->size(); ++b) {
    const fb::Block *block = plan->blocks()->Get(b);
    const std::string bp = absl::StrFormat("blocks[%d]", b);
    if (const char *f = firstField(
            block, {{"", [](const Table &, Verifier &) { return true; }},
                    {".kind", scalar(fb::Block::VT_KIND, 1)},
                    {".instructions",
                     [&](const Table &t, Verifier &v) {
                       return t.VerifyOffset(v, fb::Block::VT_INSTRUCTIONS) &&
                              v.VerifyVector(block->instructions());
                     }}}))
      return where(bp + f, block);
    for (uint32_t i = 0;
         block->instructions() && i < block->instructions()->size(); ++i) {
      const I *inst = block->instructions()->Get(i);
      if (whole(inst))
        continue;
      std::string ip = absl::StrFormat("%s.instructions[%d]", bp, i);
      if (!holds(inst, [](Verifier &) { return true; }))
        return where(ip, inst);
      if (!holds(inst, [&](Verifier &v) {
            return table(inst)->VerifyField<uint16_t>(v, I::VT_OPCODE, 2);
          }))
        return where(ip + ".opcode", inst);
      const std::string op =
          GetOpcodeInfo(inst->opcode())
              ? absl::StrFormat(" (opcode %s)", OpcodeName(inst->opcode()))
              : absl::StrFormat(" (%s)", OpcodeName(inst->opcode()));
      auto vec = [&](flatbuffers::voffset_t f, auto get) {
        return [f, get](const Table &t, Verifier &v) {
          return t.VerifyOffset(v, f) && v.VerifyVector(get());
        };
      };
      const char *f = firstField(
          inst,
          {{".inputs", vec(I::VT_INPUTS, [&] { return inst->inputs(); })},
           {".outputs", vec(I::VT_OUTPUTS, [&] { return inst->outputs(); })},
           {".ints", vec(I::VT_INTS, [&] { return inst->ints(); })},
           {".floats", vec(I::VT_FLOATS, [&] { return inst->floats(); })},
           {".strings",
            [&](const Table &t, Verifier &v) {
              return t.VerifyOffset(v, I::VT_STRINGS) &&
                     v.VerifyVector(inst->strings()) &&
                     v.VerifyVectorOfStrings(inst->strings());
            }},
           {".blocks", vec(I::VT_BLOCKS, [&] { return inst->blocks(); })},
           {".stream", scalar(I::VT_STREAM, 1)},
           {".waits", vec(I::VT_WAITS, [&] { return inst->waits(); })},
           {".record", scalar(I::VT_RECORD, 4)},
           {".loc", scalar(I::VT_LOC, 4)},
           {".rank0_only", scalar(I::VT_RANK0_ONLY, 1)}});
      return where(ip + (f ? f : "") + op, inst);
    }
  }
  return "";
}

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
  // The checksum first: a plan whose bytes changed is named as such, not
  // by what the change happens to break.
  MD_RETURN_IF_ERROR(CheckPlanChecksum(bytes));
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), verifierOptions);
  if (!fb::VerifyPlanBuffer(verifier)) {
    std::string where = locateRefusal(bytes, verifierOptions);
    if (where.empty())
      return invalidf("malformed plan file: the FlatBuffers verifier refuses "
                      "it: every table verifies alone, so the file is over "
                      "the limits of %d nested tables and %d tables",
                      options.maxDepth, options.maxTables);
    return invalidf("malformed plan file: the FlatBuffers verifier refuses "
                    "%s: an offset, length or field outside the file or "
                    "misaligned (truncated or corrupt)",
                    where);
  }
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
  if (std::optional<PlanChecksumField> sum = FindPlanChecksum(loaded.bytes_))
    loaded.checksum_ = sum->stated;
  const fb::Plan &plan = loaded.plan();

  // Stage (b).
  detail::SemanticVerifier semantic(plan);
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

namespace {

/// "; it runs at world size 1, 2, 4 or 8": the W that split `global` into
/// whole micro-steps of `micro` (multiples of a hybrid shard group of
/// `group` ranks, when there is one), or "" when none does.
std::string worldSizesThatRun(int64_t global, int64_t micro, int64_t group) {
  if (micro <= 0 || global <= 0 || global % micro != 0)
    return "";
  const int64_t steps = global / micro;
  std::vector<std::string> fits;
  constexpr size_t kMaxListed = 12;
  size_t count = 0;
  for (int64_t w = 1; w <= steps && w <= kMaxWorldSize; ++w) {
    if (steps % w != 0 || (group > 0 && w % group != 0))
      continue;
    if (++count <= kMaxListed)
      fits.push_back(absl::StrCat(w));
  }
  if (fits.empty())
    return "";
  std::string list;
  if (count > kMaxListed) {
    list = absl::StrCat(absl::StrJoin(fits, ", "), ", ... (", count,
                        " sizes in all)");
  } else if (fits.size() == 1) {
    list = fits.front();
  } else {
    const std::string last = fits.back();
    fits.pop_back();
    list = absl::StrCat(absl::StrJoin(fits, ", "), " or ", last);
  }
  return absl::StrCat("; it runs at world size ", list);
}

} // namespace

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
        "the accumulation steps would not be a whole number%s",
        recipe.global_batch(), recipe.micro_batch(), worldSize,
        worldSizesThatRun(recipe.global_batch(), recipe.micro_batch(), group));
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
