// test_flight_analysis.cpp - the flight recorder analyzer (runtime/distributed/flight_analysis.h) on
// synthetic dumps (flight_dump_builder.h): each kind of divergence names the right rank, collective and
// bucket over worlds 1-4, wrapped and unwrapped rings and every rank as the culprit; version-1 records,
// hier's inner groups, process records; the report's table; the Chrome trace. Bad input:
// test_flight_dump_reader.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/distributed/flight_analysis.h"
#include "runtime/distributed/flight_dump_reader.h"
#include "runtime/distributed/flight_report.h"
#include "tests/tools/flight_dump_builder.h"

namespace {

using namespace ddp::testing::flight;
namespace fl = ddp::dist::flight;
using fl::DivergenceKind;

std::vector<fl::GroupRecord> records_of(const Files& files) {
  std::vector<fl::GroupRecord> all;
  for (const auto& [name, doc] : files)
    for (auto& r : fl::parse_flight_dump(doc.dump(), name)) all.push_back(std::move(r));
  return fl::merge_flight_records(std::move(all));
}

fl::FlightAnalysis analyze(const Files& files, const std::string& group = "") {
  return fl::analyze_flight(records_of(files), group);
}

const fl::Divergence* find_kind(const fl::GroupAnalysis& g, DivergenceKind k) {
  for (const auto& d : g.divergences)
    if (d.kind == k) return &d;
  return nullptr;
}

std::vector<int> others_than(int world, std::vector<int> ranks) {
  std::vector<int> out;
  for (int r = 0; r < world; ++r)
    if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) out.push_back(r);
  return out;
}

// Version 1 of a version-2 record: no pid, host, global_rank, reason, dumped_unix_ns, bucket fields.
json to_version_1(json rec) {
  rec["version"] = 1;
  for (const char* k : {"pid", "host", "global_rank", "reason", "dumped_unix_ns"}) rec.erase(k);
  for (json& e : rec["entries"])
    for (const char* k : {"bucket", "bucket_bytes", "params"}) e.erase(k);
  return rec;
}

}  // namespace

TEST(FlightAnalysis, MissingIssueNamesTheRankTheCollectiveTheBucketAndTheWait) {
  const auto a = analyze(missing_issue_scenario());
  EXPECT_EQ(
      a.headline,
      "rank 1 never issued allreduce #4812 (bucket 3: blocks.1.mlp.fc2.weight .. blocks.1.ln2.bias, 1.2 MiB, "
      "iteration 402); ranks 0, 2 and 3 waited 600 s; rank 1's last completed collective is #4811");
  ASSERT_EQ(a.groups.size(), 1u);
  const auto& d = a.groups[0].lead();
  EXPECT_EQ(d.kind, DivergenceKind::MissingIssue);
  EXPECT_EQ(d.seq, 4812u);
  EXPECT_EQ(d.ranks, std::vector<int>({1}));
  EXPECT_EQ(d.others, std::vector<int>({0, 2, 3}));
  EXPECT_EQ(d.waited_min_ns, 600000000000LL);
  EXPECT_EQ(d.waited_max_ns, 600000000000LL);
  EXPECT_EQ(a.groups[0].focus_seq, 4812u);
}

// Every rank as the one that never issued, worlds 2-4, ring sizes from 1 (only the last entry) to 64, the
// behind rank's `recorded` around the ring size (wrapped by one, exactly full, one short), pending or failed
// waits, seeded.
TEST(FlightAnalysis, MissingIssueOverWorldsCulpritsRingSizesAndStates) {
  std::mt19937 rng(24);
  for (int world = 2; world <= 4; ++world)
    for (int culprit = 0; culprit < world; ++culprit)
      for (int64_t cap : {1, 2, 3, 7, 64})  // the default 2000: the test above
        for (uint64_t v :
             {uint64_t{1}, uint64_t{2}, static_cast<uint64_t>(cap) - 1, static_cast<uint64_t>(cap),
              static_cast<uint64_t>(cap) + 1, uint64_t{13}, uint64_t{4812}}) {
          if (v == 0) continue;
          const bool failed = rng() % 2 == 0;
          Files files;
          for (int r = 0; r < world; ++r) {
            RankRecord rr;
            rr.rank = r;
            rr.world = world;
            rr.capacity = cap;
            rr.recorded = r == culprit ? v : v + 1;
            json rec = make_record(rr);
            if (r != culprit) {
              if (failed)
                make_failed(entry_of(rec, v), 5000000000LL);
              else
                make_pending(entry_of(rec, v));
            }
            files.push_back({file_name(rec), rec});
          }
          SCOPED_TRACE("world " + std::to_string(world) + " culprit " + std::to_string(culprit) +
                       " capacity " + std::to_string(cap) + " v " + std::to_string(v) +
                       (failed ? " failed" : " pending"));
          const auto a = analyze(files);
          const auto& d = a.groups[0].lead();
          ASSERT_EQ(d.kind, DivergenceKind::MissingIssue) << a.headline;
          EXPECT_EQ(d.seq, v);
          EXPECT_EQ(d.ranks, std::vector<int>({culprit}));
          EXPECT_EQ(d.others, others_than(world, {culprit}));
          EXPECT_EQ(d.waited_max_ns, failed ? 5000000000LL : 600000000000LL - 100);
          EXPECT_NE(a.headline.find("rank " + std::to_string(culprit) + " never issued allreduce #" +
                                    std::to_string(v) + " "),
                    std::string::npos)
              << a.headline;
          EXPECT_NE(a.headline.find("last completed collective is #" + std::to_string(v - 1)),
                    std::string::npos)
              << a.headline;
        }
}

