#!/usr/bin/env bash
# gpu_check_dry_run.sh BUILD_DIR - ctest GpuCheck.DryRun: tools/gpu_check.sh --dry-run over every step on the CPU.
# In a CUDA build it goes through the path the GPU machine takes: tools/gpu_bundle.sh packs BUILD_DIR's binaries
# (no rebuild: ctest runs after the build) and the dry run uses the unpacked bundle with its own libraries.
# Without CUDA (no bundle possible) it runs the build folder's binaries. Exit status: the script's.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$1"
WORK="$BUILD/gpu-check-dry-run"
rm -rf "$WORK" "$BUILD/gpu-bundle-test"
if ldd "$BUILD/libddp.so" 2>/dev/null | grep libcudart >/dev/null; then  # not -q: see tools/gpu_bundle.sh
  DDP_GPU_BUNDLE_NO_BUILD=1 "$ROOT/tools/gpu_bundle.sh" "$BUILD" "$BUILD/gpu-bundle-test" || exit 1
  exec "$ROOT/tools/gpu_check.sh" --dry-run --prebuilt "$BUILD/gpu-bundle-test" --collect "$WORK/collected" "$WORK"
fi
DDP_BUILD_DIR="$BUILD" exec "$ROOT/tools/gpu_check.sh" --dry-run --collect "$WORK/collected" "$WORK"
