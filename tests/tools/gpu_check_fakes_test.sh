#!/usr/bin/env bash
# gpu_check_fakes_test.sh [SCRIPT] - ctest GpuCheck.Fakes: tools/gpu_check.sh on its GPU path (not --dry-run), on
# the CPU, with fakes for everything a GPU machine has: nvidia-smi, compute-sanitizer, a bundle whose programs and
# test binaries are small shell scripts (one suite crashes, one hangs ignoring SIGTERM, one binary hangs when
# asked to list its tests), CUDA libraries built here for CUDA 12 and 13, a PyTorch python. Each check names the
# defect of issue 37 it holds (docs/gpu.md). SCRIPT (default tools/gpu_check.sh) lets the old script be tried.
# Takes about 20 s with the current script.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SCRIPT="${1:-$ROOT/tools/gpu_check.sh}"
T="$(mktemp -d)"
[ "${FAKES_KEEP:-0}" = 1 ] && echo "fakes in $T" || trap 'rm -rf "$T"' EXIT
FAILS=0
check() {  # description, command...: one line per check
  if "${@:2}" >/dev/null 2>&1; then echo "ok   $1"; else echo "FAIL $1"; FAILS=$((FAILS + 1)); fi
}
has() { grep -qE -- "$2" "$1"; }  # file, extended regex

# ---- fakes ---------------------------------------------------------------------------------------------------
mkdir -p "$T/path" "$T/stage/bin" "$T/stage/tests" "$T/stage/lib" "$T/bundle"
export FAKE_LOG="$T/calls.log"
# A process that ignores SIGTERM (its sleeps inherit the ignored signal) and gives up by itself after 60 s.
HANG='trap "" TERM; for i in $(seq 60); do sleep 1; done; exit 0'

# nvidia-smi: answers, or hangs when $T/smi-hang exists.
cat >"$T/path/nvidia-smi" <<EOF
#!/usr/bin/env bash
[ -e "$T/smi-hang" ] && { $HANG; }
echo "NVIDIA H200, 143771 MiB, 580.159.04"
EOF
# compute-sanitizer: runs the program it is given; racecheck reports 2 hazards.
cat >"$T/path/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
tool=memcheck code=0
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do
  case "$1" in --tool) tool="$2"; shift ;; --error-exitcode) code="$2"; shift ;; --*=*) ;; --*) shift ;; esac
  shift
done
echo "sanitizer $tool $*" >>"$FAKE_LOG"
"$@"; rc=$?
n=0; [ "$tool" = racecheck ] && n=2
echo "========= ERROR SUMMARY: $n errors"
[ "$n" -gt 0 ] && exit "$code"
exit "$rc"
EOF
# ncu: the CSV Nsight Compute writes for the program it is given (one step between two AdamW groups).
cat >"$T/path/ncu" <<'EOF'
#!/usr/bin/env bash
echo "ncu $*" >>"$FAKE_LOG"
echo "==PROF== Connected to process 7"
echo '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
i=0
for k in "adamw_kernel(float*)|2,000" "gemm_kernel(float const*)|100,000" "layernorm(float*)|30,000" \
         "gemm_kernel(float const*)|150,000" "adamw_kernel(float*)|5,000"; do
  echo "\"$i\",\"7\",\"bench_e2e\",\"h\",\"${k%|*}\",\"1\",\"7\",\"(256, 1, 1)\",\"(1, 1, 1)\",\"0\",\"9.0\",\"m\",\"gpu__time_duration.sum\",\"ns\",\"${k#*|}\""
  i=$((i + 1))
done
EOF
# A PyTorch python: the version probe, and bench/pytorch_twin.py's line (eager 4 ms, compiled 2 ms a step).
cat >"$T/path/python-torch" <<'EOF'
#!/usr/bin/env bash
[ "${1:-}" = -c ] && { echo "2.11.0+cu130"; exit 0; }
echo "torch $*" >>"$FAKE_LOG"
ms=4.000; case " $* " in *" --compile "*) ms=2.000 ;; esac
echo "pytorch_twin: gpt ddp world 1 threads 16 (adamw, torch 2.11.0+cu130 x): step $ms ms, forward 1.0, backward 2.0, optimizer 1.0"
EOF

