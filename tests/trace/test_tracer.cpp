// test_tracer.cpp - the tracer records what it is told with the right fields, records nothing when disabled,
// keeps every event from concurrent threads, and writes valid Chrome trace JSON.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/trace/trace.h"
#include "runtime/trace/trace_analysis.h"

using namespace ddp;
using namespace ddp::trace;
using json = nlohmann::json;

namespace {

// Finds the one event named `name` in a parsed trace document.
const json& event_named(const json& doc, const std::string& name) {
  for (const json& e : doc["traceEvents"])
    if (e.value("name", "") == name) return e;
  throw std::runtime_error("no event named " + name);
}

// Turns the global tracer on for one test and restores it (and clears its events) afterwards.
struct GlobalTracingOn {
  GlobalTracingOn() {
    global_tracer().clear();
    global_tracer().set_enabled(true);
  }
  ~GlobalTracingOn() {
    global_tracer().set_enabled(false);
    global_tracer().clear();
  }
};

}  // namespace

TEST(Tracer, ChromeJsonHasEveryField) {
  Tracer t;
  t.set_rank(3);
  t.set_enabled(true);
  t.complete("allreduce bucket 2", "comm", kCommLane, 1500, 4250, {{"bucket", 2}, {"bytes", 4096}});
  t.instant("ready fc.weight", "ddp", kComputeLane);
  t.begin_iteration(7);
  t.end_iteration(7);
  Lane gpu = t.add_lane("cuda compute stream");
  t.complete("matmul", "forward", gpu, 10, 20);

  json doc = json::parse(t.chrome_trace_json());
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  EXPECT_EQ(doc["otherData"]["rank"], 3);
  EXPECT_EQ(doc["otherData"]["start_unix_us"], t.start_unix_us());
  EXPECT_GT(t.start_unix_us(), 1'600'000'000'000'000LL);  // after 2020: it is a wall-clock time

  const json& x = event_named(doc, "allreduce bucket 2");
  EXPECT_EQ(x["ph"], "X");
  EXPECT_EQ(x["cat"], "comm");
  EXPECT_DOUBLE_EQ(x["ts"].get<double>(), 1.5);  // ns -> us
  EXPECT_DOUBLE_EQ(x["dur"].get<double>(), 2.75);
  EXPECT_EQ(x["pid"], 3);
  EXPECT_EQ(x["tid"], kCommLane);
  EXPECT_EQ(x["args"]["bucket"], 2);
  EXPECT_EQ(x["args"]["bytes"], 4096);

  const json& i = event_named(doc, "ready fc.weight");
  EXPECT_EQ(i["ph"], "i");
  EXPECT_EQ(i["s"], "t");
  EXPECT_EQ(i["tid"], kComputeLane);
  EXPECT_FALSE(i.contains("dur"));

  const json& it = event_named(doc, "iteration 7");
  EXPECT_EQ(it["cat"], "iteration");
  EXPECT_EQ(it["tid"], kIterationLane);
  EXPECT_EQ(it["args"]["iteration"], 7);
  EXPECT_GE(it["dur"].get<double>(), 0.0);

  EXPECT_EQ(event_named(doc, "matmul")["tid"], gpu);

  std::map<int, std::string> lanes;
  std::string process;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "M") continue;
    EXPECT_EQ(e["pid"], 3);
    if (e["name"] == "thread_name") lanes[e["tid"].get<int>()] = e["args"]["name"];
    if (e["name"] == "process_name") process = e["args"]["name"];
  }
  EXPECT_EQ(process, "rank 3");
  EXPECT_EQ(lanes[kComputeLane], "compute");
  EXPECT_EQ(lanes[kCommLane], "comm");
  EXPECT_EQ(lanes[kIterationLane], "iterations");
  EXPECT_EQ(lanes[gpu], "cuda compute stream");
}

