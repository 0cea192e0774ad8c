// torch_python.cpp - finds Debian's PyTorch 1.13 and the PyPI PyTorch 2.x venv (see torch_python.h).
#include "tests/support/torch_python.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

namespace ddp::testing {

std::string torch2_venv_dir() {
  const char* v = std::getenv("DDP_TORCH2_VENV");
  if (v && *v) return v;
  const char* home = std::getenv("HOME");
  if (!home || !*home) {  // as tools/setup_torch2.sh: the user's home from the password database
    const passwd* pw = ::getpwuid(::getuid());
    home = pw && pw->pw_dir ? pw->pw_dir : "/";
  }
  return std::string(home) + "/.cache/ddp.cpp/torch2";
}

std::string torch_kind_label(TorchKind kind) { return kind == TorchKind::Debian113 ? "torch113" : "torch2"; }

namespace {

// The `__version__ = '...'` of the torch package's version.py in `site_packages`, or "" with `why` filled.
// Read from the file, not by importing torch: an import costs 1.5-5 s on this machine, and ctest runs every
// test in a process of its own. (tools/setup_torch2.sh imports it once when it makes the venv.)
std::string version_in(const std::string& python, const std::string& site_packages, std::string& why) {
  if (!std::filesystem::exists(python)) {
    why = python + " does not exist";
    return "";
  }
  const std::string file = site_packages + "/torch/version.py";
  std::ifstream in(file);
  if (!in) {
    why = python + " has no torch (no " + file + ")";
    return "";
  }
  const std::regex line(R"(^__version__\s*=\s*['"]([^'"]+)['"])");
  std::smatch m;
  for (std::string l; std::getline(in, l);)
    if (std::regex_search(l, m, line)) return m[1];
  why = file + " names no __version__";
  return "";
}

// The venv's site-packages (lib/python3.X/site-packages), or "" when there is none.
std::string venv_site_packages(const std::string& venv) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(venv + "/lib", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("python3", 0) == 0 && std::filesystem::exists(e.path() / "site-packages"))
      return (e.path() / "site-packages").string();
  }
  return "";
}

TorchPython find(TorchKind kind) {
  TorchPython t{kind, torch_kind_label(kind), "", "", ""};
  std::string why;
  if (kind == TorchKind::Debian113) {
    t.version = version_in("/usr/bin/python3", "/usr/lib/python3/dist-packages", why);
    if (!t.version.empty())
      t.python = "/usr/bin/python3";
    else
      t.missing = "Debian's python3-torch is not installed (" + why + "): apt-get install python3-torch";
    return t;
  }
  const std::string py = torch2_venv_dir() + "/bin/python";
  t.version = version_in(py, venv_site_packages(torch2_venv_dir()), why);
  if (!t.version.empty() && t.version.rfind("2.", 0) == 0) {
    t.python = py;
  } else {
    if (!t.version.empty()) why = py + " has torch " + t.version + ", not 2.x";
    t.missing = "no PyTorch 2.x venv (" + why + "): run tools/ddp torch2 (tools/setup_torch2.sh; " +
                "DDP_TORCH2_VENV chooses the place)";
  }
  return t;
}

}  // namespace

const TorchPython& torch_python(TorchKind kind) {
  // Each probed on first use only: ctest runs every test in its own process.
  if (kind == TorchKind::Debian113) {
    static const TorchPython debian = find(TorchKind::Debian113);
    return debian;
  }
  static const TorchPython pypi = find(TorchKind::PyPI2);
  return pypi;
}

std::vector<std::string> TorchPython::torchrun() const {
  if (kind == TorchKind::Debian113)
    return {python, "-m", "torch.distributed.run", "--redirects=1", "--tee=1"};
  return {std::filesystem::path(python).parent_path().string() + "/torchrun"};
}

std::vector<std::string> TorchPython::legacy_launch() const {
  if (kind == TorchKind::Debian113)
    return {python, "-m", "torch.distributed.launch", "--redirects=1", "--tee=1"};
  return {python, "-m", "torch.distributed.launch"};
}

}  // namespace ddp::testing
