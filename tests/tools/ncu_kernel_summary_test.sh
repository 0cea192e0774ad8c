#!/usr/bin/env bash
# ncu_kernel_summary_test.sh - ctest NcuKernelSummary: tools/ncu_kernel_summary.py on a small CSV shaped like
# Nsight Compute's (its preamble lines, the program's own output, quoted fields, thousands separators): the step
# between the first and second groups of optimizer launches is summed and grouped by kernel name; --all sums every
# launch; a file with no launches and a unit other than base ones are named errors.
set -u
T="$(mktemp -d)"; trap 'rm -rf "$T"' EXIT
S="$(cd "$(dirname "$0")/../.." && pwd)/tools/ncu_kernel_summary.py"
fails=0
check() { if "${@:2}"; then echo "ok   - $1"; else echo "FAIL - $1"; fails=$((fails + 1)); fi; }
row() { echo "\"$1\",\"7\",\"bench_e2e\",\"h\",\"$2\",\"1\",\"7\",\"(256, 1, 1)\",\"(1, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"${4:-ns}\",\"$3\""; }
{
  echo "==PROF== Connected to process 7"
  echo "bench_e2e: some output of the program"
  echo '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
  row 0 "init_kernel(int)" "1,000"
  row 1 "void ddp::adamw_kernel<float>(float*)" "2,000"
  row 2 "void ddp::adamw_kernel<float>(float*)" "2,000"
  row 3 "gemm_kernel(float const*)" "100,000"
  row 4 "void ddp::layernorm<float>(float*)" "30,000"
  row 5 "gemm_kernel(float const*)" "150,000"
  row 6 "void ddp::adamw_kernel<float>(float*)" "5,000"
  row 7 "gemm_kernel(float const*)" "9,999,999"
} >"$T/k.csv"
out="$(python3 "$S" "$T/k.csv" 2>&1)"
check "the step is launches 3..6 (after the first adamw group, through the next)" grep -q 'launches 3..6' <<<"$out"
check "its kernel time is 0.285 ms" grep -q '4 kernels, 0.285 ms' <<<"$out"
check "the GEMMs are one line: 2 launches, 0.250 ms, 87.7%" grep -qE '0\.250 +2 +87\.7%  gemm_kernel$' <<<"$out"
check "argument lists are dropped from the names" bash -c "! grep -q 'float const' <<<'$out'"
all="$(python3 "$S" "$T/k.csv" --all 2>&1)"
check "--all sums every launch (8 kernels, 10.290 ms)" grep -q '8 kernels, 10.290 ms' <<<"$all"
one="$(python3 "$S" "$T/k.csv" --after 2 2>&1)"
check "--after past the last group sums every launch and says why" grep -q 'fewer than 3 groups' <<<"$one"
{ head -3 "$T/k.csv"; row 0 "k()" "1.5" "usecond"; } >"$T/us.csv"
us="$(python3 "$S" "$T/us.csv" --all 2>&1)"
check "microseconds are converted (0.002 ms)" grep -q '1 kernels, 0.002 ms' <<<"$us"
{ head -3 "$T/k.csv"; row 0 "k()" "1.5" "cycle"; } >"$T/bad.csv"
check "an unknown unit is a named error" bash -c "! python3 '$S' '$T/bad.csv' >/dev/null 2>&1; python3 '$S' '$T/bad.csv' 2>&1 | grep -q \"unknown unit 'cycle'\""
head -2 "$T/k.csv" >"$T/none.csv"
check "a file without launches is a named error" bash -c "python3 '$S' '$T/none.csv' 2>&1 | grep -q 'no kernel launches'"
[ "$fails" -eq 0 ] && echo "ncu_kernel_summary: all checks passed" || { echo "ncu_kernel_summary: $fails failed"; exit 1; }
