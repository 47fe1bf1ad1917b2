//===- VerifyInternal.h - helpers shared by the plan verifiers -*- C++ -*-===//
//
// Private to runtime/plan: small accessors that treat absent FlatBuffers
// fields as empty, enum range checks, and the per-opcode operand type rules
// (TypeRules.cpp) that the semantic verifier (SemanticVerifier.h) calls once
// an instruction's indices, arity and attribute kinds are known to be valid.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_PLAN_VERIFYINTERNAL_H
#define MD_RUNTIME_PLAN_VERIFYINTERNAL_H

#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "runtime/core/Status.h"
#include "runtime/plan/Schema.h"
#include "runtime/plan/World.h"
#include "runtime/plan/plan_generated.h"

namespace md::plan::detail {

/// Tensors have at most this many dims.
constexpr int kMaxRank = 8;

/// Elements of a vector field, 0 when the field is absent.
template <typename T> uint32_t count(const flatbuffers::Vector<T> *v) {
  return v ? v->size() : 0;
}

/// One entry of a table field, with its path for messages ("buffers[3]").
template <typename T> struct TableEntry {
  uint32_t index;
  const T *entry;
  std::string path;
};

/// The entries of a table field, none when the field is absent, for a
/// range-for: `for (auto [i, buffer, path] : entries(plan.buffers(),
/// "buffers"))`.
template <typename T> class TableEntries {
public:
  using Table = flatbuffers::Vector<flatbuffers::Offset<T>>;
  TableEntries(const Table *table, absl::string_view name)
      : table_(table), name_(name) {}

  class iterator {
  public:
    iterator(const TableEntries *entries, uint32_t i)
        : entries_(entries), i_(i) {}
    TableEntry<T> operator*() const {
      return {i_, entries_->table_->Get(i_),
              absl::StrCat(entries_->name_, "[", i_, "]")};
    }
    iterator &operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const iterator &other) const { return i_ != other.i_; }

  private:
    const TableEntries *entries_;
    uint32_t i_;
  };
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, count(table_)}; }

private:
  const Table *table_;
  absl::string_view name_;
};

template <typename T>
TableEntries<T>
entries(const flatbuffers::Vector<flatbuffers::Offset<T>> *table,
        absl::string_view name) {
  return {table, name};
}

/// A string field, "" when absent.
inline absl::string_view str(const flatbuffers::String *s) {
  return s ? absl::string_view(s->c_str(), s->size()) : absl::string_view();
}

/// A name from the file, fit for a one-line message: control bytes escaped.
inline std::string printable(absl::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      const char *hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

/// Whether an enum value read from a file is one the schema defines (every
/// enum of plan.fbs is contiguous from MIN to MAX).
template <typename E> bool inRange(E e) {
  using U = std::underlying_type_t<E>;
  return static_cast<U>(e) >= static_cast<U>(E::MIN) &&
         static_cast<U>(e) <= static_cast<U>(E::MAX);
}

inline bool isFloat(fb::DType t) {
  return t == fb::DType::F32 || t == fb::DType::BF16 || t == fb::DType::F16 ||
         t == fb::DType::F64;
}
inline bool isInteger(fb::DType t) {
  return t == fb::DType::I32 || t == fb::DType::I64 || t == fb::DType::Bool;
}

/// Checks the operand types of `inst` (path `path`, e.g.
/// "blocks[0].instructions[3]") against the rule of its opcode. Needs
/// indices, arity and attribute kinds already verified.
absl::Status CheckOperandTypes(const fb::Plan &plan,
                               const fb::Instruction &inst,
                               const OpcodeInfo &info, absl::string_view path);

/// Checks what only a world size decides: gathers and scatters of full
/// buffers along an axis, broadcast roots. Same preconditions.
absl::Status CheckWorldTypes(const fb::Plan &plan, const fb::Instruction &inst,
                             const WorldBinding &world, absl::string_view path);

} // namespace md::plan::detail

#endif // MD_RUNTIME_PLAN_VERIFYINTERNAL_H
