#!/usr/bin/env bash
# bench.sh - the CPU benchmark table of ddp.cpp: first the machine (bench_machine: CPU model, ISA, the Highway
# target, the BLAS kernel, threads, the measured one-core FMA peak and copy bandwidth), then bench_e2e for the mlp and gpt configurations at world sizes 1
# and 2 (2 through ddprun) in modes ddp, nosync, nooverlap and unused, a bucket-cap sweep at world 2, the Gloo
# all-reduce table, then a summary table, the plots (when python3-matplotlib is importable) and the bucket
# simulator's measured-vs-predicted validation. Everything goes to runs/bench-<date>.json (JSON lines).
#
#   tools/bench.sh BUILD_DIR [--quick]      # --quick: few steps (about 3-5 min on 2 cores), else ~10-15 min
#   tools/bench.sh BUILD_DIR --vs-pytorch   # only the PyTorch comparison (bench/pytorch_twin.py: 1.13 and/or 2.x)
#
# When a PyTorch is importable - Debian's python3-torch (1.13) and/or PyTorch 2.x from PyPI in the venv of
# tools/setup_torch2.sh (`tools/ddp torch2`) - every pass also runs bench/pytorch_twin.py (PyTorch on the same
# models, shapes, optimizer and threads) right after bench_e2e for mlp and gpt at world 1 and 2 in modes nosync
# and ddp: 1.13 eager, 2.x eager and 2.x with torch.compile (inductor, mode default; its compile time is
# reported apart, not in the step). Every row runs ddp.cpp and each PyTorch with the same threads per rank: cores
# / world, and at world 1 also 1 thread. The summary prints them side by side (bench/compare_pytorch.py).
# OPENBLAS_CORETYPE, when set (`tools/ddp bench` sets it from the CPU: SkylakeX with AVX-512), reaches both
# runtimes, so both use the same OpenBLAS kernels.
#
# Environment: BENCH_OUT (output directory, default runs), BENCH_REPEATS (passes over the whole table and
# sweep, interleaved so that slow drifts of the machine's load hit every configuration alike; the summary
# takes medians over passes; default 3, --quick 1), BENCH_CAPS (sweep caps in MiB, default
# "0.25 1 4 25 100"), BENCH_WAIT_IDLE=N (wait up to N seconds for the 1-minute load average to fall below 1
# before starting: other work on the cores makes every number noisy), BENCH_NICE=N (run in a new session whose
# autogroup has nice N, e.g. -15; negative values need root: with the kernel's autogroup scheduling a plain
# `nice` only ranks processes within one session, so compile jobs of other sessions would still take half the
# cores), BENCH_E2E_FLAGS (extra flags for every bench_e2e run, e.g. "--gradient-as-bucket-view"), BENCH_ISA=avx2
# (every side on its AVX2 code paths on a CPU that has more: ddp.cpp's kernels (DDP_CPU_ISA), OpenBLAS
# (OPENBLAS_CORETYPE=Haswell), oneDNN (ONEDNN_MAX_CPU_ISA), PyTorch's ATen (ATEN_CPU_CAPABILITY) and MKL
# (MKL_ENABLE_INSTRUCTIONS); the same core and memory, so not a figure of an AVX2 machine). Exit code: that of
# the simulator validation (3 when an error is above 20%).
set -euo pipefail