TEST(FlightAnalysis, TwoRanksNeverIssuedOrOneIssuedNothingAtAll) {
  Files files;
  for (int r = 0; r < 4; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.world = 4;
    rr.recorded = r == 1 || r == 3 ? 6 : 7;
    json rec = make_record(rr);
    if (r % 2 == 0) make_pending(entry_of(rec, 6));
    files.push_back({file_name(rec), rec});
  }
  const auto a = analyze(files);
  const auto& d = a.groups[0].lead();
  EXPECT_EQ(d.kind, DivergenceKind::MissingIssue);
  EXPECT_EQ(d.ranks, std::vector<int>({1, 3}));
  EXPECT_EQ(d.others, std::vector<int>({0, 2}));
  EXPECT_NE(a.headline.find("ranks 1 and 3 never issued allreduce #6"), std::string::npos) << a.headline;
  EXPECT_NE(a.headline.find("; ranks 0 and 2 waited 600 s; ranks 1 and 3's last completed collective is #5"),
            std::string::npos)
      << a.headline;
  // A rank that issued nothing while the other waits on the first collective.
  Files first;
  for (int r = 0; r < 2; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.recorded = r == 0 ? 1 : 0;
    json rec = make_record(rr);
    if (r == 0) make_pending(entry_of(rec, 0));
    first.push_back({file_name(rec), rec});
  }
  const auto b = analyze(first);
  EXPECT_EQ(b.groups[0].lead().kind, DivergenceKind::MissingIssue);
  EXPECT_EQ(b.groups[0].lead().seq, 0u);
  EXPECT_NE(b.headline.find("rank 1 never issued allreduce #0 "), std::string::npos) << b.headline;
  EXPECT_NE(b.headline.find("; rank 1 issued no collective at all"), std::string::npos) << b.headline;
}

TEST(FlightAnalysis, MismatchNamesTheOddRankBothCallsAndTheBuckets) {
  const auto a = analyze(mismatch_scenario());
  const auto& d = a.groups[0].lead();
  EXPECT_EQ(d.kind, DivergenceKind::Mismatch);
  EXPECT_EQ(d.seq, 57u);
  EXPECT_EQ(d.field, "count");
  EXPECT_EQ(d.ranks, std::vector<int>({2}));
  EXPECT_EQ(d.others, std::vector<int>({0, 1}));
  EXPECT_NE(a.headline.find(
                "at collective #57 the ranks disagree on the count: rank 2 issued allreduce float32 x "
                "131072 (bucket 2: blocks.0.attn.qkv.weight .. blocks.0.ln1.bias, 512 KiB, iteration 15) "
                "where ranks 0 and 1 issued allreduce float32 x 262144 (bucket 3: "
                "blocks.1.mlp.fc2.weight .. blocks.1.ln2.bias, 1 MiB, iteration 15)"),
            std::string::npos)
      << a.headline;
  // The failed #57 on every rank is a consequence, listed after it.
  EXPECT_NE(find_kind(a.groups[0], DivergenceKind::AllWaiting), nullptr);
}

// Each field of a call, at world 2 (one against one: both named in rank order) and 3 (the odd one named),
// and the odd rank being each rank in turn.
TEST(FlightAnalysis, MismatchOfEachFieldAndEachOddRank) {
  struct Case {
    const char* field;
    void (*edit)(json&);
    const char* odd_call;
  };
  const std::vector<Case> cases = {
      {"op", [](json& e) { e["op"] = "broadcast"; }, "broadcast float32 x 262144"},
      {"dtype", [](json& e) { e["dtype"] = "bfloat16"; }, "allreduce bfloat16 x 262144"},
      {"count", [](json& e) { e["count"] = 1; }, "allreduce float32 x 1"},
      {"reduce_op", [](json& e) { e["reduce_op"] = "max"; }, "allreduce float32 x 262144 (max)"},
      {"root", [](json& e) { e["root"] = 1; }, "allreduce float32 x 262144 from root 1"},
      {"op and root",
       [](json& e) {
         e["op"] = "broadcast";
         e["root"] = 0;
       },
       "broadcast float32 x 262144 from root 0"},
      {"dtype and count",
       [](json& e) {
         e["dtype"] = "int64";
         e["count"] = 0;
       },
       "allreduce int64 x 0"},
  };
  for (const Case& c : cases)
    for (int world = 2; world <= 3; ++world)
      for (int odd = 0; odd < world; ++odd) {
        SCOPED_TRACE(std::string(c.field) + " world " + std::to_string(world) + " odd " +
                     std::to_string(odd));
        Files files;
        for (int r = 0; r < world; ++r) {
          RankRecord rr;
          rr.rank = r;
          rr.world = world;
          rr.recorded = 9;
          json rec = make_record(rr);
          if (r == odd) c.edit(entry_of(rec, 5));
          files.push_back({file_name(rec), rec});
        }
        const auto a = analyze(files);
        const auto& d = a.groups[0].lead();
        ASSERT_EQ(d.kind, DivergenceKind::Mismatch) << a.headline;
        EXPECT_EQ(d.seq, 5u);
        EXPECT_EQ(d.field, c.field);
        EXPECT_NE(a.headline.find("rank " + std::to_string(odd) + " issued " + c.odd_call + " (bucket 1"),
                  std::string::npos)
            << a.headline;
        if (world == 3) {
          EXPECT_EQ(d.ranks, std::vector<int>({odd}));
          EXPECT_EQ(d.others, others_than(3, {odd}));
        } else {
          // One against one: the lower rank is named first.
          const std::string first = "rank 0 issued";
          EXPECT_EQ(a.headline.find(": rank 0 issued"), a.headline.find(": ") + 0) << a.headline;
          EXPECT_NE(a.headline.find(first), std::string::npos);
        }
      }
}

