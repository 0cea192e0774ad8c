// trace_analysis.cpp - loading Chrome traces and the per-iteration step statistics (see trace_analysis.h for
// the definitions; docs/trace.md explains them with a picture).
#include "runtime/trace/trace_analysis.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace ddp::trace {
namespace {

using json = nlohmann::json;
using Intervals = std::vector<std::pair<double, double>>;

// Sorted, disjoint, non-empty intervals covering the same points.
Intervals normalized(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (auto [b, e] : v) {
    if (e <= b) continue;
    if (!out.empty() && b <= out.back().second)
      out.back().second = std::max(out.back().second, e);
    else
      out.push_back({b, e});
  }
  return out;
}

int64_t integer_field(const json& e, const char* key, size_t index, const std::string& source) {
  if (!e.contains(key)) return 0;
  DDP_CHECK(e[key].is_number_integer(), "trace '", source, "': event ", index, " has a non-integer \"", key,
            "\": ", e[key].dump());
  return e[key].get<int64_t>();
}

double number_field(const json& e, const char* key, size_t index, const std::string& source) {
  DDP_CHECK(e.contains(key) && e[key].is_number(), "trace '", source, "': event ", index, " (",
            e.value("name", std::string("?")), ") needs a numeric \"", key, "\"");
  return e[key].get<double>();
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Window {
  int64_t iteration;
  double begin, end;
};

IterationStats stats_for(int64_t rank, const Window& w, const std::vector<const TraceEvent*>& events) {
  IterationStats s;
  s.rank = rank;
  s.iteration = w.iteration;
  s.step_us = w.end - w.begin;
  Intervals fwd, bwd, comm, gather_wait;
  double last_backward_end = -1, last_comm_end = -1;
  // The reducer's "finalize" instant marks the end of backward compute: a backward span that contains it also
  // contains the wait for communication (the DDP end-of-backward callback), which is not compute.
  double finalize_at = -1;
  for (const TraceEvent* e : events)
    if (e->phase == 'i' && e->name == "finalize" && e->ts_us >= w.begin && e->ts_us < w.end)
      finalize_at = std::max(finalize_at, e->ts_us);
  for (const TraceEvent* e : events) {
    if (e->phase != 'X' || e->ts_us < w.begin || e->ts_us >= w.end) continue;
    double end = e->ts_us + e->dur_us;
    if (e->category == "forward") {
      fwd.push_back({e->ts_us, end});
    } else if (e->category == "backward") {
      if (finalize_at > e->ts_us && finalize_at < end) end = finalize_at;
      bwd.push_back({e->ts_us, end});
      last_backward_end = std::max(last_backward_end, end);
    } else if (e->category == "gather wait") {
      gather_wait.push_back({e->ts_us, end});
    } else if (e->category == "comm") {
      comm.push_back({e->ts_us, end});
      last_comm_end = std::max(last_comm_end, end);
      if (s.slowest_bucket.name.empty() || e->dur_us > s.slowest_bucket.dur_us) {
        s.slowest_bucket.name = e->name;
        s.slowest_bucket.dur_us = e->dur_us;
        auto b = e->args.find("bucket");
        auto n = e->args.find("bytes");
        s.slowest_bucket.bucket = b == e->args.end() ? -1 : static_cast<int64_t>(b->second);
        s.slowest_bucket.bytes = n == e->args.end() ? -1 : static_cast<int64_t>(n->second);
      }
    }
  }
  s.forward_us = union_length(fwd);
  s.backward_us = union_length(bwd);
  s.comm_us = union_length(comm);
  s.gather_wait_us = union_length(gather_wait);
  if (comm.empty())
    s.exposed_comm_us = 0;
  else if (bwd.empty())
    s.exposed_comm_us = s.comm_us;
  else
    s.exposed_comm_us = std::max(0.0, last_comm_end - last_backward_end);
  s.overlap_ratio = s.comm_us > 0 ? intersection_length(comm, bwd) / s.comm_us : 0;
  return s;
}

IterationStats median_stats(int64_t rank, const std::vector<IterationStats>& its) {
  IterationStats m;
  m.rank = rank;
  m.iteration = -1;
  auto med = [&](double IterationStats::*field) {
    std::vector<double> v;
    for (const auto& s : its) v.push_back(s.*field);
    return median_of(v);
  };
  m.step_us = med(&IterationStats::step_us);
  m.forward_us = med(&IterationStats::forward_us);
  m.backward_us = med(&IterationStats::backward_us);
  m.comm_us = med(&IterationStats::comm_us);
  m.exposed_comm_us = med(&IterationStats::exposed_comm_us);
  m.overlap_ratio = med(&IterationStats::overlap_ratio);
  m.gather_wait_us = med(&IterationStats::gather_wait_us);
  // Most often slowest bucket (lowest index wins a tie), and the median of the slowest durations.
  std::map<int64_t, int> times_slowest;
  std::vector<double> slowest_durs;
  for (const auto& s : its) {
    if (s.slowest_bucket.name.empty()) continue;
    ++times_slowest[s.slowest_bucket.bucket];
    slowest_durs.push_back(s.slowest_bucket.dur_us);
  }
  if (!times_slowest.empty()) {
    int64_t best = times_slowest.begin()->first;
    for (const auto& [bucket, count] : times_slowest)
      if (count > times_slowest[best]) best = bucket;
    for (const auto& s : its) {
      if (!s.slowest_bucket.name.empty() && s.slowest_bucket.bucket == best) {
        m.slowest_bucket = s.slowest_bucket;
        break;
      }
    }
    m.slowest_bucket.dur_us = median_of(slowest_durs);
  }
  return m;
}

}  // namespace

double union_length(Intervals intervals) {
  double total = 0;
  for (auto [b, e] : normalized(std::move(intervals))) total += e - b;
  return total;
}

double intersection_length(Intervals a, Intervals b) {
  Intervals x = normalized(std::move(a)), y = normalized(std::move(b));
  double total = 0;
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    double lo = std::max(x[i].first, y[j].first), hi = std::min(x[i].second, y[j].second);
    if (hi > lo) total += hi - lo;
    if (x[i].second < y[j].second)
      ++i;
    else
      ++j;
  }
  return total;
}

