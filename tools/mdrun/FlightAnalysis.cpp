//===- FlightAnalysis.cpp - who stopped a failed job ----------------------===//
//
// The analysis behind the launcher's one paragraph (FlightAnalysis.h) and
// the JSON form of a ring.
//
//===----------------------------------------------------------------------===//

#include "tools/mdrun/FlightAnalysis.h"

#include <signal.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/core/Comm.h"
#include "runtime/core/Json.h"
#include "runtime/plan/MemoryFormat.h"
#include "runtime/plan/Schema.h"

namespace md::mdrun {

using runtime::FlightEntry;
using runtime::FlightSnapshot;
using runtime::FlightState;

bool RankFate::abnormal() const {
  switch (kind) {
  case Kind::Running:
    return false;
  case Kind::Exited:
    return code != 0;
  case Kind::Stopped:
  case Kind::Signaled:
    return true;
  }
  return true;
}

std::string RankFate::str() const {
  switch (kind) {
  case Kind::Running:
    return "is running";
  case Kind::Stopped:
    return "was stopped (SIGSTOP, SIGTSTP or a debugger)";
  case Kind::Exited:
    return absl::StrFormat("exited with status %d", code);
  case Kind::Signaled:
    return absl::StrFormat("was killed by signal %d (%s)", code,
                           strsignal(code));
  }
  return "?";
}

std::vector<std::string> FlightLocations(const fb::Plan &plan) {
  std::vector<std::string> out;
  if (plan.locations() == nullptr)
    return out;
  for (const fb::SourceLocation *loc : *plan.locations())
    out.push_back(absl::StrCat(loc->file() ? loc->file()->str() : "?", ":",
                               loc->line(), ":", loc->col()));
  return out;
}

std::string RankListText(const std::vector<int> &ranks,
                         const std::string &noun) {
  std::vector<std::string> runs;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    runs.push_back(j == i ? absl::StrCat(ranks[i])
                          : absl::StrCat(ranks[i], "-", ranks[j]));
    i = j + 1;
  }
  return absl::StrCat(noun, ranks.size() == 1 ? " " : "s ",
                      absl::StrJoin(runs, ", "));
}

