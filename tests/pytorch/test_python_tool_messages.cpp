// test_python_tool_messages.cpp - tools/ddp_torch.py, torch_allreduce.py and plot_trace.py end with one clear
// line, not a traceback, when their Python lacks PyTorch / matplotlib (naming the interpreter that has it, or
// how to get it: tools/python_deps.py) and when ddp_torch.py is given a file that is not safetensors. The
// modules are replaced by stubs on PYTHONPATH (one that fails to import; a torch that imports but does
// nothing), so the test runs the same with or without the real packages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/run_process.h"

namespace {
namespace fs = std::filesystem;
using ddp::testing::ProcessResult;

struct Dir {
  fs::path path = fs::temp_directory_path() / ("ddp_py_messages_" + std::to_string(::getpid()));
  Dir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& content) const {
    const fs::path p = path / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
};

ProcessResult python(const std::vector<std::string>& args, const std::string& pythonpath) {
  ddp::testing::ProcessOptions o;
  o.unset_env = {"PYTHONHOME"};
  o.set_env = {{"PYTHONPATH", pythonpath}, {"PYTHONDONTWRITEBYTECODE", "1"}};
  o.timeout_s = 120;
  std::vector<std::string> argv = {"/usr/bin/env", "python3"};
  argv.insert(argv.end(), args.begin(), args.end());
  return ddp::testing::run_process(argv, o);
}

// The lines of `text` that are not empty.
std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b < text.size()) {
    size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    if (e > b) out.push_back(text.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

const std::string kTools = DDP_SOURCE_DIR "/tools/";

}  // namespace

TEST(PythonToolMessages, AMissingModuleIsOneLineNamingAnInterpreter) {
  Dir d;
  d.write("missing/torch.py", "raise ImportError('no torch in this test')\n");
  d.write("missing/matplotlib.py", "raise ImportError('no matplotlib in this test')\n");
  const std::string stubs = (d.path / "missing").string();
  struct Case {
    std::string script, module, package;
  };
  for (const Case& c : {Case{"ddp_torch.py", "torch", "python3-torch"},
                        Case{"torch_allreduce.py", "torch", "python3-torch"},
                        Case{"plot_trace.py", "matplotlib", "python3-matplotlib"}}) {
    ProcessResult r = python({kTools + c.script, "x.safetensors", "out"}, stubs);
    EXPECT_EQ(r.exit_code, 1) << c.script << "\n" << r.err;
    EXPECT_EQ(r.err.find("Traceback"), std::string::npos) << r.err;
    ASSERT_EQ(lines(r.err).size(), 1u) << c.script << ":\n" << r.err;
    EXPECT_NE(r.err.find(c.module), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("/usr/bin/python3"), std::string::npos) << "which interpreter to use: " << r.err;
  }
}

// The three answers of python_deps, with a stand-in for Debian's interpreter that has the module or not.
TEST(PythonToolMessages, MissingModuleMessageSaysWhichInterpreterHasIt) {
  Dir d;
  const std::string has = d.write("has/python3", "#!/bin/sh\nexit 0\n");
  const std::string lacks = d.write("lacks/python3", "#!/bin/sh\nexit 1\n");
  fs::permissions(has, fs::perms::owner_all);
  fs::permissions(lacks, fs::perms::owner_all);
  const auto message = [&](const std::string& debian_python) {
    const std::string code =
        "import sys, python_deps\n"
        "python_deps.DEBIAN_PYTHON = sys.argv[1]\n"
        "print(python_deps.missing_module_message('torch', 'python3-torch', 'ddp_torch.py', "
        "ImportError('No module named torch')))\n";
    return python({"-c", code, debian_python}, kTools);
  };
  ProcessResult r = message(has);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ddp_torch.py needs the Python module torch, which "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; " + has + " has it: run " + has + " "), std::string::npos) << r.out;
  r = message(lacks);
  EXPECT_NE(r.out.find("apt-get install python3-torch and run it with " + lacks), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("or pip install torch into "), std::string::npos) << r.out;
  r = message(d.path.string() + "/no/such/python3");
  EXPECT_NE(r.out.find("apt-get install python3-torch"), std::string::npos) << r.out;
  // The interpreter running is Debian's own: the module is there but shadowed or broken.
  const std::string code =
      "import sys, python_deps\n"
      "python_deps.DEBIAN_PYTHON = sys.executable\n"
      "python_deps._imports_in = lambda interpreter, module: True\n"
      "print(python_deps.missing_module_message('torch', 'python3-torch', 'ddp_torch.py', "
      "ImportError('x')))\n";
  r = python({"-c", code}, kTools);
  EXPECT_NE(r.out.find("but does not import here (x); check PYTHONPATH and PYTHONHOME"), std::string::npos)
      << r.out;
}

// Files that are not safetensors: one line naming the file and what is wrong, exit 1, no JSONDecodeError.
TEST(PythonToolMessages, ANonSafetensorsFileIsOneClearLine) {
  Dir d;
  // A torch that imports and does nothing: ddp_torch.py reads the header before it needs PyTorch.
  d.write("stub/torch/__init__.py",
          "float32 = float64 = bfloat16 = int32 = int64 = uint8 = object()\n"
          "def set_num_threads(n): pass\n"
          "def save(*args): pass\n");
  d.write("stub/torch/nn/__init__.py", "class Module: pass\n");
  d.write("stub/torch/nn/functional.py", "");
  const std::string stub = (d.path / "stub").string();
  // The 8-byte little-endian length of `header`, then `header`: the safetensors layout.
  const auto with_header = [](const std::string& header) {
    std::string out(8, '\0');
    for (size_t i = 0, n = header.size(); i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xFF);
    return out + header;
  };
  struct Case {
    std::string name, content, expected;
  };
  const std::vector<Case> cases = {
      {"short.bin", "abc", "(3 bytes, less than the 8-byte header length)"},
      {"text.txt", "this is a text file, not a checkpoint at all", "its first 8 bytes give a header of"},
      {"garbage.bin", with_header(std::string(100, '\xff')), "its 100-byte header is not JSON"},
      {"notjson.bin", with_header(std::string(100, 'x')), "its 100-byte header is not JSON"},
      {"array.bin", with_header("[]"), "its header is JSON but not an object"},
      {"entry.bin", with_header("{\"a\": 1.5}"), "header entry 'a' lacks dtype"},
  };
  for (const Case& c : cases) {
    const std::string path = d.write(c.name, c.content);
    ProcessResult r = python({kTools + "ddp_torch.py", "to-torch", path, (d.path / "out.pt").string()}, stub);
    EXPECT_EQ(r.exit_code, 1) << c.name << "\n" << r.err;
    EXPECT_EQ(r.err.find("Traceback"), std::string::npos) << c.name << ":\n" << r.err;
    ASSERT_EQ(lines(r.err).size(), 1u) << c.name << ":\n" << r.err;
    EXPECT_EQ(r.err.rfind(path + ": not a safetensors file", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.name << ": " << r.err;
  }
  const std::string missing = (d.path / "missing.safetensors").string();
  ProcessResult r = python({kTools + "ddp_torch.py", "to-torch", missing, "out.pt"}, stub);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("Traceback"), std::string::npos) << r.err;
  EXPECT_EQ(r.err, missing + ": cannot read it: No such file or directory\n") << r.err;
}