usage() { echo "usage: tools/bench.sh BUILD_DIR [--quick | --vs-pytorch]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
BUILD=$1
QUICK=0
VS_ONLY=0
[[ ${2:-} == "--quick" ]] && QUICK=1
[[ ${2:-} == "--vs-pytorch" ]] && VS_ONLY=1
[[ $# -le 2 && ( -z ${2:-} || $QUICK == 1 || $VS_ONLY == 1 ) ]] || usage
BIN=$BUILD/bin
if [[ -n ${BENCH_ISA:-} ]]; then  # every side on the AVX2 code paths, whatever the CPU has above them
  case ${BENCH_ISA,,} in
    avx2)
      export DDP_CPU_ISA=avx2 OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 \
        ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
      ;;
    *)
      echo "bench.sh: BENCH_ISA='$BENCH_ISA' is not a cap this script knows: use avx2, or unset it (the CPU's best)" >&2
      exit 2
      ;;
  esac
fi
if [[ -n ${BENCH_NICE:-} && -z ${BENCH_OWN_SESSION:-} ]]; then
  export BENCH_OWN_SESSION=1
  exec setsid --wait "$0" "$@"
fi
if [[ -n ${BENCH_NICE:-} ]]; then
  if ! echo "$BENCH_NICE" 2>/dev/null >/proc/self/autogroup; then
    echo "bench.sh: warning: could not set this session's autogroup nice to $BENCH_NICE (needs root for < 0)" >&2
  fi
fi
for prog in bench_machine bench_e2e bench_allreduce bucket_sim ddprun; do
  if [[ ! -x $BIN/$prog ]]; then
    echo "bench.sh: $BIN/$prog is missing; build it first: cmake --build $BUILD --target $prog" >&2
    exit 1
  fi
done
HERE=$(cd "$(dirname "$0")" && pwd)
OUT_DIR=${BENCH_OUT:-runs}
CAPS=${BENCH_CAPS:-"0.25 1 4 25 100"}
mkdir -p "$OUT_DIR"
STAMP=$(date +%Y-%m-%d-%H%M%S)
JSON=$OUT_DIR/bench-$STAMP.json
LOG=$OUT_DIR/bench-$STAMP.log
: >"$JSON"

if [[ $QUICK == 1 ]]; then
  MLP_STEPS=10; GPT_STEPS=5; WARMUP=2; AR_ITERS=5; REPEATS=${BENCH_REPEATS:-1}
else
  MLP_STEPS=40; GPT_STEPS=15; WARMUP=3; AR_ITERS=15; REPEATS=${BENCH_REPEATS:-3}
fi
steps_of() { [[ $1 == mlp ]] && echo $MLP_STEPS || echo $GPT_STEPS; }

if [[ ${BENCH_WAIT_IDLE:-0} -gt 0 ]]; then
  deadline=$((SECONDS + BENCH_WAIT_IDLE))
  while awk "BEGIN{exit !($(cut -d' ' -f1 /proc/loadavg) >= 1.0)}" && [[ $SECONDS -lt $deadline ]]; do
    sleep 10
  done
fi
"$BIN/bench_machine" | tee "$LOG"  # the machine first: every table below is this machine's
echo "bench.sh: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), autogroup '$(cat /proc/self/autogroup 2>/dev/null)'"
echo "bench.sh: output $JSON (log $LOG)"
LOAD=$(cut -d' ' -f1 /proc/loadavg)
if awk "BEGIN{exit !($LOAD > 1.0)}"; then
  echo "bench.sh: warning: load average $LOAD > 1 - other work shares the cores; timings will be noisy (BENCH_NICE=-15 helps)" >&2
fi

# run WORLD ARGS... : one bench_e2e run, its table to the log, its record to $JSON.
run() {
  local world=$1; shift
  local extra=()
  read -r -a extra <<<"${BENCH_E2E_FLAGS:-}"
  local cmd=("$BIN/bench_e2e" --json "$JSON" --warmup "$WARMUP" "${extra[@]}" "$@")
  if [[ $world -gt 1 ]]; then
    cmd=("$BIN/ddprun" --standalone --nproc-per-node "$world" --local-ranks-filter 0 "${cmd[@]}")
  fi
  echo "+ ${cmd[*]}" >>"$LOG"
  if ! "${cmd[@]}" >>"$LOG" 2>&1; then
    echo "bench.sh: failed: ${cmd[*]} (see $LOG)" >&2
    exit 1
  fi
  printf '.'
}

# Debian's python3 (where python3-torch and python3-matplotlib live) before whatever python3 comes first on PATH.
PY=""
for cand in /usr/bin/python3 "$(command -v python3 || true)"; do
  if [[ -n $cand && -x $cand ]]; then PY=$cand; break; fi
done
TORCH=0
if [[ -n $PY ]] && "$PY" -c 'import torch' 2>/dev/null; then TORCH=1; fi
# PyTorch 2.x from PyPI (tools/setup_torch2.sh; nothing is installed here): eager and torch.compile rows.
PY2=$("$HERE/setup_torch2.sh" --path 2>/dev/null || true)

# twin PYTHON PASS WORLD THREADS ARGS...: one pytorch_twin.py run, its record to $JSON.
twin() {
  local py=$1 pass=$2 world=$3 threads=$4; shift 4
  local cmd=("$py" "$HERE/../bench/pytorch_twin.py" --world "$world" --threads "$threads" --warmup "$WARMUP"
             --json "$JSON" --label "vs-pytorch pass $pass" "$@")
  echo "+ ${cmd[*]}" >>"$LOG"
  # One retry: PyTorch 2.15's gloo DDP at world 2 here sometimes dies at exit ("terminate called without an
  # active exception", 1 run of about 30 seen on 2026-12-02); a second failure stops the run.
  if ! "${cmd[@]}" >>"$LOG" 2>&1; then
    echo "bench.sh: retrying once after a failure: ${cmd[*]}" | tee -a "$LOG" >&2
    "${cmd[@]}" >>"$LOG" 2>&1 || { echo "bench.sh: failed twice: ${cmd[*]} (see $LOG)" >&2; exit 1; }
  fi
  printf '.'
}

# vs_pytorch PASS: ddp.cpp then each PyTorch, per configuration / world / mode / threads, so all see the same
# machine load. Threads per rank are the same on both sides in every row: cores / world, and at world 1 also 1
# (on this 2-core VM PyTorch's spinning OpenMP threads and OpenBLAS's contend, and its 1-thread step can be
# faster than its 2-thread one: both rows are shown, each against ddp.cpp with the same threads).
vs_pytorch() {
  local pass=$1 cores
  cores=$(nproc)
  for config in mlp gpt; do
    for world in 1 2; do
      for mode in nosync ddp; do
        [[ $world == 1 && $mode == ddp ]] && continue
        local per_rank=$((cores / world > 0 ? cores / world : 1))
        local thread_runs=("$per_rank")
        [[ $world == 1 && $per_rank != 1 ]] && thread_runs+=(1)
        for threads in "${thread_runs[@]}"; do
          local steps
          steps=$(steps_of $config)
          run $world --config $config --mode $mode --steps "$steps" --threads "$threads" --label "vs-pytorch pass $pass"
          if [[ $TORCH == 1 ]]; then
            twin "$PY" "$pass" $world "$threads" --config $config --mode $mode --steps "$steps"
          fi
          if [[ -n $PY2 ]]; then
            twin "$PY2" "$pass" $world "$threads" --config $config --mode $mode --steps "$steps"
            twin "$PY2" "$pass" $world "$threads" --config $config --mode $mode --steps "$steps" --compile
          fi
        done
      done
    done
  done
}

# The round trip of a cache line between the first two CPUs, after each pass: on a VM the host may move the vCPUs
# apart during a run, and a 2-thread rank's figures then lose most of the second thread's gain (bench_machine).
placement() {
  echo "bench.sh: after pass $1: $("$BIN/bench_machine" --round-trip-only | grep -o 'CPUs [0-9]* and [0-9]*: a cache line.s round trip [0-9]* ns' ||
    echo 'CPUs round trip not measured')"
}