namespace {

std::string secondsText(int64_t ns) {
  return absl::StrFormat("%.1f s",
                         static_cast<double>(std::max<int64_t>(ns, 0)) / 1e9);
}

std::string locationText(int32_t loc, const std::vector<std::string> &locs) {
  if (loc < 0 || static_cast<size_t>(loc) >= locs.size())
    return "";
  return locs[static_cast<size_t>(loc)];
}

/// "all_gather #388 (bf16, 4.0 KiB, shard group of 4, bucket 2,
/// mlp.mdl:17:23)".
std::string callText(const FlightEntry &e,
                     const std::vector<std::string> &locs) {
  const runtime::FlightCall &c = e.call;
  std::string s =
      absl::StrFormat("%s #%d (", runtime::collectiveName(c.kind), e.seq);
  if (c.kind != runtime::Collective::barrier)
    absl::StrAppend(&s, runtime::dtypeName(c.dtype), ", ",
                    plan::BytesText(c.bytes), ", ");
  absl::StrAppend(&s, runtime::groupKindName(c.group), " group of ",
                  c.groupSize);
  if (c.bucket >= 0)
    absl::StrAppend(&s, ", bucket ", c.bucket);
  if (std::string loc = locationText(c.loc, locs); !loc.empty())
    absl::StrAppend(&s, ", ", loc);
  absl::StrAppend(&s, ")");
  return s;
}

/// "in matmul at blocks[1].instructions[19] (gpt.mdl:26:13)": the
/// instruction whose kernel failed on the rank, or "" when none did.
std::string failedText(const FlightSnapshot &s,
                       const std::vector<std::string> &locs) {
  const runtime::FlightFailedInstruction &f = s.failedAt;
  if (f.opcode < 0)
    return "";
  std::string t = absl::StrFormat(
      "in %s at blocks[%d].instructions[%d]",
      plan::OpcodeName(static_cast<fb::Opcode>(f.opcode)), f.block, f.index);
  if (std::string loc = locationText(f.loc, locs); !loc.empty())
    absl::StrAppend(&t, " (", loc, ")");
  return t;
}

/// "in step 38, micro-step 2", "in the hooks after step 38", "before its
/// first step".
std::string whereText(int64_t step, int32_t micro) {
  if (step <= 0)
    return "before its first step";
  if (micro <= 0)
    return absl::StrFormat("in the hooks after step %d", step);
  return absl::StrFormat("in step %d, micro-step %d", step, micro);
}

const FlightEntry *entryOf(const FlightSnapshot &s, uint64_t seq) {
  for (const FlightEntry &e : s.entries)
    if (e.seq == seq)
      return &e;
  return nullptr;
}

/// Whether the rank reached `e`: a comm that stamps its entries (the CPU
/// comm thread) has not started a Queued one; a Queued entry of another
/// stream-ordered comm (NCCL) may be running on the device.
bool reached(const FlightSnapshot &s, const FlightEntry &e) {
  return !s.commStamps || e.state != FlightState::Queued;
}

/// The rank's last entry that it reached, or null.
const FlightEntry *lastReached(const FlightSnapshot &s) {
  for (auto it = s.entries.rbegin(); it != s.entries.rend(); ++it)
    if (reached(s, *it))
      return &*it;
  return nullptr;
}

/// Whether the rank reached collective `seq`.
bool reachedSeq(const FlightSnapshot &s, uint64_t seq) {
  const FlightEntry *e = entryOf(s, seq);
  return e != nullptr && reached(s, *e);
}

/// When the rank began waiting in `e`: when it started it, where the ring
/// knows (a host comm's start is its begin), else when it was queued.
int64_t waitBeganNs(const FlightEntry &e) {
  return e.startedNs > 0 ? e.startedNs : e.beganNs;
}

/// The lowest seq this rank began and did not complete; begun + 1 when it
/// completed all it began.
uint64_t firstOpen(const FlightSnapshot &s) {
  for (const FlightEntry &e : s.entries)
    if (e.state != FlightState::Completed)
      return e.seq;
  return s.begun + 1;
}

/// A fate's words for `n` ranks: "was killed" becomes "were killed".
std::string plural(const std::string &fate, size_t n) {
  if (n > 1 && fate.rfind("was ", 0) == 0)
    return "were " + fate.substr(4);
  if (n > 1 && fate.rfind("is ", 0) == 0)
    return "are " + fate.substr(3);
  return fate;
}

/// "rank 3 was stopped ...; ranks 0-1 were killed ...": `said` holds each
/// rank's description (its fate first, as RankFate::str() words it), and
/// ranks with the same description share one clause.
std::string byRanks(const std::vector<std::pair<int, std::string>> &said) {
  std::vector<std::pair<std::string, std::vector<int>>> clauses;
  for (const auto &[rank, text] : said) {
    auto it = std::find_if(clauses.begin(), clauses.end(),
                           [&](const auto &c) { return c.first == text; });
    if (it == clauses.end())
      clauses.push_back({text, {rank}});
    else
      it->second.push_back(rank);
  }
  std::vector<std::string> parts;
  for (auto &[text, ranks] : clauses) {
    std::sort(ranks.begin(), ranks.end());
    parts.push_back(
        absl::StrCat(RankListText(ranks), " ", plural(text, ranks.size())));
  }
  return absl::StrJoin(parts, "; ");
}

/// What must match across ranks for two entries to be the same call.
bool sameCall(const FlightEntry &a, const FlightEntry &b) {
  return a.call.kind == b.call.kind && a.call.group == b.call.group &&
         a.call.groupSize == b.call.groupSize && a.call.dtype == b.call.dtype &&
         a.call.bytes == b.call.bytes && a.call.loc == b.call.loc;
}

/// The finding when every rank completed all it began (`begunMax` on the
/// furthest): no collective holds anyone, so the ranks that died, stopped
/// or failed between collectives are the culprits.
FlightFinding noOpenCollective(const std::vector<RankRing> &ranks,
                               const std::vector<std::string> &locs,
                               uint64_t begunMax) {
  FlightFinding f;
  std::vector<std::pair<int, std::string>> said;
  for (const RankRing &r : ranks) {
    if (!r.fate.abnormal())
      continue;
    f.culprits.push_back(r.rank);
    std::string p =
        absl::StrCat(r.fate.str(), " ", whereText(r.ring.step, r.ring.micro));
    // A kernel that failed is the cause; the collective before it
    // completed.
    if (std::string in = failedText(r.ring, locs); !in.empty())
      absl::StrAppend(&p, ", ", in);
    else if (const FlightEntry *last = lastReached(r.ring))
      absl::StrAppend(&p, ", after ", callText(*last, locs));
    said.push_back({r.rank, p});
  }
  f.text = absl::StrCat(said.empty() ? "" : absl::StrCat(byRanks(said), "; "),
                        "no rank waits in a collective (", begunMax,
                        " completed on the furthest rank)");
  return f;
}

/// One version of collective s as some ranks recorded it.
using CallVariant = std::pair<const FlightEntry *, std::vector<int>>;

/// Groups the ranks that reached collective `s` by what they recorded it
/// as; more than one group is a desync.
std::vector<CallVariant> callVariants(const std::vector<const RankRing *> &in,
                                      uint64_t s) {
  std::vector<CallVariant> variants;
  for (const RankRing *r : in) {
    const FlightEntry *e = entryOf(r->ring, s);
    if (e == nullptr)
      continue;
    auto it = std::find_if(variants.begin(), variants.end(),
                           [&](auto &v) { return sameCall(*v.first, *e); });
    if (it == variants.end())
      variants.push_back({e, {r->rank}});
    else
      it->second.push_back(r->rank);
  }
  return variants;
}

/// Fills `f` for a desync on collective `s`: the ranks outside the largest
/// agreeing set are the suspects.
void describeMismatch(const std::vector<CallVariant> &variants, uint64_t s,
                      const std::vector<std::string> &locs, FlightFinding &f) {
  f.mismatch = true;
  size_t largest = 0;
  for (size_t v = 1; v < variants.size(); ++v)
    if (variants[v].second.size() > variants[largest].second.size())
      largest = v;
  std::vector<std::string> parts;
  for (size_t v = 0; v < variants.size(); ++v) {
    const auto &[call, who] = variants[v];
    parts.push_back(absl::StrCat(RankListText(who), " ",
                                 who.size() == 1 ? "runs" : "run", " ",
                                 callText(*call, locs), " ",
                                 whereText(call->call.step, call->call.micro)));
    if (v != largest)
      f.culprits.insert(f.culprits.end(), who.begin(), who.end());
  }
  std::sort(f.culprits.begin(), f.culprits.end());
  f.text = absl::StrCat("the ranks disagree on collective #", s, ": ",
                        absl::StrJoin(parts, "; "));
}

/// The culprits of a hang in collective `s`: the ranks that never reached
/// it (`behind`), else the ranks in it (`in`) that are dead, stopped or
/// failed.
std::vector<const RankRing *>
hangCulprits(const std::vector<const RankRing *> &behind,
             const std::vector<const RankRing *> &in, uint64_t s) {
  if (!behind.empty())
    return behind;
  // The ranks still in s (not past it). One that failed out of s (its
  // comm gave up waiting) noticed the hang; the dead and the stopped
  // caused it. Only when there are none does a rank that failed count.
  std::vector<const RankRing *> open, culprits;
  for (const RankRing *r : in)
    if (const FlightEntry *e = entryOf(r->ring, s);
        e != nullptr && reached(r->ring, *e) &&
        e->state != FlightState::Completed)
      open.push_back(r);
  for (const RankRing *r : open)
    if (r->fate.abnormal() && entryOf(r->ring, s)->state != FlightState::Failed)
      culprits.push_back(r);
  if (culprits.empty())
    for (const RankRing *r : open)
      if (r->fate.abnormal())
        culprits.push_back(r);
  return culprits;
}

/// "collective #s" as the call some rank recorded, when one did.
std::string hungCallText(const FlightEntry *call, uint64_t s,
                         const std::vector<std::string> &locs) {
  return call ? callText(*call, locs) : absl::StrCat("collective #", s);
}

/// Each culprit's clause: its fate, where it was, and what it was doing
/// against collective `s`.
std::vector<std::pair<int, std::string>>
culpritClauses(const std::vector<const RankRing *> &culprits, uint64_t s,
               const FlightEntry *call, const std::vector<std::string> &locs) {
  std::vector<std::pair<int, std::string>> said;
  for (const RankRing *r : culprits) {
    std::string p = absl::StrCat(r->fate.str(), " ",
                                 whereText(r->ring.step, r->ring.micro));
    if (reachedSeq(r->ring, s)) {
      absl::StrAppend(&p, ", while in ", callText(*entryOf(r->ring, s), locs));
    } else {
      if (std::string in = failedText(r->ring, locs); !in.empty())
        absl::StrAppend(&p, ", ", in);
      else if (const FlightEntry *last = lastReached(r->ring))
        absl::StrAppend(&p, ", after ", callText(*last, locs));
      else
        absl::StrAppend(&p, ", before its first collective");
      absl::StrAppend(&p, "; it never reached ", hungCallText(call, s, locs));
    }
    said.push_back({r->rank, p});
  }
  return said;
}

/// Where the ranks other than the culprits wait (in `s`, or past it in a
/// later collective the culprits never joined), and since when; who gave
/// up waiting there. Fills f.waiting; "" when nobody waits.
std::string waitsText(const std::vector<RankRing> &ranks, uint64_t s,
                      const std::vector<std::string> &locs, int64_t nowNs,
                      FlightFinding &f) {
  struct Wait {
    uint64_t seq;
    bool gaveUp;
    std::string fate; // a stopped or killed waiter's, else ""
    std::vector<int> ranks;
    int64_t ns; // the longest wait
    const FlightEntry *entry;
  };
  std::vector<Wait> waits;
  for (const RankRing &r : ranks) {
    if (std::find(f.culprits.begin(), f.culprits.end(), r.rank) !=
        f.culprits.end())
      continue;
    const FlightEntry *e = entryOf(r.ring, firstOpen(r.ring));
    if (e == nullptr || !reached(r.ring, *e))
      continue; // between collectives (its next one queued), or done
    bool gaveUp = e->state == FlightState::Failed;
    int64_t ns = (gaveUp ? e->endedNs : nowNs) - waitBeganNs(*e);
    // A waiter that is stopped or dead too says so (one that exited after
    // giving up needs no mention).
    std::string fate = r.fate.kind == RankFate::Kind::Stopped ||
                               r.fate.kind == RankFate::Kind::Signaled
                           ? r.fate.str()
                           : "";
    auto it = std::find_if(waits.begin(), waits.end(), [&](const Wait &w) {
      return w.seq == e->seq && w.gaveUp == gaveUp && w.fate == fate;
    });
    if (it == waits.end())
      waits.push_back({e->seq, gaveUp, fate, {r.rank}, ns, e});
    else {
      it->ranks.push_back(r.rank);
      it->ns = std::max(it->ns, ns);
    }
    f.waiting.push_back(r.rank);
  }
  std::sort(f.waiting.begin(), f.waiting.end());
  std::vector<std::string> waitParts;
  for (const Wait &w : waits) {
    std::string in =
        w.seq == s ? "in it" : absl::StrCat("in ", callText(*w.entry, locs));
    std::string who = RankListText(w.ranks);
    if (!w.fate.empty())
      absl::StrAppend(&who, ", which ", plural(w.fate, w.ranks.size()), ",");
    waitParts.push_back(
        w.gaveUp ? absl::StrCat(who, " gave up waiting ", in, " after ",
                                secondsText(w.ns))
                 : absl::StrCat(who, w.ranks.size() == 1 ? " waits " : " wait ",
                                in, " since ", secondsText(w.ns)));
  }
  return absl::StrJoin(waitParts, ", ");
}

/// The ranks of `call`'s group as rank `rank` sees it (the mesh's own
/// arithmetic, Comm.h); empty when the sizes do not fit the world.
std::vector<int> groupOf(const runtime::FlightCall &call, int rank,
                         int worldSize) {
  runtime::Mesh mesh;
  mesh.worldSize = worldSize;
  // The shard group's size decides the mesh; a replicate group of n ranks
  // leaves W / n to each shard group.
  mesh.shardSize = call.group == runtime::GroupKind::world ? worldSize
                   : call.group == runtime::GroupKind::shard
                       ? call.groupSize
                       : (call.groupSize > 0 ? worldSize / call.groupSize : 0);
  absl::StatusOr<runtime::Group> g = runtime::meshGroup(mesh, call.group, rank);
  if (!g.ok() || g->size() != call.groupSize)
    return {};
  return g->ranks;
}

/// The ranks outside `ranks` that the ranks in collective `s` (reached or
/// queued) wait for there, ascending.
std::vector<int> absentMembers(const std::vector<RankRing> &ranks, uint64_t s,
                               const FlightEntry *call, int worldSize) {
  std::vector<int> here, absent;
  for (const RankRing &r : ranks)
    here.push_back(r.rank);
  if (call == nullptr)
    return absent;
  for (const RankRing &r : ranks) {
    if (entryOf(r.ring, s) == nullptr)
      continue;
    for (int m : groupOf(call->call, r.rank, worldSize))
      if (std::find(here.begin(), here.end(), m) == here.end() &&
          std::find(absent.begin(), absent.end(), m) == absent.end())
        absent.push_back(m);
  }
  std::sort(absent.begin(), absent.end());
  return absent;
}

} // namespace

