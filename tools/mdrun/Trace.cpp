//===- Trace.cpp - mdrun --trace: the ranks' timelines in one file --------===//
//
// Fragments joined into one trace-event file, and a rank's fragment written
// when the launcher stops it (Trace.h).
//
//===----------------------------------------------------------------------===//

#include "tools/mdrun/Trace.h"
#include "tools/mdrun/Outputs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "runtime/exec/Safetensors.h"

namespace md::mdrun {

namespace {
// The self-pipe between the SIGTERM handler and TraceOnTerm's thread; one
// TraceOnTerm at a time (one per rank process).
int gTermPipe[2] = {-1, -1};
extern "C" void onTerm(int) {
  int saved = errno;
  char c = 't';
  (void)!::write(gTermPipe[1], &c, 1);
  errno = saved;
}
} // namespace

absl::Status PrepareTrace(const std::string &file) {
  if (absl::Status s = MakeParentDirectories(file, "--trace"); !s.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": cannot write the trace: ", s.message()));
  std::string probe = absl::StrCat(file, ".tmp");
  std::FILE *f = std::fopen(probe.c_str(), "w");
  if (f == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": cannot write the trace"));
  std::fclose(f);
  std::remove(probe.c_str());
  return absl::OkStatus();
}

TraceOnTerm::TraceOnTerm(const runtime::TraceRecorder &trace, std::string path,
                         int rank)
    : trace_(trace), path_(std::move(path)), rank_(rank) {
  if (::pipe2(gTermPipe, O_CLOEXEC) != 0)
    return; // no writer: SIGTERM ends the rank as before
  writer_ = std::thread([this] {
    char c = 0;
    ssize_t n;
    do
      n = ::read(gTermPipe[0], &c, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1 || c != 't')
      return; // the run ended: the caller writes the fragment
    (void)trace_.writeFragment(path_, rank_);
    // End as SIGTERM would have.
    ::signal(SIGTERM, SIG_DFL);
    ::raise(SIGTERM);
  });
  struct sigaction sa {};
  sa.sa_handler = onTerm;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, &previous_);
}

TraceOnTerm::~TraceOnTerm() {
  if (!writer_.joinable())
    return;
  ::sigaction(SIGTERM, &previous_, nullptr);
  char c = 'q';
  (void)!::write(gTermPipe[1], &c, 1);
  writer_.join();
  ::close(gTermPipe[0]);
  ::close(gTermPipe[1]);
  gTermPipe[0] = gTermPipe[1] = -1;
}

std::string TracePartPath(const std::string &file, int rank) {
  return absl::StrCat(file, ".rank", rank, ".part");
}

absl::Status JoinTrace(const std::string &file, const std::vector<int> &ranks,
                       const std::string &path, std::vector<int> &missing) {
  std::string tmp = absl::StrCat(path, ".tmp");
  std::ofstream out(tmp, std::ios::trunc);
  if (!out)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot write the trace"));
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (int r : ranks) {
    std::string part = TracePartPath(file, r);
    std::ifstream in(part);
    if (!in) {
      missing.push_back(r);
      continue;
    }
    std::stringstream text;
    text << in.rdbuf();
    if (!first)
      out << ",\n";
    out << text.str();
    first = false;
    in.close();
    std::remove(part.c_str());
  }
  out << "\n]}\n";
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot write the trace"));
  }
  return absl::OkStatus();
}

} // namespace md::mdrun
