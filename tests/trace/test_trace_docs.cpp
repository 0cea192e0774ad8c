// test_trace_docs.cpp - docs/trace.md's event table ("Naming convention") against a real trace of `train`:
// every kind of event the run writes (phase, category, lane, name with its numbers and parameter names as
// placeholders) has its row, and every row of the table occurs in the run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/trace/trace.h"
#include "runtime/trace/trace_analysis.h"
#include "tests/support/run_process.h"

namespace {
namespace fs = std::filesystem;

struct Row {
  std::string phase, category, name;  // name as the table writes it: `allreduce bucket <i>`
  int lane = -1;
  std::regex pattern() const {
    // <placeholder> stands for any text; the rest must match literally.
    std::string re;
    for (size_t i = 0; i < name.size(); ++i) {
      if (name[i] == '<') {
        i = name.find('>', i);
        re += ".+";
        continue;
      }
      if (std::string("\\^$.|?*+()[]{}").find(name[i]) != std::string::npos) re += '\\';
      re += name[i];
    }
    return std::regex(re);
  }
};

// "| forward of ... | X | `forward` | compute (1) | `forward` | - |" -> a Row.
std::vector<Row> table_rows(const std::string& markdown) {
  std::vector<Row> rows;
  const size_t start = markdown.find("## Naming convention");
  if (start == std::string::npos) return rows;
  std::istringstream in(markdown.substr(start));
  std::string line;
  const std::regex row_re(R"(^\| [^|]+ \| (X|i) \| `([a-z_]+)` \| [a-z]+ \((\d+)\) \| `([^`]+)` \|)");
  bool in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("|", 0) != 0) {
      if (in_table) break;
      continue;
    }
    in_table = true;
    std::smatch m;
    if (std::regex_search(line, m, row_re)) rows.push_back({m[1], m[2], m[4], std::stoi(m[3])});
  }
  return rows;
}

}  // namespace

TEST(TraceDocs, TheEventTableMatchesWhatTrainWrites) {
  std::ifstream doc(DDP_SOURCE_DIR "/docs/trace.md");
  std::stringstream md;
  md << doc.rdbuf();
  const std::vector<Row> rows = table_rows(md.str());
  ASSERT_GE(rows.size(), 5u) << "docs/trace.md has no event table under '## Naming convention'";

  const fs::path dir = fs::temp_directory_path() / ("ddp_trace_docs_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string trace_file = (dir / "t.json").string();
  ddp::testing::ProcessOptions o;
  o.unset_env = {"LOCAL_RANK", "RANK", "WORLD_SIZE", "DDP_DEBUG"};
  o.set_env = {{"OPENBLAS_NUM_THREADS", "1"}};
  auto r =
      ddp::testing::run_process({std::string(DDP_BIN_DIR) + "/train", "--model", "mlp", "--data", "synthetic",
                                 "--hidden", "8", "--synthetic-samples", "64", "--batch-size", "8", "--steps",
                                 "2", "--grad-accum", "2", "--eval-batches", "1", "--trace", trace_file},
                                o);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto trace = ddp::trace::load_chrome_trace(trace_file);
  std::set<size_t> seen_rows;
  for (const auto& e : trace.events) {
    const std::string phase(1, e.phase);
    const int64_t lane = e.tid % ddp::trace::kExtraTrackTidStride;  // overlapping events go to extra tracks
    bool documented = false;
    for (size_t k = 0; k < rows.size(); ++k) {
      const Row& row = rows[k];
      if (row.phase == phase && row.category == e.category && row.lane == lane &&
          std::regex_match(e.name, row.pattern())) {
        documented = true;
        seen_rows.insert(k);
      }
    }
    EXPECT_TRUE(documented) << "docs/trace.md has no row for the event '" << e.name << "' (ph " << phase
                            << ", category " << e.category << ", lane " << lane << ")";
  }
  for (size_t k = 0; k < rows.size(); ++k)
    EXPECT_TRUE(seen_rows.count(k)) << "docs/trace.md lists `" << rows[k].name << "` (category "
                                    << rows[k].category << "), which the run did not write";
  fs::remove_all(dir);
}
