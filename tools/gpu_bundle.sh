#!/usr/bin/env bash
# tools/gpu_bundle.sh [BUILD_DIR] [BUNDLE_DIR] - packs what tools/gpu_check.sh runs on a GPU machine into one
# folder that the device tool can carry (docs/gpu.md, "The first run"): the programs and test binaries the check
# runs, libddp.so, and the shared libraries they need that a CUDA image lacks (OpenBLAS, Gloo, Highway, ... from
# this Debian machine), as BUNDLE_DIR/bundle.tar.gz plus BUNDLE_DIR/info.txt. Not packed: glibc, libstdc++ and
# libgcc_s (the GPU machine's own, newer ones), and the CUDA libraries (cudart, cuBLAS, NCCL, cuDNN), which
# must be the GPU machine's own (gpu_check.sh finds them in the toolkit or in Python's nvidia-* packages).
# BUILD_DIR (default build) must be a CUDA build (the default configuration here: CUDA compiled, not run);
# the needed targets are built first. BUNDLE_DIR defaults to gpu-bundle/ in the repository (ignored by git).
# Check it here without a GPU: tools/gpu_check.sh --dry-run --prebuilt gpu-bundle.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
BUNDLE="${2:-$ROOT/gpu-bundle}"
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
case "$BUNDLE" in /*) ;; *) BUNDLE="$PWD/$BUNDLE" ;; esac
# The size the device tool carries with the working tree (64 MiB in all); keep the bundle well under it.
MAX_MB="${DDP_GPU_BUNDLE_MAX_MB:-48}"
say() { printf 'gpu_bundle: %s\n' "$*" >&2; }

[ -f "$BUILD/build.ninja" ] || { say "no build in $BUILD: run tools/ddp build first"; exit 1; }
[ -f "$BUILD/libddp.so" ] || { say "$BUILD/libddp.so missing: run tools/ddp build first"; exit 1; }
# grep without -q reads all of ldd's output: with -q it may exit first and, under pipefail, ldd's SIGPIPE
# failed the check now and then (GpuCheck.DryRun once in CI).
if ! ldd "$BUILD/libddp.so" | grep libcudart >/dev/null; then
  say "$BUILD is not a CUDA build (libddp.so does not link cudart): configure with -DDDP_CUDA=ON (needs nvcc, NCCL, cuDNN)"
  exit 1
fi

# What tools/gpu_check.sh runs: its own lists.
{ read -r -a PROGRAMS; read -r -a TESTS; } < <("$ROOT/tools/gpu_check.sh" --print-binaries)
if [ "${DDP_GPU_BUNDLE_NO_BUILD:-0}" != 1 ]; then  # 1: pack what is built (ctest's dry run, after the build)
  say "building ${PROGRAMS[*]} ${TESTS[*]} in $BUILD"
  cmake --build "$BUILD" -j "${DDP_JOBS:-$(nproc)}" --target "${PROGRAMS[@]}" "${TESTS[@]}" >"$BUILD.bundle-build.log" 2>&1 ||
    { { grep -E 'error' -A3 "$BUILD.bundle-build.log" | head -30 >&2 || true; }; say "build failed: $BUILD.bundle-build.log"; exit 1; }
fi

STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/tests" "$STAGE/lib"
for p in "${PROGRAMS[@]}"; do cp "$BUILD/bin/$p" "$STAGE/bin/" || { say "$BUILD/bin/$p is not built"; exit 1; }; done
# The test programs the tests may launch (tests/progs), as in the build folder.
for p in "$BUILD"/bin/testprog_*; do [ -e "$p" ] && cp "$p" "$STAGE/bin/"; done
for t in "${TESTS[@]}"; do cp "$BUILD/tests/$t" "$STAGE/tests/" || { say "$BUILD/tests/$t is not built"; exit 1; }; done
cp "$BUILD/libddp.so" "$STAGE/lib/"

# Shared libraries outside the build, except those the GPU machine must provide itself.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libcublasLt|libnccl|libcudnn|libnvrtc|libnvJitLink)'
for f in "$STAGE"/bin/* "$STAGE"/tests/* "$STAGE/lib/libddp.so"; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  [ "$name" = libddp.so ] && continue
  cp -L "$path" "$STAGE/lib/$name"
done
strip --strip-unneeded "$STAGE"/bin/* "$STAGE"/tests/* "$STAGE"/lib/* 2>/dev/null || true

mkdir -p "$BUNDLE"
rm -f "$BUNDLE/bundle.tar.gz" "$BUNDLE/info.txt"
{
  echo "build_dir=$BUILD"
  echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo +changes)"
  echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
  echo "host=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}')"
  echo "cuda_archs=$(grep -E '^DDP_CUDA_ARCHITECTURES' "$BUILD/CMakeCache.txt" | cut -d= -f2)"
  echo "programs=${PROGRAMS[*]}"
  echo "tests=${TESTS[*]}"
  echo "libs=$(cd "$STAGE/lib" && ls | tr '\n' ' ')"
} >"$STAGE/info.txt"
cp "$STAGE/info.txt" "$BUNDLE/info.txt"
tar -C "$STAGE" -czf "$BUNDLE/bundle.tar.gz" bin tests lib info.txt
mb=$(( $(stat -c %s "$BUNDLE/bundle.tar.gz") / 1048576 ))
say "wrote $BUNDLE/bundle.tar.gz (${mb} MiB) and info.txt"
if [ "$mb" -gt "$MAX_MB" ]; then
  say "the bundle is over ${MAX_MB} MiB: the device tool carries 64 MiB with the working tree; drop something"
  exit 1
fi
