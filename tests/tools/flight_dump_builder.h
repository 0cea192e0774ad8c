// flight_dump_builder.h - synthetic flight recorder dumps (docs/debugging.md "Flight recorder", schema 1 and
// 2) for the ddp_flight tests: one rank's group record with a window of completed collectives, which a test
// then edits (a pending last entry, a different count, a missing rank), and the scenario of each kind of
// divergence the analyzer names, shared by the library tests and the command-line tests.
#pragma once
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddp::testing::flight {

using nlohmann::json;

constexpr int64_t kUnixBase = 1764633600000000000;  // 2025-12-02 00:00:00 UTC
constexpr int64_t kStepNs = 10000000;               // collectives are issued 10 ms apart
constexpr int64_t kDurationNs = 7900000;            // and each takes 7.9 ms

struct RankRecord {
  std::string group = "pg0";
  std::string backend = "shm";
  int rank = 0, world = 2;
  uint64_t recorded = 10;  // seqs [0, recorded) issued
  int64_t capacity = 2000;
  std::string reason = "failure";
  int version = 2;
  int64_t global_rank = -1;  // -1: the rank itself
  // DDP buckets: collective seq is bucket (seq + shift) % buckets of iteration (seq + shift) / buckets + 1.
  uint64_t buckets = 4, shift = 0;
};

// Steady-clock anchor of the rank's process: each rank has its own, so only wall-clock times compare.
inline int64_t steady_anchor(int rank) { return 5000000000LL * (rank + 1) + 123; }
inline int64_t unix_anchor(int rank) { return kUnixBase + 1000 * rank; }
// Steady time at which `rank` issued `seq`.
inline int64_t issued_at(int rank, uint64_t seq) {
  return steady_anchor(rank) + 1000 + static_cast<int64_t>(seq) * kStepNs;
}

// One DDP bucket's all-reduce (RankRecord::buckets, shift say which bucket of which iteration).
inline json make_entry(int rank, uint64_t seq, int version = 2, uint64_t buckets = 4, uint64_t shift = 0) {
  const int64_t bucket = static_cast<int64_t>((seq + shift) % buckets);
  const int64_t issued = issued_at(rank, seq);
  json e = {{"seq", seq},
            {"op", "allreduce"},
            {"dtype", "float32"},
            {"count", 262144},
            {"reduce_op", "sum"},
            {"root", -1},
            {"state", "completed"},
            {"issuer", "ddp bucket"},
            {"iteration", static_cast<int64_t>((seq + shift) / buckets + 1)},
            {"issued_ns", issued},
            {"started_ns", issued + 100},
            {"ended_ns", issued + 100 + kDurationNs},
            {"issued_unix_ns", issued - steady_anchor(rank) + unix_anchor(rank)},
            {"duration_ns", kDurationNs}};
  if (version >= 2) {
    e["bucket"] = bucket;
    e["bucket_bytes"] = 1048576;
    e["params"] = "layer" + std::to_string(bucket) + ".weight .. layer" + std::to_string(bucket) + ".bias";
  }
  return e;
}

// Leaves `e` still waiting (started, not ended).
inline void make_pending(json& e) {
  e["state"] = "started";
  e["ended_ns"] = nullptr;
  e["duration_ns"] = nullptr;
}
// Makes `e` fail after `waited_ns` from its start.
inline void make_failed(json& e, int64_t waited_ns) {
  e["state"] = "failed";
  e["ended_ns"] = e["started_ns"].get<int64_t>() + waited_ns;
  e["duration_ns"] = waited_ns;
}

// The group record: entries [max(0, recorded - capacity), recorded), all completed; dumped 600 s after the
// last issue (failure dumps come when the timeout fires).
inline json make_record(const RankRecord& r) {
  json entries = json::array();
  const uint64_t cap = static_cast<uint64_t>(r.capacity);
  for (uint64_t s = r.recorded > cap ? r.recorded - cap : 0; s < r.recorded; ++s)
    entries.push_back(make_entry(r.rank, s, r.version, r.buckets, r.shift));
  json j = {{"version", r.version},
            {"group", r.group},
            {"backend", r.backend},
            {"rank", r.rank},
            {"world_size", r.world},
            {"capacity", r.capacity},
            {"recorded", r.recorded},
            {"clock", {{"steady_ns", steady_anchor(r.rank)}, {"unix_ns", unix_anchor(r.rank)}}},
            {"failure", nullptr},
            {"entries", entries}};
  if (r.version >= 2) {
    const uint64_t last = r.recorded == 0 ? 0 : r.recorded - 1;
    j["pid"] = 1000 + (r.global_rank >= 0 ? r.global_rank : r.rank);  // one process per global rank
    j["host"] = "node1";
    j["global_rank"] = r.global_rank >= 0 ? r.global_rank : r.rank;
    j["reason"] = r.reason;
    j["dumped_unix_ns"] =
        issued_at(r.rank, last) - steady_anchor(r.rank) + unix_anchor(r.rank) + 600000000000LL;
  }
  return j;
}

// The entry of `seq` in a record made by make_record.
inline json& entry_of(json& record, uint64_t seq) {
  for (json& e : record["entries"])
    if (e["seq"].get<uint64_t>() == seq) return e;
  throw std::runtime_error("flight_dump_builder: no entry " + std::to_string(seq));
}

// A scenario: the files of one dump folder (name, document).
using Files = std::vector<std::pair<std::string, json>>;

inline std::string file_name(const json& record) {
  std::string g = record["group"].get<std::string>();
  const int rank = record["rank"].get<int>();
  if (g.find('/') == std::string::npos) return "flight.rank" + std::to_string(rank) + ".json";
  for (char& c : g)
    if (c == '/') c = '_';
  return "flight.rank" + std::to_string(rank) + "." + g + ".json";
}

inline void write_files(const std::string& dir, const Files& files) {
  for (const auto& [name, doc] : files) {
    std::ofstream f(dir + "/" + name, std::ios::binary | std::ios::trunc);
    f << doc.dump(1) << "\n";
  }
}

// ---- one scenario per kind of divergence (the docs' worked examples) -----------------------------------

// World 4, rings wrapped (2000 of 4813), 12 buckets per iteration: rank 1 never issued #4812 (bucket 3 of
// iteration 402); ranks 0, 2 and 3 issued it and timed out after 600 s.
inline Files missing_issue_scenario() {
  Files files;
  for (int r = 0; r < 4; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.world = 4;
    rr.recorded = r == 1 ? 4812 : 4813;
    rr.buckets = 12;
    rr.shift = 3;
    json rec = make_record(rr);
    if (r != 1) {
      json& e = entry_of(rec, 4812);
      e["bucket_bytes"] = 1258291;
      e["params"] = "blocks.1.mlp.fc2.weight .. blocks.1.ln2.bias";
      make_failed(e, 600000000000LL);
      rec["failure"] =
          "collective timeout after 600 s: allreduce #4812 (262144 x float32, sum) waiting for rank 1";
    } else {
      rec["reason"] = "signal";
    }
    files.push_back({file_name(rec), rec});
  }
  return files;
}

// World 3: at #57 rank 2 issued 131072 elements (its bucket 2) where ranks 0 and 1 issued 262144 (bucket 3);
// every rank's mismatch check failed it.
inline Files mismatch_scenario() {
  Files files;
  for (int r = 0; r < 3; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.world = 3;
    rr.recorded = 58;
    json rec = make_record(rr);
    json& e = entry_of(rec, 57);
    e["bucket"] = r == 2 ? 2 : 3;
    e["params"] = r == 2 ? "blocks.0.attn.qkv.weight .. blocks.0.ln1.bias"
                         : "blocks.1.mlp.fc2.weight .. blocks.1.ln2.bias";
    e["count"] = r == 2 ? 131072 : 262144;
    e["bucket_bytes"] = r == 2 ? 524288 : 1048576;
    make_failed(e, 2000000);
    rec["failure"] = "collective mismatch at sequence number 57";
    files.push_back({file_name(rec), rec});
  }
  return files;
}

// World 2: rank 1 ran out of data and destroyed its group after #99 (reason exit); rank 0 issued #100 in
// iteration 26 and is still waiting when the stall watchdog's SIGUSR1 dumps it.
inline Files uneven_steps_scenario() {
  Files files;
  for (int r = 0; r < 2; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.recorded = r == 0 ? 101 : 100;
    rr.reason = r == 0 ? "signal" : "exit";
    json rec = make_record(rr);
    if (r == 0) make_pending(entry_of(rec, 100));
    files.push_back({file_name(rec), rec});
  }
  return files;
}

// World 4: allreduce #20 completed on ranks 0 and 2 and failed on ranks 1 and 3 (a transport error).
inline Files partial_completion_scenario() {
  Files files;
  for (int r = 0; r < 4; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.world = 4;
    rr.recorded = 21;
    json rec = make_record(rr);
    if (r % 2 == 1) {
      make_failed(entry_of(rec, 20), 30000000000LL);
      rec["failure"] = "gloo: connection reset by peer";
    }
    files.push_back({file_name(rec), rec});
  }
  return files;
}

// World 4: rank 3 was SIGKILLed (no file); ranks 0-2 issued #30 and timed out.
inline Files no_dump_scenario() {
  Files files;
  for (int r = 0; r < 3; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.world = 4;
    rr.recorded = 31;
    json rec = make_record(rr);
    make_failed(entry_of(rec, 30), 600000000000LL);
    files.push_back({file_name(rec), rec});
  }
  return files;
}

// World `world`: every rank completed #0..#recorded-1 (dumped on demand).
inline Files nothing_scenario(int world, uint64_t recorded, int64_t capacity = 2000) {
  Files files;
  for (int r = 0; r < world; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.world = world;
    rr.recorded = recorded;
    rr.capacity = capacity;
    rr.reason = "demand";
    json rec = make_record(rr);
    files.push_back({file_name(rec), rec});
  }
  return files;
}

// World 2: rank 1's record ends at #99 (dumped early); rank 0's 2000-entry ring holds #300..#2299.
inline Files no_overlap_scenario() {
  Files files;
  for (int r = 0; r < 2; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.recorded = r == 0 ? 2300 : 100;
    rr.reason = "signal";
    json rec = make_record(rr);
    files.push_back({file_name(rec), rec});
  }
  return files;
}

// World 2: rank 0 is 3 collectives ahead of rank 1 (#40..#42 queued, #40 waiting); rank 1 stopped after #39.
inline Files rank_ahead_scenario() {
  Files files;
  for (int r = 0; r < 2; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.recorded = r == 0 ? 43 : 40;
    rr.reason = "signal";
    json rec = make_record(rr);
    if (r == 0) {
      make_pending(entry_of(rec, 40));
      for (uint64_t s : {41u, 42u}) {
        json& e = entry_of(rec, s);
        e["state"] = "issued";
        e["started_ns"] = nullptr;
        e["ended_ns"] = nullptr;
        e["duration_ns"] = nullptr;
      }
    }
    files.push_back({file_name(rec), rec});
  }
  return files;
}

// World 3, dumped on demand at different times: rank 2's record ends at #49, ranks 0 and 1 completed up to
// #59.
inline Files older_dump_scenario() {
  Files files;
  for (int r = 0; r < 3; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.world = 3;
    rr.recorded = r == 2 ? 50 : 60;
    rr.reason = "demand";
    json rec = make_record(rr);
    files.push_back({file_name(rec), rec});
  }
  return files;
}

// hier: the top-level group pg0 (world 4) and its inner groups pg0/host0, pg0/host1 (world 2 each, global
// ranks 0-1 and 2-3) and pg0/leaders (global 0 and 2), each analysed on its own.
inline Files hier_scenario(bool inner_hangs, bool top_hangs) {
  Files files;
  for (int g = 0; g < 4; ++g) {
    RankRecord rr;
    rr.rank = g;
    rr.world = 4;
    rr.backend = "hier";
    rr.recorded = 13;
    json rec = make_record(rr);
    if (inner_hangs) make_pending(entry_of(rec, 12));  // the hier allreduce waits on its host group
    if (top_hangs && g == 2) {
      rr.recorded = 12;
      rec = make_record(rr);
    } else if (top_hangs) {
      make_pending(entry_of(rec, 12));
    }
    files.push_back({file_name(rec), rec});
  }
  for (int host = 0; host < 2; ++host)
    for (int local = 0; local < 2; ++local) {
      RankRecord rr;
      rr.group = "pg0/host" + std::to_string(host);
      rr.rank = local;
      rr.world = 2;
      rr.global_rank = 2 * host + local;
      rr.recorded = inner_hangs && host == 1 && local == 1 ? 25 : 26;
      json rec = make_record(rr);
      if (inner_hangs && host == 1 && local == 0) make_pending(entry_of(rec, 25));
      files.push_back({file_name(rec), rec});
    }
  for (int l = 0; l < 2; ++l) {
    RankRecord rr;
    rr.group = "pg0/leaders";
    rr.backend = "gloo";
    rr.rank = l;
    rr.world = 2;
    rr.global_rank = 2 * l;
    rr.recorded = 13;
    json rec = make_record(rr);
    files.push_back({file_name(rec), rec});
  }
  return files;
}

// Two top-level groups whose ranks wait on each other (ZeRO-3 under Join, issue 36): in pg0 rank 0 waits on a
// join-activity all-reduce that rank 1 never issued, because rank 1 waits in the gather group on an
// all-gather that rank 0 never issued. Neither group alone is the cause: the headline names both waits and
// says they form a cycle between the groups.
inline Files cross_group_wait_scenario() {
  Files files;
  for (int r = 0; r < 2; ++r) {
    RankRecord main;
    main.rank = r;
    main.recorded = r == 0 ? 21 : 20;
    main.reason = "signal";
    json m = make_record(main);
    if (r == 0) {
      json& e = entry_of(m, 20);
      e["op"] = "allreduce";
      e["dtype"] = "int32";
      e["count"] = 2;
      e["issuer"] = "join activity";
      e["iteration"] = 3;
      for (const char* k : {"bucket", "bucket_bytes", "params"}) e[k] = nullptr;
      make_pending(e);
    }
    files.push_back({file_name(m), m});
    RankRecord gather = main;
    gather.group = "gather";
    gather.recorded = r == 1 ? 11 : 10;
    json g = make_record(gather);
    if (r == 1) {
      json& e = entry_of(g, 10);
      e["op"] = "allgather";
      e["issuer"] = "zero3 param gather";
      e["params"] = "blocks.1.attn.qkv.weight .. blocks.1.ln2.bias";
      make_pending(e);
    }
    files.push_back({"flight.rank" + std::to_string(r) + ".gather.json", g});
  }
  return files;
}

}  // namespace ddp::testing::flight