# A gtest binary: its tests and what each does in "$0.tests" ("Suite.Name pass|skip|fail|crash|hang");
# "$0.listhang" makes --gtest_list_tests hang, "$0.listhang-filtered" only when a filter is given;
# "$0.crash-at-start" crashes every run before its first test. A crash names
# a different place under CUDA_LAUNCH_BLOCKING=1 (as an asynchronous CUDA error does: reported at a later call,
# unless launches block).
cat >"$T/fake_gtest" <<EOF
#!/usr/bin/env bash
set -f
list=0 filter='*'
for a in "\$@"; do case "\$a" in --gtest_list_tests) list=1 ;; --gtest_filter=*) filter="\${a#*=}" ;; esac; done
echo "\$(basename "\$0") \$([ \$list = 1 ] && echo list) \$filter CLB=\${CUDA_LAUNCH_BLOCKING:-}" >>"\$FAKE_LOG"
[ \$list = 1 ] && [ -e "\$0.listhang" ] && { $HANG; }
[ \$list = 1 ] && [ "\$filter" != '*' ] && [ -e "\$0.listhang-filtered" ] && { $HANG; }
[ \$list = 0 ] && [ -e "\$0.crash-at-start" ] && kill -SEGV \$\$
pos="\${filter%%-*}" neg=""; [ "\$pos" != "\$filter" ] && neg="\${filter#*-}"
matches() { local IFS=: p hit=0; for p in \${pos:-*}; do [[ "\$1" == \$p ]] && hit=1; done
            for p in \$neg; do [[ "\$1" == \$p ]] && hit=0; done; [ \$hit = 1 ]; }
rc=0 last=""
while read -r t what; do
  matches "\$t" || continue
  if [ \$list = 1 ]; then
    s="\${t%%.*}."; [ "\$s" != "\$last" ] && echo "\$s"; last="\$s"; echo "  \${t#*.}"; continue
  fi
  echo "[ RUN      ] \$t"
  case "\$what" in
    pass) echo "[       OK ] \$t (1 ms)" ;;
    skip) echo "skipped: no GPU"; echo "[  SKIPPED ] \$t (0 ms)" ;;
    skip2) echo "skipped: needs 2 GPUs"; echo "[  SKIPPED ] \$t (0 ms)" ;;
    fail) echo "x.cpp:1: Failure"; echo "[  FAILED  ] \$t (1 ms)"; rc=1 ;;
    hang) $HANG ;;
    crash) if [ "\${CUDA_LAUNCH_BLOCKING:-}" = 1 ]; then
             echo "unknown file: Failure: C++ exception: /src/kernels/cuda/gather.cu:42: cudaGetLastError() failed: cudaErrorIllegalAddress"
           else
             echo "unknown file: Failure: C++ exception: /src/runtime/core/cuda/stream.cpp:7: cudaStreamSynchronize(s) failed: cudaErrorIllegalAddress"
           fi
           kill -SEGV \$\$ ;;
  esac
done <"\$0.tests"
exit \$rc
EOF
chmod +x "$T/fake_gtest" "$T/path/"*
for t in test_gpu test_ops_core test_ops_nn test_ops_conv test_train test_data_loader; do
  cp "$T/fake_gtest" "$T/stage/tests/$t"
  echo "Fake.$t pass" >"$T/stage/tests/$t.tests"
done
# test_gpu: the collectives suite crashes first (defect 2); two suites after it pass.
printf '%s\n' "GpuCollectiveSpace.GlooStaged crash" "GpuTensor.RoundTrip pass" "GpuOptim.AdamW pass" \
  >"$T/stage/tests/test_gpu.tests"
