#!/usr/bin/env bash
# tools/bench_ddp_step.sh [options] BUILD [BUILD_B] - the DDP step at world 2 over the shared-memory group
# against its compute-only step (docs/benchmarks.md, "DDP step at world 2 over shm"). Per round every
# configuration and mode runs once, modes alternated (and the two builds, when BUILD_B is given: an A/B of a
# change, their order swapped every round), so that the machine's drift hits all alike. Prints each run's median
# step (and its 10th percentile) and rank 0's median exposed communication, then per row the median over the
# rounds, the range of the runs' medians, the median of their p10s and the ratios to the same build's nosync step.
#
#   --rounds R        rounds (default 3)
#   --steps S         measured steps per run (default 80 for mlp, 30 for gpt)
#   --configs "..."   bench_e2e configurations (default "mlp gpt")
#   --modes "..."     nosync, ddp, view (= ddp with --gradient-as-bucket-view); default "nosync ddp view"
#
# Each run: BUILD/bin/ddprun --standalone --nproc-per-node 2 --local-ranks-filter 0 BUILD/bin/bench_e2e
#   --config C --backend shm --mode nosync|ddp [--gradient-as-bucket-view] --steps S
# Set OPENBLAS_CORETYPE as `tools/ddp bench` does (SkylakeX with AVX-512, Haswell with AVX2) for figures
# comparable with the page. BENCH_NICE=N: run in a new session whose autogroup has nice N (as tools/bench.sh;
# e.g. -15, which needs root): on a machine shared with other sessions' builds it keeps their load off the runs.
set -euo pipefail
usage() { echo "usage: tools/bench_ddp_step.sh [--rounds R] [--steps S] [--configs \"mlp gpt\"] [--modes \"nosync ddp view\"] BUILD [BUILD_B]" >&2; exit 2; }
if [[ -n ${BENCH_NICE:-} && -z ${BENCH_OWN_SESSION:-} ]]; then
  export BENCH_OWN_SESSION=1
  exec setsid --wait "$0" "$@"
fi
ROUNDS=3 STEPS="" CONFIGS="mlp gpt" MODES="nosync ddp view"
BUILDS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="${2:?}"; shift 2 ;;
    --steps) STEPS="${2:?}"; shift 2 ;;
    --configs) CONFIGS="${2:?}"; shift 2 ;;
    --modes) MODES="${2:?}"; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "bench_ddp_step: unknown option $1" >&2; usage ;;
    *) BUILDS+=("$1"); shift ;;
  esac
done
[ ${#BUILDS[@]} -ge 1 ] && [ ${#BUILDS[@]} -le 2 ] || usage
if [[ -n ${BENCH_NICE:-} ]] && ! echo "$BENCH_NICE" 2>/dev/null >/proc/self/autogroup; then
  echo "bench_ddp_step: warning: could not set this session's autogroup nice to $BENCH_NICE (needs root for < 0)" >&2
fi
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "bench_ddp_step: --rounds must be a positive integer, got '$ROUNDS'" >&2; exit 2; }
[ -z "$STEPS" ] || [[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "bench_ddp_step: --steps must be a positive integer, got '$STEPS'" >&2; exit 2; }
for m in $MODES; do
  case "$m" in nosync|ddp|view) ;; *) echo "bench_ddp_step: unknown mode '$m' (nosync, ddp or view)" >&2; exit 2 ;; esac
done
for b in "${BUILDS[@]}"; do
  for prog in ddprun bench_e2e; do
    [ -x "$b/bin/$prog" ] || { echo "bench_ddp_step: $b/bin/$prog is missing; build it: cmake --build $b --target $prog" >&2; exit 1; }
  done
done

