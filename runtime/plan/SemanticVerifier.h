//===- SemanticVerifier.h - stage (b) of loading a plan ---------*- C++ -*-===//
//
// Private to runtime/plan: the semantic verifier LoadPlan runs once the
// FlatBuffers structure is known sound. It checks the tables in dependency
// order (header, datasets and recipe, units and params, events and
// locations, the block tree, buffers, instructions on their own and then in
// place, program order and uniformity over the block tree) so that every
// later check may index what an earlier one proved in range. Its stages are
// defined in VerifyTables.cpp, VerifyBlocks.cpp, VerifyInstructions.cpp and
// VerifyOrder.cpp. Nothing here recurses deeper than the block tree, whose
// depth is capped before anything walks it.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_SEMANTICVERIFIER_H
#define MD_RUNTIME_PLAN_SEMANTICVERIFIER_H

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "runtime/plan/Loader.h"
#include "runtime/plan/Schema.h"
#include "runtime/plan/VerifyInternal.h"

namespace md::plan::detail {

/// Blocks nest at most this deep (the step block and its micro-steps body
/// are depths 0 and 1).
constexpr int32_t kMaxBlockDepth = 16;
/// The largest world size a plan binds to.
constexpr int64_t kMaxWorldSize = int64_t{1} << 24;

/// Every check refuses a plan with InvalidArgument and a one-line message
/// that names the field path.
inline absl::Status invalid(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

template <typename... Args>
inline absl::Status invalidf(const absl::FormatSpec<Args...> &format,
                             const Args &...args) {
  return absl::InvalidArgumentError(absl::StrFormat(format, args...));
}

/// An enum field read from the plan: one plan.fbs defines, or
/// "<path>: unknown <what> <value>".
template <typename E>
inline absl::Status checkEnum(E value, absl::string_view path,
                              absl::string_view what) {
  if (inRange(value))
    return absl::OkStatus();
  return invalidf("%s: unknown %s %d", path, what, static_cast<int>(value));
}

/// An operand count as a message states it: "2", "at least 1", "1 to 3".
inline std::string arityText(Arity arity) {
  if (arity.min == arity.max)
    return absl::StrCat(arity.min);
  if (arity.max == Arity::kMany)
    return absl::StrCat("at least ", arity.min);
  return absl::StrCat(arity.min, " to ", arity.max);
}

/// Checks a shape (dims >= 0, rank <= kMaxRank) and returns its element
/// count, refusing one that overflows int64.
inline absl::Status checkShape(const flatbuffers::Vector<int64_t> *shape,
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

inline absl::Status checkFinite(double value, absl::string_view path) {
  if (!std::isfinite(value))
    return invalidf("%s: %g is not a finite number", path, value);
  return absl::OkStatus();
}

/// A finite value that is not negative (a norm bound, a rate, a decay).
inline absl::Status checkFiniteNonNegative(double value,
                                           absl::string_view path) {
  MD_RETURN_IF_ERROR(checkFinite(value, path));
  if (value < 0)
    return invalidf("%s: %g is negative", path, value);
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
  absl::Status checkHeader();

  absl::Status checkDatasetsAndRecipe();

  absl::Status checkUnitsAndParams();

  absl::Status checkInit(const fb::Init *init, const std::string &path);

  absl::Status checkEventsAndLocations();

  // --- the block tree ---------------------------------------------------
  absl::Status checkBlockTree();

  // --- buffers ----------------------------------------------------------
  absl::Status checkBuffers();

  // --- instructions, each on its own -----------------------------------
  absl::Status checkInstructions();

  absl::Status checkArity(absl::string_view path, const char *field,
                          const OpcodeInfo &info, Arity arity, uint32_t n);

  absl::Status checkBufferList(const flatbuffers::Vector<int32_t> *list,
                               absl::string_view path, const char *field);

  absl::Status checkIntAttr(IntAttr kind, int64_t v, absl::string_view path);

  absl::Status checkInstruction(const fb::Instruction &inst,
                                const std::string &path);

  /// Where an opcode may appear, given the block holding it.
  absl::Status checkPlacement(const fb::Instruction &inst, uint32_t b,
                              uint32_t i, uint32_t size,
                              const std::string &path);

  /// Block `b` ends with a yield of `values` values (required or optional).
  absl::Status checkYield(int32_t b, uint32_t values, bool required,
                          const std::string &path);

  // --- program order: liveness and events -------------------------------
  absl::Status checkProgramOrder();

  /// Walks block `b` in program order. stack_ holds (block, instruction) of
  /// the enclosing control instructions. Events recorded inside a nested
  /// block do not count after it (it may run zero times).
  absl::Status walk(int32_t b);

  template <typename PathFn>
  absl::Status checkLive(const flatbuffers::Vector<int32_t> *list,
                         const char *field, PathFn &pathOf);

  // --- uniformity: no collective under a condition that varies ---------
  /// Which buffers may hold different values on different ranks, and which
  /// blocks run on some ranks only; then refuses a collective or an exit in
  /// such a block (not in a plan pinned to W = 1). Linear: each instruction is
  /// revisited only when one of its inputs or its block turns varying, which
  /// happens once each.
  absl::Status checkUniformity();

  /// A collective whose result is the same on every rank of the world.
  /// Whether block `b` (or a block it runs) has a collective or an exit.
  bool communicates(int32_t b) const;
  /// Appends the collectives and exits block `b` runs, in order, with those
  /// of an evaluation's body; false when nested control communicates.
  bool communication(int32_t b,
                     std::vector<const fb::Instruction *> &out) const;
  /// Whether the two blocks of an `if` run the same collectives and exits
  /// (opcode, attributes but bucket ids, operand dtypes and sizes) in the
  /// same order, so that every rank reaches them whichever arm it takes.
  bool armsCommunicateAlike(const fb::Instruction &ifInst) const;
  bool collectiveMakesUniform(const fb::Instruction &inst) const;

  const fb::Plan &plan_;
  bool hybrid_ = false;
  uint32_t numDatasets_ = 0, numUnits_ = 0, numBuffers_ = 0, numEvents_ = 0,
           numLocations_ = 0, numBlocks_ = 0;
  std::vector<BlockSite> sites_;
  std::vector<bool> inHooks_;
  std::vector<bool> recorded_;
  std::vector<std::pair<int32_t, int32_t>> stack_;
};

} // namespace md::plan::detail

#endif // MD_RUNTIME_PLAN_SEMANTICVERIFIER_H