printf '%s\n' "CudaParity.Matmul pass" "CudaParity.Conv pass" "Matmul.Cpu pass" >"$T/stage/tests/test_ops_core.tests"
# test_ops_nn: one suite skips a test for want of a second GPU (expected on one GPU), one skips for want of any.
printf '%s\n' "CudaTwoGpus.CrossDevice skip2" "CudaTwoGpus.Same pass" "CudaNoGpu.Kernel skip" >"$T/stage/tests/test_ops_nn.tests"
touch "$T/stage/tests/test_ops_core.crash-at-start"  # dies before its first test, every time
printf '%s\n' "DataLoader.GpuBatches hang" "DataLoader.GpuPinned pass" >"$T/stage/tests/test_data_loader.tests"
printf '%s\n' "Resume.Bitwise pass" >"$T/stage/tests/test_train.tests"
touch "$T/stage/tests/test_train.listhang" "$T/stage/tests/test_ops_conv.listhang-filtered"
# FAKES_NO_HANG=1: no hanging suite or listing in run C (to see the crash of defect 2 alone with an old script).
if [ "${FAKES_NO_HANG:-0}" = 1 ]; then
  rm "$T/stage/tests/test_train.listhang" "$T/stage/tests/test_ops_conv.listhang-filtered"; sed -i 's/ hang$/ pass/' "$T/stage/tests/test_data_loader.tests"
fi

# The programs. bench_e2e prints the rows gpu_check parses; the label gpt-tiny-bf16 gets a loss of nan.
cat >"$T/stage/bin/bench_e2e" <<'EOF'
#!/usr/bin/env bash
[ "${1:-}" = --help ] && exit 0
echo "bench_e2e $*" >>"$FAKE_LOG"
loss=3.2000; case " $* " in *" gpt-tiny-bf16 "*) loss=nan ;; esac
cat <<TABLE
bench_e2e: fake
  metric                             median          p10          p90          min          max
  step (ms, slowest rank)             8.000        7.000        9.000        7.000        9.000
  exposed communication (ms)          0.100        0.100        0.100        0.100        0.100
  tokens/s (all ranks)           131072.000   131072.000   131072.000   131072.000   131072.000
  MFU % (peak 989 TF/s)              31.000       30.000       32.000       30.000       32.000
  loss (rank 0): first 5.5000 last $loss over 8 steps
  device memory (rank 0): peak in use 1234.0 MiB (pool high-water), memory account 900.0 MiB
TABLE
EOF
cat >"$T/stage/bin/bench_gpu_gemm" <<'EOF'
#!/usr/bin/env bash
[ "${1:-}" = --help ] && exit 0
echo "bench_gpu_gemm: n=256: 0.1 ms, 300.0 TFLOP/s"
EOF
cat >"$T/stage/bin/train" <<'EOF'
#!/usr/bin/env bash
[ "${1:-}" = --help ] && exit 0
echo "[rank 0]    throughput 1000 tokens/s (median step 8.0 ms), MFU 10.0%"
EOF
# ddprun: N copies of the program with the launcher's variables, lines prefixed "[rank i] ".
cat >"$T/stage/bin/ddprun" <<'EOF'
#!/usr/bin/env bash
[ "${1:-}" = --help ] && exit 0
n=1
while [ "${1#--}" != "$1" ]; do case "$1" in --nproc-per-node) n="$2"; shift ;; esac; shift; done
pids=()
for ((i = 0; i < n; i++)); do
  RANK=$i LOCAL_RANK=$i WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n "$@" 2>&1 | sed "s/^/[rank $i] /" & pids+=($!)
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
EOF
# The two-process world: NCCL refuses two ranks on one GPU unless each has its own NCCL_HOSTID with P2P and SHM
# off (what NCCL 2.28 does; docs/gpu.md).
cat >"$T/stage/bin/testprog_gpu_world" <<'EOF'
#!/usr/bin/env bash
echo "gpu_world $RANK NCCL_HOSTID=${NCCL_HOSTID:-} P2P=${NCCL_P2P_DISABLE:-} SHM=${NCCL_SHM_DISABLE:-}" >>"$FAKE_LOG"
if [ -z "${NCCL_HOSTID:-}" ] || [ "${NCCL_P2P_DISABLE:-}" != 1 ] || [ "${NCCL_SHM_DISABLE:-}" != 1 ]; then
  echo "NCCL WARN Duplicate GPU detected : rank $RANK and rank 0 both on CUDA device 1000"; exit 1
fi
echo "gpu_world: rank $RANK of $WORLD_SIZE: ddp 0, zero2 0, zero3 0 (max |parameter - reference|, bound 1e-05): PASS"
EOF
chmod +x "$T/stage/bin/"*
cat >"$T/stage/info.txt" <<EOF
build_dir=$T/no-such-build
commit=fake
date=2026-12-03T08:00Z
EOF
tar -C "$T/stage" -czf "$T/bundle/bundle.tar.gz" bin tests lib info.txt

