// flight_report.cpp - the text report and the Chrome trace of flight recorder dumps.
#include "runtime/distributed/flight_report.h"

#include <algorithm>
#include <ctime>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/core/log.h"

namespace ddp::dist::flight {

namespace {

int64_t waited_or_duration_ns(const GroupRecord& r, const DumpEntry& e) {
  const int64_t start = e.started_ns >= 0 ? e.started_ns : e.issued_ns;
  if (start < 0) return -1;
  if (e.pending()) return r.dumped_unix_ns >= 0 ? r.dumped_unix_ns - r.to_unix(start) : -1;
  return e.ended_ns >= 0 ? e.ended_ns - start : -1;
}

// One rank's cell for seq s: "allreduce float32 x 262144 completed 7.9 ms", "not issued", ...
std::string cell(const std::shared_ptr<const GroupRecord>& rec, uint64_t s) {
  if (!rec) return "no dump";
  if (rec->capacity == 0) return "recorder off";
  if (s >= rec->recorded) return "not issued";
  const DumpEntry* e = rec->find(s);
  if (!e) return "(before its window)";
  std::string c = e->op + " " + e->dtype + " x " + std::to_string(e->count) + " " + e->state;
  const int64_t t = waited_or_duration_ns(*rec, *e);
  if (e->completed() && t >= 0) c += " " + duration_text(t);
  if (e->device_duration_ns >= 0) c += " (GPU " + duration_text(e->device_duration_ns) + ")";
  if (e->failed() && t >= 0) c += " after " + duration_text(t);
  if (e->pending() && t >= 0) c += ", waiting " + duration_text(t);
  return c;
}

// "bucket 3: a .. b, 1.2 MiB, ddp bucket, iteration 402": what the row's collective was for, from the first
// rank that holds it; a rank that says otherwise is added ("rank 1: bucket 2").
std::string row_info(const GroupAnalysis& g, uint64_t s) {
  auto describe = [](const DumpEntry& e) {
    std::vector<std::string> parts;
    if (e.bucket >= 0) {
      parts.push_back("bucket " + std::to_string(e.bucket) + (e.params.empty() ? "" : ": " + e.params));
      if (e.bucket_bytes >= 0) parts.push_back(bytes_text(e.bucket_bytes));
    } else if (!e.params.empty()) {
      parts.push_back(e.params);
    }
    if (!e.issuer.empty()) parts.push_back(e.issuer);
    if (e.iteration >= 0) parts.push_back("iteration " + std::to_string(e.iteration));
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
    return out;
  };
  std::string first;
  bool have = false;
  std::vector<std::string> others;
  for (size_t r = 0; r < g.ranks.size(); ++r) {
    if (!g.ranks[r]) continue;
    const DumpEntry* e = g.ranks[r]->find(s);
    if (!e) continue;
    const std::string d = describe(*e);
    if (!have) {
      first = d;
      have = true;
    } else if (d != first) {
      others.push_back("rank " + std::to_string(r) + ": " + d);
    }
  }
  for (const std::string& o : others) first += "; " + o;
  return first;
}

std::vector<int> shown_ranks(const GroupAnalysis& g, size_t limit) {
  std::vector<int> shown;
  std::set<int> in;
  auto add = [&](int r) {
    if (shown.size() < limit && r >= 0 && r < g.world_size && in.insert(r).second) shown.push_back(r);
  };
  for (int r : g.lead().ranks) add(r);
  for (int r : g.lead().others) add(r);
  for (int r = 0; r < g.world_size; ++r) add(r);
  std::sort(shown.begin(), shown.end());
  return shown;
}

std::string wall_time_text(int64_t unix_ns) {
  const std::time_t t = static_cast<std::time_t>(unix_ns / 1000000000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string record_line(const GroupAnalysis& g, int r) {
  const auto& rec = g.ranks[r];
  std::string s = "  rank " + std::to_string(r) + ": ";
  if (!rec) return s + "no dump";
  s += "recorded " + std::to_string(rec->recorded);
  if (rec->capacity == 0)
    s += ", recorder off";
  else if (!rec->entries.empty())
    s += " (window #" + std::to_string(rec->entries.front().seq) + " to #" +
         std::to_string(rec->entries.back().seq) + " of a " + std::to_string(rec->capacity) + "-entry ring)";
  if (!rec->reason.empty()) s += ", dumped on " + rec->reason;
  if (rec->dumped_unix_ns >= 0)
    s += (rec->reason.empty() ? ", dumped at " : " at ") + wall_time_text(rec->dumped_unix_ns);
  if (rec->pid >= 0) s += ", pid " + std::to_string(rec->pid) + (rec->host.empty() ? "" : " on " + rec->host);
  if (rec->global_rank >= 0 && (rec->global_rank != r || rec->inner()))
    s += ", global rank " + std::to_string(rec->global_rank);
  s += ", " + rec->file;
  if (!rec->failure.empty()) s += "\n      failure: " + log::for_user(rec->failure);
  return s;
}

}  // namespace

std::string format_flight_table(const GroupAnalysis& g, const ReportOptions& options) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& rec : g.ranks) {
    if (!rec || rec->entries.empty()) continue;
    lo = std::min(lo, rec->entries.front().seq);
    hi = std::max(hi, rec->entries.back().seq);
  }
  if (lo == UINT64_MAX) return "";
  const size_t n = std::max<size_t>(options.last, 1);
  const uint64_t focus = std::clamp(g.focus_seq, lo, hi);
  const uint64_t last = std::min<uint64_t>(hi, focus + n / 4);
  const uint64_t first = last + 1 >= n ? std::max<uint64_t>(lo, last + 1 - n) : lo;

