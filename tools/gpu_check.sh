#!/usr/bin/env bash
# tools/gpu_check.sh - the one-command check for a machine with an NVIDIA GPU (docs/gpu.md): GPU tests (op parity
# CPU vs CUDA incl. bf16, NCCL world 1, two ranks on one GPU through Gloo staging, GPU-vs-CPU training, the CUDA
# optimizers, deterministic embedding backward and bitwise resume on the GPU, statistics from CUDA events), then
# short benchmarks (GEMM TFLOP/s f32 and bf16; tiny gpt and GPT-2-small step time, tokens/s, MFU, exposed
# communication in f32 and bf16; the used-map's host sync; two ranks through Gloo staging; `train`'s MFU line).
# Prints a markdown table for docs/benchmarks.md and keeps it in WORK/table.md.
#
#   tools/gpu_check.sh [options] [WORK]
#     --prebuilt DIR  run the binaries of a bundle made on the CPU machine by tools/gpu_bundle.sh (DIR/bundle.tar.gz)
#                     instead of building here (the fast path: no build on the device)
#     --collect DIR   also copy table.md, check.log, gpu.txt, bench.json and logs.tar.gz into DIR, after every
#                     step (the device tool's $OUT: at most 8 files come back)
#     --dry-run       every step with the same binaries and flags, on the CPU at tiny sizes (cuda -> cpu,
#                     nccl -> gloo, gpt2s -> gpt, 2 steps); no GPU needed. Also GPU_CHECK_DEVICE=cpu. Uses the build
#                     in DDP_BUILD_DIR (default build) unless --prebuilt. ctest runs it (GpuCheck.DryRun).
#     WORK            logs and table (default runs/gpu-check-<date>)
# Time: DDP_GPU_CHECK_DEADLINE_S (default 240) bounds the whole run after the build: each step's timeout is cut to
# what is left, and steps that would start with under 10 s left are skipped, so the script ends by then. Building
# on the device (no --prebuilt) adds at most DDP_GPU_BUILD_TIMEOUT_S (default 240) before that.
# NCCL, cuDNN and cuBLAS come from the CUDA toolkit or from Python's nvidia-* packages (found either way).
set -uo pipefail
# What the steps below run (tools/gpu_bundle.sh packs these; the load check starts each once).
GPU_CHECK_PROGRAMS=(train ddprun bench_e2e bench_gpu_gemm)
GPU_CHECK_TESTS=(test_gpu test_ops_core test_ops_nn test_ops_conv test_train test_data_loader)
[ "${1:-}" = --print-binaries ] && { echo "${GPU_CHECK_PROGRAMS[*]}"; echo "${GPU_CHECK_TESTS[*]}"; exit 0; }
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DRY=0
[ "${GPU_CHECK_DEVICE:-cuda}" = cpu ] && DRY=1
PREBUILT="" COLLECT="" WORK=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --prebuilt) PREBUILT="${2:?--prebuilt needs a folder}"; shift ;;
    --prebuilt=*) PREBUILT="${1#*=}" ;;
    --collect) COLLECT="${2:?--collect needs a folder}"; shift ;;
    --collect=*) COLLECT="${1#*=}" ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "gpu_check: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) WORK="$1" ;;
  esac
  shift
done
WORK="${WORK:-$ROOT/runs/gpu-check-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$WORK" || exit 2
WORK="$(cd "$WORK" && pwd)"
[ -n "$COLLECT" ] && { mkdir -p "$COLLECT" || exit 2; }
DEADLINE="${DDP_GPU_CHECK_DEADLINE_S:-240}"
BUILD_LIMIT="${DDP_GPU_BUILD_TIMEOUT_S:-240}"
: >"$WORK/check.log"
T0=$SECONDS
log() { printf '[gpu_check %3ds] %s\n' $((SECONDS - T0)) "$*" | tee -a "$WORK/check.log" >&2; }
declare -a ROWS=()
FAILS=0

