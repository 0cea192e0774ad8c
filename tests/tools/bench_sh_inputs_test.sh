#!/usr/bin/env bash
# bench_sh_inputs_test.sh BUILD - ctest BenchSh.RefusesBadInputsByName: tools/bench.sh refuses what it cannot run
# before it runs anything (it takes minutes once started): an unknown BENCH_ISA cap, an unknown option, a build
# without its programs - each named, with the fix. The runs themselves are the benchmark's (tools/ddp bench).
set -u
BUILD="${1:?usage: bench_sh_inputs_test.sh BUILD}"
S="$(cd "$(dirname "$0")/../.." && pwd)/tools/bench.sh"
fails=0
check() { if "${@:2}"; then echo "ok   - $1"; else echo "FAIL - $1"; fails=$((fails + 1)); fi; }
has() { grep -qF -- "$2" <<<"$1"; }
T="$(mktemp -d)"; trap 'rm -rf "$T"' EXIT

out="$(BENCH_ISA=avx9 BENCH_OUT="$T" bash "$S" "$BUILD" 2>&1)"; rc=$?
check "BENCH_ISA=avx9 exits 2" test "$rc" -eq 2
check "BENCH_ISA=avx9 named with the choices" has "$out" "BENCH_ISA='avx9' is not a cap this script knows: use avx2"
check "nothing ran" test -z "$(ls "$T")"
out="$(BENCH_OUT="$T" bash "$S" "$BUILD" --fast 2>&1)"; rc=$?
check "an unknown option exits 2 with the usage" test "$rc" -eq 2
check "the usage names the options" has "$out" "usage: tools/bench.sh BUILD_DIR [--quick | --vs-pytorch]"
out="$(BENCH_OUT="$T" bash "$S" "$T/no-build" 2>&1)"; rc=$?
check "a build without the programs exits 1" test "$rc" -eq 1
check "the missing program named with the fix" has "$out" "$T/no-build/bin/bench_machine is missing; build it first: cmake --build"
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
