# shellcheck shell=bash
# gpu_check_lib.sh - the decisions of tools/gpu_check.sh as small functions, sourced by it and by its CPU test
# (tests/tools/gpu_check_fakes_test.sh): bounded commands, which CUDA library to take, gtest listings and logs,
# compute-sanitizer summaries, the loss and budget arithmetic. No function here starts a GPU program itself;
# each reads text or files and prints its answer on stdout (reasons on stderr).

# ---- bounded commands -----------------------------------------------------------------------------------------
# gc_bounded SECONDS CMD... : CMD under `timeout`, and SIGKILL GC_KILL_S (default 5) seconds after the SIGTERM,
# so a process that ignores SIGTERM cannot hold the check. Exit status: CMD's, 124 on timeout, 137 when killed,
# 128 + N when it died of signal N. (The subshell keeps bash's "Killed"/"Segmentation fault" job notice out of
# the caller's stderr; CMD's own stderr goes through fd 4.)
gc_bounded() {
  local s="$1"; shift
  { (timeout -k "${GC_KILL_S:-5}" "$s" "$@" 2>&4; exit $?) 4>&2 2>/dev/null; }
}

# gc_rc_text RC SECONDS : what an exit status of gc_bounded means, in words.
gc_rc_text() {
  case "$1" in
    0) echo "ok" ;;
    124) echo "timed out after $2 s" ;;
    137) echo "killed after $2 s + ${GC_KILL_S:-5} s (it ignored SIGTERM)" ;;
    13[0-9]|14[0-9]|15[0-9]) echo "crashed: signal $(($1 - 128)) ($(kill -l $(($1 - 128)) 2>/dev/null || echo '?'))" ;;
    *) echo "rc=$1" ;;
  esac
}

# ---- CUDA libraries: built for this CUDA? ---------------------------------------------------------------------
# gc_lib_cuda_major FILE : the CUDA major version FILE was built for, or nothing when it cannot be told.
# libnccl names it in its version string ("NCCL version 2.28.9+cuda13.0"); libcudnn answers
# cudnnGetCudartVersion() (13010 for 13.1), asked through python3's ctypes (no GPU needed); the sonames of
# cudart and cuBLAS carry it (libcublas.so.13).
gc_lib_cuda_major() {
  local f="$1" v
  case "$(basename "$f")" in
    libnccl.so*)
      v="$(grep -a -o -m1 -E 'NCCL version [0-9.]+\+cuda[0-9]+' "$f" 2>/dev/null | head -1)"
      [ -n "$v" ] && echo "${v##*+cuda}" ;;
    libcudnn.so*)
      v="$(gc_bounded 20 python3 -c 'import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).cudnnGetCudartVersion())' \
           "$f" 2>/dev/null)"
      case "$v" in [0-9]*) echo $((v / 1000)) ;; esac ;;
    *.so.[0-9]*) echo "${f##*.so.}" ;;
  esac
}

# gc_pick_lib SONAME MAJOR DIR... : the first DIR holding SONAME built for CUDA MAJOR (stdout), each DIR passed
# over with the reason (stderr). A library whose CUDA cannot be told is taken only when no DIR has one that is
# known to match. Status 1 when none fits.
gc_pick_lib() {
  local so="$1" want="$2" d m unknown=""
  shift 2
  for d in "$@"; do
    [ -e "$d/$so" ] || continue
    m="$(gc_lib_cuda_major "$d/$so")"
    if [ -z "$m" ]; then
      echo "$so: $d/$so: cannot tell which CUDA it was built for (kept as a last resort)" >&2
      [ -z "$unknown" ] && unknown="$d"
    elif [ "$m" != "$want" ]; then
      echo "$so: passed over $d/$so: built for CUDA $m, this build is CUDA $want" >&2
    else
      echo "$d"; return 0
    fi
  done
  [ -n "$unknown" ] && { echo "$unknown"; return 0; }
  return 1
}

