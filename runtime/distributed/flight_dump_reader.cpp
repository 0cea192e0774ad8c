// flight_dump_reader.cpp - JSON of flight recorder dumps -> GroupRecord, with the checks that name the file.
#include "runtime/distributed/flight_dump_reader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace ddp::dist::flight {

namespace {
using nlohmann::json;

const char* kind_name(json::value_t t) {
  switch (t) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::binary:
      return "binary";
    case json::value_t::discarded:
      return "nothing";
    default:
      return "a number";
  }
}

// Reads the fields of one JSON object with errors that name the file, the object and the field.
class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key) const {
    DDP_CHECK(j_.contains(key), where_, ": field \"", key, "\" is missing; ", fix());
    return integer_value(key);
  }
  // -1 when the field is absent or null.
  int64_t integer_or(const char* key, int64_t fallback) const {
    return has(key) ? integer_value(key) : fallback;
  }
  std::string text(const char* key) const {
    DDP_CHECK(j_.contains(key), where_, ": field \"", key, "\" is missing; ", fix());
    return text_value(key);
  }
  std::string text_or(const char* key, const std::string& fallback) const {
    return has(key) ? text_value(key) : fallback;
  }
  const json& array(const char* key) const {
    DDP_CHECK(j_.contains(key), where_, ": field \"", key, "\" is missing; ", fix());
    const json& v = j_.at(key);
    DDP_CHECK(v.is_array(), where_, ": field \"", key, "\" is ", kind_name(v.type()), ", expected an array; ",
              fix());
    return v;
  }
  const json& object(const char* key) const {
    DDP_CHECK(j_.contains(key), where_, ": field \"", key, "\" is missing; ", fix());
    const json& v = j_.at(key);
    DDP_CHECK(v.is_object(), where_, ": field \"", key, "\" is ", kind_name(v.type()),
              ", expected an object; ", fix());
    return v;
  }

 private:
  static std::string fix() {
    return "the file is not a flight recorder dump as docs/debugging.md describes it (truncated or edited?): "
           "dump again or leave the file out";
  }
  int64_t integer_value(const char* key) const {
    const json& v = j_.at(key);
    DDP_CHECK(v.is_number_integer(), where_, ": field \"", key, "\" is ", kind_name(v.type()),
              v.is_number() ? " with a fraction" : "", ", expected a whole number; ", fix());
    return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
  }
  std::string text_value(const char* key) const {
    const json& v = j_.at(key);
    DDP_CHECK(v.is_string(), where_, ": field \"", key, "\" is ", kind_name(v.type()),
              ", expected a string; ", fix());
    return v.get<std::string>();
  }

  const json& j_;
  std::string where_;
};

void check_version(const json& doc, const std::string& where) {
  Fields f(doc, where);
  const int64_t v = f.integer("version");
  DDP_CHECK(v >= 1, where, ": schema version ", v, " is not a flight recorder version (1 to ",
            kNewestFlightSchema, "); the file is damaged or not a dump");
  DDP_CHECK(v <= kNewestFlightSchema, where, ": schema version ", v,
            " is newer than this ddp_flight reads (1 to ", kNewestFlightSchema,
            "); use the ddp_flight of the ddp.cpp build that wrote the dump");
}

// Bounds of the numbers a record holds (a damaged file must be refused by name, not make the analysis
// allocate or loop without end): the largest world, the recorder's ring limit (flight_recorder.cpp), the
// largest count of collectives or elements, timestamps in nanoseconds (below 2^62: their sums and
// differences cannot overflow).
constexpr int64_t kMaxWorld = int64_t{1} << 20;
constexpr int64_t kMaxCapacity = 10000000;
constexpr int64_t kMaxCount = int64_t{1} << 53;
constexpr int64_t kMaxNs = int64_t{1} << 62;

int64_t bounded(int64_t v, int64_t lo, int64_t hi, const std::string& where, const char* field,
                const char* what) {
  DDP_CHECK(v >= lo && v <= hi, where, ": ", field, " ", v, " is not ", what, " (", lo, " to ", hi,
            "); the file is damaged: dump again or leave the file out");
  return v;
}
// A timestamp field: -1 (absent) or a time in nanoseconds.
int64_t time_ns(int64_t v, const std::string& where, const char* field) {
  return bounded(v, -1, kMaxNs, where, field, "a time in nanoseconds");
}