TEST(Tracer, DisabledRecordsNothing) {
  Tracer t;
  EXPECT_FALSE(t.enabled());
  t.complete("a", "forward", kComputeLane, 0, 10);
  t.instant("b", "ddp", kComputeLane);
  t.begin_iteration(0);
  t.end_iteration(0);
  EXPECT_TRUE(t.events().empty());

  global_tracer().set_enabled(false);
  global_tracer().clear();
  EXPECT_FALSE(tracing_enabled());
  {
    TraceScope s("forward", "linear");
    s.arg("n", 5);
    trace_instant("finalize", "ddp");
  }
  EXPECT_TRUE(global_tracer().events().empty());
  // Enabling then disabling again: only what happened while on is kept.
  global_tracer().set_enabled(true);
  { TraceScope s("backward", "kept"); }
  global_tracer().set_enabled(false);
  { TraceScope s("backward", "dropped"); }
  auto events = global_tracer().events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "kept");
  global_tracer().clear();
}

TEST(Tracer, TraceScopeTimesItsScopeWithArgs) {
  GlobalTracingOn on;
  EXPECT_TRUE(tracing_enabled());
  {
    TraceScope outer("backward", "outer");
    outer.arg("layer", 4).arg("bytes", 1 << 20);
    {
      TraceScope inner("comm", "allreduce bucket 0", kCommLane);
      inner.arg("bucket", 0);
    }
    trace_instant("ready w", "ddp", kComputeLane, {{"index", 9}});
  }
  auto events = global_tracer().events();
  ASSERT_EQ(events.size(), 3u);
  const Event* outer = nullptr;
  const Event* inner = nullptr;
  const Event* ready = nullptr;
  for (const Event& e : events) {
    if (e.name == "outer") outer = &e;
    if (e.name == "allreduce bucket 0") inner = &e;
    if (e.name == "ready w") ready = &e;
  }
  ASSERT_TRUE(outer && inner && ready);
  EXPECT_EQ(outer->phase, 'X');
  EXPECT_STREQ(outer->category, "backward");
  EXPECT_EQ(outer->num_args, 2);
  EXPECT_STREQ(outer->args[1].key, "bytes");
  EXPECT_EQ(outer->args[1].value, 1 << 20);
  EXPECT_EQ(inner->lane, kCommLane);
  // The inner scope lies inside the outer one; the instant too.
  EXPECT_LE(outer->ts_ns, inner->ts_ns);
  EXPECT_GE(outer->ts_ns + outer->dur_ns, inner->ts_ns + inner->dur_ns);
  EXPECT_EQ(ready->phase, 'i');
  EXPECT_GE(ready->ts_ns, inner->ts_ns + inner->dur_ns);
  EXPECT_EQ(ready->args[0].value, 9);
  // Sorted by start time.
  for (size_t i = 1; i < events.size(); ++i) EXPECT_LE(events[i - 1].ts_ns, events[i].ts_ns);
}

TEST(Tracer, ConcurrentThreadsLoseNoEventsWhileAReaderSnapshots) {
  Tracer t;
  t.set_enabled(true);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5000;  // several 1024-event chunks per thread
  std::atomic<bool> go{false};
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kPerThread; ++i)
        t.complete("op", th % 2 ? "comm" : "backward", th % 2 ? kCommLane : kComputeLane, i, i + 1,
                   {{"thread", th}, {"seq", i}});
      done.fetch_add(1);
    });
  }
  go.store(true);
  // Snapshots taken while writers run must be consistent prefixes of each thread's sequence.
  size_t snapshots = 0;
  while (done.load() < kThreads || snapshots == 0) {
    std::vector<int> next(kThreads, 0);
    auto evs = t.events();
    std::vector<std::vector<int>> seen(kThreads);
    for (const Event& e : evs) {
      ASSERT_EQ(e.num_args, 2);
      seen[static_cast<size_t>(e.args[0].value)].push_back(static_cast<int>(e.args[1].value));
    }
    for (auto& s : seen) {
      std::sort(s.begin(), s.end());
      for (size_t i = 0; i < s.size(); ++i)
        ASSERT_EQ(s[i], static_cast<int>(i)) << "a hole in a thread's events";
    }
    ++snapshots;
  }
  for (auto& th : threads) th.join();
  auto evs = t.events();
  ASSERT_EQ(evs.size(), size_t{kThreads} * kPerThread);
  std::vector<int> count(kThreads, 0);
  for (const Event& e : evs) {
    EXPECT_EQ(e.name, "op");
    ++count[static_cast<size_t>(e.args[0].value)];
  }
  for (int c : count) EXPECT_EQ(c, kPerThread);
}

