#!/usr/bin/env bash
# run.sh - ctest's entry to the ddpcpp torch.distributed backend tests (tests/CMakeLists.txt, TorchBackend.*):
#   run.sh BUILD build            installs python/ (the ddp_cpp package) into BUILD/ddp_cpp_py with the pip of the
#                                 PyTorch 2.x venv (one pip command; ccache through /usr/lib/ccache when present)
#   run.sh BUILD TEST.py [ARGS]   runs one test of this folder with that venv's python and BUILD/ddp_cpp_py
# Both exit 77 (ctest: skipped) with the reason when the venv is missing ($DDP_TORCH2_VENV, default
# ~/.cache/ddp.cpp/torch2, made by tools/ddp torch2, which tools/ddp test runs first).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="$1"
shift
VENV="${DDP_TORCH2_VENV:-$HOME/.cache/ddp.cpp/torch2}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ] || ! "$PY" -c 'import torch, torch.distributed' 2>/dev/null; then
  echo "SKIP: no PyTorch 2.x venv at $VENV (tools/ddp torch2 makes it; tools/ddp test does so first)"
  exit 77
fi
OUT="$BUILD/ddp_cpp_py"
if [ "$1" = build ]; then
  [ -d /usr/lib/ccache ] && export PATH="/usr/lib/ccache:$PATH"
  export MAX_JOBS="${DDP_JOBS:-2}"
  t0=$SECONDS
  "$PY" -m pip install --quiet --no-build-isolation --no-deps --upgrade --target "$OUT" "$ROOT/python" ||
    { echo "FAIL: pip install of python/ (the ddp_cpp package) into $OUT failed (see above)"; exit 1; }
  echo "built and installed ddp_cpp into $OUT in $((SECONDS - t0)) s"
  exit 0
fi
if ! ls "$OUT"/ddp_cpp/_C*.so >/dev/null 2>&1; then
  echo "FAIL: $OUT has no ddp_cpp extension: TorchBackend.Build must run first (ctest -R TorchBackend)"
  exit 1
fi
export PYTHONPATH="$OUT${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" "$HERE/$@"
