#!/usr/bin/env bash
# tools/gpu_check.sh - the one-command check for a machine with an NVIDIA GPU, made to give a verdict in one call
# of under 10 minutes (docs/gpu.md says what each row will show):
#   1. the GPU tests, one process per gtest suite (a crash or hang costs that suite's row only); a failing suite's
#      failing tests are rerun once with CUDA_LAUNCH_BLOCKING=1, so the row names the op that failed;
#   2. two processes on the one GPU forming a real NCCL world (each its own NCCL_HOSTID, P2P and SHM off, so NCCL
#      sees two hosts: it refuses two ranks on one device otherwise) that train with the reducer and ZeRO-2/3 and
#      compare with a single-process reference (testprog_gpu_world);
#   3. compute-sanitizer memcheck over the shared-memory kernels' parity tests;
#   4. training rows (bench_e2e): step time, tokens/s, MFU, the loss (finite and falling) and the device's peak
#      memory beside the memory account; each beside PyTorch 2.x eager on the same GPU and model
#      (bench/pytorch_twin.py), as ratios; GPT-2 small (124M, tied head) bf16 MFU at world 1;
#   5. GEMM TFLOP/s, racecheck and synccheck, two ranks through Gloo staging, `train`'s MFU line, the used-map
#      sync, bf16 all-reduce;
#   6. torch.compile beside the rows of 4 (a compile can take minutes, and the deadline cuts the tail);
#   7. one GPT-2 small bf16 step under Nsight Compute: its kernel time by kernel (tools/ncu_kernel_summary.py;
#      the CSV is in logs.tar.gz).
# Every step runs under `timeout -k` (a process ignoring SIGTERM is killed), the time left is printed on every log
# line, and table.md, check.log, bench.json and logs.tar.gz are copied to --collect after every step.
#
#   tools/gpu_check.sh [options] [WORK]
#     --prebuilt DIR  run the binaries of a bundle made on the CPU machine by tools/gpu_bundle.sh (DIR/bundle.tar.gz)
#     --collect DIR   copy table.md, check.log, gpu.txt, bench.json and logs.tar.gz into DIR after every step
#     --dry-run       every step with the same binaries and flags, on the CPU at tiny sizes (cuda -> cpu,
#                     nccl -> gloo, GPT-2 shapes -> the tiny gpt, 3 steps; no compute-sanitizer); also
#                     GPU_CHECK_DEVICE=cpu. Uses DDP_BUILD_DIR (default build) unless --prebuilt. ctest: GpuCheck.DryRun
#     WORK            logs and table (default runs/gpu-check-<date>)
# Time: DDP_GPU_CHECK_DEADLINE_S (default 540) bounds the run after the build; each step's limit is cut to what is
# left. GPU_CHECK_SUITE_TIMEOUT_S (90) bounds one suite, GPU_CHECK_PROBE_TIMEOUT_S (30) nvidia-smi, the start-up
# probes and test listings; GC_KILL_S (5) is the grace between SIGTERM and SIGKILL.
# Libraries: cudart, cuBLAS, NCCL, cuDNN from GPU_CHECK_LIB_DIRS (searched first), the toolkit or Python's nvidia-*
# packages, each only if built for CUDA 13 (NCCL and cuDNN say so themselves; the others by soname).
# PyTorch: GPU_CHECK_TORCH_PYTHON, else tools/setup_torch2.sh --path, else python3 if it has torch 2.x.
set -uo pipefail
GPU_CHECK_PROGRAMS=(train ddprun bench_e2e bench_gpu_gemm testprog_gpu_world)
GPU_CHECK_TESTS=(test_gpu test_ops_core test_ops_nn test_ops_conv test_train test_data_loader)
[ "${1:-}" = --print-binaries ] && { echo "${GPU_CHECK_PROGRAMS[*]}"; echo "${GPU_CHECK_TESTS[*]}"; exit 0; }
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tools/gpu_check_lib.sh
. "$ROOT/tools/gpu_check_lib.sh"
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
[ -n "$COLLECT" ] && { mkdir -p "$COLLECT" && COLLECT="$(cd "$COLLECT" && pwd)" || exit 2; }
DEADLINE="${DDP_GPU_CHECK_DEADLINE_S:-540}"
BUILD_LIMIT="${DDP_GPU_BUILD_TIMEOUT_S:-240}"
PROBE_S="${GPU_CHECK_PROBE_TIMEOUT_S:-30}"
SUITE_S="${GPU_CHECK_SUITE_TIMEOUT_S:-90}"
CUDA_MAJOR=13  # what the build links (libcudart.so.13)
: >"$WORK/check.log"
T0=$SECONDS
DEADLINE_T0=$SECONDS  # reset after a build here
left() { echo $((DEADLINE - (SECONDS - DEADLINE_T0))); }
limit_for() { gc_limit "$1" $(($(left) - ${GC_KILL_S:-5})); }  # wanted seconds -> allowed now (0: skip)
log() { printf '[gpu_check %3ds, %3ds left] %s\n' $((SECONDS - T0)) "$(left)" "$*" | tee -a "$WORK/check.log" >&2; }
declare -a ROWS=()
declare -A BAD=()  # binary -> why it cannot run
FAILS=0

