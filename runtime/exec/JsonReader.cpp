//===- JsonReader.cpp - a cursor over the JSON md reads back --------------===//
//
// JsonReader.h. Strings decode the escapes of JSON (\" \\ \/ \b \f \n \r \t
// and \uXXXX within the basic plane, written as UTF-8); any other escaped
// character stands for itself.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/JsonReader.h"

namespace md::runtime {

bool JsonReader::ws() {
  while (i_ < s_.size() &&
         (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
    ++i_;
  return i_ < s_.size();
}

bool JsonReader::eat(char c) {
  if (!ws() || s_[i_] != c)
    return false;
  ++i_;
  return true;
}

bool JsonReader::peek(char c) { return ws() && s_[i_] == c; }

bool JsonReader::literal(absl::string_view word) {
  if (!ws() || s_.substr(i_, word.size()) != word)
    return false;
  i_ += word.size();
  return true;
}

bool JsonReader::string(std::string *out) {
  if (!eat('"'))
    return false;
  out->clear();
  while (i_ < s_.size() && s_[i_] != '"') {
    char c = s_[i_++];
    if (c == '\\') {
      if (i_ >= s_.size())
        return false;
      char e = s_[i_++];
      switch (e) {
      case 'n':
        c = '\n';
        break;
      case 't':
        c = '\t';
        break;
      case 'r':
        c = '\r';
        break;
      case 'b':
        c = '\b';
        break;
      case 'f':
        c = '\f';
        break;
      case 'u': {
        if (i_ + 4 > s_.size())
          return false;
        unsigned v = 0;
        for (int k = 0; k < 4; ++k) {
          char h = s_[i_++];
          v = v * 16 + (h >= 'a'   ? h - 'a' + 10
                        : h >= 'A' ? h - 'A' + 10
                                   : h - '0');
        }
        if (v < 0x80) {
          c = static_cast<char>(v);
        } else if (v < 0x800) {
          out->push_back(static_cast<char>(0xc0 | (v >> 6)));
          c = static_cast<char>(0x80 | (v & 0x3f));
        } else {
          out->push_back(static_cast<char>(0xe0 | (v >> 12)));
          out->push_back(static_cast<char>(0x80 | ((v >> 6) & 0x3f)));
          c = static_cast<char>(0x80 | (v & 0x3f));
        }
        break;
      }
      default:
        c = e;
        break;
      }
    }
    out->push_back(c);
  }
  return eat('"');
}

bool JsonReader::integer(int64_t *out) {
  if (!ws())
    return false;
  bool neg = false;
  if (s_[i_] == '-') {
    neg = true;
    ++i_;
  }
  size_t start = i_;
  int64_t v = 0;
  while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
    if (__builtin_mul_overflow(v, 10, &v) ||
        __builtin_add_overflow(v, s_[i_] - '0', &v))
      return false;
    ++i_;
  }
  *out = neg ? -v : v;
  return i_ > start;
}
bool JsonReader::intArray(std::vector<int64_t> *out) {
  out->clear();
  return eat('[') && items(']', [&] {
           int64_t v;
           if (!integer(&v))
             return false;
           out->push_back(v);
           return true;
         });
}

} // namespace md::runtime
