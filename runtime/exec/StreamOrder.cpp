//===- StreamOrder.cpp - are a plan's streams ordered by its events? ------===//

#include "runtime/exec/StreamOrder.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/plan/Schema.h"

namespace md::runtime {
namespace {

#define MD_CHECK_OK(expr)                                                      \
  do {                                                                         \
    absl::Status md_s = (expr);                                                \
    if (!md_s.ok())                                                            \
      return md_s;                                                             \
  } while (0)

constexpr int kMaxStreams = 256; // Instruction.stream is a ubyte

using Clock = std::vector<int64_t>; // per stream: a position known complete

struct Region {
  int arena = -1; // 0 persistent, 1 transient
  int64_t lo = 0, hi = 0;
};

/// One instruction's use of one buffer.
struct Access {
  int stream = 0;
  int64_t pos = 0; // 1-based position on its stream
  Region region;
  bool write = false;
  int32_t block = 0, inst = 0, buffer = 0;
};

class Checker {
public:
  Checker(const fb::Plan &plan, const ArenaLayout &layout, int64_t maxPairs)
      : plan_(plan), layout_(layout), budget_(maxPairs), maxPairs_(maxPairs) {
    for (uint32_t b = 0; b < count(plan.blocks()); ++b) {
      // An empty block has no instruction vector at all.
      const auto *insts = plan.blocks()->Get(b)->instructions();
      for (uint32_t i = 0; i < count(insts); ++i)
        streams_ =
            std::max(streams_, static_cast<int>(insts->Get(i)->stream()) + 1);
    }
    streams_ = std::min(std::max(streams_, 1), kMaxStreams);
    clocks_.assign(streams_, Clock(streams_, 0));
    positions_.assign(streams_, 0);
    events_.assign(count(plan.events()), Clock());
    perStream_.assign(streams_, {});
    first_.assign(streams_, 0);
    where_.assign(streams_, {});
  }

  absl::Status run() {
    if (streams_ == 1)
      return absl::OkStatus(); // one stream: program order is the order
    // Two consecutive steps with the hooks between them.
    for (int round = 0; round < 2; ++round) {
      if (plan_.step_block() >= 0)
        MD_CHECK_OK(walk(plan_.step_block()));
      if (plan_.hooks_block() >= 0)
        MD_CHECK_OK(walk(plan_.hooks_block()));
    }
    return absl::OkStatus();
  }

private:
  template <typename T> static uint32_t count(const flatbuffers::Vector<T> *v) {
    return v ? v->size() : 0;
  }

  bool region(int32_t x, Region &r) const {
    if (x < 0 || static_cast<size_t>(x) >= layout_.buffers.size())
      return false;
    const BufferLayout &l = layout_.buffers[x];
    int64_t offset = l.offset;
    const BufferLayout *root = &l;
    if (l.placement == Placement::Alias) {
      if (l.aliasOf < 0)
        return false;
      root = &layout_.buffers[l.aliasOf];
      offset += root->offset;
    }
    if (root->placement == Placement::Persistent)
      r.arena = 0;
    else if (root->placement == Placement::Transient)
      r.arena = 1;
    else
      return false;
    int64_t bytes = l.capacity;
    if (bytes <= 0)
      return false;
    r.lo = offset;
    r.hi = offset + bytes;
    return true;
  }

  std::string describe(const Access &a) const {
    const fb::Instruction *inst =
        plan_.blocks()->Get(a.block)->instructions()->Get(a.inst);
    return absl::StrFormat("blocks[%d].instructions[%d] (%s on stream %d)",
                           a.block, a.inst, plan::OpcodeName(inst->opcode()),
                           a.stream);
  }
  std::string bufferName(int32_t x) const {
    const fb::Buffer *b = plan_.buffers()->Get(x);
    return absl::StrFormat("%d '%s'", x,
                           b->name() ? b->name()->str() : std::string());
  }

  /// Checks `a` against the earlier accesses of the other streams.
  absl::Status check(const Access &a) {
    const Clock &now = clocks_[a.stream];
    for (int s = 0; s < streams_; ++s) {
      if (s == a.stream)
        continue;
      const std::vector<Access> &list = perStream_[s];
      if (static_cast<int64_t>(list.size() - first_[s]) > budget_)
        return tooLarge();
      budget_ -= static_cast<int64_t>(list.size() - first_[s]);
      for (size_t k = first_[s]; k < list.size(); ++k) {
        const Access &b = list[k];
        if (!a.write && !b.write)
          continue;
        if (b.region.arena != a.region.arena || b.region.hi <= a.region.lo ||
            a.region.hi <= b.region.lo)
          continue;
        if (now[s] >= b.pos)
          continue; // b completed before a started
        std::string known =
            now[s] == 0
                ? absl::StrFormat("nothing of stream %d", s)
                : absl::StrFormat("stream %d up to blocks[%d].instructions[%d]",
                                  s, where_[s][now[s] - 1].first,
                                  where_[s][now[s] - 1].second);
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s %s bytes that %s %s (buffers %s and %s), and no event orders "
            "them (its events cover %s): on a GPU the result would depend on "
            "timing",
            describe(a), a.write ? "writes" : "reads", describe(b),
            b.write ? "writes" : "reads", bufferName(a.buffer),
            bufferName(b.buffer), known));
      }
    }
    return absl::OkStatus();
  }