DumpEntry parse_entry(const json& j, const std::string& where) {
  DDP_CHECK(j.is_object(), where, " is ", kind_name(j.type()), ", expected an entry object");
  Fields f(j, where);
  DumpEntry e;
  const int64_t seq = f.integer("seq");
  DDP_CHECK(seq >= 0, where, ": seq ", seq, " is negative; the file is damaged");
  e.seq = static_cast<uint64_t>(seq);
  e.op = f.text("op");
  e.dtype = f.text("dtype");
  e.count = bounded(f.integer("count"), 0, kMaxCount, where, "count", "a number of elements");
  e.reduce_op = f.text_or("reduce_op", "");
  e.root = f.integer_or("root", -1);
  e.state = f.text("state");
  DDP_CHECK(e.state == "issued" || e.state == "started" || e.state == "completed" || e.state == "failed",
            where, ": state \"", e.state,
            "\" is not one of issued, started, completed, failed; the file is damaged");
  e.issuer = f.text_or("issuer", "");
  e.iteration = f.integer_or("iteration", -1);
  e.bucket = f.integer_or("bucket", -1);
  e.bucket_bytes =
      bounded(f.integer_or("bucket_bytes", -1), -1, kMaxNs, where, "bucket_bytes", "a size in bytes");
  e.params = f.text_or("params", "");
  e.issued_ns = time_ns(f.integer_or("issued_ns", -1), where, "issued_ns");
  e.started_ns = time_ns(f.integer_or("started_ns", -1), where, "started_ns");
  e.ended_ns = time_ns(f.integer_or("ended_ns", -1), where, "ended_ns");
  e.device_duration_ns = time_ns(f.integer_or("device_duration_ns", -1), where, "device_duration_ns");
  return e;
}

// The process record's fields a group record inherits when it lacks them.
struct ProcessFields {
  int64_t pid = -1;
  std::string reason;
  int64_t dumped_unix_ns = -1;
};

GroupRecord parse_group(const json& j, const std::string& where, const ProcessFields& process) {
  DDP_CHECK(j.is_object(), where, " is ", kind_name(j.type()), ", expected a group record object");
  check_version(j, where);
  Fields f(j, where);
  GroupRecord r;
  r.file = where;
  r.version = static_cast<int>(f.integer("version"));
  r.group = f.text("group");
  r.backend = f.text_or("backend", "");
  const int64_t rank = f.integer("rank"), world = f.integer("world_size");
  DDP_CHECK(world >= 1 && world <= kMaxWorld, where, ": world_size ", world,
            " is not a number of ranks (1 to ", kMaxWorld,
            "); the file is damaged: dump again or leave the file out");
  DDP_CHECK(rank >= 0 && rank < world, where, ": rank ", rank, " of world_size ", world,
            " is not a rank of that world; the file is damaged");
  r.rank = static_cast<int>(rank);
  r.world_size = static_cast<int>(world);
  r.capacity = bounded(f.integer("capacity"), 0, kMaxCapacity, where, "capacity", "a ring size");
  const int64_t recorded =
      bounded(f.integer("recorded"), 0, kMaxNs, where, "recorded", "a count of collectives");
  r.recorded = static_cast<uint64_t>(recorded);
  r.pid = f.integer_or("pid", process.pid);
  r.host = f.text_or("host", "");
  r.global_rank = f.integer_or("global_rank", -1);
  r.reason = f.text_or("reason", process.reason);
  r.dumped_unix_ns = time_ns(f.integer_or("dumped_unix_ns", process.dumped_unix_ns), where, "dumped_unix_ns");
  const json& clock = f.object("clock");
  Fields c(clock, where + " clock");
  r.clock_steady_ns =
      bounded(c.integer("steady_ns"), 0, kMaxNs, where, "clock.steady_ns", "a time in nanoseconds");
  r.clock_unix_ns = bounded(c.integer("unix_ns"), 0, kMaxNs, where, "clock.unix_ns", "a time in nanoseconds");
  r.failure = f.text_or("failure", "");
  const json& entries = f.array("entries");
  DDP_CHECK(static_cast<int64_t>(entries.size()) <= std::max<int64_t>(r.capacity, 0), where, ": ",
            entries.size(), " entries in a ring of capacity ", r.capacity,
            "; the file is damaged: dump again or leave the file out");
  r.entries.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    r.entries.push_back(parse_entry(entries[i], where + " entries[" + std::to_string(i) + "]"));
    const DumpEntry& e = r.entries.back();
    DDP_CHECK(e.seq < r.recorded, where, " entries[", i, "]: seq ", e.seq, " is not below recorded ",
              r.recorded, "; the file is damaged");
    DDP_CHECK(i == 0 || r.entries[i - 1].seq < e.seq, where, " entries[", i, "]: seq ", e.seq,
              " does not follow seq ", r.entries[i - 1].seq,
              " (entries are oldest first); the file is damaged");
  }
  return r;
}

std::string identity_text(const GroupRecord& r) {
  std::ostringstream os;
  if (r.pid >= 0) os << "pid " << r.pid;
  if (r.pid >= 0 && !r.host.empty()) os << " on " << r.host;
  if (r.pid < 0) os << "group created at unix ns " << r.clock_unix_ns;
  os << " in " << r.file;
  return os.str();
}

}  // namespace

const DumpEntry* GroupRecord::find(uint64_t seq) const {
  auto it = std::lower_bound(entries.begin(), entries.end(), seq,
                             [](const DumpEntry& e, uint64_t s) { return e.seq < s; });
  return it != entries.end() && it->seq == seq ? &*it : nullptr;
}