# ---- the table, copied out with the logs after every row ------------------------------------------------------
HEADER=""
row() {  # name, result
  ROWS+=("| $1 | $(printf '%s' "$2" | tr '|\n' '/ ') |")
  case "$2" in FAIL*) FAILS=$((FAILS + 1)) ;; esac
  { echo "$HEADER"; echo; echo "| check | result |"; echo "|---|---|"; printf '%s\n' "${ROWS[@]}"; } >"$WORK/table.md"
  collect
}
collect() {
  [ -n "$COLLECT" ] || return 0
  local f
  for f in table.md check.log gpu.txt bench.json; do [ -f "$WORK/$f" ] && cp -f "$WORK/$f" "$COLLECT/"; done
  local inside="${COLLECT#"$WORK"/}"  # a collect folder inside WORK stays out of its own archive
  (cd "$WORK" && tar -czf "$COLLECT/.logs.tar.gz" --exclude=./bundle --exclude=./table.md --exclude="./$inside" . \
     2>/dev/null)
  mv -f "$COLLECT/.logs.tar.gz" "$COLLECT/logs.tar.gz"  # whole or not at all, should the call end now
}
finish() {
  local rc=$?
  [ -f "$WORK/table.md" ] && { echo; cat "$WORK/table.md"; }
  collect
  exit "$rc"
}
trap finish EXIT

# ---- CUDA's libraries, each built for this CUDA ----------------------------------------------------------------------
ORIG_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"  # PyTorch's python runs with this (its own CUDA libraries, not ours)
IFS=: read -r -a LIB_CANDS <<<"${GPU_CHECK_LIB_DIRS:-}"
LIB_CANDS+=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib
           /usr/lib/x86_64-linux-gnu)
for py in $(gc_bounded "$PROBE_S" python3 -c "import site; print(' '.join(site.getsitepackages()))" 2>/dev/null) \
          /opt/torch/.venv/lib/python3*/site-packages; do
  [ -d "$py/nvidia" ] && LIB_CANDS+=("$py/nvidia")
done
lib_dirs_for() {  # soname -> every folder under the candidates holding it, in order
  local d
  for d in "${LIB_CANDS[@]}"; do
    [ -n "$d" ] && [ -d "$d" ] && find "$d" -maxdepth 4 -name "$1" -printf '%h\n' 2>/dev/null | sort
  done | awk '!seen[$0]++'
}
CUDA_LIBS=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9)
for so in "${CUDA_LIBS[@]}"; do
  mapfile -t dirs < <(lib_dirs_for "$so")
  d="$(gc_pick_lib "$so" "$CUDA_MAJOR" "${dirs[@]}" 2>"$WORK/pick.err")"
  while read -r l; do log "$l"; done <"$WORK/pick.err"
  if [ -n "$d" ]; then
    case ":${LD_LIBRARY_PATH:-}:" in *":$d:"*) ;; *) export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
    log "$so in $d ($(basename "$(readlink -f "$d/$so")"), CUDA $(gc_lib_cuda_major "$d/$so"))"
  else
    log "$so: none built for CUDA $CUDA_MAJOR found (GPU_CHECK_LIB_DIRS, toolkit, Python nvidia-* packages)"
  fi
done
rm -f "$WORK/pick.err"
export PATH="/usr/local/cuda/bin:$PATH"
# NCCL bootstraps on loopback (a VM may have no other usable interface) and logs its warnings; a stuck collective or
# communicator creation fails with its error inside a step's limit.
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
export DDP_COLLECTIVE_TIMEOUT_S="${DDP_COLLECTIVE_TIMEOUT_S:-60}"

# ---- the GPU ------------------------------------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
  echo "dry run on the CPU ($(nproc) cores): no GPU used" >"$WORK/gpu.txt"
else
  gc_bounded "$PROBE_S" nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$WORK/gpu.txt" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    row "GPU (nvidia-smi)" "FAIL: nvidia-smi $(gc_rc_text "$rc" "$PROBE_S"): $(head -1 "$WORK/gpu.txt")"
    log "no usable GPU; --dry-run checks the script on the CPU"
    exit 1
  fi
fi
GPU="$(head -1 "$WORK/gpu.txt")"
log "GPU: $GPU"

