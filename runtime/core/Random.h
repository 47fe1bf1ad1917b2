//===- Random.h - counter-based random numbers for init and data -*- C++
//-*-===//
//
// md never carries random state from one draw to the next: every number is a
// pure function of a key and a counter (splitmix64's finaliser, chained), so
// that any rank can compute any element on its own, in any order, and get
// the same bits. Parameters are drawn keyed by (seed, parameter name, element
// index), which lets a rank materialise only its shard; data are drawn keyed
// by (seed, epoch, sample index). docs/runtime.md gives the formulas.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_CORE_RANDOM_H
#define MD_RUNTIME_CORE_RANDOM_H

#include <cmath>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace md::runtime {

/// splitmix64's output function of `z + golden ratio`: a bijection of 64-bit
/// integers whose outputs pass BigCrush for consecutive inputs.
inline uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// A key extended by one more value: Mix64(key ^ Mix64(value)). Chain it to
/// key by several values: HashKey(HashKey(seed, epoch), index).
inline uint64_t HashKey(uint64_t key, uint64_t value) {
  return Mix64(key ^ Mix64(value));
}

/// 64-bit FNV-1a of a name, to key a stream by a parameter's name.
inline uint64_t NameKey(absl::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

/// The counter-th 64-bit draw of stream `key`.
inline uint64_t Draw(uint64_t key, uint64_t counter) {
  return HashKey(key, counter);
}

/// A double in [0, 1) from the top 53 bits of a draw.
inline double UnitInterval(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

/// A standard normal from two draws (Box-Muller, the cosine branch only):
/// the value at `counter` uses draws 2 * counter and 2 * counter + 1.
inline double StandardNormal(uint64_t key, uint64_t counter) {
  // u1 in (0, 1] so that the log is finite.
  double u1 =
      (static_cast<double>(Draw(key, 2 * counter) >> 11) + 1.0) * 0x1.0p-53;
  double u2 = UnitInterval(Draw(key, 2 * counter + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

/// An integer in [0, n) (n > 0) from one draw, by Lemire's multiply-shift
/// (its bias, below 2^-32 relative for n < 2^32, does not matter here).
inline uint64_t Below(uint64_t bits, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >>
                               64);
}

} // namespace md::runtime

#endif // MD_RUNTIME_CORE_RANDOM_H