std::vector<GroupRecord> parse_flight_dump(const std::string& json_text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::parse_error& e) {
    DDP_FAIL(source, " is not JSON (", e.what(),
             "); a flight recorder dump is a JSON file: give the dump folder "
             "or its flight.rank<R>.json files");
  }
  DDP_CHECK(doc.is_object(), source, " is ", kind_name(doc.type()),
            ", not a flight recorder dump (a JSON object with \"version\"); leave it out");
  const bool is_group = doc.contains("entries") && doc.contains("group");
  const bool is_process = doc.contains("groups");
  DDP_CHECK(
      is_group || is_process, source,
      " is neither a group record (\"group\", \"rank\", \"entries\": flight.rank<R>.json) nor a process "
      "record (\"groups\": dist::dump_flight_record's file); is it a flight recorder dump? Leave it out");
  DDP_CHECK(!(is_group && is_process), source,
            " has both \"entries\" and \"groups\": it is not a flight recorder dump; leave it out");
  std::vector<GroupRecord> out;
  if (is_group) {
    out.push_back(parse_group(doc, source, {}));
    return out;
  }
  check_version(doc, source);
  Fields f(doc, source);
  ProcessFields process;
  process.pid = f.integer_or("pid", -1);
  process.reason = f.text_or("reason", "");
  process.dumped_unix_ns = f.integer_or("dumped_unix_ns", -1);
  const json& groups = f.array("groups");
  DDP_CHECK(!groups.empty(), source,
            " is a process record with no group (\"groups\" is empty): the process had "
            "no process group when it was written; leave the file out");
  for (size_t i = 0; i < groups.size(); ++i)
    out.push_back(parse_group(groups[i], source + " groups[" + std::to_string(i) + "]", process));
  return out;
}

std::vector<GroupRecord> merge_flight_records(std::vector<GroupRecord> records) {
  std::map<std::pair<std::string, int>, size_t> kept;  // (group, rank) -> index in out
  std::vector<GroupRecord> out;
  std::map<std::string, std::pair<int, std::string>> world_of;  // group -> (world_size, first file)
  for (GroupRecord& r : records) {
    auto w = world_of.find(r.group);
    if (w == world_of.end()) {
      world_of[r.group] = {r.world_size, r.file};
    } else {
      DDP_CHECK(w->second.first == r.world_size, "records of group '", r.group,
                "' disagree on its size: ", w->second.first, " ranks in ", w->second.second, ", ",
                r.world_size, " in ", r.file,
                ": dumps of different jobs are mixed; analyse one job's dump folder at a time");
    }
    const auto key = std::make_pair(r.group, r.rank);
    auto it = kept.find(key);
    if (it == kept.end()) {
      kept[key] = out.size();
      out.push_back(std::move(r));
      continue;
    }
    GroupRecord& old = out[it->second];
    const bool other_pid = old.pid >= 0 && r.pid >= 0 && old.pid != r.pid;
    DDP_CHECK(!other_pid, "two records of group '", r.group, "' rank ", r.rank,
              " come from different processes (", identity_text(old), ", ", identity_text(r),
              "): dumps of different runs are mixed; move one run's files to another folder and analyse each "
              "folder on its own");
    const bool other_instance =
        old.clock_steady_ns != r.clock_steady_ns || old.clock_unix_ns != r.clock_unix_ns;
    DDP_CHECK(!other_instance, "two records of group '", r.group, "' rank ", r.rank,
              " come from different instances of the group (", identity_text(old), ", ", identity_text(r),
              "; their clock anchors differ): the group was made twice or the dumps are of different runs; "
              "analyse one instance's files at a time");
    if (std::make_tuple(r.recorded, r.dumped_unix_ns) >= std::make_tuple(old.recorded, old.dumped_unix_ns))
      old = std::move(r);
  }
  std::sort(out.begin(), out.end(), [](const GroupRecord& a, const GroupRecord& b) {
    return std::tie(a.group, a.rank) < std::tie(b.group, b.rank);
  });
  return out;
}

std::vector<GroupRecord> load_flight_dumps(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  DDP_CHECK(!paths.empty(),
            "no dump given: name the dump folder (DDP_FLIGHT_RECORDER_DIR, or the folder ddprun "
            "names in its failure summary) or its flight.rank<R>.json files");
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(p, ec))
        if (entry.is_regular_file() && entry.path().extension() == ".json")
          found.push_back(entry.path().string());
      DDP_CHECK(!ec, "cannot list folder '", p, "': ", ec.message());
      DDP_CHECK(!found.empty(), "folder '", p,
                "' holds no *.json file: is it the dump folder? Flight recorder "
                "dumps are named flight.rank<R>.json");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      DDP_CHECK(fs::exists(p, ec), "'", p, "' does not exist: give the dump folder or its json files");
      files.push_back(p);
    }
  }
  std::vector<GroupRecord> records;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    DDP_CHECK(in.good(), "cannot read '", file, "': check its permissions");
    std::ostringstream text;
    text << in.rdbuf();
    for (GroupRecord& r : parse_flight_dump(text.str(), file)) records.push_back(std::move(r));
  }
  return merge_flight_records(std::move(records));
}

}  // namespace ddp::dist::flight