# ---- the binaries: a carried bundle, or a build here (dry run: the existing build) ------------------------------------
BUILD_INFO=""
if [ -n "$PREBUILT" ]; then
  [ -f "$PREBUILT/bundle.tar.gz" ] || { row "bundle" "FAIL: no $PREBUILT/bundle.tar.gz (tools/gpu_bundle.sh)"; exit 1; }
  U="$WORK/bundle"
  rm -rf "$U" && mkdir -p "$U" && tar -C "$U" -xzf "$PREBUILT/bundle.tar.gz" || { row "bundle" "FAIL: cannot unpack"; exit 1; }
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
  BIN="$B/bin" TESTS="$B/tests" BUILD_INFO="build $B"
else
  B="${DDP_GPU_BUILD_DIR:-$ROOT/build-gpu}"
  log "configure + build (CUDA on) in $B (at most ${BUILD_LIMIT} s)"
  if ! gc_bounded 120 cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDP_CUDA=ON -DDDP_BUILD_BENCH=ON \
       -DDDP_CUDA_ARCHITECTURES=90 >"$WORK/configure.log" 2>&1; then
    row "build on this machine" "FAIL: configure (configure.log; build a bundle on the CPU machine: --prebuilt)"; exit 1
  fi
  if ! gc_bounded "$BUILD_LIMIT" cmake --build "$B" -j "$(nproc)" --target "${GPU_CHECK_PROGRAMS[@]}" \
       "${GPU_CHECK_TESTS[@]}" >"$WORK/build.log" 2>&1; then
    row "build on this machine" "FAIL (build.log)"; exit 1
  fi
  BIN="$B/bin" TESTS="$B/tests" BUILD_INFO="built here in $((SECONDS - T0)) s"
  DEADLINE_T0=$SECONDS
fi
HEADER="**ddp.cpp GPU check** $(date -u +%Y-%m-%d), ${GPU}; ${BUILD_INFO}$([ "$DRY" = 1 ] && echo '; DRY RUN on the CPU (tiny sizes, not GPU figures)')"

# Every binary must load and answer a probe in time; one that does not is named and its steps are skipped.
for f in "${GPU_CHECK_PROGRAMS[@]/#/$BIN/}" "${GPU_CHECK_TESTS[@]/#/$TESTS/}"; do
  name="$(basename "$f")"
  if [ ! -x "$f" ]; then BAD[$name]="absent"; continue; fi
  nf="$(gc_bounded "$PROBE_S" ldd "$f" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' ')"
  if [ -n "$nf" ]; then BAD[$name]="needs $nf"; continue; fi
  case "$f" in */tests/*) probe=(--gtest_list_tests) ;; */testprog_*) continue ;; *) probe=(--help) ;; esac
  gc_bounded "$PROBE_S" "$f" "${probe[@]}" >/dev/null 2>"$WORK/probe.err"
  rc=$?
  [ "$rc" -ne 0 ] && BAD[$name]="did not answer ${probe[*]}: $(gc_rc_text "$rc" "$PROBE_S") $(head -2 "$WORK/probe.err" | tr '\n' ' ')"
done
rm -f "$WORK/probe.err"
if [ "${#BAD[@]}" -gt 0 ]; then
  for name in "${!BAD[@]}"; do log "$name cannot run: ${BAD[$name]}"; done
  row "binaries load" "FAIL: $(for n in "${!BAD[@]}"; do printf '%s: %s; ' "$n" "${BAD[$n]}"; done)"
else
  row "binaries load" "ok ($(basename "$BIN")/, $(basename "$TESTS")/)"
fi
# Our CUDA runtime must see the GPU too (else every GPU test would skip): one tiny GEMM.
if [ "$DRY" = 0 ] && [ -z "${BAD[bench_gpu_gemm]:-}" ]; then
  gemm_probe="$(gc_bounded 60 "$BIN/bench_gpu_gemm" --n 256 --reps 1 2>&1)"
  case "$gemm_probe" in
    *TFLOP/s*) log "CUDA sees the GPU: $gemm_probe" ;;
    *) row "CUDA sees the GPU" "FAIL: $gemm_probe"; exit 1 ;;
  esac
fi

# ---- dry run: the GPU flags of each step, mapped to the CPU at tiny sizes ---------------------------------------------
dev_args() {  # args... -> the same args (GPU run) or their CPU twin (dry run), one per line
  if [ "$DRY" = 0 ]; then printf '%s\n' "$@"; return; fi
  local prev="" a
  for a in "$@"; do
    case "$prev:$a" in
      --device:cuda) a=cpu ;;
      --backend:nccl) a=gloo ;;
      --config:gpt2s|--config:gpt2-small) a=gpt ;;
      --steps:*) a=3 ;;
      --warmup:*) a=1 ;;
      --batch-size:*) a=2 ;;
    esac
    printf '%s\n' "$a"
    prev="$a"
  done
}
# "name median; ..." for bench_e2e's table rows matching $1 (name, then median p10 p90 min max); "[rank N] " dropped.
medians() {
  sed -E 's/^\[rank [0-9]+\] ?//' | grep -E "^ +($1)" |
    awk '{ if (NF < 6) next; n = $1; for (j = 2; j <= NF - 5; j++) n = n " " $j;
           printf "%s%s %s", (k++ ? "; " : ""), n, $(NF - 4) }'
}
usable() {  # binary, row name: 0 when the binary can run, else a SKIPPED row
  [ -z "${BAD[$1]:-}" ] && return 0
  row "$2" "SKIPPED ($1: ${BAD[$1]})"; return 1
}