if [[ $VS_ONLY == 1 ]]; then
  [[ $TORCH == 1 || -n $PY2 ]] || {
    echo "bench.sh: --vs-pytorch needs a PyTorch: apt-get install python3-torch (1.13), tools/ddp torch2 (2.x)" >&2; exit 1; }
  for pass in $(seq 1 "$REPEATS"); do
    printf 'bench.sh: pass %d/%d: ddp.cpp vs PyTorch%s%s (mlp, gpt; world 1 nosync, world 2 nosync and ddp) ' \
      "$pass" "$REPEATS" "$([[ $TORCH == 1 ]] && echo ' 1.13')" "${PY2:+ 2.x eager and compiled}"
    vs_pytorch "$pass"
    echo
    placement "$pass"
  done
  echo "bench.sh: PyTorch vs ddp.cpp (step medians over $REPEATS pass(es); ratio = ddp.cpp / PyTorch)"
  "${PY:-$PY2}" "$HERE/../bench/compare_pytorch.py" "$JSON"
  echo "bench.sh: done: $JSON"
  exit 0
fi

echo "bench.sh: all-reduce table (Gloo, 2 ranks)"
"$BIN/ddprun" --standalone --nproc-per-node 2 --local-ranks-filter 0 "$BIN/bench_allreduce" --min-bytes 64K \
  --max-bytes 32M --factor 2 --iters "$AR_ITERS" --json "$JSON" 2>&1 | tee -a "$LOG" | sed 's/^\[rank 0\] //' |
  grep -v '^ddprun:'

