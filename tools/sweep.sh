#!/usr/bin/env bash
# sweep.sh - the bucket sweep that draws itself (`tools/ddp bench --sweep`): for the mlp and the tiny gpt,
# bench_e2e is measured interleaved in rounds over a bucket-cap sweep at world 2, a few first-bucket caps,
# overlap off (mode nooverlap), world 1 against world 2, and the nosync runs the simulator takes compute times
# from; the bucket simulator, calibrated from a bench_allreduce run of the backend actually in use at world 2
# (cached under runs/calibration, one file per backend, host and world, reused when present), predicts the same
# points; tools/sweep_report.py prints a table per configuration (measured median and spread, predicted,
# error per point, measured and predicted best cap) and draws the step-time breakdown per setting with the
# prediction on the same axes. Described in docs/simulator.md ("The sweep that draws itself").
#
#   tools/sweep.sh BUILD_DIR [--quick]   # --quick: 2 caps, 1 round, a few steps (seconds; the ctest check)
#
# Output folder $SWEEP_OUT (default runs/sweep-<date>): sweep.json (JSON lines: bench_e2e records, the
# simulator's sim_validation rows), sweep.log (every command and its output), simulator.txt (bucket_sim
# --validate), sweep-table.md (the tables), sweep-<config>.png (the plots).
# Environment: SWEEP_OUT; SWEEP_ROUNDS (rounds over every point, each in a rotated order, alternate rounds
# reversed, so that drifts of the machine's load hit every point alike; default 3, --quick 1); SWEEP_CAPS
# (MiB, default "0.25 0.5 1 2 4 8 16 25 50 100", --quick "1 25"); SWEEP_FIRST_CAPS (first-bucket caps besides
# the default 1 MiB, run at cap 25; default "0.25 4", --quick "4"); SWEEP_CONFIGS (default "mlp gpt");
# SWEEP_STEPS_MLP / SWEEP_STEPS_GPT (measured steps per run; default 40 / 15, --quick 3 / 2); SWEEP_BACKEND
# (bench_e2e's and bench_allreduce's --backend, default cpu: what runs on a CPU without --backend; the runs
# are on the CPU except with nccl);
# SWEEP_RECALIBRATE=1 (measure the calibration again even when cached); DDP_CALIBRATION_DIR (the cache
# folder, default runs/calibration); SWEEP_NICE (autogroup nice of the whole sweep, e.g. -20 on a machine that
# others share: their builds then take less of the cores). Needs bench_e2e, bench_allreduce, bucket_sim and ddprun built, and
# python3 with matplotlib for the plots (the table is printed without it).
set -euo pipefail

