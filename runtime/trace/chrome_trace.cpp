// chrome_trace.cpp - the Chrome trace-event JSON of a Tracer, and merging per-rank files onto one time axis.
// File layout (docs/trace.md): {"traceEvents": [metadata events, events...], "displayTimeUnit": "ms",
// "otherData": {"ddp_trace_format": 1, "rank": r, "start_unix_us": t0, "clock": {...}}}; ts/dur in
// microseconds since t0. "clock" (when the program estimated it) is the offset to rank 0's clock; merging
// uses it ("common" clock) or, without it, the wall-clock starts ("wall").
// Viewers draw the complete events of one tid as a stack and Perfetto drops an event that starts inside
// another and ends after it, so such events (bucket all-reduces queued behind each other) are written on
// extra tracks of their lane: tid lane + k * kExtraTrackTidStride, named "<lane> <k + 1>".
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/trace/trace.h"

namespace ddp::trace {
namespace {

using ojson = nlohmann::ordered_json;
constexpr int kTraceFormat = 1;

ojson metadata_event(const char* name, int pid, Lane tid, ojson args) {
  return ojson{{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

// Writes `text` to path.tmp.<pid> and renames it over `path`, so a reader never sees half a trace.
void write_text_file(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp." + std::to_string(static_cast<long>(::getpid()));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    DDP_CHECK(out.good(), "cannot write trace '", path, "': cannot create '", temp,
              "' (does the directory exist and is it writable?)");
    out << text;
    out.flush();
    if (!out.good()) {
      std::remove(temp.c_str());
      DDP_FAIL("cannot write trace '", path, "': write to '", temp, "' failed (disk full?)");
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    DDP_FAIL("cannot write trace '", path, "': rename from '", temp, "' failed");
  }
}

ojson read_trace_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DDP_CHECK(in.good(), "cannot read trace '", path, "': no such file or not readable");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return ojson::parse(text.str());
  } catch (const ojson::exception& e) {
    DDP_FAIL("trace '", path, "' is not valid JSON: ", e.what());
  }
}

// For each event, the track of its lane it goes on: 0 (the lane itself) or k >= 1 (extra track k). A track
// keeps the stack of its open events; an event fits when the innermost still-open one contains it whole.
// Events are visited by start time, longer first on ties, so a parent always precedes what it contains.
std::vector<int> assign_tracks(const std::vector<Event>& events) {
  std::vector<size_t> order(events.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (events[a].ts_ns != events[b].ts_ns) return events[a].ts_ns < events[b].ts_ns;
    return events[a].dur_ns > events[b].dur_ns;
  });
  std::map<Lane, std::vector<std::vector<int64_t>>> open_ends;  // lane -> track -> ends of open events
  std::vector<int> track(events.size(), 0);
  for (size_t i : order) {
    const Event& e = events[i];
    if (e.phase != 'X') continue;
    const int64_t end = e.ts_ns + e.dur_ns;
    auto& tracks = open_ends[e.lane];
    size_t k = 0;
    for (; k < tracks.size(); ++k) {
      auto& stack = tracks[k];
      while (!stack.empty() && stack.back() <= e.ts_ns) stack.pop_back();
      if (stack.empty() || end <= stack.back()) break;
    }
    if (k == tracks.size()) tracks.emplace_back();
    tracks[k].push_back(end);
    track[i] = static_cast<int>(k);
  }
  return track;
}

}  // namespace