LoadedTrace parse_chrome_trace(std::string_view json_text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    DDP_FAIL("trace '", source, "' is not valid JSON: ", e.what());
  }
  const json* events = &doc;
  if (doc.is_object()) {
    DDP_CHECK(doc.contains("traceEvents") && doc["traceEvents"].is_array(), "trace '", source,
              "' has no \"traceEvents\" array (is it a Chrome trace file?)");
    events = &doc["traceEvents"];
  }
  DDP_CHECK(events->is_array(), "trace '", source,
            "' must be a JSON object with \"traceEvents\" or an array");

  LoadedTrace trace;
  size_t index = 0;
  for (const json& e : *events) {
    DDP_CHECK(e.is_object(), "trace '", source, "': event ", index, " is not an object");
    DDP_CHECK(!e.contains("ph") || e["ph"].is_string(), "trace '", source, "': event ", index,
              " has a \"ph\" (phase) that is not a string; is it a Chrome trace file?");
    DDP_CHECK(!e.contains("name") || e["name"].is_string(), "trace '", source, "': event ", index,
              " has a \"name\" that is not a string; is it a Chrome trace file?");
    std::string ph = e.value("ph", std::string());
    TraceEvent t;
    t.pid = integer_field(e, "pid", index, source);
    t.tid = integer_field(e, "tid", index, source);
    if (ph == "M") {
      if (e.value("name", std::string()) == "process_name" && e.contains("args") &&
          e["args"].contains("name") && e["args"]["name"].is_string())
        trace.process_names[t.pid] = e["args"]["name"].get<std::string>();
    } else if (ph == "X" || ph == "i" || ph == "I") {
      t.phase = ph == "X" ? 'X' : 'i';
      DDP_CHECK(e.contains("name") && e["name"].is_string(), "trace '", source, "': event ", index,
                " has no string \"name\"");
      t.name = e["name"].get<std::string>();
      t.category = e.contains("cat") && e["cat"].is_string() ? e["cat"].get<std::string>() : "";
      t.ts_us = number_field(e, "ts", index, source);
      if (t.phase == 'X') {
        t.dur_us = number_field(e, "dur", index, source);
        DDP_CHECK(t.dur_us >= 0, "trace '", source, "': event ", index, " (", t.name, ") has negative dur ",
                  t.dur_us);
      }
      if (e.contains("args") && e["args"].is_object())
        for (const auto& [k, v] : e["args"].items())
          if (v.is_number()) t.args[k] = v.get<double>();
      trace.events.push_back(std::move(t));
    }
    // Other phases (counters, flows, B/E pairs) are not used by the summary.
    ++index;
  }
  return trace;
}