# ---- 1. tests, one process per suite ------------------------------------------------------------------------------------
run_suite() {  # binary, suite, its tests (Suite.Name, colon-separated), row label
  local bin="$1" suite="$2" names="$3" label="$4" lim rc t=$SECONDS ok sk fail n
  local file="test-$bin-$suite.log"
  lim=$(limit_for "$SUITE_S")
  [ "$lim" -eq 0 ] && { row "$label" "SKIPPED (deadline)"; return; }
  n=$(tr ':' '\n' <<<"$names" | grep -c .)
  log "test: $label ($n tests, at most $lim s)"
  gc_bounded "$lim" "$TESTS/$bin" --gtest_filter="$names" >"$WORK/$file" 2>&1
  rc=$?
  read -r ok sk fail < <(gc_gtest_counts "$WORK/$file")
  if [ "$rc" -eq 0 ]; then
    local more_gpus; more_gpus=$(gc_gtest_more_gpu_skips "$WORK/$file")
    if [ "$DRY" = 0 ] && [ "$sk" -gt "$more_gpus" ]; then
      row "$label" "FAIL: $((sk - more_gpus)) of $n skipped on a GPU machine ($file)"
    elif [ "$DRY" = 0 ] && [ "$sk" -gt 0 ]; then
      row "$label" "PASS $ok/$n, $sk skipped (they need more GPUs than this machine has), $((SECONDS - t)) s"
    else row "$label" "PASS $ok/$n$([ "$sk" -gt 0 ] && echo ", $sk skipped (no GPU)"), $((SECONDS - t)) s"; fi
    return
  fi
  local what; what="$(gc_rc_text "$rc" "$lim")"
  local started; started="$(grep -E '^\[ RUN      \]' "$WORK/$file" | awk '{print $4}')"
  local failed; failed="$(grep -E '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$WORK/$file" | awk '{print $4}')"
  local culprit="$failed"
  [ "$rc" -ne 1 ] && culprit="$(tail -1 <<<"$started")"  # crashed or hung: the test that was running
  local detail="$what, $ok passed ($file): $(gc_failing_op "$WORK/$file")"
  # Rerun the failing tests once with launches blocking, so an asynchronous CUDA error names its op (not for a
  # hang, which would only hang again).
  if [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && [ -n "$culprit" ]; then
    lim=$(limit_for "$SUITE_S")
    if [ "$lim" -gt 0 ]; then
      log "rerun with CUDA_LAUNCH_BLOCKING=1: $(tr '\n' ' ' <<<"$culprit")"
      CUDA_LAUNCH_BLOCKING=1 gc_bounded "$lim" "$TESTS/$bin" --gtest_filter="$(paste -sd: <<<"$culprit")" \
        >"$WORK/${file%.log}.blocking.log" 2>&1
      detail+="; rerun with CUDA_LAUNCH_BLOCKING=1: $(gc_rc_text $? "$lim"), $(gc_failing_op "$WORK/${file%.log}.blocking.log")"
    fi
  fi
  row "$label" "FAIL: $detail"
  grep -E 'Failure|FAILED|rror' -A3 "$WORK/$file" | head -12 >>"$WORK/check.log"
  # The tests the crash or hang kept from running get their own process (when one ran at all: no loop on a binary
  # that dies before its first test).
  if [ "$rc" -ne 1 ] && [ -n "$started" ]; then
    local rest; rest="$(tr ':' '\n' <<<"$names" | grep -vxF -f <(printf '%s\n' "$started") | paste -sd:)"
    [ -n "$rest" ] && run_suite "$bin" "$suite" "$rest" "$label (the tests after it)"
  fi
}
test_binary() {  # binary, gtest filter: lists the matching tests (bounded) and runs each suite in its own process
  local bin="$1" filter="$2" names rc suite
  usable "$bin" "$bin '$filter'" || return
  gc_bounded "$PROBE_S" "$TESTS/$bin" --gtest_list_tests --gtest_filter="$filter" >"$WORK/list-$bin.txt" 2>/dev/null
  rc=$?
  names="$(gc_gtest_names <"$WORK/list-$bin.txt")"
  [ "$rc" -ne 0 ] && { row "$bin '$filter'" "FAIL: --gtest_list_tests $(gc_rc_text "$rc" "$PROBE_S")"; return; }
  [ -z "$names" ] && { row "$bin '$filter'" "FAIL: the filter matches no test"; return; }
  for suite in $(gc_suites <<<"$names"); do
    run_suite "$bin" "$suite" "$(grep "^$suite\." <<<"$names" | paste -sd:)" "$bin $suite"
  done
}