std::string Tracer::chrome_trace_json() const {
  const int pid = rank();
  ojson events = ojson::array();
  events.push_back(metadata_event("process_name", pid, 0, {{"name", "rank " + std::to_string(pid)}}));
  events.push_back(metadata_event("process_sort_index", pid, 0, {{"sort_index", pid}}));
  const std::vector<Event> recorded = this->events();
  const std::vector<int> track = assign_tracks(recorded);
  std::map<Lane, int> tracks_of_lane;
  for (size_t i = 0; i < recorded.size(); ++i)
    tracks_of_lane[recorded[i].lane] = std::max(tracks_of_lane[recorded[i].lane], track[i] + 1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [lane, name] : lane_names_) {
      for (int k = 0; k < std::max(1, tracks_of_lane[lane]); ++k) {
        const Lane tid = lane + k * kExtraTrackTidStride;
        events.push_back(metadata_event("thread_name", pid, tid,
                                        {{"name", k == 0 ? name : name + " " + std::to_string(k + 1)}}));
        events.push_back(metadata_event("thread_sort_index", pid, tid, {{"sort_index", lane * 1000 + k}}));
      }
    }
  }
  for (size_t i = 0; i < recorded.size(); ++i) {
    const Event& e = recorded[i];
    ojson j = {{"name", e.name},
               {"cat", e.category},
               {"ph", std::string(1, e.phase)},
               {"ts", static_cast<double>(e.ts_ns) / 1000.0}};
    if (e.phase == 'X') j["dur"] = static_cast<double>(e.dur_ns) / 1000.0;
    if (e.phase == 'i') j["s"] = "t";
    j["pid"] = pid;
    j["tid"] = e.lane + track[i] * kExtraTrackTidStride;
    ojson args = ojson::object();
    for (int i = 0; i < e.num_args; ++i) args[e.args[i].key ? e.args[i].key : "?"] = e.args[i].value;
    for (int i = 0; i < e.num_text_args; ++i)
      args[e.text_args[i].key ? e.text_args[i].key : "?"] = e.text_args[i].value;
    j["args"] = std::move(args);
    events.push_back(std::move(j));
  }
  ojson doc = {
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData", {{"ddp_trace_format", kTraceFormat}, {"rank", pid}, {"start_unix_us", start_unix_us_}}}};
  if (world_size() > 0) doc["otherData"]["world_size"] = world_size();
  if (has_clock_sync()) {
    const ClockSync c = clock_sync();
    doc["otherData"]["clock"] = {{"reference_rank", c.reference_rank},
                                 {"reference_start_unix_us", c.reference_start_unix_us},
                                 {"offset_us", static_cast<double>(c.offset_ns) / 1000.0},
                                 {"error_bound_us", static_cast<double>(c.error_bound_ns) / 1000.0},
                                 {"rounds", c.rounds}};
  }
  return doc.dump();
}

std::string rank_trace_path(const std::string& path, int rank) {
  const std::string tag = ".rank" + std::to_string(rank);
  const auto slash = path.find_last_of('/');
  const auto dot = path.find_last_of('.');
  // No extension, or the only dot starts the file name (".trace"): the tag goes at the end.
  if (dot == std::string::npos || (slash != std::string::npos && dot <= slash + 1) ||
      (slash == std::string::npos && dot == 0))
    return path + tag;
  return path.substr(0, dot) + tag + path.substr(dot);
}

void Tracer::write_chrome_trace(const std::string& path) const { write_text_file(path, chrome_trace_json()); }

namespace {

// The input's otherData.clock when it is a per-rank clock sync (offset_us, error_bound_us,
// reference_start_unix_us); null otherwise (older files, merged files).
const ojson* clock_sync_of(const ojson& doc) {
  if (!doc.contains("otherData") || !doc["otherData"].contains("clock")) return nullptr;
  const ojson& c = doc["otherData"]["clock"];
  if (!c.is_object() || !c.contains("offset_us") || !c["offset_us"].is_number() ||
      !c.contains("error_bound_us") || !c["error_bound_us"].is_number() ||
      !c.contains("reference_start_unix_us") || !c["reference_start_unix_us"].is_number_integer())
    return nullptr;
  return &c;
}

}  // namespace

// otherData.rank of a trace, -1 when absent or not a whole number.
static int64_t rank_of(const ojson& doc) {
  const ojson& other = doc["otherData"];
  return other.contains("rank") && other["rank"].is_number_integer() ? other["rank"].get<int64_t>() : -1;
}

