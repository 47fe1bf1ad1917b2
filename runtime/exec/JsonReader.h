//===- JsonReader.h - a cursor over the JSON md reads back -----*- C++ -*-===//
//
// md reads two kinds of JSON: safetensors headers (its own and PyTorch's)
// and the meta.json of a sharded checkpoint. Both are objects, arrays,
// strings and integers; this cursor reads those token by token, and each
// reader (Safetensors.cpp, CheckpointMeta.cpp) says what it expects where.
// A false return means "not what was expected here"; offset() tells where.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_EXEC_JSONREADER_H
#define MD_RUNTIME_EXEC_JSONREADER_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace md::runtime {

class JsonReader {
public:
  explicit JsonReader(absl::string_view text) : s_(text) {}

  /// Skips white space; whether any text is left.
  bool ws();
  /// Consumes `c` (after white space) if it is next.
  bool eat(char c);
  /// Whether `c` is next (after white space); consumes nothing.
  bool peek(char c);
  /// Consumes `word` (after white space), such as `null`, if it is next.
  bool literal(absl::string_view word);
  /// A string, its escapes decoded (\uXXXX as UTF-8).
  bool string(std::string *out);
  /// A decimal integer that fits in 64 bits.
  bool integer(int64_t *out);
  /// The items of an array or object whose opening bracket was consumed,
  /// each read by `item`, separated by commas, then `close`.
  template <typename Item> bool items(char close, Item item) {
    if (eat(close))
      return true;
    do {
      if (!item())
        return false;
    } while (eat(','));
    return eat(close);
  }
  /// An array of integers.
  bool intArray(std::vector<int64_t> *out);
  /// Whether only white space is left.
  bool done() { return !ws(); }
  /// The byte where reading stopped.
  size_t offset() const { return i_; }

private:
  absl::string_view s_;
  size_t i_ = 0;
};

} // namespace md::runtime

#endif // MD_RUNTIME_EXEC_JSONREADER_H
