// torch_python.cpp - finds Debian's PyTorch 1.13 and the PyPI PyTorch 2.x venv (see torch_python.h).
#include "tests/support/torch_python.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "tests/support/run_process.h"

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

// torch.__version__ when `python` imports torch (and the launcher module), else "" with `why` filled.
std::string probe(const std::string& python, std::string& why) {
  if (!std::filesystem::exists(python)) {
    why = python + " does not exist";
    return "";
  }
  ProcessOptions o;
  o.unset_env = {"PYTHONPATH", "PYTHONHOME"};
  o.timeout_s = 120;
  auto r = run_process({python, "-c", "import torch, torch.distributed.run; print(torch.__version__)"}, o);
  std::string v = r.out;
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  if (r.exit_code != 0 || v.empty()) {
    why = python + " cannot import torch.distributed.run (exit " + std::to_string(r.exit_code) + ")";
    return "";
  }
  return v;
}

TorchPython find(TorchKind kind) {
  TorchPython t{kind, torch_kind_label(kind), "", "", ""};
  std::string why;
  if (kind == TorchKind::Debian113) {
    t.version = probe("/usr/bin/python3", why);
    if (!t.version.empty()) t.python = "/usr/bin/python3";
    else t.missing = "Debian's python3-torch is not installed (" + why + "): apt-get install python3-torch";
    return t;
  }
  const std::string py = torch2_venv_dir() + "/bin/python";
  t.version = probe(py, why);
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
  if (kind == TorchKind::Debian113) return {python, "-m", "torch.distributed.run", "--redirects=1", "--tee=1"};
  return {std::filesystem::path(python).parent_path().string() + "/torchrun"};
}

std::vector<std::string> TorchPython::legacy_launch() const {
  if (kind == TorchKind::Debian113)
    return {python, "-m", "torch.distributed.launch", "--redirects=1", "--tee=1"};
  return {python, "-m", "torch.distributed.launch"};
}

}  // namespace ddp::testing
