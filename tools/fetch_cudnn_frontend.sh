#!/usr/bin/env bash
# fetch_cudnn_frontend.sh - the cuDNN frontend's C++ headers (NVIDIA's header-only graph API over cuDNN, which
# kernels/cuda/cudnn_attention.cpp uses for the fused bf16 attention) from PyPI's nvidia-cudnn-frontend wheel,
# once, into a cache outside the tree. Only headers are kept (3 MB); the wheel's Python module is not used.
# tools/ddp runs it before configuring a CUDA build; CMake looks in the same place (DDP_CUDNN_FRONTEND_DIR).
#
#   tools/fetch_cudnn_frontend.sh          # fetch when missing; prints the include folder
#   tools/fetch_cudnn_frontend.sh --path   # print the include folder when present (exit 1 when not; no network)
#
# Where: $DDP_CUDNN_FRONTEND_DIR, default $HOME/.cache/ddp.cpp/cudnn-frontend-$VERSION (headers in include/).
# What: nvidia-cudnn-frontend==$VERSION, one pinned wheel file (the same on every machine: CPython 3.11,
# manylinux_2_28 x86_64), checked against its SHA-256, downloaded by pip in a throwaway venv of Debian's
# /usr/bin/python3 (python3-venv). Exit status 0 with the folder on stdout; 1 with the reason on stderr.
set -euo pipefail
VERSION=1.32.0
WHEEL="nvidia_cudnn_frontend-$VERSION-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
SHA256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
HOME_DIR="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
DEST="${DDP_CUDNN_FRONTEND_DIR:-$HOME_DIR/.cache/ddp.cpp/cudnn-frontend-$VERSION}"
say() { printf 'fetch_cudnn_frontend: %s\n' "$*" >&2; }

if [ -f "$DEST/include/cudnn_frontend.h" ]; then
  printf '%s\n' "$DEST/include"
  exit 0
fi
[ "${1:-}" = --path ] && exit 1

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
/usr/bin/python3 -m venv "$TMP/venv" >"$TMP/venv.log" 2>&1 ||
  { cat "$TMP/venv.log" >&2; say "python3 -m venv failed (needs Debian's python3-venv)"; exit 1; }
"$TMP/venv/bin/pip" download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 --implementation cp "nvidia-cudnn-frontend==$VERSION" -d "$TMP/wheel" \
  >"$TMP/pip.log" 2>&1 || { cat "$TMP/pip.log" >&2; say "pip download of nvidia-cudnn-frontend==$VERSION failed"; exit 1; }
[ -f "$TMP/wheel/$WHEEL" ] || { say "pip brought $(ls "$TMP/wheel"), not $WHEEL"; exit 1; }
echo "$SHA256  $TMP/wheel/$WHEEL" | sha256sum --check --quiet - ||
  { say "$WHEEL does not match its pinned SHA-256"; exit 1; }
mkdir -p "$DEST"
/usr/bin/python3 - "$TMP/wheel/$WHEEL" "$DEST/include.part" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    for n in names:
        z.extract(n, sys.argv[2])
PY
rm -rf "$DEST/include"
mv "$DEST/include.part/include" "$DEST/include"
rm -rf "$DEST/include.part"
[ -f "$DEST/include/cudnn_frontend.h" ] || { say "the wheel had no include/cudnn_frontend.h"; exit 1; }
say "cuDNN frontend $VERSION headers in $DEST/include"
printf '%s\n' "$DEST/include"
