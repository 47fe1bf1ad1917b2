//===- TraceRecorderTest.cpp - one rank's timeline as trace events --------===//
//
// runtime/core/TraceRecorder: slices, flows and the tracks' names written
// as Chrome trace events (checked field by field), the event limit, and a
// fragment written to a file.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/TraceRecorder.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "runtime/core/FlightRecorder.h"
#include "gtest/gtest.h"

namespace md::runtime {
namespace {

TEST(TraceRecorder, SlicesFlowsAndTracks) {
  TraceRecorder t;
  t.slice("all_gather (mlp.mdl:17:23)", "collective", TraceRecorder::Comm,
          1'000'500, 1'002'750, "\"bytes\": 4096, \"bucket\": 2");
  t.slice("matmul \"q\"", "kernel", TraceRecorder::Compute, 1'003'000,
          1'004'000);
  t.flow(TraceRecorder::Comm, 1'000'500, TraceRecorder::Compute, 1'003'000);
  EXPECT_EQ(t.events(), 4u);
  EXPECT_EQ(t.dropped(), 0u);
  EXPECT_EQ(
      t.fragment(1),
      "{\"ph\": \"M\", \"pid\": 1, \"name\": \"process_name\", \"args\": "
      "{\"name\": \"rank 1\"}},\n"
      "{\"ph\": \"M\", \"pid\": 1, \"name\": \"process_sort_index\", "
      "\"args\": {\"sort_index\": 1}},\n"
      "{\"ph\": \"M\", \"pid\": 1, \"tid\": 0, \"name\": \"thread_name\", "
      "\"args\": {\"name\": \"compute stream\"}},\n"
      "{\"ph\": \"M\", \"pid\": 1, \"tid\": 1, \"name\": \"thread_name\", "
      "\"args\": {\"name\": \"comm stream\"}},\n"
      "{\"ph\": \"M\", \"pid\": 1, \"tid\": 2, \"name\": \"thread_name\", "
      "\"args\": {\"name\": \"host\"}},\n"
      "{\"ph\": \"X\", \"pid\": 1, \"tid\": 1, \"ts\": 1000.500, \"dur\": "
      "2.250, \"cat\": \"collective\", \"name\": \"all_gather "
      "(mlp.mdl:17:23)\", \"args\": {\"bytes\": 4096, \"bucket\": 2}},\n"
      "{\"ph\": \"X\", \"pid\": 1, \"tid\": 0, \"ts\": 1003.000, \"dur\": "
      "1.000, \"cat\": \"kernel\", \"name\": \"matmul \\\"q\\\"\"},\n"
      "{\"ph\": \"s\", \"pid\": 1, \"tid\": 1, \"ts\": 1000.500, \"id\": 1, "
      "\"cat\": \"flow\", \"name\": \"event\"},\n"
      "{\"ph\": \"f\", \"pid\": 1, \"tid\": 0, \"ts\": 1003.000, \"id\": 1, "
      "\"cat\": \"flow\", \"name\": \"event\", \"bp\": \"e\"}");
}

TEST(TraceRecorder, KeepsAtMostItsLimit) {
  TraceRecorder t(3);
  for (int i = 0; i < 5; ++i)
    t.slice("k", "kernel", TraceRecorder::Compute, i, i + 1);
  t.flow(TraceRecorder::Comm, 0, TraceRecorder::Compute, 1);
  EXPECT_EQ(t.events(), 3u);
  EXPECT_EQ(t.dropped(), 3u);
  EXPECT_NE(t.fragment(0).find("\"3 events not kept (the trace's limit)\""),
            std::string::npos);
}

// What an instruction pays with a trace on: two clock reads, its name and
// one event. Printed; bounded loosely (a shared machine), while a system
// call or a copy of the whole trace per event would fail it.
TEST(TraceRecorder, CostsLittlePerEvent) {
  constexpr int kEvents = 200000;
  TraceRecorder t(kEvents);
  int64_t t0 = MonotonicNs();
  for (int i = 0; i < kEvents; ++i) {
    int64_t b = MonotonicNs();
    t.slice(std::string("matmul (models/gpt.mdl:41:17)"), "kernel",
            TraceRecorder::Compute, b, MonotonicNs());
  }
  double ns = static_cast<double>(MonotonicNs() - t0) / kEvents;
  std::printf("trace: %.1f ns per traced instruction\n", ns);
  EXPECT_LT(ns, 10000.0);
  EXPECT_EQ(t.events(), static_cast<size_t>(kEvents));
}

TEST(TraceRecorder, WritesItsFragment) {
  TraceRecorder t;
  t.slice("step 1", "step", TraceRecorder::Host, 0, 5000);
  std::string path = ::testing::TempDir() + "/trace-fragment.part";
  ASSERT_TRUE(t.writeFragment(path, 0).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), t.fragment(0));
  EXPECT_FALSE(t.writeFragment("/nonexistent-dir/x.part", 0).ok());
}

} // namespace
} // namespace md::runtime
