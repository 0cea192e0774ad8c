// ddp_flight.cpp - `ddp_flight [--last N] [--group NAME] [--chrome OUT.json] DIR|FILE...`: reads every rank's
// flight recorder dumps (a dump folder, or files: group records flight.rank<R>[.<group>].json and process
// records) and prints first one sentence saying which rank broke the step and where, then per group a table
// of the last N collectives around the divergence side by side per rank, the ranks' records and the
// divergences found; --chrome writes the dumped window as one Chrome trace with every rank on the common wall
// clock. The analysis lives in runtime/distributed/flight_analysis.h; how to read it: docs/debugging.md
// "Reading dumps with ddp_flight". Exit codes: 0 analysed (whatever it found), 2 bad command line or bad
// input.
#include <cstdio>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "runtime/core/cli.h"
#include "runtime/core/log.h"
#include "runtime/core/terminal_text.h"
#include "runtime/distributed/flight_analysis.h"
#include "runtime/distributed/flight_dump_reader.h"
#include "runtime/distributed/flight_report.h"

int main(int argc, char** argv) {
  try {
    std::vector<std::string> paths;
    int last = 8;
    std::string group, chrome;
    ddp::cli::Parser p("ddp_flight",
                       "Reads the flight recorder dumps of all ranks (DDP_FLIGHT_RECORDER_DIR, or the folder "
                       "ddprun names) and says which rank broke the step and where: first one sentence, then "
                       "the last collectives side by side per rank and the divergences found. See "
                       "docs/debugging.md.");
    p.disable_local_rank();  // a file tool: no launcher passes it a rank
    p.add_positionals("DIR|FILE", &paths, "a dump folder (all *.json in it) or dump files");
    p.add("last", &last, "collectives per group in the table", ddp::cli::Bounds::between(1, 100000));
    p.add("group", &group, "analyse only this group (e.g. pg0, pg0/host1); default: every group");
    p.add("chrome", &chrome,
          "also write a Chrome trace (chrome://tracing, Perfetto) of the window to this file");
    p.parse(argc, argv);
    if (paths.empty())
      throw ddp::cli::UsageError("ddp_flight: give the dump folder or its json files (see --help)");

    const std::vector<ddp::dist::flight::GroupRecord> records = ddp::dist::flight::load_flight_dumps(paths);
    const ddp::dist::flight::FlightAnalysis analysis = ddp::dist::flight::analyze_flight(records, group);
    ddp::dist::flight::ReportOptions options;
    options.last = static_cast<size_t>(last);
    std::fputs(
        ddp::log::escape_for_terminal(ddp::dist::flight::format_flight_report(analysis, options)).c_str(),
        stdout);
    if (!chrome.empty()) {
      std::vector<ddp::dist::flight::GroupRecord> shown;
      for (const auto& r : records)
        if (group.empty() || r.group == group) shown.push_back(r);
      std::ofstream out(chrome, std::ios::binary | std::ios::trunc);
      out << ddp::dist::flight::flight_chrome_trace(shown);
      out.close();
      if (!out) {
        std::fprintf(stderr,
                     "ddp_flight: cannot write the Chrome trace to '%s': check that its folder exists and "
                     "is writable\n",
                     ddp::log::escape_for_terminal(chrome).c_str());
        return 2;
      }
      std::printf("\nChrome trace: %s\n", ddp::log::escape_for_terminal(chrome).c_str());
    }
    return 0;
  } catch (const ddp::cli::UsageError& e) {
    std::fprintf(stderr, "%s\n", ddp::log::for_user(e.what()).c_str());
    return 2;
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "%s\n", ddp::log::error_line("ddp_flight", e.what()).c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    // The reader bounds what a record may ask for; this is a last line, never an abort (issue 36).
    std::fprintf(stderr,
                 "ddp_flight: out of memory while reading the dumps: a record is damaged or far larger than "
                 "any job's; give the files one at a time to find it, and leave it out\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n",
                 ddp::log::error_line("ddp_flight", std::string("cannot analyse the dumps: ") + e.what() +
                                                        " (a damaged record? give the files one at a time)")
                     .c_str());
    return 2;
  }
}