TEST(Tracer, ClearForgetsEarlierEventsOnly) {
  Tracer t;
  t.set_enabled(true);
  for (int i = 0; i < 3000; ++i) t.complete("old", "forward", kComputeLane, i, i + 1);
  t.clear();
  t.complete("new", "forward", kComputeLane, 5, 6);
  std::thread other([&] { t.instant("from another thread", "ddp", kComputeLane); });
  other.join();
  auto evs = t.events();
  ASSERT_EQ(evs.size(), 2u);
  EXPECT_EQ(evs[0].name, "new");
  EXPECT_EQ(evs[1].name, "from another thread");
}

TEST(Tracer, MisuseIsReportedByName) {
  Tracer t;
  t.set_enabled(true);
  try {
    t.complete("k", "forward", kComputeLane, 100, 50);
    FAIL();
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("trace event 'k': end 50 ns is before begin 100 ns"),
              std::string::npos)
        << e.what();
  }
  t.begin_iteration(3);
  try {
    t.end_iteration(4);
    FAIL();
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("end_iteration(4) but the open iteration is 3"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      t.complete("many", "comm", kCommLane, 0, 1, {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}, {"e", 5}}),
      ddp::Error);
  EXPECT_THROW(t.add_lane(""), ddp::Error);
  // An end whose begin happened while tracing was off is ignored, not an error.
  Tracer off;
  off.begin_iteration(1);
  off.set_enabled(true);
  EXPECT_NO_THROW(off.end_iteration(1));
  EXPECT_TRUE(off.events().empty());
}

TEST(Tracer, WriteAndLoadRoundTrip) {
  std::string dir = ::testing::TempDir() + "ddp_trace_rt_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  Tracer t;
  t.set_rank(1);
  t.set_enabled(true);
  t.complete("fwd", "forward", kComputeLane, 0, 2000);
  t.complete("allreduce bucket 0", "comm", kCommLane, 1000, 3000, {{"bucket", 0}, {"bytes", 64}});
  t.write_chrome_trace(dir + "/rank1.json");
  LoadedTrace loaded = load_chrome_trace(dir + "/rank1.json");
  ASSERT_EQ(loaded.events.size(), 2u);
  EXPECT_EQ(loaded.process_names[1], "rank 1");
  EXPECT_EQ(loaded.events[1].name, "allreduce bucket 0");
  EXPECT_DOUBLE_EQ(loaded.events[1].dur_us, 2.0);
  EXPECT_EQ(loaded.events[1].args.at("bytes"), 64);
  EXPECT_FALSE(std::filesystem::exists(dir + "/rank1.json.tmp." + std::to_string(::getpid())));
  try {
    t.write_chrome_trace(dir + "/missing/x.json");
    FAIL();
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write trace '" + dir + "/missing/x.json'"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Tracer, TextArgumentsAreWrittenAsStringsAndTooManyAreRefusedByName) {
  Tracer t;
  t.set_enabled(true);
  t.complete("allreduce bucket 0", "comm", kCommLane, 10, 20, {{"bucket", 0}},
             {{"first_param", "fc2.bias"}, {"last_param", "fc1.weight \"quoted\""}});
  const std::string json = t.chrome_trace_json();
  EXPECT_NE(json.find(R"("args":{"bucket":0,"first_param":"fc2.bias","last_param":"fc1.weight \"quoted\""})"),
            std::string::npos)
      << json;
  try {
    t.complete("x", "comm", kCommLane, 0, 1, {}, {{"a", "1"}, {"b", "2"}, {"c", "3"}});
    FAIL() << "three text arguments accepted";
  } catch (const ddp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("trace event 'x': 0 arguments and 3 text arguments"), std::string::npos)
        << e.what();
  }
}
