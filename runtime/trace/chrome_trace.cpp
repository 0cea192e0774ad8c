// chrome_trace.cpp - the Chrome trace-event JSON of a Tracer, and merging per-rank files onto one time axis.
// File layout (docs/trace.md): {"traceEvents": [metadata events, events...], "displayTimeUnit": "ms",
// "otherData": {"ddp_trace_format": 1, "rank": r, "start_unix_us": t0}}; ts/dur in microseconds since t0.
#include <unistd.h>

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

}  // namespace

std::string Tracer::chrome_trace_json() const {
  const int pid = rank();
  ojson events = ojson::array();
  events.push_back(metadata_event("process_name", pid, 0, {{"name", "rank " + std::to_string(pid)}}));
  events.push_back(metadata_event("process_sort_index", pid, 0, {{"sort_index", pid}}));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [lane, name] : lane_names_) {
      events.push_back(metadata_event("thread_name", pid, lane, {{"name", name}}));
      events.push_back(metadata_event("thread_sort_index", pid, lane, {{"sort_index", lane}}));
    }
  }
  for (const Event& e : this->events()) {
    ojson j = {{"name", e.name},
               {"cat", e.category},
               {"ph", std::string(1, e.phase)},
               {"ts", static_cast<double>(e.ts_ns) / 1000.0}};
    if (e.phase == 'X') j["dur"] = static_cast<double>(e.dur_ns) / 1000.0;
    if (e.phase == 'i') j["s"] = "t";
    j["pid"] = pid;
    j["tid"] = e.lane;
    ojson args = ojson::object();
    for (int i = 0; i < e.num_args; ++i) args[e.args[i].key ? e.args[i].key : "?"] = e.args[i].value;
    j["args"] = std::move(args);
    events.push_back(std::move(j));
  }
  ojson doc = {
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData", {{"ddp_trace_format", kTraceFormat}, {"rank", pid}, {"start_unix_us", start_unix_us_}}}};
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
  write_text_file(output, doc.dump());
}

}  // namespace ddp::trace