RESULTS="$(mktemp)"
trap 'rm -f "$RESULTS"' EXIT
# The machine first, from the first build that has bench_machine (an A/B's older build may predate it);
# --no-probe: the runs below are the measurement.
machine=""
for b in "${BUILDS[@]}"; do [ -x "$b/bin/bench_machine" ] && { machine="$b/bin/bench_machine"; break; }; done
if [ -n "$machine" ]; then "$machine" --no-probe; else echo "bench_ddp_step: no bench_machine in ${BUILDS[*]} (cmake --build BUILD --target bench_machine prints the machine)"; fi
echo "bench_ddp_step: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); builds: ${BUILDS[*]}"
printf '%-5s %-4s %-6s %-24s %10s %10s %12s\n' round cfg mode build step_ms p10_ms exposed_ms
for ((r = 1; r <= ROUNDS; r++)); do
  # Where the host runs the two vCPUs (a cache line's round trip between them; docs/benchmarks.md, "The machine"):
  # together or apart changes both modes' steps. An older bench_machine without the flag prints nothing here.
  if [ -n "$machine" ]; then
    trip="$("$machine" --round-trip-only 2>/dev/null | grep -o 'round trip [0-9]* ns' || true)"
    [ -z "$trip" ] || echo "# round $r: CPUs' $trip"
  fi
  order=("${BUILDS[@]}")
  if [ ${#BUILDS[@]} -eq 2 ] && [ $((r % 2)) -eq 0 ]; then order=("${BUILDS[1]}" "${BUILDS[0]}"); fi
  for c in $CONFIGS; do
    steps="$STEPS"
    [ -n "$steps" ] || { [ "$c" = gpt ] && steps=30 || steps=80; }
    for m in $MODES; do
      for b in "${order[@]}"; do
        args=(--config "$c" --backend shm --steps "$steps")
        case "$m" in nosync) args+=(--mode nosync) ;; ddp) args+=(--mode ddp) ;; view) args+=(--mode ddp --gradient-as-bucket-view) ;; esac
        out="$("$b/bin/ddprun" --standalone --nproc-per-node 2 --local-ranks-filter 0 "$b/bin/bench_e2e" "${args[@]}" 2>&1)" ||
          { echo "$out" >&2; echo "bench_ddp_step: the run of $b with ${args[*]} failed (above)" >&2; exit 1; }
        step="$(awk '/step \(ms, slowest rank\)/ { print $(NF-4) }' <<<"$out" | tail -1)"
        p10="$(awk '/step \(ms, slowest rank\)/ { print $(NF-3) }' <<<"$out" | tail -1)"
        exposed="$(awk '/exposed communication \(ms\)/ { print $(NF-4) }' <<<"$out" | tail -1)"
        [ -n "$step" ] || { echo "$out" >&2; echo "bench_ddp_step: no 'step (ms, slowest rank)' row in bench_e2e's output (above)" >&2; exit 1; }
        printf '%-5s %-4s %-6s %-24s %10s %10s %12s\n' "$r" "$c" "$m" "$b" "$step" "$p10" "${exposed:--}"
        echo "$c $m $b $step ${exposed:-0} $p10" >>"$RESULTS"
      done
    done
  done
done

echo
echo "medians over $ROUNDS round(s) (ms; exposed = rank 0's exposed communication)"
echo "(range: the runs' medians; p10: the median of the runs' 10th percentiles, and its ratio to nosync's)"
printf '%-4s %-6s %-24s %10s %17s %10s %9s %9s %12s %10s\n' cfg mode build step_ms range p10_ms vs_nosync p10_vs exposed_ms exp/step
awk '
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function lowest(list,   a, n, i, m) { n = split(list, a, " "); m = a[1] + 0; for (i = 2; i <= n; i++) if (a[i] + 0 < m) m = a[i] + 0; return m }
  function highest(list,   a, n, i, m) { n = split(list, a, " "); m = a[1] + 0; for (i = 2; i <= n; i++) if (a[i] + 0 > m) m = a[i] + 0; return m }
  { key = $1 " " $2 " " $3; if (!(key in steps)) order[++k] = key; steps[key] = steps[key] " " $4; exp_[key] = exp_[key] " " $5
    p10s[key] = p10s[key] " " $6 }
  END {
    for (i = 1; i <= k; i++) {
      split(order[i], f, " "); s = median(steps[order[i]]); e = median(exp_[order[i]]); p = median(p10s[order[i]])
      base = f[1] " nosync " f[3]
      ratio = (base in steps) ? sprintf("%.3fx", s / median(steps[base])) : "-"
      pratio = (base in steps) ? sprintf("%.3fx", p / median(p10s[base])) : "-"
      range = sprintf("%.3f-%.3f", lowest(steps[order[i]]), highest(steps[order[i]]))
      share = (f[2] == "nosync") ? "-" : sprintf("%.1f%%", 100 * e / s)
      printf "%-4s %-6s %-24s %10.3f %17s %10.3f %9s %9s %12s %10s\n", f[1], f[2], f[3], s, range, p, ratio, pratio, (f[2] == "nosync" ? "-" : sprintf("%.3f", e)), share
    }
  }' "$RESULTS"