// A rank that skipped bucket 3's all-reduce of iteration 2 issues the next one in its place: same call, other
// bucket; the analyzer says the buckets are out of step there.
TEST(FlightAnalysis, MismatchOfBucketsWhenTheCallsAgree) {
  Files files;
  for (int r = 0; r < 2; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.recorded = r == 1 ? 11 : 12;
    json rec = make_record(rr);
    if (r == 1)
      for (uint64_t s = 7; s < 11; ++s) {  // rank 1: #7 is bucket 0 of iteration 3, ...
        entry_of(rec, s)["bucket"] = static_cast<int64_t>((s + 1) % 4);
        entry_of(rec, s)["iteration"] = static_cast<int64_t>((s + 1) / 4 + 1);
      }
    else
      make_pending(entry_of(rec, 11));
    files.push_back({file_name(rec), rec});
  }
  const auto a = analyze(files);
  const auto& d = a.groups[0].lead();
  EXPECT_EQ(d.kind, DivergenceKind::Mismatch) << a.headline;
  EXPECT_EQ(d.seq, 7u);
  EXPECT_EQ(d.field, "bucket");
  EXPECT_NE(a.headline.find("rank 0 issued allreduce float32 x 262144 (bucket 3"), std::string::npos)
      << a.headline;
  EXPECT_NE(a.headline.find("rank 1 issued allreduce float32 x 262144 (bucket 0"), std::string::npos)
      << a.headline;
  // The hang it leads to is listed too.
  const auto* m = find_kind(a.groups[0], DivergenceKind::MissingIssue);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->seq, 11u);
  EXPECT_EQ(m->ranks, std::vector<int>({1}));
}

// A rank that skipped ZeRO's broadcasts of iteration 3 all-reduces iteration 4's first bucket where the other
// broadcasts: the ranks are in different iterations at that seq, and the one ahead skipped collectives.
TEST(FlightAnalysis, MismatchAcrossIterationsSaysWhichRankSkipped) {
  for (int skipper = 0; skipper < 2; ++skipper) {
    Files files;
    for (int r = 0; r < 2; ++r) {
      RankRecord rr;
      rr.rank = r;
      rr.recorded = 10;
      json rec = make_record(rr);
      json& e = entry_of(rec, 8);  // bucket 0 of iteration 3 on both; the other rank broadcasts instead
      if (r != skipper) {
        e["op"] = "broadcast";
        e["root"] = 0;
        e["count"] = 1024;
        e["issuer"] = "zero";
        e["bucket"] = nullptr;
        e["bucket_bytes"] = nullptr;
        e["params"] = nullptr;
        e["iteration"] = 2;
      }
      files.push_back({file_name(rec), rec});
    }
    const auto a = analyze(files);
    const auto& d = a.groups[0].lead();
    ASSERT_EQ(d.kind, DivergenceKind::Mismatch) << a.headline;
    EXPECT_EQ(d.field, "op, count and root");
    const std::string skip = std::to_string(skipper), other = std::to_string(1 - skipper);
    EXPECT_NE(
        a.headline.find("rank " + other + " issued broadcast float32 x 1024 from root 0 (zero, iteration 2)"),
        std::string::npos)
        << a.headline;
    EXPECT_NE(a.headline.find("rank " + skip +
                              " issued allreduce float32 x 262144 (bucket 0: layer0.weight .. "
                              "layer0.bias, 1 MiB, iteration 3)"),
              std::string::npos)
        << a.headline;
    EXPECT_NE(a.headline.find("; rank " + skip + " is in iteration 3 there while rank " + other +
                              " is in 2: rank " + skip + " skipped collectives of iteration 2 that rank " +
                              other + " issued"),
              std::string::npos)
        << a.headline;
  }
}

TEST(FlightAnalysis, UnevenStepsSaysTheRankFinishedAndPointsAtJoin) {
  const auto a = analyze(uneven_steps_scenario());
  const auto& d = a.groups[0].lead();
  EXPECT_EQ(d.kind, DivergenceKind::UnevenSteps);
  EXPECT_EQ(d.seq, 100u);
  EXPECT_EQ(d.ranks, std::vector<int>({1}));
  EXPECT_EQ(d.others, std::vector<int>({0}));
  EXPECT_EQ(
      a.headline,
      "rank 1 had finished after #99 (its group was destroyed) while rank 0 issued allreduce #100 in "
      "iteration "
      "26 (bucket 0: layer0.weight .. layer0.bias, 1 MiB) and waited 600 s: the ranks ran different numbers "
      "of steps (uneven inputs); give every rank the same number of batches, or wrap the training loop in "
      "ddp::Join");
}

TEST(FlightAnalysis, RankAheadByKCollectivesIsSaidAfterTheMissingIssue) {
  const auto a = analyze(rank_ahead_scenario());
  const auto& g = a.groups[0];
  EXPECT_EQ(g.lead().kind, DivergenceKind::MissingIssue);
  const auto* ahead = find_kind(g, DivergenceKind::RankAhead);
  ASSERT_NE(ahead, nullptr);
  EXPECT_EQ(ahead->ahead_by, 3);
  EXPECT_FALSE(ahead->completed_ahead);
  EXPECT_EQ(ahead->ranks, std::vector<int>({0}));
  EXPECT_EQ(ahead->others, std::vector<int>({1}));
  EXPECT_EQ(ahead->sentence,
            "rank 0 is 3 collectives ahead of rank 1: issued #40 to #42, none of them completed (queued "
            "behind #40)");
}

