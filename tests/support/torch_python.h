// torch_python.h - the two PyTorch installations the tests run launchers, stores and the checkpoint bridge
// under: Debian 12's python3-torch 1.13 (/usr/bin/python3) and PyTorch 2.x from PyPI in the venv that
// tools/setup_torch2.sh makes ($DDP_TORCH2_VENV, default $HOME/.cache/ddp.cpp/torch2: both look there).
// Each is looked up once per test program (its torch/version.py, no import); a missing one carries the
// reason and the fix, for GTEST_SKIP.
#pragma once
#include <string>
#include <vector>

namespace ddp::testing {

enum class TorchKind { Debian113, PyPI2 };

struct TorchPython {
  TorchKind kind;
  std::string label;    // "torch113" / "torch2": the tests' parameter names
  std::string python;   // the interpreter; "" when this PyTorch is not available
  std::string version;  // torch.__version__ as it reports it
  std::string missing;  // why it is not available, and how to get it
  bool available() const { return !python.empty(); }
  // torchrun as a person types it: Debian's through `python3 -m torch.distributed.run` with the
  // --redirects=1 --tee=1 workaround for its Python 3.11 bug (docs/launcher.md), 2.x's venv/bin/torchrun.
  std::vector<std::string> torchrun() const;
  // `python -m torch.distributed.launch` (plus Debian's workaround flags).
  std::vector<std::string> legacy_launch() const;
};

// Where tools/setup_torch2.sh puts the venv.
std::string torch2_venv_dir();

const TorchPython& torch_python(TorchKind kind);

// Both kinds, for INSTANTIATE_TEST_SUITE_P.
inline std::vector<TorchKind> all_torch_kinds() { return {TorchKind::Debian113, TorchKind::PyPI2}; }
std::string torch_kind_label(TorchKind kind);

}  // namespace ddp::testing

// Skips the test, with the reason and the fix, when that PyTorch is not installed.
#define DDP_REQUIRE_TORCH(tp) \
  if (!(tp).available()) GTEST_SKIP() << (tp).missing