# CUDA libraries built here: for CUDA 12 in a venv-like folder searched first, for CUDA 13 after it (defect 6).
for v in 12:2.21.5:12080 13:2.28.9:13010; do
  IFS=: read -r major nccl cudart <<<"$v"
  d="$T/libs/cu$major"; mkdir -p "$d"
  echo "__attribute__((used)) const char v[] = \"NCCL version $nccl+cuda$major.0\";" |
    cc -shared -fPIC -x c - -o "$d/libnccl.so.2"
  echo "int cudnnGetCudartVersion(void) { return $cudart; }" | cc -shared -fPIC -x c - -o "$d/libcudnn.so.9"
done

# Runs SCRIPT on the fakes (work folder $1, collect folder $1/out), bounded here in case SCRIPT itself hangs.
run_check() {
  local w="$1"; shift
  PATH="$T/path:$PATH" GPU_CHECK_LIB_DIRS="$T/libs/cu12:$T/libs/cu13" GPU_CHECK_TORCH_PYTHON="$T/path/python-torch" \
    GPU_CHECK_PROBE_TIMEOUT_S=2 GPU_CHECK_SUITE_TIMEOUT_S=3 GC_KILL_S=1 DDP_GPU_CHECK_DEADLINE_S=120 \
    timeout -k 1 "${RUN_LIMIT:-60}" "$SCRIPT" --prebuilt "$T/bundle" --collect "$w/out" "$w" "$@" >"$w.stdout" 2>&1
}

# ---- A: nvidia-smi hangs ignoring SIGTERM (defect 7) -------------------------------------------------------------
touch "$T/smi-hang"
t0=$SECONDS
RUN_LIMIT=30 run_check "$T/a"
check "7: a hanging nvidia-smi is killed: the check ends in 15 s (took $((SECONDS - t0)) s)" test $((SECONDS - t0)) -lt 15
check "7: ... and its row says nvidia-smi did not answer" has "$T/a/out/table.md" 'nvidia-smi.*(timed out|killed)'
rm -f "$T/smi-hang"

# ---- B: killed (SIGKILL) in the middle: what ran so far is already packed (defect 7) ------------------------------
mkdir -p "$T/b"
setsid bash -c "$(declare -f run_check); T='$T' SCRIPT='$SCRIPT' RUN_LIMIT=60 run_check '$T/b'" &
pid=$!
for _ in $(seq 100); do grep -q GpuTensor "$T/b/out/table.md" 2>/dev/null && break; sleep 0.2; done
kill -KILL -- "-$pid" 2>/dev/null; wait "$pid" 2>/dev/null
check "7: killed mid-run, logs.tar.gz is already in the collect folder" test -s "$T/b/out/logs.tar.gz"
check "7: ... and holds the steps' logs" bash -c "tar -tzf '$T/b/out/logs.tar.gz' | grep -q 'test-.*\.log'"

# ---- C: the whole run -----------------------------------------------------------------------------------------------
t0=$SECONDS
run_check "$T/c"
rc=$?
took=$((SECONDS - t0))
R="$T/c/out/table.md" L="$T/c/out/check.log"
[ -f "$R" ] || R="$T/c/table.md"
[ -f "$L" ] || L="$T/c/check.log"
check "2: the crashing collectives suite has its own row" has "$R" 'GpuCollectiveSpace.*FAIL'
check "2: ... and the suites after it still ran and passed" has "$R" 'GpuTensor.*PASS'
check "2: ... (second suite)" has "$R" 'GpuOptim.*PASS'
check "2: the crashed suite was rerun with CUDA_LAUNCH_BLOCKING=1" has "$FAKE_LOG" 'test_gpu  ?GpuCollectiveSpace.* CLB=1'
check "2: ... and its row names the failing op from that rerun" has "$R" 'GpuCollectiveSpace.*gather\.cu:42'
check "6: the CUDA 12 libnccl was passed over" has "$L" "passed over $T/libs/cu12/libnccl.so.2: built for CUDA 12"
check "6: the CUDA 12 libcudnn was passed over" has "$L" "passed over $T/libs/cu12/libcudnn.so.9: built for CUDA 12"
check "6: the CUDA 13 libnccl was taken" has "$L" "libnccl.so.2 in $T/libs/cu13"
check "2: a binary that dies before its first test gets one row, not a loop" \
  test "$(grep -c '^| test_ops_core' "$R")" = 1