LoadedTrace load_chrome_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DDP_CHECK(in.good(), "cannot read trace '", path, "': no such file or not readable");
  std::stringstream text;
  text << in.rdbuf();
  return parse_chrome_trace(text.str(), path);
}

std::vector<RankSummary> analyze_trace(const LoadedTrace& trace) {
  std::map<int64_t, std::vector<const TraceEvent*>> by_rank;
  for (const TraceEvent& e : trace.events) by_rank[e.pid].push_back(&e);

  std::vector<RankSummary> out;
  for (const auto& [rank, events] : by_rank) {
    std::vector<Window> windows;
    double first = 0, last = 0;
    bool any_work = false;
    for (const TraceEvent* e : events) {
      if (e->phase != 'X') continue;
      if (e->category == "iteration") {
        auto it = e->args.find("iteration");
        int64_t i =
            it != e->args.end() ? static_cast<int64_t>(it->second) : static_cast<int64_t>(windows.size());
        windows.push_back({i, e->ts_us, e->ts_us + e->dur_us});
      } else if (e->category == "forward" || e->category == "backward" || e->category == "comm") {
        first = any_work ? std::min(first, e->ts_us) : e->ts_us;
        last = any_work ? std::max(last, e->ts_us + e->dur_us) : e->ts_us + e->dur_us;
        any_work = true;
      }
    }
    if (windows.empty() && !any_work) continue;
    // No markers: the whole trace is one iteration (end made inclusive of the last event's start).
    if (windows.empty()) windows.push_back({-1, first, std::max(last, first) + 1e-9});
    std::sort(windows.begin(), windows.end(),
              [](const Window& a, const Window& b) { return a.begin < b.begin; });
    RankSummary r;
    r.rank = rank;
    for (const Window& w : windows) r.iterations.push_back(stats_for(rank, w, events));
    if (r.iterations.size() == 1 && r.iterations[0].iteration == -1) r.iterations[0].step_us = last - first;
    r.median = median_stats(rank, r.iterations);
    out.push_back(std::move(r));
  }
  return out;
}

std::string format_summary(const std::vector<RankSummary>& summaries) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%5s %7s %10s %10s %10s %10s %11s %8s  %s\n", "rank", "iter", "step_ms",
                "fwd_ms", "bwd_ms", "comm_ms", "exposed_ms", "overlap", "slowest bucket");
  out += line;
  auto row = [&](const IterationStats& s, const std::string& iter) {
    std::string bucket = "-";
    if (!s.slowest_bucket.name.empty()) {
      char b[128];
      std::string index = s.slowest_bucket.bucket >= 0 ? "#" + std::to_string(s.slowest_bucket.bucket)
                                                       : "'" + s.slowest_bucket.name + "'";
      std::string bytes =
          s.slowest_bucket.bytes >= 0 ? std::to_string(s.slowest_bucket.bytes) + " B" : std::string("? B");
      std::snprintf(b, sizeof b, "%s %s %.3f ms", index.c_str(), bytes.c_str(),
                    s.slowest_bucket.dur_us / 1000);
      bucket = b;
    }
    std::snprintf(line, sizeof line, "%5lld %7s %10.3f %10.3f %10.3f %10.3f %11.3f %7.1f%%  %s\n",
                  static_cast<long long>(s.rank), iter.c_str(), s.step_us / 1000, s.forward_us / 1000,
                  s.backward_us / 1000, s.comm_us / 1000, s.exposed_comm_us / 1000, 100 * s.overlap_ratio,
                  bucket.c_str());
    out += line;
  };
  for (const RankSummary& r : summaries) {
    for (const IterationStats& s : r.iterations)
      row(s, s.iteration >= 0 ? std::to_string(s.iteration) : "all");
    row(r.median, "median");
  }
  for (const RankSummary& r : summaries)
    if (r.median.gather_wait_us > 0) {
      std::snprintf(line, sizeof line, "rank %lld: waiting for parameter all-gathers %.3f ms per step (median)\n",
                    static_cast<long long>(r.rank), r.median.gather_wait_us / 1000);
      out += line;
    }
  return out;
}

}  // namespace ddp::trace