# ---- 2. two processes, one GPU, a real NCCL world -------------------------------------------------------------------------
# NCCL refuses two ranks on one GPU ("Duplicate GPU detected") when they share a host hash; NCCL_HOSTID per process
# makes them two "hosts", which then talk through NCCL's socket transport (P2P and SHM off, as between hosts).
two_process_world() {
  local label="reducer + ZeRO-2/3, 2 processes on 1 GPU (NCCL, own NCCL_HOSTID each) vs 1-process reference"
  usable testprog_gpu_world "$label" && usable ddprun "$label" || return
  local lim rc args; lim=$(limit_for 120)
  [ "$lim" -eq 0 ] && { row "$label" "SKIPPED (deadline)"; return; }
  mapfile -t args < <(dev_args --device cuda --backend nccl --steps 5)
  local why="two processes on one GPU: NCCL refuses two ranks with one host hash ('Duplicate GPU detected',"
  why+=" ncclInvalidUsage), so each gets NCCL_HOSTID=gpu-check-rank-<local rank>, NCCL_P2P_DISABLE=1,"
  why+=" NCCL_SHM_DISABLE=1: two 'hosts' joined by NCCL's socket transport on lo. If NCCL refuses anyway the row"
  why+=" says REFUSED with its message and two ranks on one GPU rest on the Gloo-staged tests (test_gpu)."
  log "$why"
  log "two processes: ddprun --nproc-per-node 2 testprog_gpu_world ${args[*]}"
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 gc_bounded "$lim" "$BIN/ddprun" --nproc-per-node 2 --standalone \
    /bin/bash -c 'export NCCL_HOSTID="gpu-check-rank-$LOCAL_RANK"; exec "$0" "$@"' "$BIN/testprog_gpu_world" "${args[@]}" \
    >"$WORK/two-processes.log" 2>&1
  rc=$?
  local verdict; verdict="$(grep -E 'gpu_world: rank 0 ' "$WORK/two-processes.log" | tail -1 | sed -E 's/.*gpu_world: //')"
  if [ "$rc" -eq 0 ] && [ "$(grep -c 'gpu_world: rank .*: PASS' "$WORK/two-processes.log")" -eq 2 ]; then
    row "$label" "PASS: $verdict"
  elif grep -qE 'Duplicate GPU|communicator creation' "$WORK/two-processes.log"; then
    row "$label" "REFUSED by NCCL ($(gc_rc_text "$rc" "$lim")): $(grep -m1 -E 'Duplicate GPU|communicator creation' "$WORK/two-processes.log" | cut -c1-200) - two ranks on one GPU then rest on the Gloo-staged tests"
  else
    row "$label" "FAIL: $(gc_rc_text "$rc" "$lim") (two-processes.log): ${verdict:-$(grep -v '^ ' "$WORK/two-processes.log" | tail -1)}"
  fi
}

# ---- 3. compute-sanitizer ------------------------------------------------------------------------------------------------
SANITIZER="${GPU_CHECK_SANITIZER:-$(command -v compute-sanitizer)}"
SAN_BIN=test_ops_nn
SAN_FILTER='LayerNorm.Cuda*:Softmax.Cuda*:CrossEntropy.Cuda*:Attention.Cuda*:Embedding.Cuda*'
sanitize() {  # tool
  local label="compute-sanitizer $1 ($SAN_BIN: LayerNorm, Softmax, CrossEntropy, Attention, Embedding)"
  usable "$SAN_BIN" "$label" || return
  local lim rc n t=$SECONDS; lim=$(limit_for 75)
  [ "$lim" -eq 0 ] && { row "$label" "SKIPPED (deadline)"; return; }
  local cmd=("$TESTS/$SAN_BIN" --gtest_filter="$SAN_FILTER")
  if [ "$DRY" = 1 ] || [ -z "$SANITIZER" ]; then
    gc_bounded "$lim" "${cmd[@]}" >"$WORK/sanitize-$1.log" 2>&1
    rc=$?
    if [ "$DRY" = 1 ]; then row "$label" "dry run: the suite ran without compute-sanitizer: $(gc_rc_text "$rc" "$lim")"
    else row "$label" "FAIL: compute-sanitizer not found (PATH, /usr/local/cuda/bin)"; fi
    return
  fi
  log "compute-sanitizer --tool $1 over $SAN_BIN '$SAN_FILTER' (at most $lim s)"
  gc_bounded "$lim" "$SANITIZER" --tool "$1" --error-exitcode 99 "${cmd[@]}" >"$WORK/sanitize-$1.log" 2>&1
  rc=$?
  n="$(gc_sanitizer_errors "$WORK/sanitize-$1.log")"
  if [ "$rc" -eq 0 ]; then row "$label" "PASS: ${n:-0} errors, $((SECONDS - t)) s"
  else row "$label" "FAIL: $(gc_rc_text "$rc" "$lim"), ${n:-?} errors (sanitize-$1.log): $(grep -m1 -E '^========= [A-Z]' "$WORK/sanitize-$1.log" | cut -c1-160)"
  fi
}

