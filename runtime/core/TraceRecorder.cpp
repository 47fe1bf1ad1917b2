//===- TraceRecorder.cpp - one rank's timeline for `mdrun --trace` --------===//
//
// Events kept in memory and written as Chrome trace-event JSON
// (TraceRecorder.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/TraceRecorder.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/EnumNames.h"
#include "runtime/core/Json.h"

namespace md::runtime {

namespace {

/// Nanoseconds as the format's microseconds, to the nanosecond.
std::string micros(int64_t ns) {
  return absl::StrFormat("%d.%03d", ns / 1000, ns % 1000);
}

// The trace's thread names, in Track order.
constexpr const char *kTrackNames[] = {"compute stream", "comm stream", "host"};
static_assert(namesEveryValue(kTrackNames, TraceRecorder::Host));

/// A track's thread name; anything past the table is the host's.
const char *trackName(int track) {
  return enumName(kTrackNames, track, "host");
}

} // namespace

TraceRecorder::TraceRecorder(size_t maxEvents) : max_(maxEvents) {}

bool TraceRecorder::room() {
  if (events_.size() < max_)
    return true;
  ++dropped_;
  return false;
}

void TraceRecorder::slice(std::string name, const char *cat, int track,
                          int64_t beginNs, int64_t endNs, std::string args) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!room())
    return;
  events_.push_back(
      {'X', track, beginNs, endNs, 0, cat, std::move(name), std::move(args)});
}

void TraceRecorder::flow(int fromTrack, int64_t fromNs, int toTrack,
                         int64_t toNs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() + 2 > max_) {
    ++dropped_;
    return;
  }
  uint64_t id = nextFlow_++;
  events_.push_back({'s', fromTrack, fromNs, fromNs, id, "flow", "event", ""});
  events_.push_back({'f', toTrack, toNs, toNs, id, "flow", "event", ""});
}

std::string TraceRecorder::fragment(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = absl::StrFormat(
      "{\"ph\": \"M\", \"pid\": %d, \"name\": \"process_name\", \"args\": "
      "{\"name\": \"rank %d\"}},\n{\"ph\": \"M\", \"pid\": %d, \"name\": "
      "\"process_sort_index\", \"args\": {\"sort_index\": %d}}",
      rank, rank, rank, rank);
  for (int t : {Compute, Comm, Host})
    absl::StrAppendFormat(&out,
                          ",\n{\"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                          "\"name\": \"thread_name\", \"args\": {\"name\": "
                          "\"%s\"}}",
                          rank, t, trackName(t));
  for (const Event &e : events_) {
    if (e.phase == 'X') {
      absl::StrAppendFormat(
          &out,
          ",\n{\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %s, \"dur\": "
          "%s, \"cat\": \"%s\", \"name\": %s%s}",
          rank, e.track, micros(e.beginNs), micros(e.endNs - e.beginNs), e.cat,
          JsonQuote(e.name),
          e.args.empty() ? "" : absl::StrCat(", \"args\": {", e.args, "}"));
    } else {
      // A flow's start binds to the slice around it, its end to the slice
      // that begins there ("bp": "e").
      absl::StrAppendFormat(&out,
                            ",\n{\"ph\": \"%c\", \"pid\": %d, \"tid\": %d, "
                            "\"ts\": %s, \"id\": %d, \"cat\": \"flow\", "
                            "\"name\": \"event\"%s}",
                            e.phase, rank, e.track, micros(e.beginNs), e.id,
                            e.phase == 'f' ? ", \"bp\": \"e\"" : "");
    }
  }
  if (dropped_ > 0)
    absl::StrAppendFormat(&out,
                          ",\n{\"ph\": \"M\", \"pid\": %d, \"name\": "
                          "\"process_labels\", \"args\": {\"labels\": \"%d "
                          "events not kept (the trace's limit)\"}}",
                          rank, dropped_);
  return out;
}

absl::Status TraceRecorder::writeFragment(const std::string &path,
                                          int rank) const {
  std::string text = fragment(rank);
  std::FILE *f = std::fopen(path.c_str(), "w");
  if (f == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot write the trace"));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok)
    return absl::InternalError(absl::StrCat(path, ": cannot write the trace"));
  return absl::OkStatus();
}

} // namespace md::runtime
