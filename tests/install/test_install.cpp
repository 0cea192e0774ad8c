// test_install.cpp - `cmake --install` puts headers, the libraries, ddprun, ddp_flight and a package config
// in a prefix, and a separate project builds and runs against it with find_package(ddp): tests/consumer, and
// the README's "Using it from C++" program taken verbatim from README.md (so the README cannot drift from the
// code), run under ddprun and, when the PyTorch 2.x venv exists, under its torchrun too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tests/support/run_process.h"
#include "tests/support/torch_python.h"

namespace {
namespace fs = std::filesystem;
using ddp::testing::ProcessResult;

ProcessResult run(const std::vector<std::string>& argv, std::map<std::string, std::string> env = {}) {
  ddp::testing::ProcessOptions o;
  o.set_env = std::move(env);
  o.timeout_s = 240;
  return ddp::testing::run_process(argv, o);
}
std::string output(const ProcessResult& r) { return r.out + r.err + (r.timed_out ? "\n(timed out)" : ""); }

// The first ```cpp fenced block after the heading `heading` in the markdown text; "" when there is none.
std::string fenced_cpp_after(const std::string& markdown, const std::string& heading) {
  const size_t h = markdown.find("\n" + heading + "\n");
  if (h == std::string::npos) return "";
  const std::string open = "\n```cpp\n";
  const size_t b = markdown.find(open, h);
  const size_t next_heading = markdown.find("\n## ", h + 1);
  if (b == std::string::npos || (next_heading != std::string::npos && b > next_heading)) return "";
  const size_t e = markdown.find("\n```\n", b + open.size());
  if (e == std::string::npos) return "";
  return markdown.substr(b + open.size(), e + 1 - (b + open.size()));
}

struct Prefix {
  fs::path work = fs::temp_directory_path() / ("ddp_install_" + std::to_string(::getpid()));
  std::string prefix = (work / "prefix").string();
  Prefix() { fs::remove_all(work); }
  ~Prefix() { fs::remove_all(work); }
};
}  // namespace

TEST(Install, FencedBlockExtraction) {
  const std::string md =
      "# t\n\n## Using it from C++\n\ntext\n\n```cpp\nint main() {}\n```\n\n## Next\n```cpp\nx\n```\n";
  EXPECT_EQ(fenced_cpp_after(md, "## Using it from C++"), "int main() {}\n");
  EXPECT_EQ(fenced_cpp_after("## Using it from C++\n\n## Next\n```cpp\nx\n```\n", "## Using it from C++"),
            "");
  EXPECT_EQ(fenced_cpp_after(md, "## Missing"), "");
}

TEST(Install, ConsumerProjectFindsAndLinksDdpRuntimeAndModels) {
  Prefix p;
  ProcessResult r = run({DDP_CMAKE_COMMAND, "--install", DDP_BUILD_DIR, "--prefix", p.prefix});
  ASSERT_EQ(r.exit_code, 0) << "cmake --install failed:\n" << output(r);
  EXPECT_TRUE(fs::exists(p.prefix + "/bin/ddprun"));
  EXPECT_TRUE(fs::exists(p.prefix + "/bin/ddp_flight"));  // ddprun's failure summary points at it
  EXPECT_TRUE(fs::exists(p.prefix + "/include/ddp/runtime/ddp/distributed_data_parallel.h"));
  EXPECT_TRUE(fs::exists(p.prefix + "/include/ddp/models/mlp.h"));
  EXPECT_TRUE(fs::exists(p.prefix + "/lib/cmake/ddp/ddpConfig.cmake"));

  // The README's program, exactly as the README shows it.
  std::ifstream readme(DDP_SOURCE_DIR "/README.md");
  std::stringstream md;
  md << readme.rdbuf();
  const std::string example = fenced_cpp_after(md.str(), "## Using it from C++");
  ASSERT_FALSE(example.empty()) << "README.md has no ```cpp block under '## Using it from C++'";
  const fs::path example_file = p.work / "my_program.cpp";
  std::ofstream(example_file) << example;

  const std::string build = (p.work / "consumer").string();
  r = run({DDP_CMAKE_COMMAND, "-S", DDP_SOURCE_DIR "/tests/consumer", "-B", build, "-G", "Ninja",
           "-DCMAKE_PREFIX_PATH=" + p.prefix, "-DREADME_EXAMPLE=" + example_file.string()});
  ASSERT_EQ(r.exit_code, 0) << "configuring the consumer against the install failed:\n" << output(r);
  r = run({DDP_CMAKE_COMMAND, "--build", build});
  ASSERT_EQ(r.exit_code, 0) << "building the consumer (tests/consumer and the README's program) failed:\n"
                            << output(r);
  r = run({build + "/consumer"});
  EXPECT_EQ(r.exit_code, 0) << "the consumer did not run correctly:\n" << output(r);

  // As the README says to launch it: two ranks under the installed ddprun.
  r = run({p.prefix + "/bin/ddprun", "--standalone", "--nproc-per-node", "2", build + "/readme_example"},
          {{"OPENBLAS_NUM_THREADS", "1"}});
  ASSERT_EQ(r.exit_code, 0) << "the README's program failed under ddprun:\n" << output(r);
  // It trains: rank 0 logs every 8th batch of both epochs, and the loss goes down.
  const std::string log = output(r);
  std::regex line(R"(epoch (\d+) batch (\d+): loss ([0-9.]+))");
  std::vector<double> losses;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it)
    losses.push_back(std::stod((*it)[3]));
  ASSERT_GE(losses.size(), 4u) << log;
  EXPECT_LT(losses.back(), 0.75 * losses.front()) << log;  // 2.30 -> 1.41 on this data and seed
  // The same program under PyTorch 2.x's torchrun (agent store, 2.x store protocol), when its venv exists
  // (tests/support/torch_python.h): the same loss lines as under ddprun.
  const auto& torch2 = ddp::testing::torch_python(ddp::testing::TorchKind::PyPI2);
  if (torch2.available()) {
    auto loss_lines = [&](const std::string& text) {
      std::vector<std::string> out;
      for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator(); ++it)
        out.push_back(it->str());
      return out;
    };
    std::vector<std::string> cmd = torch2.torchrun();
    cmd.insert(cmd.end(), {"--standalone", "--nproc_per_node=2", "--no_python", build + "/readme_example"});
    ProcessResult t = run(cmd, {{"OPENBLAS_NUM_THREADS", "1"}, {"OMP_NUM_THREADS", "1"}});
    ASSERT_EQ(t.exit_code, 0) << "the README's program failed under torchrun " << torch2.version << ":\n"
                              << output(t);
    EXPECT_EQ(loss_lines(output(t)), loss_lines(log)) << output(t);
  }
  r = run({p.prefix + "/bin/ddprun", "--help"});
  EXPECT_EQ(r.exit_code, 0) << "installed ddprun does not start:\n" << output(r);
  r = run({p.prefix + "/bin/ddp_flight", "--help"});
  EXPECT_EQ(r.exit_code, 0) << "installed ddp_flight does not start:\n" << output(r);
}