# ---- 4. training rows and PyTorch beside them ------------------------------------------------------------------------------
declare -A STEP_MS=()  # label -> ddp.cpp's median step (ms)
bench() {  # label, seconds, bench_e2e args...
  local label="$1" want="$2"; shift 2
  usable bench_e2e "$label" || return
  local lim args rc; lim=$(limit_for "$want")
  [ "$lim" -eq 0 ] && { row "$label" "SKIPPED (deadline)"; return; }
  mapfile -t args < <(dev_args --device cuda --backend nccl "$@")
  [ "$DRY" = 1 ] && args+=(--peak-tflops 1)  # the CPU has no datasheet peak: exercise the MFU row anyway
  log "bench: $label: bench_e2e ${args[*]}"
  local log="bench-$label.log"
  gc_bounded "$lim" "$BIN/bench_e2e" "${args[@]}" --json "$WORK/bench.json" --label "$label" >"$WORK/$log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    row "$label" "FAIL: $(gc_rc_text "$rc" "$lim") ($log): $(grep -v '^ ' "$WORK/$log" | tail -1)"; return
  fi
  local m loss mem attn
  m="$(medians 'step \(|tokens/s|exposed|MFU|used-map' <"$WORK/$log")"
  # bf16 rows: which attention ran (cuDNN's fused one, or the materialising kernels and why)
  attn="$(grep -m1 '^  bf16 attention:' "$WORK/$log" | sed 's/^ *//')"
  [ -n "$attn" ] && m="$m; $attn"
  loss="$(gc_loss_verdict "$WORK/$log")"
  mem="$(gc_device_memory "$WORK/$log")"
  STEP_MS[$label]="$(medians 'step \(' <"$WORK/$log" | awk '{print $NF}')"
  if [ -z "$m" ]; then row "$label" "FAIL: no bench_e2e table in $log"
  elif [ -z "$mem" ]; then row "$label" "FAIL: no device memory line in $log; $m; loss $loss"
  elif [ "${loss%%:*}" = FAIL ]; then row "$label" "$loss; $m; device: $mem"
  else row "$label" "$m; loss $loss; device: $mem"; fi
}
TORCH_PY="" TORCH_V=""
find_torch() {  # sets TORCH_PY and TORCH_V to a python with PyTorch 2.x, if any
  local py v
  for py in "${GPU_CHECK_TORCH_PYTHON:-}" "$(gc_bounded "$PROBE_S" "$ROOT/tools/setup_torch2.sh" --path 2>/dev/null)" \
            "$(command -v python3)"; do
    [ -n "$py" ] && [ -x "$py" ] || continue
    v="$(LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" gc_bounded "$PROBE_S" "$py" -c 'import torch; print(torch.__version__)' \
         2>/dev/null | tail -1)"
    case "$v" in 2.*) TORCH_PY="$py" TORCH_V="$v"; return 0 ;; esac
  done
  return 1
}
torch_row() {  # ddp.cpp row label, eager|compile, seconds, pytorch_twin args...
  local of="$1" variant="$2" want="$3"; shift 3
  local label="PyTorch ${TORCH_V:-2.x} $([ "$variant" = compile ] && echo torch.compile || echo eager), same model as $of"
  local args lim rc; mapfile -t args < <(dev_args --device cuda "$@")
  [ "$variant" = compile ] && args+=(--compile) && [ "$DRY" = 1 ] && args+=(--compile-backend eager)
  # No PyTorch 2.x here, or a dry run past the first model (each run costs ~20 s of a 2-core machine): the flags
  # are checked.
  local why=""
  [ -z "$TORCH_PY" ] && why="no PyTorch 2.x here"
  [ -n "$TORCH_PY" ] && [ "$DRY" = 1 ] && [ "$of" != gpt-tiny-f32 ] && why="dry run: only gpt-tiny-f32 runs"
  if [ -n "$why" ]; then
    python3 "$ROOT/bench/pytorch_twin.py" "${args[@]}" --parse-only >"$WORK/torch-$variant-$of.log" 2>&1
    if [ $? -eq 0 ]; then row "$label" "SKIPPED ($why); flags accepted by pytorch_twin.py --parse-only"
    else row "$label" "FAIL: pytorch_twin.py rejects the flags ($(tail -1 "$WORK/torch-$variant-$of.log"))"; fi
    return
  fi
  lim=$(limit_for "$want")
  [ "$lim" -eq 0 ] && { row "$label" "SKIPPED (deadline)"; return; }
  log "torch: $label: pytorch_twin.py ${args[*]}"
  LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" gc_bounded "$lim" "$TORCH_PY" "$ROOT/bench/pytorch_twin.py" "${args[@]}" \
    >"$WORK/torch-$variant-$of.log" 2>&1
  rc=$?
  local ms; ms="$(grep -oE 'step [0-9.]+ ms' "$WORK/torch-$variant-$of.log" | tail -1 | awk '{print $2}')"
  if [ "$rc" -ne 0 ] || [ -z "$ms" ]; then
    row "$label" "FAIL: $(gc_rc_text "$rc" "$lim") (torch-$variant-$of.log): $(tail -1 "$WORK/torch-$variant-$of.log" | cut -c1-160)"
  else
    row "$label" "step $ms ms; ratio ddp.cpp / PyTorch step time $(gc_ratio "${STEP_MS[$of]:-}" "$ms") (ddp.cpp ${STEP_MS[$of]:-?} ms)$(grep -oE 'compile [0-9.]+ s' "$WORK/torch-$variant-$of.log" | sed 's/^/; /')"
  fi
}