# ---- the table: one markdown row per step, written (and collected) after every step -----------------------
HEADER=""
write_table() {
  {
    echo "$HEADER"
    echo
    echo "| check | result |"
    echo "|---|---|"
    for r in "${ROWS[@]}"; do echo "$r"; done
  } >"$WORK/table.md"
  collect
}
row() {  # name, result
  ROWS+=("| $1 | $(printf '%s' "$2" | tr '|' '/') |")
  case "$2" in FAIL*) FAILS=$((FAILS + 1)) ;; esac
  write_table
}
collect() {
  [ -n "$COLLECT" ] || return 0
  cp -f "$WORK/table.md" "$WORK/check.log" "$COLLECT/" 2>/dev/null
  for f in gpu.txt bench.json; do [ -f "$WORK/$f" ] && cp -f "$WORK/$f" "$COLLECT/"; done
  return 0
}
pack_logs() {
  [ -n "$COLLECT" ] || return 0
  (cd "$WORK" && tar -czf "$COLLECT/logs.tar.gz" --exclude=bundle --exclude=table.md . 2>/dev/null)
  collect
}
finish() {  # on every exit: the table on stdout, the logs packed for --collect
  local rc=$?
  [ -f "$WORK/table.md" ] && { echo; cat "$WORK/table.md"; }
  pack_logs
  exit "$rc"
}
trap finish EXIT

# ---- time: every step's timeout is cut to the deadline -------------------------------------------------------
DEADLINE_T0=$SECONDS  # reset after the build
left() { echo $((DEADLINE - (SECONDS - DEADLINE_T0))); }
limit_for() {  # wanted seconds -> seconds allowed now (0: skip)
  local l; l=$(left)
  if [ "$l" -lt 10 ]; then echo 0; elif [ "$1" -lt $((l - 5)) ]; then echo "$1"; else echo $((l - 5)); fi
}

# ---- where CUDA's libraries are: toolkit or Python's nvidia-* wheels ------------------------------------------
LIB_CANDS=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu)
for py in $(python3 -c "import site; print(' '.join(site.getsitepackages()))" 2>/dev/null) /opt/torch/.venv/lib/python3*/site-packages; do
  [ -d "$py/nvidia" ] && LIB_CANDS+=("$py/nvidia")
done
lib_dirs_for() {  # soname -> directories holding it
  local d
  for d in "${LIB_CANDS[@]}"; do
    [ -d "$d" ] || continue
    find "$d" -maxdepth 4 -name "$1" -printf '%h\n' 2>/dev/null | head -1
  done | awk '!seen[$0]++'
}
CUDA_LIBS=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9)
for so in "${CUDA_LIBS[@]}"; do
  d="$(lib_dirs_for "$so" | head -1)"
  if [ -n "$d" ]; then
    case ":${LD_LIBRARY_PATH:-}:" in *":$d:"*) ;; *) export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d" ;; esac
    case "$so" in libnccl*) export NCCL_ROOT="$(dirname "$d")" ;; libcudnn*) export CUDNN_ROOT="$(dirname "$d")" ;; esac
    log "$so in $d ($(basename "$(readlink -f "$d/$so")"))"
  else
    log "$so not found (toolkit or Python nvidia-* packages)"
  fi
done
export PATH="/usr/local/cuda/bin:$PATH"
# Every NCCL group here is world 1 on one machine: bootstrap on loopback (a VM may have no other usable
# interface), and NCCL's warnings in the logs.
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
# A stuck collective or communicator creation fails with its clear error inside a step's time limit, not at
# the default 10 minutes.
export DDP_COLLECTIVE_TIMEOUT_S="${DDP_COLLECTIVE_TIMEOUT_S:-60}"

# ---- the GPU ---------------------------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
  echo "dry run on the CPU ($(nproc) cores): no GPU used" >"$WORK/gpu.txt"
elif ! nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$WORK/gpu.txt" 2>&1; then
  log "no usable GPU (nvidia-smi: $(head -1 "$WORK/gpu.txt")); --dry-run checks the script on the CPU"
  exit 1
fi
GPU="$(head -1 "$WORK/gpu.txt")"
log "GPU: $GPU"

# ---- the binaries: a carried bundle, or a build here (dry run: the existing build) ---------------------------
BUILD_INFO=""
if [ -n "$PREBUILT" ]; then
  [ -f "$PREBUILT/bundle.tar.gz" ] || { log "no $PREBUILT/bundle.tar.gz: make it with tools/gpu_bundle.sh"; exit 1; }
  U="$WORK/bundle"
  rm -rf "$U" && mkdir -p "$U" && tar -C "$U" -xzf "$PREBUILT/bundle.tar.gz" || { log "cannot unpack $PREBUILT/bundle.tar.gz"; exit 1; }
  BIN="$U/bin" TESTS="$U/tests"
  export LD_LIBRARY_PATH="$U/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  BUILD_INFO="bundle $(grep -E '^(commit|date)=' "$U/info.txt" | cut -d= -f2 | tr '\n' ' ')"
  # Tests find helper programs through the build folder's absolute path (DDP_BIN_DIR): recreate it as a link.
  bd="$(grep '^build_dir=' "$U/info.txt" | cut -d= -f2)"
  if [ -n "$bd" ] && [ ! -e "$bd" ]; then
    mkdir -p "$(dirname "$bd")" 2>/dev/null && ln -s "$U" "$bd" && log "linked $bd -> $U (the tests' DDP_BIN_DIR)"
  fi
