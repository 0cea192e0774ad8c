#!/usr/bin/env bash
# tools/gpu_check.sh [OUT_DIR] - the one-command check for a machine with an NVIDIA GPU and a CUDA toolkit:
# builds with CUDA (native sm_90 plus sm_80), runs the GPU tests (op parity CPU vs CUDA, NCCL with world size 1,
# two ranks on one GPU through the Gloo-staged path, the reducer's stream/event ordering via GPU-vs-CPU
# training), then a short benchmark table (GEMM TFLOP/s, tiny gpt and GPT-2-small step time, tokens/s, MFU,
# exposed communication). Logs go to OUT_DIR (default runs/gpu-check-<date>); the table is printed last.
# Designed to finish within 8 minutes on an H200 machine with 16 cores.
# NCCL and cuDNN come from the toolkit or from Python's nvidia-nccl / nvidia-cudnn packages (found either way).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/runs/gpu-check-$(date +%Y%m%d-%H%M%S)}"
BUILD="${DDP_GPU_BUILD_DIR:-$ROOT/build-gpu}"
mkdir -p "$OUT"
T0=$SECONDS
log() { printf '[gpu_check %3ds] %s\n' $((SECONDS - T0)) "$*" | tee -a "$OUT/check.log"; }
declare -a ROWS
row() { ROWS+=("$(printf '%-44s %s' "$1" "$2")"); }

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
log "GPU: $(tail -n +2 "$OUT/gpu.txt" 2>/dev/null | head -1)"

# NCCL / cuDNN from Python wheels when the toolkit lacks them.
for lib in nccl cudnn; do
  for d in $(python3 -c "import site,sys; print(' '.join(site.getsitepackages()+[site.getusersitepackages()]))" 2>/dev/null); do
    if [ -d "$d/nvidia/$lib/lib" ]; then
      upper=$(echo "$lib" | tr a-z A-Z)
      export "${upper}_ROOT=$d/nvidia/$lib"
      export LD_LIBRARY_PATH="$d/nvidia/$lib/lib:${LD_LIBRARY_PATH:-}"
      log "$lib from $d/nvidia/$lib (used only if the toolkit has none)"
    fi
  done
done
export PATH="/usr/local/cuda/bin:$PATH"

log "configure + build (CUDA on) in $BUILD"
if ! cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDP_CUDA=ON -DDDP_BUILD_BENCH=ON \
     > "$OUT/configure.log" 2>&1; then
  log "configure FAILED (see $OUT/configure.log)"; tail -20 "$OUT/configure.log"; exit 1
fi
if ! timeout 300 cmake --build "$BUILD" -j "$(nproc)" --target test_gpu test_ops_core test_ops_nn test_ops_conv \
     test_ddp bench_e2e bench_gpu_gemm ddprun > "$OUT/build.log" 2>&1; then
  log "build FAILED (see $OUT/build.log)"; grep -E 'error' "$OUT/build.log" | head -20; exit 1
fi
log "built"

run_test() {  # name, binary, filter
  local name="$1" bin="$2" filter="$3"
  if timeout 120 "$BUILD/tests/$bin" --gtest_filter="$filter" > "$OUT/$name.log" 2>&1; then
    row "$name" "PASS ($(grep -c '^\[       OK' "$OUT/$name.log") ok, $(grep -c '^\[  SKIPPED' "$OUT/$name.log") skipped)"
  else
    row "$name" "FAIL (see $name.log)"
    grep -E 'Failure|FAILED' -A3 "$OUT/$name.log" | head -20 | tee -a "$OUT/check.log"
  fi
}
log "GPU tests"
run_test "op parity: core ops (CPU vs CUDA)" test_ops_core '*Cuda*'
run_test "op parity: nn ops (CPU vs CUDA)" test_ops_nn '*Cuda*'
run_test "op parity: conv/pool/bn (CPU vs CUDA)" test_ops_conv '*Cuda*:*Gpu*'
run_test "NCCL world 1, Gloo-staged 2 ranks, reducer" test_gpu '*'

log "benchmarks"
if out=$(timeout 60 "$BUILD/bin/bench_gpu_gemm" 2>&1); then row "GEMM f32 4096^3" "$out"; else row "GEMM" "FAIL: $out"; fi
echo "$out" > "$OUT/gemm.log"
bench() {  # label, args...
  local label="$1"; shift
  if timeout 150 "$BUILD/bin/bench_e2e" --device cuda --backend nccl --json "$OUT/bench.json" --label "$label" "$@" \
       > "$OUT/bench-$label.log" 2>&1; then
    row "$label" "$(grep -E 'step|tokens|MFU' "$OUT/bench-$label.log" | tail -3 | tr '\n' ' ')"
  else
    row "$label" "FAIL (see bench-$label.log)"
  fi
}
bench gpt-tiny --config gpt --warmup 5 --steps 30
bench gpt2-small --config gpt2s --warmup 2 --steps 8 --batch-size 4
if timeout 120 "$BUILD/bin/ddprun" --nproc-per-node 2 --standalone "$BUILD/bin/bench_e2e" --config gpt --device cuda \
     --backend gloo --warmup 3 --steps 15 --json "$OUT/bench.json" --label gpt-tiny-2ranks-gloo-staged \
     > "$OUT/bench-2ranks.log" 2>&1; then
  row "gpt-tiny, 2 ranks on 1 GPU (Gloo staged)" "$(grep -E 'step|exposed' "$OUT/bench-2ranks.log" | tail -2 | tr '\n' ' ')"
else
  row "gpt-tiny, 2 ranks on 1 GPU (Gloo staged)" "FAIL (see bench-2ranks.log)"
fi

log "done in $((SECONDS - T0)) s; logs in $OUT"
echo
echo "== ddp.cpp GPU check ($(date -u +%Y-%m-%d), $(tail -n +2 "$OUT/gpu.txt" 2>/dev/null | head -1))"
for r in "${ROWS[@]}"; do echo "  $r"; done | tee "$OUT/table.txt"