// The behind rank's dump is older: the ahead rank completed what the behind one had not issued yet, so
// nothing diverged, and the analyzer says so rather than blaming the rank.
TEST(FlightAnalysis, AnOlderDumpIsNotABehindRank) {
  const auto a = analyze(older_dump_scenario());
  const auto& d = a.groups[0].lead();
  EXPECT_EQ(d.kind, DivergenceKind::RankAhead) << a.headline;
  EXPECT_TRUE(d.completed_ahead);
  EXPECT_EQ(d.ahead_by, 10);
  EXPECT_EQ(d.ranks, std::vector<int>({0, 1}));
  EXPECT_EQ(d.others, std::vector<int>({2}));
  EXPECT_EQ(
      a.headline,
      "rank 2's record ends at #49, 10 collectives before ranks 0 and 1's, which completed #50: its dump is "
      "older (written 100 ms earlier, reason demand), so it was not behind in the job; compare dumps written "
      "at the same time");
  EXPECT_EQ(find_kind(a.groups[0], DivergenceKind::MissingIssue), nullptr);
}

TEST(FlightAnalysis, CompletedOnSomeRanksOnly) {
  const auto a = analyze(partial_completion_scenario());
  const auto& d = a.groups[0].lead();
  EXPECT_EQ(d.kind, DivergenceKind::PartialCompletion);
  EXPECT_EQ(d.seq, 20u);
  EXPECT_EQ(d.ranks, std::vector<int>({1, 3}));
  EXPECT_EQ(d.others, std::vector<int>({0, 2}));
  EXPECT_EQ(
      a.headline,
      "allreduce #20 (bucket 0: layer0.weight .. layer0.bias, 1 MiB, iteration 6) completed on ranks 0 and 2 "
      "only; ranks 1 and 3 did not complete it (waited 30 s and failed); rank 1's error: gloo: connection "
      "reset by peer");
}

TEST(FlightAnalysis, ARankThatLeftNoDumpIsNamedAndTheRestAnalysed) {
  const auto a = analyze(no_dump_scenario());
  const auto& g = a.groups[0];
  EXPECT_EQ(g.world_size, 4);
  EXPECT_FALSE(g.ranks[3]);
  const auto& d = g.lead();
  EXPECT_EQ(d.kind, DivergenceKind::NoDump);
  EXPECT_EQ(d.ranks, std::vector<int>({3}));
  EXPECT_EQ(d.others, std::vector<int>({0, 1, 2}));
  EXPECT_EQ(d.seq, 30u);
  EXPECT_EQ(a.headline,
            "rank 3 left no dump (crashed, killed or stopped: see its exit in the launcher's log); ranks 0-2 "
            "waited "
            "600 s on allreduce #30 (bucket 2: layer2.weight .. layer2.bias, 1 MiB, iteration 8); the last "
            "collective every dumped rank completed is #29");
}

// A rank without a dump and a dumped rank that never issued: both said, the missing dump first.
TEST(FlightAnalysis, NoDumpAndAMissingIssueAmongTheRest) {
  for (int world = 3; world <= 4; ++world)
    for (int gone = 0; gone < world; ++gone)
      for (int behind = 0; behind < world; ++behind) {
        if (behind == gone) continue;
        SCOPED_TRACE("world " + std::to_string(world) + " gone " + std::to_string(gone) + " behind " +
                     std::to_string(behind));
        Files files;
        for (int r = 0; r < world; ++r) {
          if (r == gone) continue;
          RankRecord rr;
          rr.rank = r;
          rr.world = world;
          rr.recorded = r == behind ? 8 : 9;
          json rec = make_record(rr);
          if (r != behind) make_pending(entry_of(rec, 8));
          files.push_back({file_name(rec), rec});
        }
        const auto a = analyze(files);
        const auto& g = a.groups[0];
        EXPECT_EQ(g.lead().kind, DivergenceKind::NoDump);
        EXPECT_EQ(g.lead().ranks, std::vector<int>({gone}));
        const auto* m = find_kind(g, DivergenceKind::MissingIssue);
        ASSERT_NE(m, nullptr);
        EXPECT_EQ(m->ranks, std::vector<int>({behind}));
        EXPECT_EQ(m->seq, 8u);
      }
}

TEST(FlightAnalysis, RingsThatDoNotOverlapAreSaidNotGuessed) {
  const auto a = analyze(no_overlap_scenario());
  const auto& d = a.groups[0].lead();
  EXPECT_EQ(d.kind, DivergenceKind::NoOverlap);
  EXPECT_EQ(d.seq, 100u);
  EXPECT_EQ(d.ranks, std::vector<int>({0}));
  EXPECT_EQ(d.others, std::vector<int>({1}));
  EXPECT_EQ(
      a.headline,
      "rank 0's ring starts at #300, after rank 1's record ends at #99: the windows do not overlap (rank 0 "
      "issued 2200 collectives past it and the 2000-entry ring wrapped), so the dumps cannot show whether "
      "rank "
      "0 completed #100; raise DDP_FLIGHT_RECORDER_ENTRIES or dump sooner");
  EXPECT_EQ(find_kind(a.groups[0], DivergenceKind::MissingIssue), nullptr);
  EXPECT_EQ(find_kind(a.groups[0], DivergenceKind::RankAhead), nullptr);
}