elif [ "$DRY" = 1 ]; then
  B="${DDP_BUILD_DIR:-$ROOT/build}"
  case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
  BIN="$B/bin" TESTS="$B/tests"
  BUILD_INFO="build $B"
else
  B="${DDP_GPU_BUILD_DIR:-$ROOT/build-gpu}"
  log "configure + build (CUDA on) in $B (at most ${BUILD_LIMIT} s)"
  if ! cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDP_CUDA=ON -DDDP_BUILD_BENCH=ON \
       -DDDP_CUDA_ARCHITECTURES=90 >"$WORK/configure.log" 2>&1; then
    log "configure FAILED (see configure.log; a missing package here means: build a bundle on the CPU machine, --prebuilt)"
    tail -20 "$WORK/configure.log" >&2; row "build on this machine" "FAIL: configure (configure.log)"; exit 1
  fi
  if ! timeout "$BUILD_LIMIT" cmake --build "$B" -j "$(nproc)" --target "${GPU_CHECK_PROGRAMS[@]}" \
       "${GPU_CHECK_TESTS[@]}" >"$WORK/build.log" 2>&1; then
    log "build FAILED (see build.log)"; grep -E 'error' "$WORK/build.log" | head -20 >&2
    row "build on this machine" "FAIL (build.log)"; exit 1
  fi
  BIN="$B/bin" TESTS="$B/tests"
  BUILD_INFO="built here in $((SECONDS - T0)) s"
  DEADLINE_T0=$SECONDS
fi
HEADER="**ddp.cpp GPU check** $(date -u +%Y-%m-%d), ${GPU}; ${BUILD_INFO}$([ "$DRY" = 1 ] && echo '; DRY RUN on the CPU (tiny sizes, not GPU figures)')"