  const std::vector<int> ranks = shown_ranks(g, std::max<size_t>(options.rank_columns, 1));
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> head = {"", "seq"};
  for (int r : ranks) head.push_back("rank " + std::to_string(r));
  head.push_back("collective");
  rows.push_back(head);
  for (uint64_t s = first; s <= last; ++s) {
    std::vector<std::string> row = {s == g.focus_seq && g.diverged() ? ">" : "", std::to_string(s)};
    for (int r : ranks) row.push_back(cell(g.ranks[r], s));
    row.push_back(row_info(g, s));
    rows.push_back(row);
  }
  std::vector<size_t> width(head.size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::ostringstream out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      std::string v = row[c];
      if (c + 1 < row.size()) v.resize(width[c], ' ');
      line += (c == 0 ? "" : c == 1 ? " " : "  ") + v;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  }
  if (ranks.size() < static_cast<size_t>(g.world_size)) {
    std::vector<int> hidden;
    for (int r = 0; r < g.world_size; ++r)
      if (!std::binary_search(ranks.begin(), ranks.end(), r)) hidden.push_back(r);
    out << "(" << rank_list_text(hidden) << " not shown)\n";
  }
  return out.str();
}

std::string format_flight_report(const FlightAnalysis& a, const ReportOptions& options) {
  std::ostringstream out;
  out << a.headline << "\n";
  std::vector<size_t> order = {a.lead};
  for (size_t i = 0; i < a.groups.size(); ++i)
    if (i != a.lead) order.push_back(i);
  for (size_t i : order) {
    const GroupAnalysis& g = a.groups[i];
    out << "\ngroup " << g.group << " (" << (g.backend.empty() ? "" : g.backend + ", ") << "world "
        << g.world_size << ")\n";
    const std::string table = format_flight_table(g, options);
    if (!table.empty()) out << table;
    out << "records:\n";
    // A run of ranks without a record is one line ("ranks 4-1023: no dump"), however large the world.
    for (int r = 0; r < g.world_size;) {
      int end = r;
      while (end < g.world_size && !g.ranks[static_cast<size_t>(end)]) ++end;
      if (end - r >= 3) {
        out << "  ranks " << r << "-" << end - 1 << ": no dump\n";
        r = end;
      } else {
        out << record_line(g, r) << "\n";
        ++r;
      }
    }
    out << "divergences:\n";
    for (const Divergence& d : g.divergences)
      out << "  - " << divergence_kind_name(d.kind) << ": " << d.sentence << "\n";
  }
  return out.str();
}

std::string flight_chrome_trace(const std::vector<GroupRecord>& records) {
  using nlohmann::json;
  // Process of each record: its global rank, else the top-level group's rank of the same OS process, else its
  // rank in its group.
  std::map<std::pair<int64_t, std::string>, int64_t> top_rank;  // (pid, host) -> rank in a top-level group
  for (const GroupRecord& r : records)
    if (!r.inner() && r.pid >= 0) top_rank[{r.pid, r.host}] = r.rank;
  std::map<std::string, int> tid_of;
  for (const GroupRecord& r : records) tid_of.emplace(r.group, 0);
  int next_tid = 0;
  for (auto& [name, tid] : tid_of) tid = next_tid++;

  struct Event {
    int64_t start_ns, end_ns;
    int64_t pid;
    json j;
  };
  std::vector<Event> events;
  std::map<int64_t, std::string> process_names;
  std::set<std::pair<int64_t, int>> threads;
  for (const GroupRecord& r : records) {
    int64_t pid = r.rank;
    if (r.global_rank >= 0)
      pid = r.global_rank;
    else if (auto it = top_rank.find({r.pid, r.host}); r.pid >= 0 && it != top_rank.end())
      pid = it->second;
    std::string pname = "rank " + std::to_string(pid);
    if (r.pid >= 0) pname += " (pid " + std::to_string(r.pid) + (r.host.empty() ? "" : " on " + r.host) + ")";
    process_names.emplace(pid, pname);
    const int tid = tid_of[r.group];
    threads.insert({pid, tid});
    for (const DumpEntry& e : r.entries) {
      const int64_t start = r.to_unix(e.started_ns >= 0 ? e.started_ns : e.issued_ns);
      if (start < 0) continue;
      int64_t end = r.to_unix(e.ended_ns);
      if (end < 0) end = e.pending() && r.dumped_unix_ns >= 0 ? std::max(start, r.dumped_unix_ns) : start;
      json args = {{"group", r.group},         {"seq", e.seq},     {"op", e.op},
                   {"dtype", e.dtype},         {"count", e.count}, {"bytes", entry_bytes(e)},
                   {"iteration", e.iteration}, {"state", e.state}, {"issuer", e.issuer}};
      args["bucket"] = e.bucket >= 0 ? json(e.bucket) : json(nullptr);
      args["params"] = e.params.empty() ? json(nullptr) : json(e.params);
      if (e.device_duration_ns >= 0) args["device_dur_us"] = static_cast<double>(e.device_duration_ns) / 1e3;
      json ev = {{"name", e.op + " #" + std::to_string(e.seq)},
                 {"cat", "collective"},
                 {"ph", "X"},
                 {"pid", pid},
                 {"tid", tid},
                 {"args", std::move(args)}};
      events.push_back({start, end, pid, std::move(ev)});
    }
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.pid < b.pid;
  });
  const int64_t t0 = events.empty() ? 0 : events.front().start_ns;
  json trace = json::array();
  for (const auto& [pid, name] : process_names)
    trace.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", name}}}});
  for (const auto& [pid, tid] : threads) {
    std::string group;
    for (const auto& [name, t] : tid_of)
      if (t == tid) group = name;
    trace.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", group}}}});
  }
  for (Event& e : events) {
    e.j["ts"] = static_cast<double>(e.start_ns - t0) / 1e3;
    e.j["dur"] = static_cast<double>(e.end_ns - e.start_ns) / 1e3;
    trace.push_back(std::move(e.j));
  }
  json doc = {
      {"traceEvents", std::move(trace)}, {"displayTimeUnit", "ms"}, {"otherData", {{"t0_unix_ns", t0}}}};
  return doc.dump(1) + "\n";
}

}  // namespace ddp::dist::flight
