#!/usr/bin/env bash
# bench_ddp_step_smoke.sh BUILD - ctest BenchDdpStep.Smoke: tools/bench_ddp_step.sh end to end at its smallest (one
# round, the mlp, 3 steps a run, every mode), so that a renamed flag of bench_e2e or ddprun, or a changed output
# row the script reads, shows up here: each run's row, the vCPUs' round trip before the round, the medians table
# with every mode's ratio to nosync; and its bad inputs refused by name. No timing is checked.
set -u
BUILD="${1:?usage: bench_ddp_step_smoke.sh BUILD}"
S="$(cd "$(dirname "$0")/../.." && pwd)/tools/bench_ddp_step.sh"
fails=0
check() { if "${@:2}"; then echo "ok   - $1"; else echo "FAIL - $1"; fails=$((fails + 1)); fi; }
has() { grep -qE -- "$2" <<<"$1"; }

out="$(bash "$S" --rounds 1 --configs mlp --steps 3 "$BUILD" 2>&1)"
rc=$?
echo "$out"
check "exit 0" test "$rc" -eq 0
check "the machine first" has "$out" '^machine: '
check "the round trip before the round" has "$out" "^# round 1: CPUs' round trip [0-9]+ ns"
for m in nosync ddp view; do
  check "a row for mode $m" has "$out" "^1 +mlp +$m +"
  check "a median row for mode $m" has "$out" "^mlp +$m +.* [0-9.]+x "
done
check "nosync's ratio is 1" has "$out" '^mlp +nosync .* 1\.000x'

bad="$(bash "$S" --rounds 0 "$BUILD" 2>&1)"; rc=$?
check "--rounds 0 refused" test "$rc" -eq 2
check "--rounds 0 named" has "$bad" "--rounds must be a positive integer, got '0'"
bad="$(bash "$S" --modes "ddp fast" "$BUILD" 2>&1)"; rc=$?
check "an unknown mode refused" test "$rc" -eq 2
check "the unknown mode named" has "$bad" "unknown mode 'fast'"
bad="$(bash "$S" /nonexistent-build 2>&1)"; rc=$?
check "a build without the programs refused" test "$rc" -eq 1
check "the missing program named with the fix" has "$bad" "/nonexistent-build/bin/ddprun is missing; build it"
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
