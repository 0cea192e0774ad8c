// test_layering.cpp - the include arrows between the runtime's folders point down the layers only:
// kernels <- tensor <- autograd <- ops <- nn <- ddp, with distributed (which moves buffers and knows no
// autograd) below ops and ddp. Each rule names a folder and the folders its files must not include; a file
// that does is named with its line, so the fix (move what it needs down, or the file up) is plain.
// optim has no rule: ZeroRedundancyOptimizer (optim/) uses ddp's host collectives, as PyTorch's lives in
// torch.distributed.optim.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace {
namespace fs = std::filesystem;

struct Rule {
  std::string folder;                 // relative to the source root
  std::vector<std::string> must_not;  // folders whose headers it must not include
};

// "file:line: #include ..." for every include of a forbidden folder under rule.folder.
std::vector<std::string> violations(const Rule& rule) {
  std::vector<std::string> found;
  const fs::path root = fs::path(DDP_SOURCE_DIR) / rule.folder;
  const std::regex include_line(R"(^\s*#\s*include\s*"([^"]+)\")");
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh")) continue;
    std::ifstream in(entry.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (!std::regex_search(line, m, include_line)) continue;
      for (const std::string& bad : rule.must_not)
        if (m[1].str().rfind(bad + "/", 0) == 0)
          found.push_back(fs::relative(entry.path(), DDP_SOURCE_DIR).string() + ":" + std::to_string(n) +
                          ": " + line);
    }
  }
  return found;
}

}  // namespace

TEST(Layering, IncludesPointDownTheLayersOnly) {
  const std::vector<Rule> rules = {
      {"kernels", {"runtime/autograd", "runtime/ops", "runtime/nn", "runtime/optim", "runtime/ddp"}},
      {"runtime/tensor",
       {"runtime/autograd", "runtime/ops", "runtime/nn", "runtime/optim", "runtime/ddp",
        "runtime/distributed"}},
      {"runtime/autograd",
       {"runtime/ops", "runtime/nn", "runtime/optim", "runtime/ddp", "runtime/distributed"}},
      // ops may use distributed (SyncBatchNorm's collectives), never ddp: the Tensor -> CommBuffer bridge
      // lives in runtime/distributed/tensor_comm_buffer.h for that.
      {"runtime/ops", {"runtime/nn", "runtime/optim", "runtime/ddp"}},
      {"runtime/distributed",
       {"runtime/autograd", "runtime/ops", "runtime/nn", "runtime/optim", "runtime/ddp"}},
      {"runtime/nn", {"runtime/ddp"}},
  };
  for (const Rule& rule : rules) {
    std::string list;
    for (const std::string& v : violations(rule)) list += "  " + v + "\n";
    EXPECT_TRUE(list.empty()) << rule.folder << " includes a layer above it:\n" << list;
  }
}