check "7: a suite that ignores SIGTERM is killed and the run goes on" has "$R" 'DataLoader.*killed'
check "7: ... the suite beside it in its binary still ran" has "$FAKE_LOG" 'test_data_loader  ?DataLoader.GpuPinned'
check "7: a binary that hangs listing its tests gets a row, not a hang" has "$R" 'test_train.*(timed out|killed)'
check "7: ... also when it hangs only listing a filter's tests" has "$R" "test_ops_conv.*list_tests.*(timed out|killed)"
check "7: the run ended by itself (rc $rc, $took s)" test "$rc" -ne 124 -a "$rc" -ne 137
check "skips: a test that needs 2 GPUs skips on one without failing its suite" has "$R" 'TwoGpus.*PASS 1/2, 1 skipped.*more GPUs'
check "skips: ... but a test that skips for want of a GPU on a GPU machine fails its suite" has "$R" 'NoGpu.*FAIL: 1 of 1 skipped'
check "budget: the log shows the time left" has "$L" 's left'
check "sanitizer: memcheck ran" has "$R" 'memcheck.*(PASS|0 errors)'
check "sanitizer: racecheck's 2 hazards fail its row" has "$R" 'racecheck.*FAIL.*2 error'
check "sanitizer: synccheck ran" has "$R" 'synccheck'
check "two processes: the NCCL world row passed" has "$R" '2 processes.*PASS'
check "two processes: each rank had its own NCCL_HOSTID" \
  bash -c "grep -o 'gpu_world [01] NCCL_HOSTID=[^ ]*' '$FAKE_LOG' | awk '{print \$3}' | sort -u | grep -c . | grep -qx 2"
check "training: a row's loss is checked (finite, falls)" has "$R" 'gpt-tiny-f32.*loss ok'
check "training: a nan loss fails its row" has "$R" 'gpt-tiny-bf16.*FAIL.*not finite'
check "training: device peak memory beside the account" has "$R" 'gpt-tiny-f32.*peak in use 1234'
check "pytorch: eager and compiled rows with ratios" has "$R" 'torch.compile.*ratio'
check "pytorch: ... eager" has "$R" 'eager.*ratio'
check "gpt2-small 124M bf16 MFU row" has "$R" 'gpt2-small.*bf16.*MFU'
check "ncu: one step's kernel time, the GEMMs first" has "$R" "one step's kernel time.*4 kernels, 0.285 ms.*top: gemm_kernel 0.250 ms \\(2 x\\)"
# ---- the decisions alone (tools/gpu_check_lib.sh) ------------------------------------------------------------------
. "$ROOT/tools/gpu_check_lib.sh"
loss_of() { printf '  loss (rank 0): first %s last %s over 4 steps\n' "$1" "$2" >"$T/loss.log"; gc_loss_verdict "$T/loss.log"; }
check "lib: a loss of -nan is not finite" bash -c "[[ '$(loss_of 5.5 -nan)' == 'FAIL: loss not finite'* ]]"
check "lib: a loss of inf is not finite" bash -c "[[ '$(loss_of inf 3.0)' == 'FAIL: loss not finite'* ]]"
check "lib: a loss that stays is a failure" bash -c "[[ '$(loss_of 5.5 5.5)' == 'FAIL: loss did not fall'* ]]"
check "lib: a loss that falls is ok" bash -c "[[ '$(loss_of 5.5 1e-3)' == 'ok (5.5 -> 1e-3)' ]]"
check "lib: a step gets what is left minus 5 s" test "$(gc_limit 90 50)" = 45
check "lib: under 10 s left, no step starts" test "$(gc_limit 90 9)" = 0
check "lib: exit 137 reads as killed after ignoring SIGTERM" bash -c "[[ '$(gc_rc_text 137 3)' == *'ignored SIGTERM'* ]]"
check "lib: exit 139 reads as SIGSEGV" bash -c "[[ '$(gc_rc_text 139 3)' == *SEGV* ]]"
echo "gpu_check_fakes_test: $FAILS failed ($SCRIPT)"
[ "$FAILS" -eq 0 ]