TEST(FlightAnalysis, EveryRankWaitingOnTheSameCollective) {
  for (int world = 1; world <= 4; ++world) {
    Files files;
    for (int r = 0; r < world; ++r) {
      RankRecord rr;
      rr.rank = r;
      rr.world = world;
      json rec = make_record(rr);
      make_pending(entry_of(rec, 9));
      files.push_back({file_name(rec), rec});
    }
    const auto a = analyze(files);
    const auto& d = a.groups[0].lead();
    EXPECT_EQ(d.kind, DivergenceKind::AllWaiting) << a.headline;
    EXPECT_EQ(d.seq, 9u);
    EXPECT_EQ(d.ranks.size(), static_cast<size_t>(world));
    EXPECT_EQ(a.headline.rfind(
                  world == 1 ? "the only rank issued allreduce #9" : "every rank issued allreduce #9", 0),
              0u)
        << a.headline;
    // Nobody failed: the wait is the finding, and the hint says where to look.
    EXPECT_EQ(a.headline.find("look for a rank stuck inside it") != std::string::npos, world > 1)
        << a.headline;
    if (world < 2) continue;
    // One rank failed it (a mismatch check, a transport error): its message says why, no stuck-rank hint.
    json& rec0 = files[0].second;
    make_failed(entry_of(rec0, 9), 1000);
    rec0["failure"] = "collective mismatch at sequence number 9";
    const auto b = analyze(files);
    EXPECT_EQ(b.groups[0].lead().kind, DivergenceKind::AllWaiting);
    EXPECT_NE(b.headline.find(" (some failed); rank 0's error: collective mismatch at sequence number 9"),
              std::string::npos)
        << b.headline;
    EXPECT_EQ(b.headline.find("stuck"), std::string::npos) << b.headline;
  }
}

TEST(FlightAnalysis, ARankWithTheRecorderOffIsLeftOut) {
  Files files;
  for (int r = 0; r < 3; ++r) {
    RankRecord rr;
    rr.rank = r;
    rr.world = 3;
    rr.capacity = r == 1 ? 0 : 2000;
    rr.recorded = r == 1 ? 0 : 10;
    json rec = make_record(rr);
    files.push_back({file_name(rec), rec});
  }
  const auto a = analyze(files);
  const auto& g = a.groups[0];
  EXPECT_EQ(g.lead().kind, DivergenceKind::RecorderOff) << a.headline;
  EXPECT_EQ(g.lead().ranks, std::vector<int>({1}));
  EXPECT_EQ(find_kind(g, DivergenceKind::MissingIssue), nullptr);  // its recorded 0 is not "never issued #0"
}

// Worlds 1-4, empty and full and wrapped rings, one-entry rings.
TEST(FlightAnalysis, NothingDivergedSaysUpToWhere) {
  for (int world = 1; world <= 4; ++world)
    for (int64_t cap : {1, 2, 5, 64})
      for (uint64_t recorded : {uint64_t{0}, uint64_t{1}, static_cast<uint64_t>(cap),
                                static_cast<uint64_t>(cap) + 1, uint64_t{4813}}) {
        SCOPED_TRACE("world " + std::to_string(world) + " capacity " + std::to_string(cap) + " recorded " +
                     std::to_string(recorded));
        const auto a = analyze(nothing_scenario(world, recorded, cap));
        const auto& g = a.groups[0];
        ASSERT_EQ(g.divergences.size(), 1u) << a.headline;
        EXPECT_EQ(g.lead().kind, DivergenceKind::Nothing);
        EXPECT_FALSE(g.diverged());
        if (recorded == 0) {
          EXPECT_EQ(a.headline, "no collective of group 'pg0' was recorded yet (recorded 0 on " +
                                    fl::rank_list_text(others_than(world, {})) + ")");
          continue;
        }
        const uint64_t lo = recorded > static_cast<uint64_t>(cap) ? recorded - cap : 0;
        const std::string window = "(#" + std::to_string(lo) + " to #" + std::to_string(recorded - 1) +
                                   (world == 1   ? ")"
                                    : world == 2 ? " on both ranks)"
                                                 : " on all " + std::to_string(world) + " ranks)");
        EXPECT_EQ(a.headline, std::string(world == 1 ? "the only rank (world 1)" : "every rank") +
                                  " completed everything up to allreduce #" + std::to_string(recorded - 1) +
                                  " in the window " + window + ": nothing diverged");
      }
}

// Version 1 records (no bucket, pid, reason or dump time): the same findings, worded without what is absent.
TEST(FlightAnalysis, Version1RecordsAreReadWithoutTheNewFields) {
  Files v1;
  for (auto& [name, doc] : missing_issue_scenario()) v1.push_back({name, to_version_1(doc)});
  const auto a = analyze(v1);
  EXPECT_EQ(a.groups[0].lead().kind, DivergenceKind::MissingIssue);
  EXPECT_EQ(
      a.headline,
      "rank 1 never issued allreduce #4812 (ddp bucket, float32 x 262144, iteration 402); ranks 0, 2 and 3 "
      "waited 600 s; rank 1's last completed collective is #4811");
  // Pending with no dump time: how long is unknown.
  Files pending;
  for (auto& [name, doc] : rank_ahead_scenario()) pending.push_back({name, to_version_1(doc)});
  const auto b = analyze(pending);
  EXPECT_EQ(b.groups[0].lead().kind, DivergenceKind::MissingIssue);
  EXPECT_EQ(b.groups[0].lead().waited_max_ns, -1);
  EXPECT_NE(b.headline.find("rank 0 waited on it;"), std::string::npos) << b.headline;
  // A version-1 rank beside version-2 ranks.
  Files mixed = missing_issue_scenario();
  mixed[1].second = to_version_1(mixed[1].second);
  EXPECT_EQ(analyze(mixed).groups[0].lead().kind, DivergenceKind::MissingIssue);
}