# Every binary must load: a missing shared library is named here, not as 12 identical failures below.
missing=""
for f in "${GPU_CHECK_PROGRAMS[@]/#/$BIN/}" "${GPU_CHECK_TESTS[@]/#/$TESTS/}"; do
  if [ ! -x "$f" ]; then missing+=" $(basename "$f") (absent)"; continue; fi
  nf="$(ldd "$f" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' ')"
  if [ -n "$nf" ]; then missing+=" $(basename "$f") needs: $nf"; continue; fi
  # Starting it catches the rest (symbol versions: the bundle needs glibc >= 2.34 and GLIBCXX_3.4.30).
  case "$f" in */tests/*) probe=(--gtest_list_tests) ;; *) probe=(--help) ;; esac
  if ! out="$("$f" "${probe[@]}" 2>&1 >/dev/null)"; then missing+=" $(basename "$f") does not start: $(echo "$out" | head -2 | tr '\n' ' ')"; fi
done
if [ -n "$missing" ]; then
  log "binaries cannot run:$missing"
  row "binaries load" "FAIL:$missing"
  exit 1
fi
# On the GPU machine our CUDA runtime must see the GPU too (else every GPU test would skip): one tiny GEMM.
if [ "$DRY" = 0 ]; then
  probe="$(timeout 60 "$BIN/bench_gpu_gemm" --n 256 --reps 1 2>&1)"
  case "$probe" in
    *"skipped: no GPU"*|"") row "CUDA sees the GPU" "FAIL: $probe"; exit 1 ;;
    *TFLOP/s*) log "CUDA sees the GPU: $probe" ;;
    *) row "CUDA sees the GPU" "FAIL: $probe"; exit 1 ;;
  esac
fi
row "binaries load" "ok ($(basename "$BIN")/, $(basename "$TESTS")/; LD_LIBRARY_PATH has ${#CUDA_LIBS[@]} CUDA libraries' folders)"

# ---- dry run: the GPU flags of each step, mapped to the CPU at tiny sizes -------------------------------------
dev_args() {  # args... -> the same args (GPU run) or their CPU twin (dry run), one per line
  if [ "$DRY" = 0 ]; then printf '%s\n' "$@"; return; fi
  local prev=""
  for a in "$@"; do
    case "$prev:$a" in
      --device:cuda) a=cpu ;;
      --backend:nccl) a=gloo ;;
      --config:gpt2s) a=gpt ;;
      --steps:*) a=2 ;;
      --warmup:*) a=1 ;;
      --batch-size:*) a=2 ;;
    esac
    printf '%s\n' "$a"
    prev="$a"
  done
}

# "name median; ..." for bench_e2e's table rows matching $1: each row is a name, then median p10 p90 min max.
# Under ddprun every line starts with "[rank 0] "; that prefix is dropped first.
medians() {
  sed -E 's/^\[rank [0-9]+\] ?//' | grep -E "^ +($1)" |
    awk '{ if (NF < 6) next; n = $1; for (j = 2; j <= NF - 5; j++) n = n " " $j;
           printf "%s%s %s", (k++ ? "; " : ""), n, $(NF - 4) }'
}
bench_row() {  # label, log: the parsed medians, or FAIL when the table is missing
  local m; m="$(medians 'step \(|tokens/s|exposed|MFU|used-map' <"$WORK/$2")"
  if [ -z "$m" ]; then row "$1" "FAIL: no bench_e2e table in $2 (parser?)"; else row "$1" "$m"; fi
}

# ---- steps -----------------------------------------------------------------------------------------------------
run_test() {  # name, binary, gtest filter, seconds
  local name="$1" bin="$2" filter="$3" want="$4"
  local file; file="test-$(echo "$bin-$filter" | tr -c 'A-Za-z0-9_\n' '-').log"
  local n; n="$("$TESTS/$bin" --gtest_list_tests --gtest_filter="$filter" 2>/dev/null | grep -c '^  ')"
  if [ "$n" -eq 0 ]; then row "$name" "FAIL: filter '$filter' matches no test in $bin"; return; fi
  local lim; lim=$(limit_for "$want")
  if [ "$lim" -eq 0 ]; then row "$name" "SKIPPED (deadline)"; return; fi
  log "test: $name ($bin '$filter', $n tests, at most $lim s)"
  local t=$SECONDS
  if timeout "$lim" "$TESTS/$bin" --gtest_filter="$filter" >"$WORK/$file" 2>&1; then
    local ok sk
    # one line per test that ran: "[       OK ] Suite.Name (12 ms)" (the summary lists them again, without time)
    ok=$(grep -cE '^\[       OK \] .* \([0-9]+ ms\)$' "$WORK/$file")
    sk=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$WORK/$file")
    if [ "$DRY" = 0 ] && [ "$sk" -gt 0 ]; then  # on the GPU machine nothing here may skip
      row "$name" "FAIL: $sk of $n skipped on a GPU machine ($file)"
    else
      row "$name" "PASS $ok/$n$([ "$sk" -gt 0 ] && echo ", $sk skipped (no GPU)"), $((SECONDS - t)) s"
    fi
  else
    local rc=$?
    row "$name" "FAIL rc=$rc$([ $rc -eq 124 ] && echo " (timeout $lim s)") ($file)"
    grep -E 'Failure|FAILED|error' -A3 "$WORK/$file" | head -20 | tee -a "$WORK/check.log" >&2
  fi
}

gemm() {  # dtype, n
  local lim; lim=$(limit_for 40)
  if [ "$lim" -eq 0 ]; then row "GEMM $1" "SKIPPED (deadline)"; return; fi
  local n="$2"; [ "$DRY" = 1 ] && n=64
  log "bench: GEMM $1 n=$n"
  if timeout "$lim" "$BIN/bench_gpu_gemm" --dtype "$1" --n "$n" >"$WORK/gemm-$1.log" 2>&1; then
    row "GEMM $1 (ops::matmul)" "$(tail -1 "$WORK/gemm-$1.log")"
  else
    row "GEMM $1 (ops::matmul)" "FAIL rc=$? (gemm-$1.log): $(tail -1 "$WORK/gemm-$1.log")"
  fi
}

bench() {  # label, seconds, bench_e2e args...
  local label="$1" want="$2"; shift 2
  local lim; lim=$(limit_for "$want")
  if [ "$lim" -eq 0 ]; then row "$label" "SKIPPED (deadline)"; return; fi
  local args; mapfile -t args < <(dev_args --device cuda --backend nccl "$@")
  [ "$DRY" = 1 ] && args+=(--peak-tflops 1)  # the CPU has no datasheet peak: exercise the MFU row anyway
  log "bench: $label: bench_e2e ${args[*]}"
  if timeout "$lim" "$BIN/bench_e2e" "${args[@]}" --json "$WORK/bench.json" --label "$label" >"$WORK/bench-$label.log" 2>&1; then
    bench_row "$label" "bench-$label.log"
  else
    row "$label" "FAIL rc=$? (bench-$label.log): $(grep -v '^ ' "$WORK/bench-$label.log" | tail -1)"
  fi
}

two_ranks() {
  local label="gpt tiny, 2 ranks on 1 GPU (Gloo staged)"
  local lim; lim=$(limit_for 60)
  if [ "$lim" -eq 0 ]; then row "$label" "SKIPPED (deadline)"; return; fi
  local args; mapfile -t args < <(dev_args --config gpt --device cuda --backend gloo --warmup 3 --steps 15)
  log "bench: $label"
  if timeout "$lim" "$BIN/ddprun" --nproc-per-node 2 --standalone "$BIN/bench_e2e" "${args[@]}" \
       --json "$WORK/bench.json" --label gpt-tiny-2ranks-gloo-staged >"$WORK/bench-2ranks.log" 2>&1; then
    bench_row "$label" bench-2ranks.log
  else
    row "$label" "FAIL rc=$? (bench-2ranks.log): $(grep -v '^ ' "$WORK/bench-2ranks.log" | tail -1)"
  fi
}

train_mfu() {
  local label="train gpt bf16, synthetic (throughput, MFU)"
  local lim; lim=$(limit_for 60)
  if [ "$lim" -eq 0 ]; then row "$label" "SKIPPED (deadline)"; return; fi
  local args; mapfile -t args < <(dev_args --model gpt --data synthetic --device cuda --dtype bfloat16 --steps 40 \
                                    --eval-interval 0 --sample-tokens 0)
  [ "$DRY" = 1 ] && args+=(--peak-tflops 1)
  log "train: ${args[*]}"
  if timeout "$lim" "$BIN/train" "${args[@]}" >"$WORK/train-bf16.log" 2>&1; then
    local t; t="$(grep -E 'throughput|MFU' "$WORK/train-bf16.log" | sed 's/^\[rank 0\] *//' | tr -s ' ' | tr '\n' ';')"
    case "$t" in *MFU*) row "$label" "$t" ;; *) row "$label" "FAIL: no MFU line (train-bf16.log): $t" ;; esac
  else
    row "$label" "FAIL rc=$? (train-bf16.log): $(tail -1 "$WORK/train-bf16.log")"
  fi
}