# ---- 5. the rest ------------------------------------------------------------------------------------------------------------
gemm() {  # dtype, n[, float32 matmul precision]
  local label="GEMM $1${3:+ $3} (ops::matmul)" tag="$1${3:+-$3}"
  usable bench_gpu_gemm "$label" || return
  local lim rc n="$2" extra=(); lim=$(limit_for 40)
  [ "$lim" -eq 0 ] && { row "$label" "SKIPPED (deadline)"; return; }
  [ "$DRY" = 1 ] && n=64
  [ -n "${3:-}" ] && extra=(--float32-matmul-precision "$3")
  log "bench: $label n=$n"
  gc_bounded "$lim" "$BIN/bench_gpu_gemm" --dtype "$1" --n "$n" "${extra[@]}" >"$WORK/gemm-$tag.log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then row "$label" "$(tail -1 "$WORK/gemm-$tag.log")"
  else row "$label" "FAIL: $(gc_rc_text "$rc" "$lim") (gemm-$tag.log): $(tail -1 "$WORK/gemm-$tag.log")"; fi
}
two_ranks_gloo() {
  local label="gpt tiny, 2 ranks on 1 GPU (Gloo staged)"
  usable ddprun "$label" && usable bench_e2e "$label" || return
  local lim rc args; lim=$(limit_for 60)
  [ "$lim" -eq 0 ] && { row "$label" "SKIPPED (deadline)"; return; }
  mapfile -t args < <(dev_args --config gpt --device cuda --backend gloo --warmup 3 --steps 15)
  log "bench: $label"
  gc_bounded "$lim" "$BIN/ddprun" --nproc-per-node 2 --standalone "$BIN/bench_e2e" "${args[@]}" \
    --json "$WORK/bench.json" --label gpt-tiny-2ranks-gloo-staged >"$WORK/bench-2ranks.log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then row "$label" "$(medians 'step \(|tokens/s|exposed' <"$WORK/bench-2ranks.log")"
  else row "$label" "FAIL: $(gc_rc_text "$rc" "$lim") (bench-2ranks.log): $(grep -v '^ ' "$WORK/bench-2ranks.log" | tail -1)"; fi
}
train_mfu() {
  local label="train gpt bf16, synthetic (throughput, MFU)"
  usable train "$label" || return
  local lim rc args; lim=$(limit_for 60)
  [ "$lim" -eq 0 ] && { row "$label" "SKIPPED (deadline)"; return; }
  mapfile -t args < <(dev_args --model gpt --data synthetic --device cuda --dtype bfloat16 --steps 40 \
                                --eval-interval 0 --sample-tokens 0)
  [ "$DRY" = 1 ] && args+=(--peak-tflops 1)
  log "train: ${args[*]}"
  gc_bounded "$lim" "$BIN/train" "${args[@]}" >"$WORK/train-bf16.log" 2>&1
  rc=$?
  local t; t="$(grep -E 'throughput|MFU' "$WORK/train-bf16.log" | sed 's/^\[rank 0\] *//' | tr -s ' ' | tr '\n' ';')"
  if [ "$rc" -ne 0 ]; then row "$label" "FAIL: $(gc_rc_text "$rc" "$lim") (train-bf16.log): $(tail -1 "$WORK/train-bf16.log")"
  else case "$t" in *MFU*) row "$label" "$t" ;; *) row "$label" "FAIL: no MFU line (train-bf16.log): $t" ;; esac; fi
}