usage() { echo "usage: tools/sweep.sh BUILD_DIR [--quick]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
BUILD=$1
QUICK=0
if [[ $# == 2 ]]; then [[ $2 == --quick ]] || usage; QUICK=1; fi
BIN=$BUILD/bin
HERE=$(cd "$(dirname "$0")" && pwd)
# SWEEP_NICE=N: run in a new session whose autogroup has nice N (as tools/bench.sh's BENCH_NICE: with autogroup
# scheduling a plain `nice` only ranks processes inside one session; negative values need root).
if [[ -n ${SWEEP_NICE:-} && -z ${SWEEP_OWN_SESSION:-} ]]; then
  export SWEEP_OWN_SESSION=1
  exec setsid --wait "$0" "$@"
fi
if [[ -n ${SWEEP_NICE:-} ]] && ! echo "$SWEEP_NICE" 2>/dev/null >/proc/self/autogroup; then
  echo "sweep: warning: could not set this session's autogroup nice to $SWEEP_NICE (needs root for < 0)" >&2
fi
for prog in bench_e2e bench_allreduce bucket_sim ddprun; do
  [[ -x $BIN/$prog ]] || { echo "sweep: $BIN/$prog is missing; build it: cmake --build $BUILD --target $prog" >&2; exit 1; }
done
PY=""
for cand in /usr/bin/python3 "$(command -v python3 || true)"; do
  if [[ -n $cand && -x $cand ]]; then PY=$cand; break; fi
done
[[ -n $PY ]] || { echo "sweep: python3 is needed for the tables (apt-get install python3)" >&2; exit 1; }

if [[ $QUICK == 1 ]]; then
  ROUNDS=${SWEEP_ROUNDS:-1}; CAPS=${SWEEP_CAPS:-"1 25"}; FIRST_CAPS=${SWEEP_FIRST_CAPS-"4"}
  STEPS_MLP=${SWEEP_STEPS_MLP:-3}; STEPS_GPT=${SWEEP_STEPS_GPT:-2}; WARMUP=1
else
  ROUNDS=${SWEEP_ROUNDS:-3}; CAPS=${SWEEP_CAPS:-"0.25 0.5 1 2 4 8 16 25 50 100"}; FIRST_CAPS=${SWEEP_FIRST_CAPS-"0.25 4"}
  STEPS_MLP=${SWEEP_STEPS_MLP:-40}; STEPS_GPT=${SWEEP_STEPS_GPT:-15}; WARMUP=3
fi
CONFIGS=${SWEEP_CONFIGS:-"mlp gpt"}
BACKEND=${SWEEP_BACKEND:-cpu}
DEVICE=cpu  # a CPU sweep even where a GPU is visible, unless the backend is NCCL
[[ $BACKEND == nccl ]] && DEVICE=cuda
for c in $CONFIGS; do [[ $c == mlp || $c == gpt ]] || { echo "sweep: SWEEP_CONFIGS item '$c': use mlp and/or gpt" >&2; exit 2; }; done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "sweep: SWEEP_ROUNDS='$ROUNDS' must be a positive integer" >&2; exit 2; }
for v in STEPS_MLP STEPS_GPT; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "sweep: SWEEP_$v='${!v}' must be a positive integer" >&2; exit 2; }
done
[[ -n ${CAPS// /} ]] || { echo "sweep: SWEEP_CAPS is empty; give caps in MiB, e.g. \"1 25\"" >&2; exit 2; }
for c in $CAPS $FIRST_CAPS; do
  [[ $c =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] && awk "BEGIN{exit !($c > 0)}" ||
    { echo "sweep: cap '$c' (SWEEP_CAPS / SWEEP_FIRST_CAPS) is not a positive number of MiB, e.g. 0.25 or 25" >&2; exit 2; }
done
OUT=${SWEEP_OUT:-runs/sweep-$(date +%Y-%m-%d-%H%M%S)}
mkdir -p "$OUT"
JSON=$OUT/sweep.json
LOG=$OUT/sweep.log
: >"$JSON"
: >"$LOG"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
echo "sweep: $(nproc) cores, host $(hostname), load $LOAD_BEFORE (1/5/15 min), autogroup '$(cat /proc/self/autogroup 2>/dev/null)'; output $OUT"
if awk "BEGIN{exit !($(cut -d' ' -f1 /proc/loadavg) > 1.0)}"; then
  echo "sweep: warning: load average above 1: other work shares the cores; timings will be noisy" >&2
fi

# launch WORLD CMD...: CMD alone for world 1, else under ddprun; the output goes to the log.
launch() {
  local world=$1; shift
  local cmd=("$@")
  [[ $world -gt 1 ]] && cmd=("$BIN/ddprun" --standalone --nproc-per-node "$world" --local-ranks-filter 0 "${cmd[@]}")
  echo "+ ${cmd[*]}" >>"$LOG"
  "${cmd[@]}" >>"$LOG" 2>&1 || { echo "sweep: failed: ${cmd[*]} (see $LOG)" >&2; exit 1; }
}

# 1. The calibration of the backend in use at world 2: its name as the process group resolves it (a one-row
# probe), the cache file bucket_sim looks for, measured when absent.
PROBE=$OUT/backend-probe.json
: >"$PROBE"
launch 2 "$BIN/bench_allreduce" --backend "$BACKEND" --min-bytes 4K --max-bytes 4K --iters 1 --warmup 0 --json "$PROBE"
RESOLVED=$("$PY" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["backend"])' "$PROBE")
rm -f "$PROBE"
CAL=$("$BIN/bucket_sim" --print-calibration-path --backend "$RESOLVED" --world 2)
if [[ -s $CAL && ${SWEEP_RECALIBRATE:-0} != 1 ]]; then
  echo "sweep: calibration: reusing $CAL (backend $RESOLVED, world 2; SWEEP_RECALIBRATE=1 measures it again)"
else
  mkdir -p "$(dirname "$CAL")"
  : >"$CAL.tmp"
  launch 2 "$BIN/bench_allreduce" --backend "$RESOLVED" --registered --min-bytes 4K --max-bytes 64M --factor 4 \
    --iters 20 --json "$CAL.tmp"
  mv "$CAL.tmp" "$CAL"
  echo "sweep: calibration: measured $CAL (bench_allreduce, backend $RESOLVED, world 2, registered buffers as DDP's buckets, 4 KiB-64 MiB)"
fi
echo "sweep: calibration fit: $("$PY" -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if l.strip()][-1]["fit"]
print("%s, alpha %.4g ms, B %.4g GB/s" % (r["algorithm"], r["alpha_s"] * 1e3, r["bandwidth_bytes_per_s"] / 1e9))' "$CAL")"

# 2. The points: "config world mode cap first_cap".
POINTS=()
for config in $CONFIGS; do
  for cap in $CAPS; do POINTS+=("$config 2 ddp $cap 1"); done
  for first in $FIRST_CAPS; do POINTS+=("$config 2 ddp 25 $first"); done
  POINTS+=("$config 2 nooverlap 25 1" "$config 2 nosync 25 1" "$config 1 ddp 25 1" "$config 1 nosync 25 1")
done
N=${#POINTS[@]}
echo "sweep: $N points x $ROUNDS round(s), steps mlp $STEPS_MLP / gpt $STEPS_GPT after $WARMUP warm-up; caps $CAPS MiB; first-bucket caps 1 $FIRST_CAPS MiB"
for round in $(seq 1 "$ROUNDS"); do
  printf 'sweep: round %d/%d ' "$round" "$ROUNDS"
  for k in $(seq 0 $((N - 1))); do
    i=$(( (k + (round - 1) * 7) % N ))
    (( round % 2 == 0 )) && i=$(( N - 1 - i ))
    read -r config world mode cap first <<<"${POINTS[$i]}"
    steps=$STEPS_MLP; [[ $config == gpt ]] && steps=$STEPS_GPT
    launch "$world" "$BIN/bench_e2e" --config "$config" --mode "$mode" --backend "$BACKEND" --device "$DEVICE" --bucket-cap-mb "$cap" \
      --first-bucket-mb "$first" --steps "$steps" --warmup "$WARMUP" --json "$JSON" --label "sweep round $round"
    printf '.'
  done
  echo
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# 3. The simulator on the same points (its rows go into sweep.json), then the tables and the plots.
set +e
"$BIN/bucket_sim" --validate "$JSON" --network-json "$CAL" --validate-world-1 --validate-json "$JSON" \
  --max-error-pct 1e9 >"$OUT/simulator.txt" 2>&1
SIM=$?
set -e
[[ $SIM == 0 ]] || { cat "$OUT/simulator.txt" >&2; echo "sweep: bucket_sim --validate failed (exit $SIM)" >&2; exit 1; }
"$PY" "$HERE/sweep_report.py" "$JSON" --calibration "$CAL" --out "$OUT" \
  --load "before $LOAD_BEFORE, after $LOAD_AFTER (1/5/15 min)" --rounds "$ROUNDS" --simulator-log "$OUT/simulator.txt"
echo "sweep: done: $OUT (load before $LOAD_BEFORE, after $LOAD_AFTER)"
