"""test_errors.py - bad input and broken peers end in a Python exception on every live rank, never a hang:
each case runs 2 ranks with a 4 s collective timeout, and the harness kills a rank that is still running 60 s on.

  wrong dtype on one rank, wrong shape on one rank: every rank raises DistBackendError naming the collective
      (the ranks compare their calls on every collective), at once;
  a dtype the backend does not move (uint32) on one rank: that rank raises ValueError naming the collective
      and the dtypes it moves; the other raises DistBackendError when its timeout ends, naming the missing rank;
  a dead peer (os._exit before the collective): the live rank raises within the timeout, naming the peer;
  a stopped peer (SIGSTOP): the live rank raises when the timeout ends, naming the peer;
  an unsupported collective (send/recv): RuntimeError naming it;
  a collective's own timeout (AllreduceOptions.timeout, 1 s under the group's 4 s) while the peer never calls:
      raised at 1 s, naming the timeout and the rank;
  an abort (the backend's abort(), as torch.distributed's _abort_process_group calls it) while rank 0 waits in
      an all-reduce its peer never calls: the Work raises within a second, saying it was aborted (when the
      collectives run on the caller, DDP_TORCH_COLLECTIVES, another thread aborts while the call blocks);
  the flight record: with only PyTorch's TORCH_FR_DUMP_TEMP_FILE set, both ranks of the wrong-dtype case write
      flight.rank<R>.json beside it, with the failed allreduce.

    python test_errors.py     # one line per case; exits 1 when a rank hung or an exception lacked its words
"""
import datetime
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

TIMEOUT_S = 4


def body(rank, world, store, case):
    harness.init("ddpcpp", rank, world, store, timeout_s=TIMEOUT_S)
    t0 = time.monotonic()
    try:
        if case == "wrong_dtype":
            dist.all_reduce(torch.ones(8, dtype=torch.float32 if rank == 0 else torch.float64))
        elif case == "wrong_shape":
            dist.all_reduce(torch.ones(8 if rank == 0 else 9))
        elif case == "unmoved_dtype":
            dist.all_reduce(torch.ones(8, dtype=torch.float32 if rank == 0 else torch.uint32))
        elif case == "dead_peer":
            dist.all_reduce(torch.ones(4))
            if rank == 1:
                os._exit(3)
            time.sleep(0.2)
            dist.all_reduce(torch.ones(4))
        elif case == "stopped_peer":
            dist.all_reduce(torch.ones(4))
            if rank == 1:
                os.kill(os.getpid(), signal.SIGSTOP)
            dist.all_reduce(torch.ones(4))
        elif case == "unsupported":
            if rank == 0:
                dist.send(torch.ones(2), 1)
            else:
                dist.recv(torch.ones(2), 0)
        elif case == "call_timeout":
            if rank == 1:
                time.sleep(2.5)  # never calls the all-reduce; alive until rank 0 is through
                return ("no error", time.monotonic() - t0)
            opts = dist.AllreduceOptions()
            opts.timeout = datetime.timedelta(seconds=1)  # the group's is TIMEOUT_S
            t0 = time.monotonic()
            dist.group.WORLD.allreduce([torch.ones(4)], opts).wait()
        elif case == "aborted":
            if rank == 1:
                time.sleep(1.5)  # never calls the all-reduce; alive until rank 0 is through
                return ("no error", time.monotonic() - t0)
            backend = dist.group.WORLD._get_backend(torch.device("cpu"))
            if backend.collectives_run_on() == "caller":
                # The all-reduce runs inside the call: another thread aborts while this one is blocked there.
                aborter = threading.Timer(0.3, backend.abort)
                aborter.start()
                t0 = time.monotonic() + 0.3
                work = dist.all_reduce(torch.ones(4), async_op=True)
                aborter.join()
            else:
                work = dist.all_reduce(torch.ones(4), async_op=True)
                time.sleep(0.3)
                t0 = time.monotonic()
                backend.abort()
            work.wait()
        return ("no error", time.monotonic() - t0)
    except Exception as e:  # noqa: BLE001
        return (f"{type(e).__name__}: {e}", time.monotonic() - t0)


# Per case: (rank, words its message must hold, the longest it may take in seconds).
EXPECT = {
    "wrong_dtype": [(0, ["DistBackendError", "allreduce"], 3), (1, ["DistBackendError", "allreduce"], 3)],
    "wrong_shape": [(0, ["DistBackendError", "allreduce"], 3), (1, ["DistBackendError", "allreduce"], 3)],
    "unmoved_dtype": [(0, ["DistBackendError", "allreduce", "rank 1"], TIMEOUT_S + 5),
                      (1, ["ValueError", "allreduce", "uint32", "float32"], 3)],
    "dead_peer": [(0, ["DistBackendError", "allreduce", "rank 1"], 3)],
    "stopped_peer": [(0, ["DistBackendError", "allreduce", "rank 1"], TIMEOUT_S + 5)],
    "unsupported": [(0, ["send", "ddpcpp"], 3), (1, ["recv", "ddpcpp"], 3)],
    "call_timeout": [(0, ["DistBackendError", "allreduce", "timeout 1000 ms", "rank(s) 1"], 2.5)],
    "aborted": [(0, ["allreduce", "torch.distributed aborted the process group"], 1)],
}


def main():
    failed = False
    fr_dir = tempfile.mkdtemp(prefix="ddpcpp_fr_")
    for case, expect in EXPECT.items():
        # The flight record goes beside PyTorch's own dump file when only TORCH_FR_DUMP_TEMP_FILE is set.
        os.environ.pop("DDP_FLIGHT_RECORDER_DIR", None)
        if case == "wrong_dtype":
            os.environ["TORCH_FR_DUMP_TEMP_FILE"] = os.path.join(fr_dir, "nccl_trace_rank_")
        else:
            os.environ.pop("TORCH_FR_DUMP_TEMP_FILE", None)
        results = harness.run_ranks(body, world=2, timeout_s=60, args=(case,), wait_for=[r for r, _, _ in expect])
        for rank, words, limit in expect:
            status, value = results[rank]
            if status != "ok":
                print(f"FAIL {case}: rank {rank} {status}: {value}")
                failed = True
                continue
            text, took = value
            missing = [w for w in words if w not in text]
            ok = not missing and took <= limit
            failed |= not ok
            first = text.splitlines()[0] if text else ""
            print(f"{'ok  ' if ok else 'FAIL'} {case}: rank {rank} raised in {took:.2f} s: {first[:300]}"
                  + (f"  [missing words: {missing}]" if missing else "") + (f"  [over {limit} s]" if took > limit else ""))
        if case in ("dead_peer", "stopped_peer"):
            print(f"     {case}: rank 1 {results[1][0]} (killed by the harness when stopped)")
    for r in (0, 1):
        path = os.path.join(fr_dir, f"flight.rank{r}.json")
        text = open(path).read() if os.path.exists(path) else ""
        ok = '"failed"' in text and "allreduce" in text
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} flight record of the wrong_dtype case, rank {r}: "
              f"{path if text else 'missing'}{'' if ok else ' (no failed allreduce in it)'}")
    shutil.rmtree(fr_dir, ignore_errors=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