FlightFinding AnalyzeFlight(const std::vector<RankRing> &ranks,
                            const std::vector<std::string> &locs,
                            int64_t nowNs, const FlightWorld &world) {
  if (ranks.empty()) {
    FlightFinding f;
    f.text = "no rank's flight recorder to analyse";
    return f;
  }
  uint64_t s = UINT64_MAX, begunMax = 0;
  for (const RankRing &r : ranks) {
    s = std::min(s, firstOpen(r.ring));
    begunMax = std::max(begunMax, r.ring.begun);
  }
  if (s > begunMax)
    return noOpenCollective(ranks, locs, begunMax);
  FlightFinding f;
  f.seq = s;

  // Where each rank stands against collective s: one whose comm has only
  // queued it has not reached it.
  std::vector<const RankRing *> behind, in, all;
  for (const RankRing &r : ranks) {
    (reachedSeq(r.ring, s) || (r.ring.begun >= s && !r.ring.commStamps)
         ? in
         : behind)
        .push_back(&r);
    all.push_back(&r);
  }

  // A desync: the ranks that reached s, or queued it, disagree on what it
  // is.
  std::vector<CallVariant> variants = callVariants(all, s);
  if (variants.size() > 1) {
    describeMismatch(variants, s, locs, f);
    return f;
  }
  // The call itself, as some rank that reached it recorded it.
  const FlightEntry *call = variants.empty() ? nullptr : variants[0].first;

  std::vector<const RankRing *> culprits = hangCulprits(behind, in, s);
  for (const RankRing *r : culprits)
    f.culprits.push_back(r->rank);
  std::sort(f.culprits.begin(), f.culprits.end());
  std::vector<std::pair<int, std::string>> said =
      culpritClauses(culprits, s, call, locs);
  std::string wait = waitsText(ranks, s, locs, nowNs, f);
  if (said.empty() && world.ranksPerNode > 0)
    f.elsewhere = absentMembers(ranks, s, call, world.worldSize);
  if (!f.elsewhere.empty()) {
    // The collective waits for ranks another launcher watches: those of a
    // node whose ranks are all stopped, say, which no comm here can tell
    // from a slow one. Naming the node is what this side can know.
    std::vector<int> nodes;
    for (int r : f.elsewhere)
      if (nodes.empty() || nodes.back() != r / world.ranksPerNode)
        nodes.push_back(r / world.ranksPerNode);
    f.text = absl::StrCat(
        "no rank of this node is dead, stopped or behind, but ",
        hungCallText(call, s, locs), " did not complete: it waits for ",
        RankListText(f.elsewhere), " on ", RankListText(nodes, "node"),
        ", whose launcher", nodes.size() == 1 ? "" : "s",
        " can say why", wait.empty() ? "" : "; ", wait);
    return f;
  }
  if (said.empty()) {
    // No rank is dead or stopped, none is behind: a hang inside the
    // collective itself (a comm or the network).
    f.text = absl::StrCat("no rank is dead, stopped or behind, but ",
                          hungCallText(call, s, locs), " did not complete",
                          wait.empty() ? "" : "; ", wait);
    return f;
  }
  f.text = byRanks(said);
  if (!wait.empty())
    absl::StrAppend(&f.text, "; ", wait);
  return f;
}

