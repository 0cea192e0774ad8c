// test_flight_dump_reader.cpp - loading flight recorder dumps (runtime/distributed/flight_dump_reader.h):
// folders and files, both kinds of record, repeats of one record, and each bad input with an error that
// names the file and the fix.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/distributed/flight_dump_reader.h"
#include "tests/tools/flight_dump_builder.h"

namespace {

using namespace ddp::testing::flight;
namespace fl = ddp::dist::flight;
namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("ddp_flight_reader_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// The message of the ddp::Error that parsing `text` throws ("" when it does not throw).
std::string parse_error(const std::string& text, const std::string& source = "d/flight.rank0.json") {
  try {
    fl::parse_flight_dump(text, source);
  } catch (const ddp::Error& e) {
    return e.what();
  }
  return "";
}

std::string merge_error(std::vector<fl::GroupRecord> records) {
  try {
    fl::merge_flight_records(std::move(records));
  } catch (const ddp::Error& e) {
    return e.what();
  }
  return "";
}

std::string load_error(const std::vector<std::string>& paths) {
  try {
    fl::load_flight_dumps(paths);
  } catch (const ddp::Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

}  // namespace

TEST(FlightDumpReader, ReadsEveryFieldOfAVersion2GroupRecord) {
  RankRecord rr;
  rr.rank = 1;
  rr.world = 4;
  rr.recorded = 3;
  json rec = make_record(rr);
  make_pending(entry_of(rec, 2));
  rec["failure"] = "timeout";
  const auto records = fl::parse_flight_dump(rec.dump(), "x.json");
  ASSERT_EQ(records.size(), 1u);
  const fl::GroupRecord& r = records[0];
  EXPECT_EQ(r.file, "x.json");
  EXPECT_EQ(r.version, 2);
  EXPECT_EQ(r.group, "pg0");
  EXPECT_EQ(r.backend, "shm");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.capacity, 2000);
  EXPECT_EQ(r.recorded, 3u);
  EXPECT_EQ(r.pid, 1001);
  EXPECT_EQ(r.host, "node1");
  EXPECT_EQ(r.global_rank, 1);
  EXPECT_EQ(r.reason, "failure");
  EXPECT_EQ(r.failure, "timeout");
  EXPECT_EQ(r.clock_steady_ns, steady_anchor(1));
  ASSERT_EQ(r.entries.size(), 3u);
  const fl::DumpEntry& e = r.entries[2];
  EXPECT_EQ(e.seq, 2u);
  EXPECT_EQ(e.op, "allreduce");
  EXPECT_EQ(e.dtype, "float32");
  EXPECT_EQ(e.count, 262144);
  EXPECT_EQ(e.reduce_op, "sum");
  EXPECT_EQ(e.root, -1);
  EXPECT_EQ(e.state, "started");
  EXPECT_TRUE(e.pending());
  EXPECT_EQ(e.issuer, "ddp bucket");
  EXPECT_EQ(e.iteration, 1);
  EXPECT_EQ(e.bucket, 2);
  EXPECT_EQ(e.bucket_bytes, 1048576);
  EXPECT_EQ(e.params, "layer2.weight .. layer2.bias");
  EXPECT_EQ(e.issued_ns, issued_at(1, 2));
  EXPECT_EQ(e.started_ns, issued_at(1, 2) + 100);
  EXPECT_EQ(e.ended_ns, -1);
  EXPECT_EQ(r.to_unix(e.issued_ns), issued_at(1, 2) - steady_anchor(1) + unix_anchor(1));
  EXPECT_EQ(r.find(1)->seq, 1u);
  EXPECT_EQ(r.find(3), nullptr);
  EXPECT_EQ(r.first_seq(), 0u);
}

TEST(FlightDumpReader, Version1RecordsLeaveTheNewFieldsUnknown) {
  json rec = make_record(RankRecord{.version = 1});
  const auto r = fl::parse_flight_dump(rec.dump(), "v1.json").at(0);
  EXPECT_EQ(r.version, 1);
  EXPECT_EQ(r.pid, -1);
  EXPECT_EQ(r.reason, "");
  EXPECT_EQ(r.dumped_unix_ns, -1);
  EXPECT_EQ(r.global_rank, -1);
  EXPECT_EQ(r.entries.at(0).bucket, -1);
  EXPECT_EQ(r.entries.at(0).params, "");
}

TEST(FlightDumpReader, BadDocumentsNameTheFileAndTheFix) {
  EXPECT_HAS(parse_error("{\"version\": 2, \"group\""), "d/flight.rank0.json is not JSON");
  EXPECT_HAS(parse_error("not json at all"), "give the dump folder or its flight.rank<R>.json files");
  EXPECT_HAS(parse_error("[1, 2]"), "d/flight.rank0.json is an array, not a flight recorder dump");
  EXPECT_HAS(parse_error("{\"traceEvents\": []}"), "d/flight.rank0.json is neither a group record");
  EXPECT_HAS(parse_error("{\"traceEvents\": []}"), "nor a process record");
  json rec = make_record(RankRecord{});
  rec["version"] = 3;
  EXPECT_HAS(parse_error(rec.dump()),
             "schema version 3 is newer than this ddp_flight reads (1 to 2); use the "
             "ddp_flight of the ddp.cpp build that wrote the dump");
  rec["version"] = 0;
  EXPECT_HAS(parse_error(rec.dump()), "schema version 0 is not a flight recorder version");
  rec["version"] = "2";
  EXPECT_HAS(parse_error(rec.dump()), "field \"version\" is a string, expected a whole number");
  rec = make_record(RankRecord{});
  rec.erase("recorded");
  EXPECT_HAS(parse_error(rec.dump()), "d/flight.rank0.json: field \"recorded\" is missing");
  rec = make_record(RankRecord{});
  rec["entries"][3]["count"] = 1.5;
  EXPECT_HAS(parse_error(rec.dump()),
             "d/flight.rank0.json entries[3]: field \"count\" is a number with a fraction");
  rec = make_record(RankRecord{});
  rec["entries"][1]["state"] = "done";
  EXPECT_HAS(parse_error(rec.dump()), "state \"done\" is not one of issued, started, completed, failed");
  rec = make_record(RankRecord{});
  rec["rank"] = 2;  // world 2
  EXPECT_HAS(parse_error(rec.dump()), "rank 2 of world_size 2 is not a rank of that world");
  rec = make_record(RankRecord{});
  rec["entries"][9]["seq"] = 10;  // recorded 10
  EXPECT_HAS(parse_error(rec.dump()), "seq 10 is not below recorded 10");
  rec = make_record(RankRecord{});
  std::swap(rec["entries"][1], rec["entries"][2]);
  EXPECT_HAS(parse_error(rec.dump()), "entries[2]: seq 1 does not follow seq 2");
  // A process record whose group is damaged names the group's place in it.
  json bad = make_record(RankRecord{});
  bad.erase("clock");
  EXPECT_HAS(
      parse_error(json{{"version", 2}, {"groups", json::array({make_record(RankRecord{}), bad})}}.dump(),
                  "p.json"),
      "p.json groups[1]: field \"clock\" is missing");
  EXPECT_HAS(parse_error(json{{"version", 2}, {"groups", 5}}.dump(), "p.json"),
             "p.json: field \"groups\" is a number, expected an array");
}

TEST(FlightDumpReader, TwoRecordsOfOneRankFromDifferentProcessesAreRefused) {
  json a = make_record(RankRecord{});
  json b = a;
  b["pid"] = 4242;
  auto ra = fl::parse_flight_dump(a.dump(), "run1/flight.rank0.json");
  auto rb = fl::parse_flight_dump(b.dump(), "run2/flight.rank0.json");
  const std::string err = merge_error({ra[0], rb[0]});
  EXPECT_HAS(err,
             "two records of group 'pg0' rank 0 come from different processes (pid 1000 on node1 in "
             "run1/flight.rank0.json, pid 4242 on node1 in run2/flight.rank0.json)");
  EXPECT_HAS(err, "move one run's files to another folder and analyse each folder on its own");
  // Version 1 (no pid): told apart by the group's clock anchor.
  json c = make_record(RankRecord{.version = 1});
  json d = c;
  d["clock"]["unix_ns"] = d["clock"]["unix_ns"].get<int64_t>() + 5;
  const std::string err1 = merge_error(
      {fl::parse_flight_dump(c.dump(), "a.json")[0], fl::parse_flight_dump(d.dump(), "b.json")[0]});
  EXPECT_HAS(err1, "come from different instances of the group");
  EXPECT_HAS(err1, "a.json");
  EXPECT_HAS(err1, "b.json");
  // Records of one group that disagree on its size.
  json w4 = make_record(RankRecord{.rank = 1, .world = 4});
  const std::string err2 = merge_error(
      {fl::parse_flight_dump(a.dump(), "a.json")[0], fl::parse_flight_dump(w4.dump(), "w4.json")[0]});
  EXPECT_HAS(err2, "records of group 'pg0' disagree on its size: 2 ranks in a.json, 4 in w4.json");
}

TEST(FlightDumpReader, TheSameRecordTwiceKeepsTheNewer) {
  RankRecord rr;
  rr.recorded = 5;
  json early = make_record(rr);
  rr.recorded = 9;
  json late = make_record(rr);
  for (bool late_first : {false, true}) {
    std::vector<fl::GroupRecord> rs;
    rs.push_back(fl::parse_flight_dump((late_first ? late : early).dump(), "one.json")[0]);
    rs.push_back(fl::parse_flight_dump((late_first ? early : late).dump(), "two.json")[0]);
    const auto merged = fl::merge_flight_records(rs);
    ASSERT_EQ(merged.size(), 1u);
    EXPECT_EQ(merged[0].recorded, 9u);
    EXPECT_EQ(merged[0].file, late_first ? "one.json" : "two.json");
  }
}

TEST(FlightDumpReader, FoldersAndFiles) {
  const std::string dir = temp_dir("folders");
  write_files(dir, missing_issue_scenario());
  write(dir + "/notes.txt", "not a dump, not *.json: skipped");
  fs::create_directories(dir + "/sub");
  write(dir + "/sub/flight.rank0.json", "{}");  // folders are not searched recursively
  const auto from_dir = fl::load_flight_dumps({dir});
  ASSERT_EQ(from_dir.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(from_dir[r].rank, r);
  EXPECT_EQ(from_dir[2].file, dir + "/flight.rank2.json");
  const auto from_files = fl::load_flight_dumps({dir + "/flight.rank3.json", dir + "/flight.rank0.json"});
  ASSERT_EQ(from_files.size(), 2u);
  EXPECT_EQ(from_files[0].rank, 0);  // sorted by group and rank
  // The same file twice is one record.
  EXPECT_EQ(fl::load_flight_dumps({dir, dir + "/flight.rank1.json"}).size(), 4u);

  EXPECT_HAS(load_error({}), "no dump given");
  EXPECT_HAS(load_error({dir + "/missing.json"}), "'" + dir + "/missing.json' does not exist");
  const std::string empty = temp_dir("empty");
  EXPECT_HAS(load_error({empty}), "folder '" + empty + "' holds no *.json file");
  write(dir + "/flight.rank9.json", "garbage");
  EXPECT_HAS(load_error({dir}), dir + "/flight.rank9.json is not JSON");
  fs::remove_all(dir);
  fs::remove_all(empty);
}