  absl::Status instruction(int32_t b, int32_t i) {
    const fb::Instruction *inst =
        plan_.blocks()->Get(b)->instructions()->Get(i);
    int s = std::min(static_cast<int>(inst->stream()), streams_ - 1);
    for (uint32_t k = 0; k < count(inst->waits()); ++k) {
      int32_t e = inst->waits()->Get(k);
      if (e < 0 || static_cast<size_t>(e) >= events_.size() ||
          events_[e].empty())
        continue; // the loader refuses waits before records
      for (int t = 0; t < streams_; ++t)
        clocks_[s][t] = std::max(clocks_[s][t], events_[e][t]);
    }
    int64_t pos = ++positions_[s];
    where_[s].push_back({b, i});
    clocks_[s][s] = pos;
    std::vector<Access> mine;
    auto use = [&](const flatbuffers::Vector<int32_t> *list, bool write) {
      for (uint32_t k = 0; k < count(list); ++k) {
        Access a;
        a.stream = s;
        a.pos = pos;
        a.write = write;
        a.block = b;
        a.inst = i;
        a.buffer = list->Get(k);
        if (region(a.buffer, a.region))
          mine.push_back(a);
      }
    };
    use(inst->inputs(), false);
    use(inst->outputs(), true);
    // A state load or store between two buffers at the same bytes (an
    // optimizer that updated its state in place) copies nothing: the
    // executor skips it (Executor::Impl::copyBuffer), so it touches nothing.
    if ((inst->opcode() == fb::Opcode::StateLoad ||
         inst->opcode() == fb::Opcode::StateStore) &&
        mine.size() == 2 && mine[0].region.arena == mine[1].region.arena &&
        mine[0].region.lo == mine[1].region.lo)
      mine.clear();
    for (const Access &a : mine)
      MD_CHECK_OK(check(a));
    // Nested blocks run inside this instruction, on their own streams.
    for (uint32_t k = 0; k < count(inst->blocks()); ++k) {
      int32_t nested = inst->blocks()->Get(k);
      fb::BlockKind kind = plan_.blocks()->Get(nested)->kind();
      bool repeats = kind == fb::BlockKind::MicroSteps ||
                     kind == fb::BlockKind::ForBody ||
                     kind == fb::BlockKind::EvalBody;
      for (int round = 0; round < (repeats ? 2 : 1); ++round)
        MD_CHECK_OK(walk(nested));
    }
    for (Access &a : mine)
      perStream_[s].push_back(a);
    // Accesses every other stream has seen complete are ordered before
    // anything to come: drop them from the scans.
    for (int t = 0; t < streams_; ++t) {
      int64_t seen = std::numeric_limits<int64_t>::max();
      for (int u = 0; u < streams_; ++u)
        if (u != t)
          seen = std::min(seen, clocks_[u][t]);
      while (first_[t] < perStream_[t].size() &&
             perStream_[t][first_[t]].pos <= seen)
        ++first_[t];
    }
    if (inst->record() >= 0 &&
        static_cast<size_t>(inst->record()) < events_.size())
      events_[inst->record()] = clocks_[s];
    return absl::OkStatus();
  }

  absl::Status walk(int32_t b) {
    const fb::Block *block = plan_.blocks()->Get(b);
    for (uint32_t i = 0; i < count(block->instructions()); ++i)
      MD_CHECK_OK(instruction(b, static_cast<int32_t>(i)));
    return absl::OkStatus();
  }

  const fb::Plan &plan_;
  const ArenaLayout &layout_;
  int streams_ = 1;
  std::vector<Clock> clocks_;
  std::vector<int64_t> positions_;
  std::vector<Clock> events_;
  std::vector<std::vector<Access>> perStream_;
  /// Per stream, the first access still to scan (the ones before it are
  /// ordered before every stream's next instruction).
  std::vector<size_t> first_;
  /// Access pairs left to compare before the check gives up: bounds the
  /// time a hostile or huge plan without events can take.
  int64_t budget_;
  const int64_t maxPairs_;
  absl::Status tooLarge() const {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the plan has too many unordered cross-stream accesses to check "
        "(more than %d pairs)",
        maxPairs_));
  }
  /// Per stream, the instruction at each position (1-based: index pos - 1).
  std::vector<std::vector<std::pair<int32_t, int32_t>>> where_;
};

} // namespace

absl::Status CheckStreamOrder(const plan::LoadedPlan &plan,
                              const ArenaLayout &layout, int64_t maxPairs) {
  return Checker(plan.plan(), layout, maxPairs).run();
}

absl::Status CheckStreamOrder(const plan::LoadedPlan &plan,
                              const ArenaLayout &layout) {
  return CheckStreamOrder(plan, layout, 200'000'000);
}

} // namespace md::runtime

#undef MD_CHECK_OK