namespace {

std::string nsOrNull(int64_t ns) { return ns > 0 ? absl::StrCat(ns) : "null"; }

} // namespace

std::string FlightJson(const RankRing &r, const std::vector<std::string> &locs,
                       int64_t nowNs) {
  const FlightSnapshot &s = r.ring;
  std::string out = absl::StrFormat(
      "{\n  \"rank\": %d,\n  \"pid\": %d,\n  \"fate\": %s,\n  \"phase\": "
      "%s,\n  \"capacity\": %d,\n  \"begun\": %d,\n  \"step\": %d,\n  "
      "\"micro_step\": %d,\n  \"steps_done\": %d,\n  \"progress_ns\": %d,\n  "
      "\"written_ns\": %d,\n  \"comm_stamps\": %s,\n  \"failed_in\": "
      "%s,\n  \"collectives\": [",
      r.rank, s.pid, runtime::JsonQuote(r.fate.str()),
      runtime::JsonQuote(runtime::rankPhaseName(s.phase)), s.capacity, s.begun,
      s.step, s.micro, s.stepsDone, s.progressNs, nowNs,
      s.commStamps ? "true" : "false",
      s.failedAt.opcode < 0 ? "null"
                            : runtime::JsonQuote(failedText(s, locs).substr(3)));
  for (size_t i = 0; i < s.entries.size(); ++i) {
    const FlightEntry &e = s.entries[i];
    std::string loc = locationText(e.call.loc, locs);
    absl::StrAppendFormat(
        &out,
        "%s\n    {\"seq\": %d, \"kind\": %s, \"group\": %s, \"group_size\": "
        "%d, \"dtype\": %s, \"bytes\": %d, \"bucket\": %d, \"location\": %s, "
        "\"step\": %d, \"micro_step\": %d, \"state\": %s, \"began_ns\": %s, "
        "\"started_ns\": %s, \"ended_ns\": %s}",
        i == 0 ? "" : ",", e.seq,
        runtime::JsonQuote(runtime::collectiveName(e.call.kind)),
        runtime::JsonQuote(runtime::groupKindName(e.call.group)),
        e.call.groupSize, runtime::JsonQuote(runtime::dtypeName(e.call.dtype)),
        e.call.bytes, e.call.bucket,
        loc.empty() ? "null" : runtime::JsonQuote(loc), e.call.step,
        e.call.micro, runtime::JsonQuote(runtime::flightStateName(e.state)),
        nsOrNull(e.beganNs), nsOrNull(e.startedNs), nsOrNull(e.endedNs));
  }
  absl::StrAppend(&out, s.entries.empty() ? "]\n}\n" : "\n  ]\n}\n");
  return out;
}

} // namespace md::mdrun
