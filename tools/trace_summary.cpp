// trace_summary.cpp - `trace_summary TRACE.json [MORE.json...]`: per rank and iteration, the forward,
// backward and communication time, exposed communication, overlap and slowest bucket of a ddp.cpp Chrome
// trace (one rank's file, several, or a merged file), then the medians over iterations. The analysis lives in
// runtime/trace/trace_analysis.h; definitions in docs/trace.md. Exit codes: 2 bad command line, 1 bad trace.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/cli.h"
#include "runtime/core/log.h"
#include "runtime/core/terminal_text.h"
#include "runtime/trace/trace_analysis.h"

namespace {

nlohmann::ordered_json stats_json(const ddp::trace::IterationStats& s) {
  nlohmann::ordered_json j = {
      {"iteration", s.iteration},        {"step_us", s.step_us}, {"forward_us", s.forward_us},
      {"backward_us", s.backward_us},    {"comm_us", s.comm_us}, {"exposed_comm_us", s.exposed_comm_us},
      {"overlap_ratio", s.overlap_ratio}};
  if (s.gather_wait_us > 0) j["gather_wait_us"] = s.gather_wait_us;
  if (!s.slowest_bucket.name.empty())
    j["slowest_bucket"] = {{"name", s.slowest_bucket.name},
                           {"bucket", s.slowest_bucket.bucket},
                           {"bytes", s.slowest_bucket.bytes},
                           {"dur_us", s.slowest_bucket.dur_us}};
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> files;
    int rank = -1;
    bool as_json = false;
    ddp::cli::Parser p("trace_summary",
                       "Summarizes a ddp.cpp Chrome trace per rank and iteration: forward, backward and "
                       "communication time, exposed communication, overlap ratio and slowest bucket, then "
                       "medians over iterations (times in ms). See docs/trace.md.");
    p.disable_local_rank();  // a file tool: no launcher passes it a rank
    p.add_positionals("TRACE.json", &files, "trace files (one per rank, or one merged file)");
    p.add("rank", &rank, "show only this rank (-1: all ranks)");
    p.add("json", &as_json, "print JSON instead of a table");
    p.parse(argc, argv);
    if (files.empty()) throw ddp::cli::UsageError("trace_summary: give at least one trace file (see --help)");

    ddp::trace::LoadedTrace trace;
    for (const std::string& f : files) {
      ddp::trace::LoadedTrace one = ddp::trace::load_chrome_trace(f);
      trace.events.insert(trace.events.end(), one.events.begin(), one.events.end());
      trace.process_names.insert(one.process_names.begin(), one.process_names.end());
    }
    std::vector<ddp::trace::RankSummary> summaries;
    for (auto& s : ddp::trace::analyze_trace(trace))
      if (rank < 0 || s.rank == rank) summaries.push_back(std::move(s));
    if (summaries.empty()) {
      std::fprintf(stderr,
                   "trace_summary: no forward/backward/comm/iteration events%s in %zu file(s); was tracing "
                   "enabled, and do the events follow the naming in docs/trace.md?\n",
                   rank >= 0 ? (" for rank " + std::to_string(rank)).c_str() : "", files.size());
      return 1;
    }
    if (as_json) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const auto& s : summaries) {
        nlohmann::ordered_json its = nlohmann::ordered_json::array();
        for (const auto& it : s.iterations) its.push_back(stats_json(it));
        out.push_back({{"rank", s.rank}, {"iterations", its}, {"median", stats_json(s.median)}});
      }
      std::printf("%s\n", out.dump(2).c_str());
    } else {
      std::fputs(ddp::trace::format_summary(summaries).c_str(), stdout);
    }
    return 0;
  } catch (const ddp::cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", ddp::log::for_user(e.what()).c_str());
    return 2;
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "%s\n", ddp::log::error_line("trace_summary", e.what()).c_str());
    return 1;
  }
}
