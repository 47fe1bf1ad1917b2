//===- Markov.cpp - the sparse Markov chain of md's token data ------------===//

#include "runtime/data/Markov.h"

#include <algorithm>
#include <cmath>

namespace md::data {
namespace {

/// Keys the chain: synthetic data's task key ("md-task") ^ "seq".
constexpr uint64_t kChainKey = 0x6d642d7461736bull ^ 0x736571ull;

} // namespace

MarkovChain::MarkovChain(int64_t vocab, uint64_t chainSeed) : vocab_(vocab) {
  successors_ = std::min<int64_t>(kMaxSuccessors, vocab_);
  uint64_t key =
      runtime::HashKey(kChainKey ^ chainSeed, static_cast<uint64_t>(vocab_));
  next_.resize(static_cast<size_t>(vocab_ * successors_));
  for (int64_t i = 0; i < vocab_ * successors_; ++i)
    next_[static_cast<size_t>(i)] = static_cast<int64_t>(
        runtime::Below(runtime::Draw(key, static_cast<uint64_t>(i)),
                       static_cast<uint64_t>(vocab_)));
  const double p[kMaxSuccessors] = {0.6, 0.25, 0.1, 0.05};
  double total = 0;
  for (int64_t s = 0; s < successors_; ++s)
    total += p[s];
  double c = 0;
  for (int64_t s = 0; s < successors_; ++s) {
    probability_[s] = p[s] / total;
    c += p[s] / total;
    cumulative_[s] = c;
  }
  cumulative_[successors_ - 1] = 1.0;
}

std::optional<double> MarkovChain::entropyRate() const {
  const int64_t v = vocab_, k = successors_;

  // Each token's successor distribution, coinciding successors merged, and
  // its entropy.
  std::vector<double> rowEntropy(static_cast<size_t>(v), 0.0);
  for (int64_t i = 0; i < v; ++i) {
    double h = 0;
    for (int64_t s = 0; s < k; ++s) {
      bool seen = false;
      for (int64_t r = 0; r < s; ++r)
        seen = seen || successor(i, r) == successor(i, s);
      if (seen)
        continue;
      double q = 0;
      for (int64_t r = s; r < k; ++r)
        if (successor(i, r) == successor(i, s))
          q += probability_[r];
      if (q > 0)
        h -= q * std::log(q);
    }
    rowEntropy[static_cast<size_t>(i)] = h;
  }

  // Strongly connected components (Tarjan's algorithm without recursion);
  // the stationary distribution is unique exactly when one component is
  // closed (no edge leaves it).
  std::vector<int64_t> index(static_cast<size_t>(v), -1),
      low(static_cast<size_t>(v), 0), component(static_cast<size_t>(v), -1);
  std::vector<int64_t> stack, callStack, edgeAt(static_cast<size_t>(v), 0);
  std::vector<char> onStack(static_cast<size_t>(v), 0);
  int64_t counter = 0, components = 0;
  for (int64_t root = 0; root < v; ++root) {
    if (index[static_cast<size_t>(root)] >= 0)
      continue;
    callStack.push_back(root);
    while (!callStack.empty()) {
      int64_t n = callStack.back();
      size_t un = static_cast<size_t>(n);
      if (index[un] < 0) {
        index[un] = low[un] = counter++;
        stack.push_back(n);
        onStack[un] = 1;
      }
      if (edgeAt[un] < k) {
        int64_t m = successor(n, edgeAt[un]++);
        size_t um = static_cast<size_t>(m);
        if (index[um] < 0)
          callStack.push_back(m);
        else if (onStack[um])
          low[un] = std::min(low[un], index[um]);
        continue;
      }
      callStack.pop_back();
      if (!callStack.empty()) {
        size_t parent = static_cast<size_t>(callStack.back());
        low[parent] = std::min(low[parent], low[un]);
      }
      if (low[un] == index[un]) {
        int64_t m;
        do {
          m = stack.back();
          stack.pop_back();
          onStack[static_cast<size_t>(m)] = 0;
          component[static_cast<size_t>(m)] = components;
        } while (m != n);
        ++components;
      }
    }
  }
  std::vector<char> open(static_cast<size_t>(components), 0);
  for (int64_t i = 0; i < v; ++i)
    for (int64_t s = 0; s < k; ++s)
      if (component[static_cast<size_t>(successor(i, s))] !=
          component[static_cast<size_t>(i)])
        open[static_cast<size_t>(component[static_cast<size_t>(i)])] = 1;
  if (std::count(open.begin(), open.end(), 0) != 1)
    return std::nullopt;

  // The stationary distribution by power iteration of the lazy chain
  // (I + P) / 2, which has the same stationary distribution and is
  // aperiodic, from the uniform distribution.
  std::vector<double> pi(static_cast<size_t>(v), 1.0 / static_cast<double>(v)),
      next(static_cast<size_t>(v));
  for (int iteration = 0; iteration < 100000; ++iteration) {
    for (int64_t i = 0; i < v; ++i)
      next[static_cast<size_t>(i)] = 0.5 * pi[static_cast<size_t>(i)];
    for (int64_t i = 0; i < v; ++i) {
      double half = 0.5 * pi[static_cast<size_t>(i)];
      for (int64_t s = 0; s < k; ++s)
        next[static_cast<size_t>(successor(i, s))] += half * probability_[s];
    }
    double change = 0;
    for (int64_t i = 0; i < v; ++i)
      change +=
          std::fabs(next[static_cast<size_t>(i)] - pi[static_cast<size_t>(i)]);
    pi.swap(next);
    if (change < 1e-13) {
      double h = 0;
      for (int64_t i = 0; i < v; ++i)
        h += pi[static_cast<size_t>(i)] * rowEntropy[static_cast<size_t>(i)];
      return h;
    }
  }
  return std::nullopt;
}

} // namespace md::data
