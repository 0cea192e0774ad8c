// test_flight_recorder.cpp - the flight recorder of the CPU groups (flight_recorder.h): the ring keeps the last
// N collectives in order across wrap-around, with their fields, states and timestamps; a rank that skips a
// collective leaves, on the ranks that waited, a failure dump showing that collective failed and the earlier
// ones completed; DDP_FLIGHT_RECORDER_ENTRIES=0 records nothing, a bad value is refused by name; the dump is
// JSON with the documented fields (schema 2: why it was written, the bucket, its bytes and parameters); a rank
// that finished leaves an "exit" record; SIGUSR1 makes every group write its record; the progress page a
// launcher watches counts issued and ended collectives; recording allocates nothing per collective. Worlds 1-3,
// gloo, shm and hier.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/train.h"
#include "runtime/core/error.h"
#include "runtime/distributed/flight_progress.h"
#include "runtime/distributed/flight_recorder.h"
#include "runtime/distributed/local_world.h"
#include "runtime/distributed/process_group_factory.h"
#include "tests/support/collective_checks.h"

using namespace ddp;
using namespace ddp::dist;
using namespace std::chrono_literals;

// Counts operator new on threads that ask for it (the allocation test); everything else passes through to
// malloc/free. GCC sees free() of what it thinks is operator new's memory; that pairing is exactly ours.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace {
thread_local bool t_count_allocations = false;
thread_local int64_t t_allocations = 0;
}  // namespace
void* operator new(std::size_t n) {
  if (t_count_allocations) ++t_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

// Sets (or unsets, with nullopt) an environment variable for the scope of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value->c_str(), 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::filesystem::path fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("ddp_flight_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  EXPECT_TRUE(f.good()) << "no file " << p;
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

ProcessGroupOptions short_timeout() {
  ProcessGroupOptions o;
  o.timeout = 1s;
  o.debug_collectives = false;
  return o;
}

class FlightRecorderBackends : public ::testing::TestWithParam<std::string> {};

// The ring keeps the last N collectives in issue order after wrapping around, each completed, with its op,
// dtype, count and root, and ordered timestamps.
TEST_P(FlightRecorderBackends, RingKeepsTheLastNInOrderAcrossWrapAround) {
  for (int world : {1, 2, 3}) {
    for (int capacity : {1, 4, 5}) {
      ScopedEnv entries("DDP_FLIGHT_RECORDER_ENTRIES", std::to_string(capacity));
      const int total = 2 * capacity + 3;  // wraps twice and a bit
      run_threads(
          world,
          [&](int rank, ProcessGroup& pg) {
            std::vector<float> buf(7, 1.0f);
            std::vector<int32_t> ints(3, rank);
            for (int i = 0; i < total; ++i) {
              if (i % 3 == 0) pg.allreduce(comm_buffer(buf.data(), 7))->wait();
              if (i % 3 == 1) pg.broadcast(comm_buffer(ints.data(), 3), world - 1)->wait();
              if (i % 3 == 2) pg.barrier()->wait();
            }
            const FlightRecorder* fr = pg.flight_recorder();
            ASSERT_NE(fr, nullptr);
            EXPECT_EQ(fr->capacity(), static_cast<size_t>(capacity));
            auto es = fr->entries();
            ASSERT_EQ(es.size(), static_cast<size_t>(capacity)) << "world " << world;
            for (size_t k = 0; k < es.size(); ++k) {
              const FlightEntry& e = es[k];
              const uint64_t seq = total - capacity + k;
              EXPECT_EQ(e.seq, seq);
              EXPECT_EQ(e.state, FlightState::Completed);
              EXPECT_GT(e.issued_ns, 0);
              EXPECT_LE(e.issued_ns, e.started_ns);
              EXPECT_LE(e.started_ns, e.ended_ns);
              EXPECT_STREQ(e.issuer, "user");
              if (seq % 3 == 0) {
                EXPECT_EQ(e.kind, CollectiveKind::Allreduce);
                EXPECT_EQ(e.count, 7);
                EXPECT_EQ(e.dtype, DType::F32);
              } else if (seq % 3 == 1) {
                EXPECT_EQ(e.kind, CollectiveKind::Broadcast);
                EXPECT_EQ(e.count, 3);
                EXPECT_EQ(e.dtype, DType::I32);
                EXPECT_EQ(e.root, world - 1);
              } else {
                EXPECT_EQ(e.kind, CollectiveKind::Barrier);
              }
            }
          },
          short_timeout(), GetParam());
    }
  }
}

// Rank 1 skips allreduce #1: the ranks that waited write flight.rank<R>.json when it times out, showing #0
// completed and #1 failed with the reason; rank 1's own record shows #0 completed and nothing after.
TEST_P(FlightRecorderBackends, SkippedCollectiveIsDumpedAsFailedByTheWaitingRanks) {
  for (int world : {2, 3}) {
    const auto dir = fresh_dir(GetParam() + std::to_string(world));
    ScopedEnv where("DDP_FLIGHT_RECORDER_DIR", dir.string());
    ScopedEnv entries("DDP_FLIGHT_RECORDER_ENTRIES", std::nullopt);
    run_threads(
        world,
        [&](int rank, ProcessGroup& pg, Store& store) {
          std::vector<float> buf(16, 1.0f);
          pg.allreduce(comm_buffer(buf.data(), 16))->wait();  // #0: everyone
          std::vector<std::string> others;
          for (int r = 0; r < world; ++r)
            if (r != 1) others.push_back("done/" + std::to_string(r));
          if (rank == 1) {
            store.wait(others, 30s);  // skips #1, stays alive until the others failed
            auto es = pg.flight_recorder()->entries();
            ASSERT_EQ(es.size(), 1u);
            EXPECT_EQ(es[0].state, FlightState::Completed);
            EXPECT_FALSE(std::filesystem::exists(dir / "flight.rank1.json"));  // written when it is destroyed
            return;
          }
          std::string err = ddp::testing::error_of(pg.allreduce(comm_buffer(buf.data(), 16)));
          EXPECT_FALSE(err.empty());
          store.set("done/" + std::to_string(rank), "1");
        },
        short_timeout(), GetParam());
    // The ranks that waited wrote a failure record (hier's inner groups name theirs after the group); the one
    // that skipped left its record when its group was destroyed: "exit", one collective, no failure.
    {
      auto doc = read_json(dir / "flight.rank1.json");
      EXPECT_EQ(doc["reason"], "exit");
      EXPECT_TRUE(doc["failure"].is_null());
      EXPECT_EQ(doc["recorded"], 1);
      EXPECT_EQ(doc["entries"].size(), 1u);
    }
    for (int r = 0; r < world; ++r) {
      if (r == 1) continue;
      auto doc = read_json(dir / ("flight.rank" + std::to_string(r) + ".json"));
      EXPECT_EQ(doc["version"], 2);
      EXPECT_EQ(doc["reason"], "failure");
      EXPECT_EQ(doc["rank"], r);
      EXPECT_EQ(doc["world_size"], world);
      EXPECT_EQ(doc["backend"], GetParam());
      ASSERT_TRUE(doc["failure"].is_string());
      const auto& es = doc["entries"];
      ASSERT_EQ(es.size(), 2u) << doc.dump();
      EXPECT_EQ(es[0]["seq"], 0);
      EXPECT_EQ(es[0]["state"], "completed");
      EXPECT_TRUE(es[0]["duration_ns"].is_number());
      EXPECT_EQ(es[1]["seq"], 1);
      EXPECT_EQ(es[1]["state"], "failed");
      EXPECT_EQ(es[1]["op"], "allreduce");
      EXPECT_TRUE(es[1]["started_ns"].is_number());
    }
    std::filesystem::remove_all(dir);
  }
}

// A collective mismatch (debug mode: rank 1 all-reduces another size) fails the group on both ranks, and each
// writes its record with the mismatched collective failed and the reason.
TEST_P(FlightRecorderBackends, MismatchIsDumpedByEveryRank) {
  const auto dir = fresh_dir("mismatch" + GetParam());
  ScopedEnv where("DDP_FLIGHT_RECORDER_DIR", dir.string());
  ScopedEnv entries("DDP_FLIGHT_RECORDER_ENTRIES", std::nullopt);
  ProcessGroupOptions options = short_timeout();
  options.timeout = 10s;
  options.debug_collectives = true;
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg) {
        std::vector<float> buf(16, 1.0f);
        pg.barrier()->wait();
        const std::string err = ddp::testing::error_of(pg.allreduce(comm_buffer(buf.data(), rank == 0 ? 16 : 8)));
        EXPECT_NE(err.find("mismatch"), std::string::npos) << err;
      },
      options, GetParam());
  for (int r = 0; r < 2; ++r) {
    auto doc = read_json(dir / ("flight.rank" + std::to_string(r) + ".json"));
    ASSERT_EQ(doc["entries"].size(), 2u) << doc.dump();
    EXPECT_EQ(doc["entries"][0]["state"], "completed");
    EXPECT_EQ(doc["entries"][1]["state"], "failed");
    EXPECT_EQ(doc["entries"][1]["count"], r == 0 ? 16 : 8);
    EXPECT_NE(doc["failure"].get<std::string>().find("mismatch"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

// DDP_FLIGHT_RECORDER_ENTRIES=0 records nothing and writes no failure dump, even with the directory set.
TEST_P(FlightRecorderBackends, ZeroEntriesRecordsNothing) {
  const auto dir = fresh_dir("off" + GetParam());
  ScopedEnv where("DDP_FLIGHT_RECORDER_DIR", dir.string());
  ScopedEnv entries("DDP_FLIGHT_RECORDER_ENTRIES", "0");
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg, Store& store) {
        std::vector<float> buf(4, 1.0f);
        pg.allreduce(comm_buffer(buf.data(), 4))->wait();
        if (rank == 1) {
          store.wait({"done/0"}, 30s);
        } else {
          EXPECT_FALSE(ddp::testing::error_of(pg.allreduce(comm_buffer(buf.data(), 4))).empty());
          store.set("done/0", "1");
        }
        EXPECT_EQ(pg.flight_recorder()->capacity(), 0u);
        EXPECT_TRUE(pg.flight_recorder()->entries().empty());
      },
      short_timeout(), GetParam());
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

// A second top-level group of the same rank (ZeRO-3's gather group) writes its own file: the first group keeps
// flight.rank<R>.json, the second flight.rank<R>.<name>.json. Before, both wrote flight.rank<R>.json and the
// later dump replaced the other's record (the gather group's failure was lost).
TEST_P(FlightRecorderBackends, ASecondGroupOfTheSameRankWritesItsOwnFile) {
  const auto dir = fresh_dir("second" + GetParam());
  ScopedEnv where("DDP_FLIGHT_RECORDER_DIR", dir.string());
  ScopedEnv entries("DDP_FLIGHT_RECORDER_ENTRIES", std::nullopt);
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg, Store& store) {
        DistEnv env;
        env.rank = rank;
        env.world_size = 2;
        ProcessGroupOptions o = short_timeout();
        o.name = "gather";
        auto second = new_process_group(env, store, GetParam(), o);
        std::vector<float> buf(4, 1.0f);
        pg.allreduce(comm_buffer(buf.data(), 4))->wait();
        second->allgather(comm_buffer(buf.data(), 2), comm_buffer(buf.data(), 4))->wait();
        second->allgather(comm_buffer(buf.data(), 2), comm_buffer(buf.data(), 4))->wait();
        pg.barrier()->wait();
        if (rank == 0) dump_flight_records_to_dirs("demand");
        pg.barrier()->wait();
      },
      short_timeout(), GetParam());
  for (int r = 0; r < 1; ++r) {
    auto first = read_json(dir / ("flight.rank" + std::to_string(r) + ".json"));
    auto gather = read_json(dir / ("flight.rank" + std::to_string(r) + ".gather.json"));
    EXPECT_EQ(first["entries"][0]["op"], "allreduce") << first.dump();
    ASSERT_EQ(gather["entries"].size(), 2u) << gather.dump();
    EXPECT_EQ(gather["entries"][0]["op"], "allgather");
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Backends, FlightRecorderBackends, ::testing::Values("gloo", "shm", "hier"));

// A bad DDP_FLIGHT_RECORDER_ENTRIES is refused when the group is made, naming the variable.
TEST(FlightRecorder, BadEntriesValueIsRefusedByName) {
  for (const char* bad : {"abc", "-1", "1.5", "", "10000001", "99999999999", "12x"}) {
    ScopedEnv entries("DDP_FLIGHT_RECORDER_ENTRIES", std::string(bad));
    std::string err;
    try {
      run_threads(1, [](int, ProcessGroup&) {}, short_timeout(), "shm");
    } catch (const Error& e) {
      err = e.what();
    }
    EXPECT_NE(err.find("DDP_FLIGHT_RECORDER_ENTRIES='" + std::string(bad) + "'"), std::string::npos)
        << bad << ": " << err;
  }
  for (const char* good : {"0", "1", "2000", "10000000"}) {
    ScopedEnv entries("DDP_FLIGHT_RECORDER_ENTRIES", std::string(good));
    EXPECT_EQ(flight_recorder_entries_from_env(), static_cast<size_t>(std::stoull(good)));
  }
  ScopedEnv unset("DDP_FLIGHT_RECORDER_ENTRIES", std::nullopt);
  EXPECT_EQ(flight_recorder_entries_from_env(), 2000u);
}

// The on-demand dump (all live groups of the process) parses as JSON with every documented field, and carries
// the issuer tag and the training iteration.
TEST(FlightRecorder, DumpHasTheDocumentedFields) {
  const auto dir = fresh_dir("dump");
  ScopedEnv entries("DDP_FLIGHT_RECORDER_ENTRIES", "8");
  set_flight_iteration(41);
  run_threads(
      2,
      [&](int rank, ProcessGroup& pg, Store& store) {
        std::vector<double> buf(5, 1.0);
        {
          FlightIssuer who("ddp bucket", 3, 40, "fc1.weight .. fc2.bias");
          pg.allreduce(comm_buffer(buf.data(), 5), ReduceOp::Max)->wait();
        }
        pg.barrier()->wait();
        store.set("ready/" + std::to_string(rank), "1");
        if (rank == 0) {
          store.wait({"ready/0", "ready/1"}, 30s);
          dump_flight_record((dir / "all.json").string());
          pg.flight_recorder()->dump((dir / "one.json").string());
          store.set("dumped", "1");
        } else {
          store.wait({"dumped"}, 30s);
        }
      },
      short_timeout(), "gloo");
  set_flight_iteration(-1);
  auto all = read_json(dir / "all.json");
  EXPECT_EQ(all["version"], 2);
  EXPECT_EQ(all["reason"], "demand");
  EXPECT_EQ(all["pid"], getpid());
  ASSERT_GE(all["groups"].size(), 2u);  // both ranks' groups live in this process
  auto one = read_json(dir / "one.json");
  for (const char* k : {"version", "group", "backend", "rank", "world_size", "global_rank", "pid", "host",
                        "reason", "dumped_unix_ns", "capacity", "clock", "recorded", "failure", "entries"})
    EXPECT_TRUE(one.contains(k)) << k;
  EXPECT_EQ(one["rank"], 0);
  EXPECT_EQ(one["reason"], "demand");
  EXPECT_EQ(one["pid"], getpid());
  EXPECT_GT(one["dumped_unix_ns"].get<int64_t>(), one["clock"]["unix_ns"].get<int64_t>());
  EXPECT_EQ(one["capacity"], 8);
  EXPECT_EQ(one["recorded"], 2);
  EXPECT_TRUE(one["failure"].is_null());
  EXPECT_TRUE(one["clock"]["steady_ns"].is_number());
  EXPECT_TRUE(one["clock"]["unix_ns"].is_number());
  EXPECT_FALSE(one["group"].get<std::string>().empty());
  ASSERT_EQ(one["entries"].size(), 2u);
  const auto& e = one["entries"][0];
  for (const char* k : {"seq", "op", "dtype", "count", "reduce_op", "root", "state", "issuer", "iteration",
                        "issued_ns", "started_ns", "ended_ns", "issued_unix_ns", "duration_ns",
                        "device_duration_ns", "bucket", "bucket_bytes", "params"})
    EXPECT_TRUE(e.contains(k)) << k;
  EXPECT_EQ(e["op"], "allreduce");
  EXPECT_EQ(e["dtype"], "float64");
  EXPECT_EQ(e["count"], 5);
  EXPECT_EQ(e["reduce_op"], "max");
  EXPECT_EQ(e["state"], "completed");
  EXPECT_EQ(e["issuer"], "ddp bucket");
  EXPECT_EQ(e["iteration"], 41);
  EXPECT_GE(e["duration_ns"].get<int64_t>(), 0);
  EXPECT_TRUE(e["device_duration_ns"].is_null());  // host backends have no device clock
  EXPECT_EQ(e["bucket"], 3);
  EXPECT_EQ(e["bucket_bytes"], 40);
  EXPECT_EQ(e["params"], "fc1.weight .. fc2.bias");
  const auto& b = one["entries"][1];
  EXPECT_EQ(b["op"], "barrier");
  EXPECT_EQ(b["issuer"], "user");  // the scope ended: the tag and the bucket with it
  EXPECT_TRUE(b["bucket"].is_null());
  EXPECT_TRUE(b["bucket_bytes"].is_null());
  EXPECT_TRUE(b["params"].is_null());
  std::filesystem::remove_all(dir);
}

// Train names its step (from 1, as its log does) and the reducer tags its bucket all-reduces "ddp bucket".
TEST(FlightRecorder, TrainRecordsItsStepAndTheReducerItsBuckets) {
  ScopedEnv entries("DDP_FLIGHT_RECORDER_ENTRIES", std::nullopt);
  models::TrainOptions o;
  o.model = "mlp";
  o.data = "synthetic";
  o.quiet = true;
  o.steps = 3;
  o.warmup_steps = 1;
  o.batch_size = 4;
  o.eval_batches = 1;
  o.eval_interval = 0;
  o.synthetic_samples = 64;
  run_threads(2, [&](int, ProcessGroup& pg) {
    models::train(o, std::shared_ptr<ProcessGroup>(std::shared_ptr<ProcessGroup>{}, &pg));
    std::vector<FlightEntry> buckets;
    for (const FlightEntry& e : pg.flight_recorder()->entries())
      if (std::string(e.issuer) == "ddp bucket") buckets.push_back(e);
    ASSERT_FALSE(buckets.empty());
    for (const FlightEntry& e : buckets) {
      EXPECT_EQ(e.kind, CollectiveKind::Allreduce);
      EXPECT_GE(e.iteration, 1);
      EXPECT_LE(e.iteration, 3);
      EXPECT_GE(e.bucket, 0);
      EXPECT_GT(e.bucket_bytes, 0);
      EXPECT_NE(std::string(e.params), "");  // the bucket's first (.. last) parameter name
    }
    int32_t highest = 0;
    for (const FlightEntry& e : buckets) highest = std::max(highest, e.bucket);
    EXPECT_EQ(buckets.back().bucket, highest);  // buckets go in index order: the highest is the last
    EXPECT_EQ(buckets.back().iteration, 3);
  });
  set_flight_iteration(-1);
}

// Recording a collective allocates nothing (the ring and the tag are preallocated), also after wrapping.
TEST(FlightRecorder, RecordingAllocatesNothingPerCollective) {
  FlightRecorder fr("test", 0, 1, 16);
  const std::string long_names(300, 'p');
  FlightIssuer who("a tag longer than the twenty-four bytes of the slot", 7, 1 << 22, long_names.c_str());
  CollectiveDesc d;
  d.kind = CollectiveKind::Allreduce;
  d.count = 1 << 20;
  t_allocations = 0;
  t_count_allocations = true;
  for (uint64_t seq = 0; seq < 100; ++seq) {
    d.seq = seq;
    fr.issued(d);
    fr.started(seq);
    fr.completed(seq);
  }
  t_count_allocations = false;
  EXPECT_EQ(t_allocations, 0);
  auto es = fr.entries();
  ASSERT_EQ(es.size(), 16u);
  EXPECT_EQ(es.front().seq, 84u);
  EXPECT_EQ(es.back().seq, 99u);
  EXPECT_EQ(std::string(es.back().issuer).size(), 23u);  // truncated, terminated
  EXPECT_EQ(std::string(es.back().params).size(), sizeof(FlightEntry::params) - 1);
  EXPECT_EQ(es.back().bucket, 7);
}

// SIGUSR1 makes every group with a dump directory write its record ("signal"), while it keeps working.
TEST(FlightRecorder, SigusrOneDumpsEveryGroupAndTheJobGoesOn) {
  const auto dir = fresh_dir("sigusr1");
  ScopedEnv where("DDP_FLIGHT_RECORDER_DIR", dir.string());
  ScopedEnv entries("DDP_FLIGHT_RECORDER_ENTRIES", std::nullopt);
  for (const std::string backend : {"gloo", "shm", "hier"}) {
    run_threads(
        2,
        [&](int rank, ProcessGroup& pg, Store& store) {
          std::vector<float> buf(8, 1.0f);
          pg.allreduce(comm_buffer(buf.data(), 8))->wait();
          store.set("before/" + std::to_string(rank), "1");
          store.wait({"before/0", "before/1"}, 30s);
          const auto file = dir / ("flight.rank" + std::to_string(rank) + ".json");
          if (rank == 0) {
            ::raise(SIGUSR1);
            store.set("raised", "1");
          }
          store.wait({"raised"}, 30s);
          // Written by the recorder's own thread: wait for it (bounded), then check it.
          for (int i = 0; i < 3000 && !std::filesystem::exists(file); ++i) std::this_thread::sleep_for(10ms);
          ASSERT_TRUE(std::filesystem::exists(file)) << backend;
          store.set("seen/" + std::to_string(rank), "1");
          store.wait({"seen/0", "seen/1"}, 30s);
          nlohmann::json doc;
          for (int i = 0; i < 300; ++i) {  // the other thread may be writing it this instant
            try {
              doc = read_json(file);
              break;
            } catch (const std::exception&) {
              std::this_thread::sleep_for(10ms);
            }
          }
          EXPECT_EQ(doc["reason"], "signal") << backend;
          EXPECT_EQ(doc["recorded"], 1) << backend;
          pg.allreduce(comm_buffer(buf.data(), 8))->wait();  // the group still works
          EXPECT_EQ(buf[0], 4.0f);
        },
        short_timeout(), backend);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  std::filesystem::remove_all(dir);
}

// The progress page (what ddprun's stall watchdog reads): issued and ended collectives of the process and the
// time of the newest transition; a collective that waits shows as pending.
TEST(FlightRecorder, ProgressPageCountsIssuedAndEndedCollectives) {
  const auto dir = fresh_dir("progress");
  FlightProgressWatch watch((dir / "progress.rank0").string());
  EXPECT_FALSE(watch.read().attached);
  flight_progress_attach(watch.path());
  const auto s0 = watch.read();
  EXPECT_TRUE(s0.attached);
  EXPECT_EQ(s0.pid, getpid());
  for (const std::string backend : {"gloo", "shm"}) {
    const auto before = watch.read();
    run_threads(
        2,
        [&](int rank, ProcessGroup& pg, Store& store) {
          std::vector<float> buf(8, 1.0f);
          for (int i = 0; i < 5; ++i) pg.allreduce(comm_buffer(buf.data(), 8))->wait();
          store.set("five/" + std::to_string(rank), "1");
          store.wait({"five/0", "five/1"}, 30s);
          if (rank == 1) {
            // Rank 0 now waits on #5: pending on the page until rank 1 arrives.
            for (int i = 0; i < 3000 && watch.read().pending() == 0; ++i) std::this_thread::sleep_for(1ms);
            EXPECT_EQ(watch.read().pending(), 1u) << backend;
            std::this_thread::sleep_for(20ms);
            EXPECT_GE(ddp::dist::FlightProgressWatch::Snapshot{watch.read()}.last_change_ns, s0.last_change_ns);
          }
          pg.allreduce(comm_buffer(buf.data(), 8))->wait();
        },
        short_timeout(), backend);
    const auto after = watch.read();
    EXPECT_EQ(after.issued - before.issued, 12u) << backend;  // 2 ranks x 6, one process
    EXPECT_EQ(after.ended - before.ended, 12u) << backend;
    EXPECT_EQ(after.pending(), 0u) << backend;
    EXPECT_GT(after.last_change_ns, 0);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
