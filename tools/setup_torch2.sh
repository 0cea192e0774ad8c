#!/usr/bin/env bash
# setup_torch2.sh - PyTorch 2.x from PyPI in a virtual environment outside the source tree, for the tests and
# benchmarks that use today's PyTorch as the yardstick (tests/launchers, tests/distributed TorchStore*,
# tests/pytorch, bench/pytorch_twin.py). Debian's python3-torch (1.13) stays what it is; this is beside it.
#
#   tools/setup_torch2.sh          # create it once; a second call only reports the version (no network)
#   tools/setup_torch2.sh --path   # print the venv's python (nothing installed), exit 1 when it has no torch 2.x
#   tools/setup_torch2.sh --with-torchft   # the same venv, plus torchft (for tools/bench_torchft.py only; no test
#                                  # needs it): $DDP_TORCHFT_SPEC, default torchft==0.2.0, with torch held at the
#                                  # venv's version; a second call only reports the version (no network)
#   tools/ddp torch2               # the same as the first form
#
# Where: $DDP_TORCH2_VENV, default $HOME/.cache/ddp.cpp/torch2 (tests/support/torch_python.cpp looks in the
# same place). What: $DDP_TORCH2_SPEC (default torch==2.15.0 numpy), installed with pip from PyPI into a venv
# of Debian's /usr/bin/python3 ($DDP_TORCH2_PYTHON to choose another). PyPI's Linux x86_64 torch wheel is the
# CUDA build: pip also brings NVIDIA's CUDA runtime wheels (about 3.0 GB to download, 5.3 GB on disk); it runs
# on the CPU without a GPU. docs/pytorch.md has the measured sizes and times and the smaller routes tried.
# Exit status: 0 when the venv has torch 2.x (and torchft with --with-torchft), 1 when it could not be made (the
# reason on stderr).
set -euo pipefail
HOME_DIR="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"  # the tests fall back the same way
VENV="${DDP_TORCH2_VENV:-$HOME_DIR/.cache/ddp.cpp/torch2}"
SPEC="${DDP_TORCH2_SPEC:-torch==2.15.0 numpy}"
TORCHFT_SPEC="${DDP_TORCHFT_SPEC:-torchft==0.2.0}"
BASE_PY="${DDP_TORCH2_PYTHON:-/usr/bin/python3}"
PY="$VENV/bin/python"

say() { printf 'setup_torch2: %s\n' "$*" >&2; }

# The torch version the venv's python imports, or nothing (when it has none, or one older than 2).
torch2_version() {
  [ -x "$PY" ] || return 1
  local v
  v="$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)" || return 1
  case "$v" in 2.*) printf '%s\n' "$v" ;; *) return 1 ;; esac
}

if [ "${1:-}" = "--path" ]; then
  torch2_version >/dev/null || exit 1
  printf '%s\n' "$PY"
  exit 0
fi
WITH_TORCHFT=0
if [ "${1:-}" = "--with-torchft" ]; then WITH_TORCHFT=1; shift; fi
[ $# -eq 0 ] || { say "usage: tools/setup_torch2.sh [--path | --with-torchft]"; exit 2; }

# torchft (tools/bench_torchft.py's yardstick) into the venv that has torch 2.x: nothing when it imports already;
# torch is pinned to the venv's version so that pip never replaces it.
torchft_step() {
  [ "$WITH_TORCHFT" = 1 ] || return 0
  local tv ftv t0=$SECONDS
  tv="$(torch2_version)"
  if ftv="$("$PY" -c 'import importlib.metadata as m, torchft; print(m.version("torchft"))' 2>/dev/null)"; then
    say "torchft $ftv is ready in $VENV (nothing to do)"
    return 0
  fi
  read -r -a ftpkgs <<<"$TORCHFT_SPEC"
  say "installing $TORCHFT_SPEC from PyPI into $VENV (torch held at ${tv%%+*})"
  if ! "$PY" -m pip install --disable-pip-version-check --timeout 60 --retries 2 -q "${ftpkgs[@]}" \
      "torch==${tv%%+*}" >/tmp/ddp-torchft-pip.log 2>&1; then
    tail -5 /tmp/ddp-torchft-pip.log >&2
    say "pip install $TORCHFT_SPEC failed after $((SECONDS - t0)) s: PyPI unreachable or no wheel for this" \
        "python/torch (full log /tmp/ddp-torchft-pip.log); tools/bench_torchft.py cannot run, nothing else needs it"
    return 1
  fi
  ftv="$("$PY" -c 'import importlib.metadata as m, torchft; print(m.version("torchft"))' 2>&1)" ||
    { say "torchft installed, but it does not import with torch $tv: $ftv"; return 1; }
  say "torchft $ftv installed in $VENV in $((SECONDS - t0)) s"
}

if v="$(torch2_version)"; then
  say "PyTorch $v is ready in $VENV (nothing to do)"
  torchft_step
  exit $?
fi

case "$VENV" in
  "$(cd "$(dirname "$0")/.." && pwd)"/*) say "DDP_TORCH2_VENV=$VENV is inside the source tree: choose a path outside it"; exit 1 ;;
esac
[ -x "$BASE_PY" ] || { say "$BASE_PY not found: install python3 (apt-get install python3 python3-venv) or set DDP_TORCH2_PYTHON"; exit 1; }
if [ ! -x "$PY" ]; then
  mkdir -p "$(dirname "$VENV")"
  "$BASE_PY" -m venv "$VENV" 2>/tmp/ddp-torch2-venv.log || {
    cat /tmp/ddp-torch2-venv.log >&2
    say "could not create a venv with $BASE_PY (Debian: apt-get install python3-venv)"; rm -rf "$VENV"; exit 1; }
fi
say "installing $SPEC from PyPI into $VENV (about 3 GB: the CUDA wheels come with PyPI's torch)"
t0=$SECONDS
read -r -a pkgs <<<"$SPEC"
# Short network timeouts and few retries: without a network this fails in seconds, not in pip's 15 minutes.
if ! "$PY" -m pip install --no-cache-dir --disable-pip-version-check --timeout 60 --retries 2 -q "${pkgs[@]}" \
    >/tmp/ddp-torch2-pip.log 2>&1; then
  tail -5 /tmp/ddp-torch2-pip.log >&2
  say "pip install $SPEC failed after $((SECONDS - t0)) s (full log /tmp/ddp-torch2-pip.log); the PyTorch 2.x tests will skip"
  exit 1
fi
v="$(torch2_version)" || { say "installed, but $PY does not import a torch 2.x; the PyTorch 2.x tests will skip"; exit 1; }
say "PyTorch $v installed in $VENV in $((SECONDS - t0)) s ($(du -sh "$VENV" 2>/dev/null | cut -f1) on disk)"
torchft_step