# Most important first: a deadline cuts the tail.
log "GPU tests"
run_test "op parity: core ops (CPU vs CUDA)" test_ops_core '*Cuda*' 60
run_test "op parity: nn ops incl. bf16 (CPU vs CUDA)" test_ops_nn '*Cuda*' 60
run_test "op parity: conv/pool/bn (CPU vs CUDA)" test_ops_conv '*Cuda*:*Gpu*' 60
run_test "NCCL world 1, Gloo staging, determinism, resume, stats, optimizers" test_gpu '*' 150
run_test "train: bitwise resume (device auto = GPU)" test_train 'Resume.*' 90
run_test "data loader: GPU batches (pinned, copy stream)" test_data_loader 'DataLoader.Gpu*' 30
log "benchmarks"
gemm f32 4096
gemm bf16 8192
bench gpt-tiny-f32 45 --config gpt --warmup 5 --steps 30
bench gpt-tiny-bf16 45 --config gpt --dtype bf16 --warmup 5 --steps 30
bench gpt2s-f32 75 --config gpt2s --warmup 2 --steps 8 --batch-size 4
bench gpt2s-bf16 75 --config gpt2s --dtype bf16 --warmup 2 --steps 8 --batch-size 4
two_ranks
train_mfu
bench gpt-tiny-f32-unused-params 45 --config gpt --mode unused --warmup 5 --steps 30
bench gpt2s-bf16-bf16-allreduce 75 --config gpt2s --dtype bf16 --allreduce-dtype bf16 --warmup 2 --steps 8 --batch-size 4

log "done in $((SECONDS - T0)) s, $FAILS failed; logs in $WORK"
write_table
[ "$FAILS" -eq 0 ]
