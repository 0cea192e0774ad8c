// chrome_trace.cpp - the Chrome trace-event JSON of a Tracer, and merging per-rank files onto one time axis.
// File layout (docs/trace.md): {"traceEvents": [metadata events, events...], "displayTimeUnit": "ms",
// "otherData": {"ddp_trace_format": 1, "rank": r, "start_unix_us": t0}}; ts/dur in microseconds since t0.
// Viewers draw the complete events of one tid as a stack and Perfetto drops an event that starts inside
// another and ends after it, so such events (bucket all-reduces queued behind each other) are written on
// extra tracks of their lane: tid lane + k * kExtraTrackTidStride, named "<lane> <k + 1>".
#include <unistd.h>

#include <algorithm>
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
    j["args"] = std::move(args);
    events.push_back(std::move(j));
  }
  ojson doc = {
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData", {{"ddp_trace_format", kTraceFormat}, {"rank", pid}, {"start_unix_us", start_unix_us_}}}};
  if (world_size() > 0) doc["otherData"]["world_size"] = world_size();
  return doc.dump();
}

void Tracer::write_chrome_trace(const std::string& path) const { write_text_file(path, chrome_trace_json()); }

void merge_chrome_traces(const std::vector<std::string>& inputs, const std::string& output) {
  DDP_CHECK(!inputs.empty(), "merge_chrome_traces: no input files; pass each rank's trace");
  struct Input {
    std::string path;
    ojson doc;
    int64_t start_unix_us = 0;
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
    files.push_back({path, std::move(doc), t0});
  }
  int64_t base = files[0].start_unix_us;
  for (const Input& f : files) base = std::min(base, f.start_unix_us);

  std::map<int64_t, std::string> owner_of_pid;
  ojson merged = ojson::array();
  ojson merged_from = ojson::array();
  for (Input& f : files) {
    std::set<int64_t> pids;
    const double shift_us = static_cast<double>(f.start_unix_us - base);
    for (ojson& e : f.doc["traceEvents"]) {
      if (e.contains("pid") && e["pid"].is_number_integer()) pids.insert(e["pid"].get<int64_t>());
      if (e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() + shift_us;
      merged.push_back(std::move(e));
    }
    for (int64_t pid : pids) {
      auto [it, fresh] = owner_of_pid.emplace(pid, f.path);
      DDP_CHECK(fresh, "merge_chrome_traces: rank ", pid, " appears in both '", it->second, "' and '", f.path,
                "'; merge each rank's trace once");
    }
    merged_from.push_back(f.path);
  }
  ojson ranks = ojson::array();
  for (const auto& [pid, path] : owner_of_pid) ranks.push_back(pid);
  ojson doc = {{"traceEvents", std::move(merged)},
               {"displayTimeUnit", "ms"},
               {"otherData",
                {{"ddp_trace_format", kTraceFormat},
                 {"start_unix_us", base},
                 {"ranks", std::move(ranks)},
                 {"merged_from", std::move(merged_from)}}}};
  for (const Input& f : files)
    if (f.doc["otherData"].contains("world_size"))
      doc["otherData"]["world_size"] = f.doc["otherData"]["world_size"];
  write_text_file(output, doc.dump());
}

}  // namespace ddp::trace
