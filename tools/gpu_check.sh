#!/usr/bin/env bash
# tools/gpu_check.sh [OUT_DIR] - the one-command check for a machine with an NVIDIA GPU and a CUDA toolkit:
# builds with CUDA (sm_80 and sm_90), runs the GPU tests (op parity CPU vs CUDA incl. bf16 mixed precision, NCCL
# with world size 1, two ranks on one GPU through the Gloo-staged path, GPU-vs-CPU training, the deterministic
# embedding backward and the bitwise resume on the GPU), then a short benchmark table (GEMM TFLOP/s; tiny gpt
# and GPT-2-small step time, tokens/s, MFU in float32 and bf16; exposed communication; `train` with its MFU
# line). Logs go to OUT_DIR (default runs/gpu-check-<date>); the table is printed last and kept in table.txt.
# Every step has its own timeout, and steps that would start after DDP_GPU_CHECK_BUDGET_S (default 420 s)
# are skipped, so the whole script ends within 8 minutes on an H200 machine with 16 cores.
# NCCL and cuDNN come from the toolkit or from Python's nvidia-nccl / nvidia-cudnn packages (found either way).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/runs/gpu-check-$(date +%Y%m%d-%H%M%S)}"
BUILD="${DDP_GPU_BUILD_DIR:-$ROOT/build-gpu}"
BUDGET="${DDP_GPU_CHECK_BUDGET_S:-420}"
mkdir -p "$OUT"
T0=$SECONDS
log() { printf '[gpu_check %3ds] %s\n' $((SECONDS - T0)) "$*" | tee -a "$OUT/check.log"; }
declare -a ROWS
row() { ROWS+=("$(printf '%-46s %s' "$1" "$2")"); }
over_budget() { [ $((SECONDS - T0)) -gt "$BUDGET" ]; }
# "metric: median" for the bench_e2e table rows matching $1 (the median is the first number of a row).
medians() {
  grep -E "^ *($1)" | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/) {
    n = ""; for (j = 1; j < i; j++) n = n (j > 1 ? " " : "") $j; printf "%s %s; ", n, $i; break }}'
}

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
     test_train test_ddp bench_e2e bench_gpu_gemm ddprun train > "$OUT/build.log" 2>&1; then
  log "build FAILED (see $OUT/build.log)"; grep -E 'error' "$OUT/build.log" | head -20; exit 1
fi
log "built"

run_test() {  # name, binary, filter, timeout
  local name="$1" bin="$2" filter="$3" limit="$4"
  local file="test-$(echo "$bin-$filter" | tr -c 'A-Za-z0-9_\n' '-').log"  # no '/' or '*' in file names
  if over_budget; then row "$name" "SKIPPED (time budget)"; return; fi
  log "test: $name"
  if timeout "$limit" "$BUILD/tests/$bin" --gtest_filter="$filter" > "$OUT/$file" 2>&1; then
    row "$name" "PASS ($(grep -c '^\[       OK' "$OUT/$file") ok, $(grep -c '^\[  SKIPPED' "$OUT/$file") skipped)"
  else
    row "$name" "FAIL rc=$? (see $file)"
    grep -E 'Failure|FAILED' -A3 "$OUT/$file" | head -20 | tee -a "$OUT/check.log"
  fi
}
log "GPU tests"
run_test "op parity: core ops (CPU vs CUDA)" test_ops_core '*Cuda*' 60
run_test "op parity: nn ops incl. bf16 (CPU vs CUDA)" test_ops_nn '*Cuda*' 60
run_test "op parity: conv/pool/bn (CPU vs CUDA)" test_ops_conv '*Cuda*:*Gpu*' 60
run_test "NCCL world 1, Gloo-staged 2 ranks, resume" test_gpu '*' 150
run_test "train: bitwise resume (device auto = GPU)" test_train 'Resume.*' 90

log "benchmarks"
if ! over_budget; then
  if out=$(timeout 60 "$BUILD/bin/bench_gpu_gemm" 2>&1); then row "GEMM" "$(echo "$out" | tail -2 | tr '\n' ' ')"; else row "GEMM" "FAIL: $(echo "$out" | tail -1)"; fi
  echo "$out" > "$OUT/gemm.log"
fi
bench() {  # label, timeout, args...
  local label="$1" limit="$2"; shift 2
  if over_budget; then row "$label" "SKIPPED (time budget)"; return; fi
  log "bench: $label"
  if timeout "$limit" "$BUILD/bin/bench_e2e" --device cuda --backend nccl --json "$OUT/bench.json" --label "$label" "$@" \
       > "$OUT/bench-$label.log" 2>&1; then
    row "$label" "$(medians 'step|tokens/s|exposed|MFU' < "$OUT/bench-$label.log")"
  else
    row "$label" "FAIL (see bench-$label.log)"
  fi
}
bench gpt-tiny-f32 45 --config gpt --warmup 5 --steps 30
bench gpt-tiny-bf16 45 --config gpt --dtype bf16 --warmup 5 --steps 30
bench gpt2s-f32 75 --config gpt2s --warmup 2 --steps 8 --batch-size 4
bench gpt2s-bf16 75 --config gpt2s --dtype bf16 --warmup 2 --steps 8 --batch-size 4
bench gpt2s-bf16-bf16allreduce 75 --config gpt2s --dtype bf16 --allreduce-dtype bf16 --warmup 2 --steps 8 --batch-size 4
if over_budget; then row "gpt-tiny, 2 ranks on 1 GPU (Gloo staged)" "SKIPPED (time budget)"; else
  log "bench: 2 ranks on one GPU through Gloo staging"
  if timeout 60 "$BUILD/bin/ddprun" --nproc-per-node 2 --standalone "$BUILD/bin/bench_e2e" --config gpt --device cuda \
       --backend gloo --warmup 3 --steps 15 --json "$OUT/bench.json" --label gpt-tiny-2ranks-gloo-staged \
       > "$OUT/bench-2ranks.log" 2>&1; then
    row "gpt-tiny, 2 ranks on 1 GPU (Gloo staged)" "$(medians 'step|exposed' < "$OUT/bench-2ranks.log")"
  else
    row "gpt-tiny, 2 ranks on 1 GPU (Gloo staged)" "FAIL (see bench-2ranks.log)"
  fi
fi
if over_budget; then row "train gpt bf16 (MFU line)" "SKIPPED (time budget)"; else
  log "train: gpt, synthetic data, bf16, 40 steps"
  if timeout 60 "$BUILD/bin/train" --model gpt --data synthetic --device cuda --dtype bfloat16 --steps 40 \
       --eval-interval 0 --sample-tokens 0 > "$OUT/train-bf16.log" 2>&1; then
    row "train gpt bf16 (MFU line)" "$(grep -E 'throughput|MFU' "$OUT/train-bf16.log" | tr -s ' ' | tr '\n' ';')"
  else
    row "train gpt bf16 (MFU line)" "FAIL (see train-bf16.log)"
  fi
fi

log "done in $((SECONDS - T0)) s; logs in $OUT"
echo
echo "== ddp.cpp GPU check ($(date -u +%Y-%m-%d), $(tail -n +2 "$OUT/gpu.txt" 2>/dev/null | head -1))"
for r in "${ROWS[@]}"; do echo "  $r"; done | tee "$OUT/table.txt"