TEST(FlightAnalysis, HierInnerGroupLeadsWhenOnlyItDiverged) {
  const auto a = analyze(hier_scenario(/*inner_hangs=*/true, /*top_hangs=*/false));
  ASSERT_EQ(a.groups.size(), 4u);
  EXPECT_EQ(a.groups[0].group, "pg0");  // top-level first, then inner ones by name
  EXPECT_EQ(a.groups[1].group, "pg0/host0");
  EXPECT_EQ(a.groups[2].group, "pg0/host1");
  EXPECT_EQ(a.groups[3].group, "pg0/leaders");
  EXPECT_EQ(a.groups[0].lead().kind, DivergenceKind::AllWaiting);
  EXPECT_EQ(a.lead, 2u);
  EXPECT_EQ(a.groups[2].lead().kind, DivergenceKind::MissingIssue);
  EXPECT_EQ(a.headline.rfind("in group pg0/host1: rank 1 (global rank 3) never issued allreduce #25 ", 0), 0u)
      << a.headline;
  EXPECT_NE(a.headline.find("rank 0 (global rank 2) waited 600 s"), std::string::npos) << a.headline;
  EXPECT_EQ(a.groups[1].lead().kind, DivergenceKind::Nothing);
  // --group picks one.
  const auto only = analyze(hier_scenario(true, false), "pg0/host0");
  ASSERT_EQ(only.groups.size(), 1u);
  EXPECT_EQ(only.groups[0].group, "pg0/host0");
}

TEST(FlightAnalysis, HierTopLevelGroupLeadsWhenItDiverged) {
  const auto a = analyze(hier_scenario(/*inner_hangs=*/true, /*top_hangs=*/true));
  EXPECT_EQ(a.lead, 0u);
  EXPECT_EQ(a.groups[0].lead().kind, DivergenceKind::MissingIssue);
  EXPECT_EQ(a.groups[0].lead().ranks, std::vector<int>({2}));
  EXPECT_EQ(a.headline.rfind("rank 2 never issued allreduce #12 ", 0), 0u) << a.headline;
}

TEST(FlightAnalysis, TwoGroupsWaitingOnEachOtherAreNamedTogether) {
  const auto a = analyze(cross_group_wait_scenario());
  ASSERT_EQ(a.groups.size(), 2u);
  EXPECT_NE(a.headline.find("wait on each other"), std::string::npos) << a.headline;
  // Both halves of the wait: rank 0's all-reduce in pg0 that rank 1 never issued, rank 1's all-gather in the
  // gather group that rank 0 never issued.
  for (const char* piece : {"group pg0", "allreduce #20", "join activity", "rank 1 never issued",
                            "group gather", "allgather #10", "zero3 param gather", "rank 0 never issued"})
    EXPECT_NE(a.headline.find(piece), std::string::npos) << piece << "\n" << a.headline;
  // Each group's own finding is still the missing issue.
  for (const auto& g : a.groups) EXPECT_EQ(g.lead().kind, DivergenceKind::MissingIssue) << g.group;
  // Not a cycle: only one group waits on a rank that waits nowhere else.
  Files one = cross_group_wait_scenario();
  for (auto& [name, doc] : one)
    if (doc["group"] == "gather") {
      doc["recorded"] = 10;
      doc["entries"].erase(doc["entries"].end() - (doc["entries"].size() > 10 ? 1 : 0), doc["entries"].end());
    }
  const auto b = analyze(one);
  EXPECT_EQ(b.headline.find("wait on each other"), std::string::npos) << b.headline;
}

// A process record (dist::dump_flight_record) holds several groups; with the same group record also given as
// its own file (the failure dump), the one with more collectives recorded is kept.
TEST(FlightAnalysis, ProcessRecordsAndGroupRecordsTogether) {
  Files files;
  for (int r = 0; r < 2; ++r) {
    RankRecord top, inner;
    top.rank = r;
    top.recorded = 20;
    inner.group = "pg0/host0";
    inner.rank = r;
    inner.recorded = 40;
    json groups = json::array({make_record(top), make_record(inner)});
    if (r == 1) {
      // rank 1's process record was written on SIGUSR1 later; its failure dump of pg0 (fewer entries) too.
      RankRecord older = top;
      older.recorded = 18;
      json early = make_record(older);
      files.push_back({"flight.rank1.json", early});
      groups[0]["dumped_unix_ns"] = groups[0]["dumped_unix_ns"].get<int64_t>() + 1;
    }
    files.push_back({"process.rank" + std::to_string(r) + ".json",
                     json{{"version", 2}, {"reason", "signal"}, {"pid", 1000 + r}, {"groups", groups}}});
  }
  const auto records = records_of(files);
  ASSERT_EQ(records.size(), 4u);
  for (const auto& rec : records) {
    EXPECT_EQ(rec.recorded, rec.group == "pg0" ? 20u : 40u) << rec.file;
    EXPECT_NE(rec.file.find("process.rank"), std::string::npos) << rec.file;
  }
  const auto a = fl::analyze_flight(records);
  EXPECT_EQ(a.groups.size(), 2u);
  EXPECT_EQ(a.groups[0].lead().kind, DivergenceKind::Nothing);
  EXPECT_EQ(a.groups[1].lead().kind, DivergenceKind::Nothing);
  // A process record's pid and reason reach its groups when they lack their own.
  json bare = make_record(RankRecord{});
  bare.erase("pid");
  bare.erase("reason");
  const auto parsed = fl::parse_flight_dump(
      json{{"version", 2}, {"reason", "demand"}, {"pid", 77}, {"groups", json::array({bare})}}.dump(),
      "p.json");
  ASSERT_EQ(parsed.size(), 1u);
  EXPECT_EQ(parsed[0].pid, 77);
  EXPECT_EQ(parsed[0].reason, "demand");
  EXPECT_EQ(parsed[0].file, "p.json groups[0]");
}

