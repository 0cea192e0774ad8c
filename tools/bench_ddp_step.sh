#!/usr/bin/env bash
# tools/bench_ddp_step.sh [options] BUILD [BUILD_B] - the DDP step at world 2 over the shared-memory group
# against its compute-only step (docs/benchmarks.md, "DDP step at world 2 over shm"). Per round every
# configuration and mode runs once, modes alternated (and the two builds, when BUILD_B is given: an A/B of a
# change, their order swapped every round), so that the machine's drift hits all alike. Prints each run's median
# step and rank 0's median exposed communication, then per row the median over the rounds and the ratio to the
# same build's nosync step.
#
#   --rounds R        rounds (default 3)
#   --steps S         measured steps per run (default 80 for mlp, 30 for gpt)
#   --configs "..."   bench_e2e configurations (default "mlp gpt")
#   --modes "..."     nosync, ddp, view (= ddp with --gradient-as-bucket-view); default "nosync ddp view"
#
# Each run: BUILD/bin/ddprun --standalone --nproc-per-node 2 --local-ranks-filter 0 BUILD/bin/bench_e2e
#   --config C --backend shm --mode nosync|ddp [--gradient-as-bucket-view] --steps S
# Set OPENBLAS_CORETYPE as `tools/ddp bench` does (SkylakeX with AVX-512) for figures comparable with the page.
set -euo pipefail
usage() { echo "usage: tools/bench_ddp_step.sh [--rounds R] [--steps S] [--configs \"mlp gpt\"] [--modes \"nosync ddp view\"] BUILD [BUILD_B]" >&2; exit 2; }
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
echo "bench_ddp_step: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); builds: ${BUILDS[*]}"
printf '%-5s %-4s %-6s %-24s %10s %12s\n' round cfg mode build step_ms exposed_ms
for ((r = 1; r <= ROUNDS; r++)); do
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
        exposed="$(awk '/exposed communication \(ms\)/ { print $(NF-4) }' <<<"$out" | tail -1)"
        [ -n "$step" ] || { echo "$out" >&2; echo "bench_ddp_step: no 'step (ms, slowest rank)' row in bench_e2e's output (above)" >&2; exit 1; }
        printf '%-5s %-4s %-6s %-24s %10s %12s\n' "$r" "$c" "$m" "$b" "$step" "${exposed:--}"
        echo "$c $m $b $step ${exposed:-0}" >>"$RESULTS"
      done
    done
  done
done

echo
echo "medians over $ROUNDS round(s) (ms; exposed = rank 0's exposed communication)"
printf '%-4s %-6s %-24s %10s %10s %12s %10s\n' cfg mode build step_ms vs_nosync exposed_ms exp/step
awk '
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { key = $1 " " $2 " " $3; if (!(key in steps)) order[++k] = key; steps[key] = steps[key] " " $4; exp_[key] = exp_[key] " " $5 }
  END {
    for (i = 1; i <= k; i++) {
      split(order[i], f, " "); s = median(steps[order[i]]); e = median(exp_[order[i]])
      base = f[1] " nosync " f[3]
      ratio = (base in steps) ? sprintf("%.2fx", s / median(steps[base])) : "-"
      share = (f[2] == "nosync") ? "-" : sprintf("%.1f%%", 100 * e / s)
      printf "%-4s %-6s %-24s %10.3f %10s %12s %10s\n", f[1], f[2], f[3], s, ratio, (f[2] == "nosync" ? "-" : sprintf("%.3f", e)), share
    }
  }' "$RESULTS"