void merge_chrome_traces(const std::vector<std::string>& inputs, const std::string& output) {
  DDP_CHECK(!inputs.empty(), "merge_chrome_traces: no input files; pass each rank's trace");
  struct Input {
    std::string path;
    ojson doc;
    int64_t start_unix_us = 0;
    double shift_us = 0;
  };
  std::vector<Input> files;
  for (const std::string& path : inputs) {
    ojson doc = read_trace_file(path);
    DDP_CHECK(doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array(), "trace '",
              path,
              "' has no \"traceEvents\" array; merge needs files written by Tracer::write_chrome_trace");
    const ojson* start = doc.contains("otherData") ? &doc["otherData"] : nullptr;
    DDP_CHECK(
        start && start->contains("start_unix_us") && (*start)["start_unix_us"].is_number_integer(), "trace '",
        path,
        "' has no otherData.start_unix_us (the wall-clock time of its time 0), so it cannot be aligned;",
        " merge needs files written by Tracer::write_chrome_trace");
    int64_t t0 = (*start)["start_unix_us"].get<int64_t>();
    files.push_back({path, std::move(doc), t0, 0.0});
  }
  // The common clock needs every input synchronized against one reference (the same job's rank 0).
  bool common = true;
  for (const Input& f : files) {
    const ojson* c = clock_sync_of(f.doc);
    common = common && c && (*c)["reference_start_unix_us"] ==
                                (*clock_sync_of(files[0].doc))["reference_start_unix_us"];
  }
  int64_t base_unix_us = 0;
  ojson clock = {{"alignment", common ? "common" : "wall"}};
  ojson per_rank = ojson::array();
  if (common) {
    // Reference time = ts + offset_us; shifted right so that no event lands before 0.
    double earliest = 0;
    for (const Input& f : files) earliest = std::min(earliest, (*clock_sync_of(f.doc))["offset_us"].get<double>());
    double max_bound = 0;
    for (Input& f : files) {
      const ojson& c = *clock_sync_of(f.doc);
      f.shift_us = c["offset_us"].get<double>() - earliest;
      max_bound = std::max(max_bound, c["error_bound_us"].get<double>());
      per_rank.push_back({{"rank", rank_of(f.doc)},
                          {"file", f.path},
                          {"offset_us", c["offset_us"]},
                          {"error_bound_us", c["error_bound_us"]}});
    }
    const ojson& c0 = *clock_sync_of(files[0].doc);
    base_unix_us = c0["reference_start_unix_us"].get<int64_t>() + static_cast<int64_t>(std::floor(earliest));
    clock["reference_rank"] = c0.contains("reference_rank") && c0["reference_rank"].is_number_integer()
                                  ? c0["reference_rank"].get<int64_t>()
                                  : 0;
    clock["max_error_bound_us"] = max_bound;
  } else {
    base_unix_us = files[0].start_unix_us;
    for (const Input& f : files) base_unix_us = std::min(base_unix_us, f.start_unix_us);
    for (Input& f : files) {
      f.shift_us = static_cast<double>(f.start_unix_us - base_unix_us);
      per_rank.push_back({{"rank", rank_of(f.doc)}, {"file", f.path}, {"offset_us", f.shift_us}});
    }
  }
  clock["inputs"] = std::move(per_rank);

  std::map<int64_t, std::string> owner_of_pid;
  ojson metadata = ojson::array();
  std::vector<ojson> timed;
  ojson merged_from = ojson::array();
  for (Input& f : files) {
    std::set<int64_t> pids;
    for (ojson& e : f.doc["traceEvents"]) {
      if (e.contains("pid") && e["pid"].is_number_integer()) pids.insert(e["pid"].get<int64_t>());
      if (e.contains("ts") && e["ts"].is_number()) {
        e["ts"] = e["ts"].get<double>() + f.shift_us;
        timed.push_back(std::move(e));
      } else {
        metadata.push_back(std::move(e));
      }
    }
    for (int64_t pid : pids) {
      auto [it, fresh] = owner_of_pid.emplace(pid, f.path);
      DDP_CHECK(fresh, "merge_chrome_traces: rank ", pid, " appears in both '", it->second, "' and '", f.path,
                "'; merge each rank's trace once");
    }
    merged_from.push_back(f.path);
  }
  // Sorted by time (stable: a file's own order among equal times is kept), after the metadata.
  std::stable_sort(timed.begin(), timed.end(),
                   [](const ojson& a, const ojson& b) { return a["ts"].get<double>() < b["ts"].get<double>(); });
  ojson merged = std::move(metadata);
  for (ojson& e : timed) merged.push_back(std::move(e));
  ojson ranks = ojson::array();
  for (const auto& [pid, path] : owner_of_pid) ranks.push_back(pid);
  ojson doc = {{"traceEvents", std::move(merged)},
               {"displayTimeUnit", "ms"},
               {"otherData",
                {{"ddp_trace_format", kTraceFormat},
                 {"start_unix_us", base_unix_us},
                 {"ranks", std::move(ranks)},
                 {"merged_from", std::move(merged_from)},
                 {"clock", std::move(clock)}}}};
  for (const Input& f : files)
    if (f.doc["otherData"].contains("world_size"))
      doc["otherData"]["world_size"] = f.doc["otherData"]["world_size"];
  write_text_file(output, doc.dump());
}

}  // namespace ddp::trace