TEST(FlightReport, TableShowsTheLastCollectivesAroundTheDivergencePerRank) {
  const auto a = analyze(missing_issue_scenario());
  const std::string table = fl::format_flight_table(a.groups[0], {.last = 4});
  // header + 4 rows: #4809 .. #4812 (the divergence is the last seq any rank issued)
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = table.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(table.substr(start, nl - start));
  ASSERT_EQ(lines.size(), 5u) << table;
  EXPECT_NE(lines[0].find("seq   rank 0"), std::string::npos) << table;
  EXPECT_NE(lines[0].find("rank 3"), std::string::npos) << table;
  EXPECT_EQ(lines[1].rfind("  4809  allreduce float32 x 262144 completed 7.9 ms", 0), 0u) << table;
  EXPECT_EQ(lines[4].rfind("> 4812  allreduce float32 x 262144 failed after 600 s  not issued", 0), 0u)
      << table;
  EXPECT_NE(lines[4].find("bucket 3: blocks.1.mlp.fc2.weight .. blocks.1.ln2.bias, 1.2 MiB, ddp bucket, "
                          "iteration 402"),
            std::string::npos)
      << table;
  // The whole report: the headline first, then the table, the records and the divergences.
  const std::string report = fl::format_flight_report(a, {.last = 4});
  EXPECT_EQ(report.rfind(a.headline + "\n", 0), 0u);
  EXPECT_NE(report.find("group pg0 (shm, world 4)"), std::string::npos);
  EXPECT_NE(
      report.find("records:\n  rank 0: recorded 4813 (window #2813 to #4812 of a 2000-entry ring), dumped on "
                  "failure at 2025-12-02 00:10:48 UTC, pid 1000 on node1, flight.rank0.json"),
      std::string::npos)
      << report;
  EXPECT_NE(report.find("divergences:\n  - missing issue: rank 1 never issued"), std::string::npos) << report;
}

// An NCCL record's GPU time (device_duration_ns, from its CUDA events) is shown beside the host's.
TEST(FlightReport, NcclRecordsShowTheGpuTime) {
  Files files = nothing_scenario(2, 3);
  for (auto& [name, doc] : files) {
    doc["backend"] = "nccl";
    for (json& e : doc["entries"]) e["device_duration_ns"] = 6100000;
  }
  const auto records = records_of(files);
  EXPECT_EQ(records[0].entries[0].device_duration_ns, 6100000);
  const std::string table = fl::format_flight_table(fl::analyze_flight(records).groups[0], {.last = 1});
  EXPECT_NE(table.find("allreduce float32 x 262144 completed 7.9 ms (GPU 6.1 ms)"), std::string::npos)
      << table;
  const json trace = json::parse(fl::flight_chrome_trace(records));
  EXPECT_DOUBLE_EQ(trace["traceEvents"].back()["args"]["device_dur_us"].get<double>(), 6100.0);
}

TEST(FlightReport, TableCellsForNoDumpBeforeTheWindowAndHiddenRanks) {
  const auto a = analyze(no_dump_scenario());
  const std::string table = fl::format_flight_table(a.groups[0], {.last = 2});
  EXPECT_NE(table.find("no dump"), std::string::npos) << table;
  const auto b = analyze(no_overlap_scenario());
  const std::string t2 = fl::format_flight_table(b.groups[0], {.last = 3});
  EXPECT_NE(t2.find("(before its window)"), std::string::npos) << t2;
  // Four ranks in two columns: the ranks the divergence names first, the rest listed as not shown.
  const std::string t3 = fl::format_flight_table(a.groups[0], {.last = 2, .rank_columns = 2});
  EXPECT_NE(t3.find("rank 3"), std::string::npos) << t3;
  EXPECT_NE(t3.find("(ranks 1 and 2 not shown)"), std::string::npos) << t3;
}