# ---- gtest ------------------------------------------------------------------------------------------------------
# gc_gtest_names < `--gtest_list_tests` output : one Suite.Name per line (parameterised comments dropped).
gc_gtest_names() {
  awk '/^[^ ]/ { suite = $1; next } /^  [^ ]/ { print suite $1 }'
}
# gc_suites < names : the suites in order of first appearance.
gc_suites() { awk -F. '!seen[$1]++ { print $1 }'; }
# gc_gtest_counts LOG : "passed skipped failed" from the per-test lines of a gtest log.
gc_gtest_counts() {
  local ok sk fail
  ok=$(grep -cE '^\[       OK \] .* \([0-9]+ ms\)$' "$1")
  sk=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$1")
  fail=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$1")
  echo "$ok $sk $fail"
}
# gc_gtest_more_gpu_skips LOG : how many tests skipped saying they need more GPUs than this machine has
# ("skipped: ... needs 2 GPUs"): on a one-GPU machine those skips are expected, not a failure.
gc_gtest_more_gpu_skips() {
  grep -cE '^skipped: .*needs [0-9]+ GPUs' "$1"
}
# gc_failing_op LOG : the first failing test (or the test that was running when the process died) and the last
# source location a CUDA/NCCL/cuBLAS/cuDNN check named (file.cu:line or file.cpp:line), or the last error line.
gc_failing_op() {
  local t where
  t="$(grep -E '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$1" | head -1 | awk '{print $4}')"
  [ -z "$t" ] && t="$(grep -E '^\[ RUN      \]' "$1" | tail -1 | awk '{print $4}')"
  where="$(grep -oE '[A-Za-z0-9_/.-]+\.(cu|cpp|h):[0-9]+[^|]{0,100}' "$1" | grep -iE 'cuda|nccl|cublas|cudnn|error' |
           tail -1)"
  [ -z "$where" ] && where="$(grep -iE 'error|what\(\)|Failure' "$1" | tail -1 | cut -c1-160)"
  echo "${t:-?}${where:+ at $where}"
}

# ---- compute-sanitizer -------------------------------------------------------------------------------------------
# gc_sanitizer_errors LOG : the error count of "========= ERROR SUMMARY: N errors" (nothing when absent).
gc_sanitizer_errors() {
  grep -oE 'ERROR SUMMARY: [0-9]+ error' "$1" | tail -1 | awk '{print $3}'
}

# ---- training rows ---------------------------------------------------------------------------------------------
# gc_loss_verdict LOG : "ok (first -> last)" when bench_e2e's "loss (rank 0): first A last B" line has finite
# values and B < A; else "FAIL: ..." naming what is wrong.
gc_loss_verdict() {
  local line a b
  line="$(grep -E 'loss \(rank 0\): first' "$1" | tail -1)"
  [ -z "$line" ] && { echo "FAIL: no loss line"; return; }
  a="$(echo "$line" | sed -E 's/.*first ([^ ]+) last.*/\1/')"
  b="$(echo "$line" | sed -E 's/.*last ([^ ]+).*/\1/')"
  awk -v a="$a" -v b="$b" 'function finite(x) { return x ~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/ }
    BEGIN { if (!finite(a) || !finite(b)) printf "FAIL: loss not finite (%s -> %s)\n", a, b
            else if (b + 0 >= a + 0) printf "FAIL: loss did not fall (%s -> %s)\n", a, b
            else printf "ok (%s -> %s)\n", a, b }'
}
# gc_device_memory LOG : bench_e2e's "device memory (rank 0): ..." line without its label.
gc_device_memory() { grep -E 'device memory \(rank 0\):' "$1" | tail -1 | sed -E 's/.*device memory \(rank 0\): *//'; }

# gc_ratio A B : A / B to two decimals ("?" when either is missing or B is 0).
gc_ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "?"; else printf "%.2f\n", a / b }'; }

# ---- time ----------------------------------------------------------------------------------------------------------
# gc_limit WANT LEFT : the seconds a step may take when LEFT remain (5 kept for the end), 0 when under 10 remain.
gc_limit() {
  if [ "$2" -lt 10 ]; then echo 0; elif [ "$1" -lt $(($2 - 5)) ]; then echo "$1"; else echo $(($2 - 5)); fi
}
