//===- Markov.h - the sparse Markov chain of md's token data ---*- C++ -*-===//
//
// One fixed random Markov chain over a vocabulary of V tokens, shared by the
// `synthetic` sequence task (runtime/data/Synthetic.cpp) and `md-data markov`
// (token files): each token i has min(4, V) successors next[i][s], drawn
// uniformly from the vocabulary (two may coincide), taken with probabilities
// 0.6, 0.25, 0.1, 0.05 (renormalised when V < 4).
//
// The chain is a pure function of (V, chain seed):
//
//   chain key      = HashKey(0x6d642d7461736b ^ 0x736571 ^ chain seed, V)
//   next[i][s]     = Below(Draw(chain key, i * min(4, V) + s), V)
//
// Chain seed 0 is the chain of `synthetic` data. A walk of n tokens keyed by
// `key` starts at Below(Draw(key, 0), V); token j > 0 is the successor of
// token j - 1 picked by UnitInterval(Draw(key, j)) against the cumulative
// probabilities.
//
//===----------------------------------------------------------------------===//

#ifndef MD_RUNTIME_DATA_MARKOV_H
#define MD_RUNTIME_DATA_MARKOV_H

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/core/Random.h"

namespace md::data {

class MarkovChain {
public:
  static constexpr int64_t kMaxSuccessors = 4;

  /// The chain over `vocab` (> 0) tokens chosen by `chainSeed`.
  MarkovChain(int64_t vocab, uint64_t chainSeed);

  int64_t vocab() const { return vocab_; }
  /// min(4, V): the successors each token has (some may coincide).
  int64_t successors() const { return successors_; }
  /// The s-th successor of `token`.
  int64_t successor(int64_t token, int64_t s) const {
    return next_[static_cast<size_t>(token * successors_ + s)];
  }
  /// The probability of the s-th successor (0.6, 0.25, 0.1, 0.05 for V >= 4).
  double probability(int64_t s) const { return probability_[s]; }

  /// The first token of the walk keyed by `key`.
  int64_t first(uint64_t key) const {
    return static_cast<int64_t>(
        runtime::Below(runtime::Draw(key, 0), static_cast<uint64_t>(vocab_)));
  }
  /// Token j (> 0) of the walk keyed by `key`, after `token` (token j - 1).
  int64_t next(int64_t token, uint64_t key, int64_t j) const {
    double u =
        runtime::UnitInterval(runtime::Draw(key, static_cast<uint64_t>(j)));
    int64_t s = 0;
    while (s + 1 < successors_ && u >= cumulative_[s])
      ++s;
    return successor(token, s);
  }
  /// Calls emit(j, token) for the tokens j in [0, n) of the walk keyed by
  /// `key`.
  template <typename Emit> void walk(uint64_t key, int64_t n, Emit &&emit) const {
    if (n <= 0)
      return;
    int64_t token = first(key);
    emit(int64_t{0}, token);
    for (int64_t j = 1; j < n; ++j) {
      token = next(token, key, j);
      emit(j, token);
    }
  }

  /// The entropy rate in nats per token, sum_i pi_i H(P(. | i)) with pi the
  /// stationary distribution and P(. | i) token i's successor distribution
  /// (coinciding successors merged): the cross-entropy a model that knows
  /// the chain reaches on a long walk. std::nullopt when the chain has no
  /// unique stationary distribution (more than one closed class, which a
  /// walk may end up in depending on where it starts) or the power
  /// iteration computing it does not converge.
  std::optional<double> entropyRate() const;

private:
  int64_t vocab_ = 0, successors_ = 0;
  std::vector<int64_t> next_;
  double probability_[kMaxSuccessors] = {0, 0, 0, 0};
  double cumulative_[kMaxSuccessors] = {1, 1, 1, 1};
};

} // namespace md::data

#endif // MD_RUNTIME_DATA_MARKOV_H
