//===- Wire.h - little-endian header fields on the wire ------*- C++ -*-===//
//
// The headers that md's processes exchange over TCP are fixed-size records
// of little-endian integers, written and read field by field so that their
// layout does not depend on a compiler's struct padding or on the machine.
// (Tensor data travel as raw bytes: the gloo comm's fingerprint makes
// ranks of different byte order refuse each other instead.)
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_NET_WIRE_H
#define MD_RUNTIME_NET_WIRE_H

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace md::net {

class WireWriter {
public:
  WireWriter &u32(uint32_t v) { return le(v, 4); }
  WireWriter &i32(int32_t v) { return le(uint32_t(v), 4); }
  WireWriter &u64(uint64_t v) { return le(v, 8); }
  WireWriter &i64(int64_t v) { return le(uint64_t(v), 8); }
  WireWriter &bytes(std::string_view b) {
    out_.append(b.data(), b.size());
    return *this;
  }
  const std::string &str() const { return out_; }
  std::string take() { return std::move(out_); }

private:
  WireWriter &le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
      out_.push_back(char((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::string out_;
};

/// Reads fields in order; reading past the end yields zeros and clears
/// ok().
class WireReader {
public:
  explicit WireReader(std::string_view in) : in_(in) {}
  uint32_t u32() { return uint32_t(le(4)); }
  int32_t i32() { return int32_t(uint32_t(le(4))); }
  uint64_t u64() { return le(8); }
  int64_t i64() { return int64_t(le(8)); }
  std::string_view bytes(size_t n) {
    if (n > in_.size() - at_) {
      ok_ = false;
      at_ = in_.size();
      return {};
    }
    std::string_view b = in_.substr(at_, n);
    at_ += n;
    return b;
  }
  bool ok() const { return ok_; }
  size_t left() const { return in_.size() - at_; }

private:
  uint64_t le(int n) {
    if (size_t(n) > in_.size() - at_) {
      ok_ = false;
      at_ = in_.size();
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; ++i)
      v |= uint64_t(uint8_t(in_[at_ + i])) << (8 * i);
    at_ += n;
    return v;
  }
  std::string_view in_;
  size_t at_ = 0;
  bool ok_ = true;
};

} // namespace md::net

#endif // MD_RUNTIME_NET_WIRE_H