TEST(FlightChromeTrace, EveryRankOneProcessOnTheCommonClockSortedAndWellFormed) {
  const auto records = records_of(missing_issue_scenario());
  const json trace = json::parse(fl::flight_chrome_trace(records));
  ASSERT_TRUE(trace.contains("traceEvents"));
  const int64_t t0 = trace["otherData"]["t0_unix_ns"].get<int64_t>();
  double last_ts = -1;
  std::set<int64_t> pids;
  size_t complete = 0;
  for (const json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    if (e["ph"] == "M") {
      EXPECT_EQ(complete, 0u) << "metadata comes first";
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    ++complete;
    const double ts = e["ts"].get<double>();
    EXPECT_GE(ts, last_ts) << "sorted by time";
    last_ts = ts;
    EXPECT_GE(e["dur"].get<double>(), 0);
    pids.insert(e["pid"].get<int64_t>());
    const json& args = e["args"];
    const uint64_t seq = args["seq"].get<uint64_t>();
    EXPECT_EQ(e["name"], "allreduce #" + std::to_string(seq));
    for (const char* k : {"bucket", "params", "bytes", "iteration", "state", "group"})
      EXPECT_TRUE(args.contains(k)) << k;
    // On the wall clock: ts is started (steady) converted with the rank's own anchor.
    const int rank = static_cast<int>(e["pid"].get<int64_t>());
    const int64_t started_unix = issued_at(rank, seq) + 100 - steady_anchor(rank) + unix_anchor(rank);
    EXPECT_NEAR(ts, static_cast<double>(started_unix - t0) / 1e3, 1e-3);
    if (seq == 4812 && rank != 1) {
      EXPECT_EQ(args["state"], "failed");
      EXPECT_NEAR(e["dur"].get<double>(), 600e6, 1e-3);
      EXPECT_EQ(args["bucket"], 3);
      EXPECT_EQ(args["bytes"], 1258291);
    }
  }
  EXPECT_EQ(pids, std::set<int64_t>({0, 1, 2, 3}));
  EXPECT_EQ(complete, 4u * 2000u);
  // A pending collective ends at its rank's dump time.
  const json t2 = json::parse(fl::flight_chrome_trace(records_of(uneven_steps_scenario())));
  bool seen = false;
  for (const json& e : t2["traceEvents"])
    if (e["ph"] == "X" && e["args"]["seq"] == 100) {
      EXPECT_NEAR(e["dur"].get<double>(), 600e6 - 0.1, 1e-3);
      seen = true;
    }
  EXPECT_TRUE(seen);
}

TEST(FlightChromeTrace, HierGroupsAreThreadsOfTheRankProcess) {
  const json trace = json::parse(fl::flight_chrome_trace(records_of(hier_scenario(true, false))));
  std::map<int64_t, std::set<std::string>> groups_of_pid;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X") groups_of_pid[e["pid"].get<int64_t>()].insert(e["args"]["group"].get<std::string>());
  EXPECT_EQ(groups_of_pid[0], std::set<std::string>({"pg0", "pg0/host0", "pg0/leaders"}));
  EXPECT_EQ(groups_of_pid[3], std::set<std::string>({"pg0", "pg0/host1"}));
}

TEST(FlightAnalysis, TextHelpers) {
  EXPECT_EQ(fl::rank_list_text({}), "no rank");
  EXPECT_EQ(fl::rank_list_text({1}), "rank 1");
  EXPECT_EQ(fl::rank_list_text({2, 0}), "ranks 0 and 2");
  EXPECT_EQ(fl::rank_list_text({0, 2, 3}), "ranks 0, 2 and 3");
  EXPECT_EQ(fl::rank_list_text({0, 1, 2, 3}), "ranks 0-3");
  EXPECT_EQ(fl::rank_list_text({0, 1, 2, 4, 6, 7, 8, 9}), "ranks 0-2, 4 and 6-9");
  EXPECT_EQ(fl::duration_text(999), "999 ns");
  EXPECT_EQ(fl::duration_text(7900000), "7.9 ms");
  EXPECT_EQ(fl::duration_text(600000000000LL), "600 s");
  EXPECT_EQ(fl::duration_text(1500), "1.5 us");
  EXPECT_EQ(fl::bytes_text(1023), "1023 B");
  EXPECT_EQ(fl::bytes_text(1024), "1 KiB");
  EXPECT_EQ(fl::bytes_text(1258291), "1.2 MiB");
  EXPECT_EQ(fl::bytes_text(3LL << 30), "3 GiB");
}

// Seeded random records - worlds 1-4, ring sizes 1 to 9, any `recorded`, ranks without a record, the
// recorder off, random states, calls and buckets, version 1 or 2 - never make the analysis throw or leave it
// without a lead sentence, and the report and the Chrome trace are always made.
TEST(FlightAnalysis, RandomRecordsAlwaysGiveALeadSentence) {
  std::mt19937 rng(2024);
  const char* states[] = {"issued", "started", "completed", "failed"};
  for (int iter = 0; iter < 1500; ++iter) {
    const int world = 1 + static_cast<int>(rng() % 4);
    Files files;
    for (int r = 0; r < world; ++r) {
      if (world > 1 && rng() % 5 == 0) continue;  // no dump
      RankRecord rr;
      rr.rank = r;
      rr.world = world;
      rr.capacity = rng() % 7 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 9);
      rr.recorded = rr.capacity == 0 ? 0 : rng() % 20;
      rr.version = rng() % 4 == 0 ? 1 : 2;
      rr.reason = rng() % 3 == 0 ? "exit" : "signal";
      json rec = make_record(rr);
      for (json& e : rec["entries"]) {
        if (rng() % 3 == 0) e["state"] = states[rng() % 4];
        if (rng() % 10 == 0) e["count"] = static_cast<int64_t>(rng() % 3);
        if (rng() % 10 == 0 && rr.version == 2) e["bucket"] = static_cast<int64_t>(rng() % 3);
        if (rng() % 10 == 0) e["started_ns"] = nullptr;
      }
      if (rng() % 8 == 0 && !rec["entries"].empty())  // a gap: an entry the ring no longer holds
        rec["entries"].erase(rng() % rec["entries"].size());
      files.push_back({file_name(rec), rec});
    }
    if (files.empty()) continue;
    SCOPED_TRACE("iteration " + std::to_string(iter));
    fl::FlightAnalysis a;
    ASSERT_NO_THROW(a = analyze(files));
    ASSERT_FALSE(a.groups.empty());
    EXPECT_FALSE(a.headline.empty());
    for (const auto& g : a.groups) {
      ASSERT_FALSE(g.divergences.empty());
      for (const auto& d : g.divergences)
        EXPECT_FALSE(d.sentence.empty()) << fl::divergence_kind_name(d.kind);
    }
    const std::string report = fl::format_flight_report(a, {.last = 1 + rng() % 9});
    EXPECT_EQ(report.rfind(a.headline + "\n", 0), 0u);
    EXPECT_NO_THROW((void)json::parse(fl::flight_chrome_trace(records_of(files))));
  }
}