# ---- 7. one step's kernels under Nsight Compute ------------------------------------------------------------------
profile_step() {
  local label="GPT-2 small bf16, one step's kernel time by kernel (ncu)"
  usable bench_e2e "$label" || return
  local ncu; ncu="${GPU_CHECK_NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}"
  [ "$DRY" = 1 ] && { row "$label" "SKIPPED (dry run: no GPU to profile)"; return; }
  [ -z "$ncu" ] && { row "$label" "SKIPPED (no ncu: PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute)"; return; }
  local lim rc; lim=$(limit_for 90)
  [ "$lim" -eq 0 ] && { row "$label" "SKIPPED (deadline)"; return; }
  log "ncu over one GPT-2 small bf16 step (at most $lim s)"
  gc_bounded "$lim" "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    "$BIN/bench_e2e" --device cuda --backend nccl --config gpt2-small --dtype bf16 --warmup 1 --steps 1 \
    --batch-size 8 >"$WORK/ncu-gpt2s.csv" 2>"$WORK/ncu-gpt2s.err"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    row "$label" "FAIL: ncu $(gc_rc_text "$rc" "$lim") (ncu-gpt2s.err): $(tail -1 "$WORK/ncu-gpt2s.err" | cut -c1-160)"
    return
  fi
  if ! python3 "$ROOT/tools/ncu_kernel_summary.py" "$WORK/ncu-gpt2s.csv" --top 6 --width 60 >"$WORK/ncu-summary.txt" 2>&1; then
    row "$label" "FAIL: tools/ncu_kernel_summary.py: $(tail -1 "$WORK/ncu-summary.txt")"; return
  fi
  row "$label" "$(head -1 "$WORK/ncu-summary.txt" | sed 's/^launches [0-9.]*: [^:]*: //'); top: $(tail -n +3 "$WORK/ncu-summary.txt" |
    awk '{ n = $4; for (j = 5; j <= NF; j++) n = n " " $j; printf "%s%s %s ms (%s x)", (k++ ? ", " : ""), n, $1, $2 }')"
}

# ---- the order: most decisive first, so the deadline cuts the tail ---------------------------------------------------------
log "1. GPU tests, one process per suite"
test_binary test_ops_core '*Cuda*'
test_binary test_ops_nn '*Cuda*'
test_binary test_ops_conv '*Cuda*:*Gpu*'
test_binary test_gpu '*'
test_binary test_train 'Resume.*'
test_binary test_data_loader 'DataLoader.Gpu*'
log "2. two processes on one GPU (NCCL)"
two_process_world
log "3. compute-sanitizer memcheck (racecheck and synccheck come after the training rows)"
sanitize memcheck
log "4. training rows beside PyTorch eager with F.scaled_dot_product_attention (pytorch_twin.py --attention sdpa: ddp.cpp's GPU attention is fused too; torch.compile's rows come last: each compile can take minutes)"
find_torch && log "PyTorch $TORCH_V: $TORCH_PY" || log "no PyTorch 2.x found: its rows only check pytorch_twin.py's flags"
bench gpt-tiny-f32 45 --config gpt --warmup 5 --steps 30
torch_row gpt-tiny-f32 eager 60 --config gpt --attention sdpa --warmup 5 --steps 30
bench gpt-tiny-bf16 45 --config gpt --dtype bf16 --warmup 5 --steps 30
bench gpt2-small-bf16 90 --config gpt2-small --dtype bf16 --warmup 2 --steps 10 --batch-size 8
torch_row gpt2-small-bf16 eager 90 --config gpt2-small --dtype bf16 --attention sdpa --warmup 2 --steps 10 --batch-size 8
log "5. GEMMs, racecheck and synccheck, Gloo-staged ranks, train, unused parameters, bf16 all-reduce"
gemm bf16 8192
gemm f32 4096
gemm f32 4096 high   # TF32 tensor cores (core/float32_math.h)
for tool in racecheck synccheck; do sanitize "$tool"; done
two_ranks_gloo
train_mfu
bench gpt-tiny-f32-unused-params 45 --config gpt --mode unused --warmup 5 --steps 30
bench gpt2-small-bf16-bf16-allreduce 75 --config gpt2-small --dtype bf16 --allreduce-dtype bf16 --warmup 2 --steps 8 --batch-size 8
log "6. torch.compile beside the same rows"
torch_row gpt-tiny-f32 compile 120 --config gpt --attention sdpa --warmup 5 --steps 30
torch_row gpt2-small-bf16 compile 180 --config gpt2-small --dtype bf16 --attention sdpa --warmup 2 --steps 10 --batch-size 8
log "7. one step under Nsight Compute"
profile_step

log "done in $((SECONDS - T0)) s, $FAILS failed; logs in $WORK"
row "verdict" "$FAILS rows failed, $((SECONDS - T0)) s"
[ "$FAILS" -eq 0 ]