for pass in $(seq 1 "$REPEATS"); do
  for config in mlp gpt; do
    steps=$(steps_of $config)
    printf 'bench.sh: pass %d/%d: %s table (worlds 1, 2; modes ddp nosync nooverlap unused), sweep (caps %s) ' \
      "$pass" "$REPEATS" $config "$CAPS"
    for world in 1 2; do
      for mode in ddp nosync nooverlap unused; do
        run $world --config $config --mode $mode --steps "$steps" --label "table pass $pass"
      done
    done
    for cap in $CAPS; do
      [[ $cap == 25 ]] && continue  # the table's ddp run is the 25 MiB point
      run 2 --config $config --mode ddp --bucket-cap-mb "$cap" --steps "$steps" --label "sweep pass $pass"
    done
    echo
  done
  if [[ $TORCH == 1 || -n $PY2 ]]; then
    printf 'bench.sh: pass %d/%d: ddp.cpp vs PyTorch ' "$pass" "$REPEATS"
    vs_pytorch "$pass"
    echo
  fi
  placement "$pass"
done

echo "bench.sh: summary (medians over $REPEATS pass(es) of each run's median; rate = all ranks; GF/s per rank)"
if [[ -n $PY ]]; then
  "$PY" "$HERE/plot_bench.py" "$JSON" --table
else
  echo "bench.sh: python3 not found; the records are in $JSON"
fi

if [[ $TORCH == 1 || -n $PY2 ]]; then
  echo "bench.sh: PyTorch vs ddp.cpp (step medians over $REPEATS pass(es); ratio = ddp.cpp / PyTorch)"
  "${PY:-$PY2}" "$HERE/../bench/compare_pytorch.py" "$JSON"
else
  echo "bench.sh: no PyTorch importable; no PyTorch comparison (apt-get install python3-torch; tools/ddp torch2)"
fi

echo "bench.sh: bucket simulator validation (2 ranks; network fitted from the nooverlap runs, isolated all-reduce fit beside it)"
set +e
"$BIN/bucket_sim" --validate "$JSON" --network-json "$JSON" --validate-json "$JSON"
VALID=$?
set -e

if [[ -n $PY ]] && "$PY" -c 'import matplotlib' 2>/dev/null; then
  "$PY" "$HERE/plot_bench.py" "$JSON" --plots "$OUT_DIR"
else
  echo "bench.sh: python3-matplotlib not importable; no plots (tools/ddp installs it)"
fi
echo "bench.sh: done: $JSON"
exit $VALID
