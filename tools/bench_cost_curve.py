#!/usr/bin/python3
"""bench_cost_curve.py - how the cost grows (issue 29): ddp.cpp against PyTorch over model size, parameter count
and DDP's own overhead, interleaved in one run, against this machine's sgemm peak measured in the same run.

  tools/bench_cost_curve.py [--build build] [--out DIR] [--passes 3]   # the full run (about 30-40 min here)
  tools/bench_cost_curve.py --quick                                    # 1 pass, 4 points (a few minutes)
  tools/bench_cost_curve.py --smoke --out /tmp/x                       # seconds: ctest's check that it runs

What runs (each a separate process; per pass every point runs every implementation back to back, the order of
the implementations rotated from point to point, so that the machine's drift hits them alike):
  implementations: ddp.cpp (bench_e2e, shm group under ddprun), PyTorch 1.13 (Debian's /usr/bin/python3) and
    PyTorch 2.x eager (the venv of tools/setup_torch2.sh) when importable, all through bench/pytorch_twin.py
    with the same model, data, optimizer and threads per rank (world 1: 2 threads; world 2: 1 thread a rank;
    PyTorch's world 2 is gloo on loopback, the only CPU backend it has).
  (a) model size: gpt widths x depths x contexts (1024 tokens per rank: batch 16 at context 64, 4 at 256), mlp
      hidden 1024 and 4096; world 1 compute-only (nosync) and world 2 nosync and DDP. Per point: step time, GFLOP/s
      per rank (bench_e2e's FLOP count, the same for every implementation) and the fraction of the sgemm peak.
  (b) parameter count at fixed bytes: bench_e2e --config many (16, 256, 4096 tensors holding 8 MiB), world 2,
      (DDP step - compute-only step) / tensors.
  (c) DDP overhead at world 2: DDP step / nosync step, ddp.cpp in the default mode and gradient_as_bucket_view,
      PyTorch in its default mode.
  peak: bench_micro_ops Gemm_Peak (a 1024^3 sgemm on OpenBLAS and oneDNN, the best of them) at 1 and 2 threads,
    and at 1 thread in two processes at once (what each rank of a world-2 run has), before and after the runs;
    the best of the two is the peak. World 1 points are held against the 2-thread peak, world 2 points against
    the 1-thread-in-two-processes peak.

Figures: the median over passes of each run's median step ("spread": min-max over the passes; with one pass the
run's p10-p90). Writes DIR/records.jsonl (one line per run), DIR/tables.md and, when matplotlib imports,
DIR/cost-size.png and DIR/cost-ddp.png. --nice N runs it in its own session with autogroup nice N (root for
N < 0), as tools/bench.sh's BENCH_NICE. Numbers: docs/benchmarks.md, "How the cost grows".
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TWIN = os.path.join(ROOT, "bench", "pytorch_twin.py")


def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()


def load_str():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# ---- points ----------------------------------------------------------------------------------------------------
def gpt(width, depth, context):
    return {"name": f"gpt w{width} d{depth} c{context}", "kind": "gpt", "width": width, "depth": depth,
            "context": context, "batch": 1024 // context}


def mlp(hidden):
    return {"name": f"mlp h{hidden}", "kind": "mlp", "hidden": hidden}


def many(n):
    return {"name": f"many {n}", "kind": "many", "tensors": n}


def e2e_args(p):
    if p["kind"] == "gpt":
        return ["--config", "gpt", "--gpt-width", str(p["width"]), "--gpt-depth", str(p["depth"]),
                "--gpt-context", str(p["context"]), "--batch-size", str(p["batch"])]
    if p["kind"] == "mlp":
        return ["--config", "mlp", "--mlp-hidden", str(p["hidden"])]
    return ["--config", "many", "--param-tensors", str(p["tensors"])]


def est_flops(p):  # forward + backward FLOPs per rank step, to choose the step count (bench_e2e's rule)
    if p["kind"] == "gpt":
        C, L, T, V = p["width"], p["depth"], p["context"], 256
        return (2 * (L * 12 * C * C + C * V) + L * 2 * T * C) * 3 * 1024
    if p["kind"] == "mlp":
        h = p["hidden"]
        return 6 * (784 * h + h * h + 10 * h) * 64
    return 0


# ---- running -----------------------------------------------------------------------------------------------------
class Runner:
    def __init__(self, a):
        self.a = a
        self.build = os.path.abspath(a.build)
        self.env = dict(os.environ)
        self.env.setdefault("OPENBLAS_CORETYPE", coretype())
        self.env.pop("DDP_FLIGHT_RECORDER_DIR", None)
        self.warmup = 1 if a.smoke else 2  # untimed steps first (the first rebuilds the buckets)

    def run(self, cmd, what):
        for attempt in (1, 2):  # one retry, as tools/bench.sh (PyTorch 2.x's gloo DDP once died at exit)
            r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=900)
            if r.returncode == 0:
                return r
            print(f"bench_cost_curve: {what} failed (exit {r.returncode}, attempt {attempt}):\n"
                  f"{(r.stdout + r.stderr)[-1500:]}", file=sys.stderr)
        sys.exit(f"bench_cost_curve: {what} failed twice: {' '.join(cmd)}")

    def round_trip_ns(self):
        """The first two CPUs' cache-line round trip now (bench_machine --round-trip-only), or None: on a VM the host
        may move the vCPUs apart during the run, and 2-thread steps follow it (docs/benchmarks.md, "The machine")."""
        r = subprocess.run([f"{self.build}/bin/bench_machine", "--round-trip-only"], env=self.env,
                           capture_output=True, text=True)
        m = re.search(r"round trip (\d+) ns", r.stdout)
        return int(m.group(1)) if m else None

    def ddpcpp(self, p, world, mode, view, steps):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            jf = f.name
        os.unlink(jf)
        threads = max(1, (os.cpu_count() or 2) // world)
        cmd = [f"{self.build}/bin/bench_e2e", *e2e_args(p), "--mode", mode, "--steps", str(steps),
               "--warmup", str(self.warmup),
               "--threads", str(threads), "--backend", "shm", "--json", jf]
        if view:
            cmd.append("--gradient-as-bucket-view")
        if world > 1:
            cmd = [f"{self.build}/bin/ddprun", "--standalone", "--nproc-per-node", str(world),
                   "--local-ranks-filter", "0", *cmd]
        self.run(cmd, f"bench_e2e {p['name']} world {world} {mode}")
        with open(jf) as f:
            rec = json.loads(f.read().strip().splitlines()[-1])
        os.unlink(jf)
        s = rec["step_s"]
        return {"step": s["median"], "p10": s["p10"], "p90": s["p90"], "flops": rec["flops_per_rank_step"],
                "params": rec["params"], "tensors": rec.get("param_tensors"), "threads": threads}

    def twin(self, py, p, world, mode, view, steps):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            jf = f.name
        os.unlink(jf)
        threads = max(1, (os.cpu_count() or 2) // world)
        if p["kind"] == "gpt":
            size = ["--config", "gpt", "--gpt-width", str(p["width"]), "--gpt-depth", str(p["depth"]),
                    "--gpt-context", str(p["context"]), "--batch-size", str(p["batch"])]
        elif p["kind"] == "mlp":
            size = ["--config", "mlp", "--mlp-hidden", str(p["hidden"])]
        else:
            size = ["--config", "many", "--param-tensors", str(p["tensors"])]
        cmd = [py, TWIN, *size, "--mode", mode, "--world", str(world), "--threads", str(threads),
               "--steps", str(steps), "--warmup", str(self.warmup), "--json", jf]
        if view:
            cmd.append("--gradient-as-bucket-view")
        self.run(cmd, f"pytorch_twin ({py}) {p['name']} world {world} {mode}")
        with open(jf) as f:
            rec = json.loads(f.read().strip().splitlines()[-1])
        os.unlink(jf)
        return {"step": rec["step_s"], "p10": rec.get("step_p10_s", rec["step_s"]),
                "p90": rec.get("step_p90_s", rec["step_s"]), "torch": rec["torch"], "threads": threads}


def coretype():
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags"))
    except (OSError, StopIteration):
        return ""
    if all(f in flags for f in ("avx512bw", "avx512vl", "avx512dq")):
        return "SkylakeX"
    return "Haswell" if "avx2" in flags else ""


# torch's version from its torch/version.py, without importing torch (an import takes seconds here).
TORCH_VERSION = ("import importlib.util, os; s = importlib.util.find_spec('torch'); "
                 "g = {}; exec(open(os.path.join(s.submodule_search_locations[0], 'version.py')).read(), g); "
                 "print(g['__version__'])")


def torch_pythons(a):
    """(label, python) of each PyTorch found: Debian's 1.13 and the 2.x venv (--smoke: the first only)."""
    out = []
    if not a.no_torch and not a.no_torch1 and os.path.exists("/usr/bin/python3"):
        v = sh(f'/usr/bin/python3 -c "{TORCH_VERSION}" 2>/dev/null')
        if v:
            out.append((f"torch {v.split('+')[0]}", "/usr/bin/python3"))
    if not a.no_torch and not a.no_torch2 and not (a.smoke and out):
        py = sh(f"{HERE}/setup_torch2.sh --path 2>/dev/null")
        if py:
            v = sh(f'{py} -c "{TORCH_VERSION}" 2>/dev/null')
            if v:
                out.append((f"torch {v.split('+')[0]}", py))
    return out


def measure_peak(runner, min_time, reps):
    """GFLOP/s of a 1024^3 sgemm, best of OpenBLAS and oneDNN: 1 thread, 2 threads, 1 thread x 2 processes."""
    exe = f"{runner.build}/bin/bench_micro_ops"

    tmp = tempfile.mkdtemp(prefix="cost_peak_")

    def cmd(t, i=0):  # the program prints its own table on stdout; the JSON goes to a file
        return [exe, f"--blas_threads={t}", "--benchmark_filter=Gemm_Peak", f"--benchmark_min_time={min_time}",
                f"--benchmark_repetitions={reps}", f"--benchmark_out={tmp}/{t}-{i}.json",
                "--benchmark_out_format=json"]

    def best(t, i=0):
        with open(f"{tmp}/{t}-{i}.json") as f:
            bench = json.load(f)["benchmarks"]
        vals = [b["GFLOP/s"] for b in bench if "GFLOP/s" in b and b.get("run_type") == "iteration"
                and not b.get("error_occurred")]
        return max(vals)  # the counter counts GFLOP, as a rate: GFLOP/s

    out = {}
    for t in (1, 2):
        env = dict(runner.env, OMP_NUM_THREADS=str(t))
        r = subprocess.run(cmd(t), env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            sys.exit(f"bench_cost_curve: {' '.join(cmd(t))} failed:\n{r.stderr[-1500:]}")
        out[f"{t}t"] = best(t)
    env = dict(runner.env, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen(cmd(1, i), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in (1, 2)]
    for pr in procs:
        pr.communicate(timeout=600)
    out["1t x2"] = statistics.mean(best(1, i) for i in (1, 2))
    subprocess.run(["rm", "-rf", tmp])
    return out


# ---- summary -----------------------------------------------------------------------------------------------------
def med(xs):
    return statistics.median(xs) if xs else float("nan")


def summarize(records, key):
    rs = [r for r in records if all(r[k] == v for k, v in key.items())]
    if not rs:
        return None
    steps = [r["step"] for r in rs]
    m = med(steps)
    lo, hi = (min(steps), max(steps)) if len(rs) > 1 else (rs[0]["p10"], rs[0]["p90"])
    return {"step": m, "lo": lo, "hi": hi, "n": len(rs), "by_pass": {r["pass"]: r["step"] for r in rs}, "r0": rs[0]}


def fmt_ms(s):
    if s is None:
        return "-"
    return f"{s['step'] * 1e3:.2f} ({s['lo'] * 1e3:.2f}-{s['hi'] * 1e3:.2f})"


def tables(records, size_points, many_points, impls, peak, meta):
    L = []
    L.append(f"Run: {meta['date_start']} to {meta['date_end']}, {meta['machine']}; load (1/5/15 min) "
             f"{meta['load_start']} at the start, {meta['load_end']} at the end; {meta['passes']} pass(es); "
             f"OPENBLAS_CORETYPE={meta['coretype']}; implementations: {', '.join(i for i, _ in impls)}.")
    L.append(f"Command: `{meta['command']}`")
    trips = sorted({(r["pass"], r["point"]): r.get("round_trip_ns") for r in records
                    if r.get("round_trip_ns") is not None}.values())
    if trips:
        far = sum(1 for t in trips if t > 200)
        L.append("")
        L.append(f"The first two CPUs' cache-line round trip, measured before each point of each pass: {trips[0]}-"
                 f"{trips[-1]} ns; {far} of {len(trips)} probes above 200 ns (the cores then share no cache, and "
                 f"2-thread steps lose most of the second thread's gain: docs/benchmarks.md, \"The machine\"; each "
                 f"record carries its probe as round_trip_ns).")
    L.append("")
    L.append("sgemm peak (1024^3, best of OpenBLAS and oneDNN, GFLOP/s; before / after the runs): " + "; ".join(
        f"{k} {peak['before'][k]:.1f} / {peak['after'][k]:.1f}" for k in peak["before"]) +
        f". Peak used: world 1 (2 threads) {peak['best']['2t']:.1f}, world 2 (1 thread a rank, two processes) "
        f"{peak['best']['1t x2']:.1f}.")
    L.append("")
    names = [i for i, _ in impls]
    # (a) size
    L.append("#### Model size: step time (ms, median over passes, spread), GFLOP/s per rank, % of the sgemm peak")
    L.append("")
    hdr = "| point | params | GFLOP/rank step | world | mode | ddp.cpp ms | GFLOP/s | % peak |"
    sep = "|---|---:|---:|---:|---|---:|---:|---:|"
    for n in names:
        hdr += f" {n} ms | {n} / ddp.cpp |"
        sep += "---:|---:|"
    L += [hdr, sep]
    for p in size_points:
        for world, mode in ((1, "nosync"), (2, "nosync"), (2, "ddp")):
            ours = summarize(records, {"point": p["name"], "impl": "ddp.cpp", "world": world, "mode": mode,
                                       "view": False})
            if ours is None:
                continue
            fl = ours["r0"]["flops"]
            gf = fl / ours["step"] / 1e9
            pk = peak["best"]["2t" if world == 1 else "1t x2"]
            row = (f"| {p['name']} | {ours['r0']['params'] / 1e6:.2f}M | {fl / 1e9:.2f} | {world} | {mode} | "
                   f"{fmt_ms(ours)} | {gf:.1f} | {100 * gf / pk:.0f}% |")
            for n in names:
                t = summarize(records, {"point": p["name"], "impl": n, "world": world, "mode": mode, "view": False})
                row += f" {fmt_ms(t)} | {t['step'] / ours['step']:.2f}x |" if t else " - | - |"
            L.append(row)
    L.append("")
    L.append("`X / ddp.cpp` = that PyTorch's step over ddp.cpp's: ddp.cpp's speed as a multiple of it "
             "(the issue's target: >= 1.25 against 1.13, >= 1.0 against 2.x).")
    L.append("")
    # (b) parameters
    if many_points:
        L.append("#### Parameter count at fixed bytes (8 MiB in N tensors), world 2: (DDP step - compute-only step)")
        L.append("")
        hdr = "| tensors | impl | nosync ms | DDP ms | DDP - nosync ms | per tensor us (spread over passes) |"
        L += [hdr, "|---:|---|---:|---:|---:|---:|"]
        per = {}
        for p in many_points:
            for n in ["ddp.cpp"] + names:
                a = summarize(records, {"point": p["name"], "impl": n, "world": 2, "mode": "nosync", "view": False})
                b = summarize(records, {"point": p["name"], "impl": n, "world": 2, "mode": "ddp", "view": False})
                if not a or not b:
                    continue
                N = p["tensors"]
                d = b["step"] - a["step"]
                passes = [b["by_pass"][k] - a["by_pass"][k] for k in b["by_pass"] if k in a["by_pass"]]
                spread = f"{min(passes) / N * 1e6:.1f} to {max(passes) / N * 1e6:.1f}" if len(passes) > 1 else "-"
                per[(N, n)] = d / N
                L.append(f"| {N} | {n} | {fmt_ms(a)} | {fmt_ms(b)} | {d * 1e3:.2f} | {d / N * 1e6:.1f} ({spread}) |")
        L.append("")
        for n in names:
            Ns = sorted({N for (N, i) in per if i == n})
            if Ns:
                L.append(f"- Per tensor, ddp.cpp / {n}: " + ", ".join(
                    f"{N}: {per[(N, 'ddp.cpp')] / per[(N, n)]:.2f}" if per[(N, n)] > 0 else f"{N}: -" for N in Ns))
        ours = [per[(p["tensors"], "ddp.cpp")] for p in many_points if (p["tensors"], "ddp.cpp") in per]
        if ours and min(ours) > 0:
            L.append(f"- ddp.cpp per tensor, largest / smallest over the counts: {max(ours) / min(ours):.2f}x "
                     f"(at few tensors the 8 MiB all-reduce itself, not hidden, dominates the difference)")
        # The marginal cost of one more tensor between consecutive counts: the all-reduce's bytes cancel out.
        Ns = sorted({p["tensors"] for p in many_points})
        for lo_n, hi_n in zip(Ns, Ns[1:]):
            parts = []
            for n in ["ddp.cpp"] + names:
                if (lo_n, n) in per and (hi_n, n) in per:
                    parts.append(f"{n} {(per[(hi_n, n)] * hi_n - per[(lo_n, n)] * lo_n) / (hi_n - lo_n) * 1e6:.1f} us")
            L.append(f"- Marginal cost of a tensor from {lo_n} to {hi_n} tensors ((diff(hi) - diff(lo)) / "
                     f"{hi_n - lo_n}): " + ", ".join(parts))
        L.append("")
    # (c) overhead
    L.append("#### DDP overhead at world 2: DDP step / compute-only (nosync) step")
    L.append("")
    hdr = "| point | ddp.cpp nosync ms | ddp.cpp DDP ms | ratio | ddp.cpp view ms | ratio |"
    sep = "|---|---:|---:|---:|---:|---:|"
    for n in names:
        hdr += f" {n} ratio |"
        sep += "---:|"
    L += [hdr, sep]
    for p in size_points + many_points:
        a = summarize(records, {"point": p["name"], "impl": "ddp.cpp", "world": 2, "mode": "nosync", "view": False})
        b = summarize(records, {"point": p["name"], "impl": "ddp.cpp", "world": 2, "mode": "ddp", "view": False})
        v = summarize(records, {"point": p["name"], "impl": "ddp.cpp", "world": 2, "mode": "ddp", "view": True})
        if not a or not b:
            continue
        row = (f"| {p['name']} | {fmt_ms(a)} | {fmt_ms(b)} | {b['step'] / a['step']:.2f}x | {fmt_ms(v)} | "
               f"{(v['step'] / a['step']) if v else float('nan'):.2f}x |")
        for n in names:
            ta = summarize(records, {"point": p["name"], "impl": n, "world": 2, "mode": "nosync", "view": False})
            tb = summarize(records, {"point": p["name"], "impl": n, "world": 2, "mode": "ddp", "view": False})
            row += f" {tb['step'] / ta['step']:.2f}x |" if ta and tb else " - |"
        L.append(row)
    L.append("")
    return "\n".join(L)


def plots(records, size_points, many_points, impls, peak, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench_cost_curve: matplotlib not importable; no plots (apt-get install python3-matplotlib)")
        return []
    names = ["ddp.cpp"] + [i for i, _ in impls]
    marks = {"ddp.cpp": "o-"}
    files = []
    # x: the size points in order of their FLOPs per rank step, as categories (several have similar FLOPs).
    def flops_of(p):
        o = summarize(records, {"point": p["name"], "impl": "ddp.cpp", "world": 1, "mode": "nosync", "view": False})
        return o["r0"]["flops"] if o else est_flops(p)

    cats = sorted(size_points, key=flops_of)
    xt = [f"{p['name']}\n{flops_of(p) / 1e9:.1f} GFLOP" for p in cats]
    fig, axes = plt.subplots(1, 3, figsize=(19, 6))
    offsets = {n: (i - (len(names) - 1) / 2) * 0.12 for i, n in enumerate(names)}
    for ax, (world, mode, title) in zip(axes[:2], ((1, "nosync", "world 1, compute-only step, 2 threads"),
                                                  (2, "ddp", "world 2, DDP step, 1 thread per rank"))):
        pk = peak["best"]["2t" if world == 1 else "1t x2"]
        ax.plot(range(len(cats)), [flops_of(p) / 1e9 / pk * 1e3 for p in cats], "_", color="gray", ms=18, mew=2,
                label=f"at the sgemm peak ({pk:.0f} GFLOP/s)")
        for n in names:
            xs, ys, lo, hi = [], [], [], []
            for i, p in enumerate(cats):
                s = summarize(records, {"point": p["name"], "impl": n, "world": world, "mode": mode, "view": False})
                if s:
                    xs.append(i + offsets[n])
                    ys.append(s["step"] * 1e3)
                    lo.append(s["step"] * 1e3 - s["lo"] * 1e3)
                    hi.append(s["hi"] * 1e3 - s["step"] * 1e3)
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt=marks.get(n, "s").replace("-", ""), capsize=3, label=n)
        ax.set_yscale("log")
        ax.set_xticks(range(len(cats)))
        ax.set_xticklabels(xt, rotation=45, ha="right", fontsize=8)
        ax.set_xlabel("model (in order of GFLOP per rank step, forward + backward)")
        ax.set_ylabel("step time (ms, median over passes; bars: spread)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[2]
    for world, mode, style in ((1, "nosync", "o"), (2, "ddp", "s")):
        for n in names:
            if not (n == "ddp.cpp" or world == 1):
                continue
            xs, ys = [], []
            for i, p in enumerate(cats):
                s = summarize(records, {"point": p["name"], "impl": n, "world": world, "mode": mode, "view": False})
                if s:
                    pk = peak["best"]["2t" if world == 1 else "1t x2"]
                    xs.append(i + offsets[n] + (0.2 if world == 2 else 0))
                    ys.append(100 * flops_of(p) / s["step"] / 1e9 / pk)
            if xs:
                ax.plot(xs, ys, style, color=None if world == 1 else "tab:red",
                        label=f"{n}, world {world} {'compute-only' if mode == 'nosync' else 'DDP'}")
    ax.axhline(70, color="gray", ls=":", label="issue 29 target 70%")
    ax.set_ylim(0, 100)
    ax.set_xticks(range(len(cats)))
    ax.set_xticklabels(xt, rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("model (in order of GFLOP per rank step)")
    ax.set_ylabel("% of the measured sgemm peak (per rank)")
    ax.set_title("GFLOP/s per rank / sgemm peak at the same threads")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    f1 = os.path.join(out, "cost-size.png")
    fig.savefig(f1, dpi=90)
    plt.close(fig)
    files.append(f1)

    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    ax = axes[0]
    for n in names:
        xs, ys = [], []
        for p in many_points:
            a = summarize(records, {"point": p["name"], "impl": n, "world": 2, "mode": "nosync", "view": False})
            b = summarize(records, {"point": p["name"], "impl": n, "world": 2, "mode": "ddp", "view": False})
            if a and b:
                xs.append(p["tensors"])
                ys.append(max(1e-3, (b["step"] - a["step"]) / p["tensors"] * 1e6))
        if xs:
            ax.plot(xs, ys, marks.get(n, "s--"), label=n)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = [p["tensors"] for p in many_points]
    if ticks:
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.set_xlim(min(ticks) / 2, max(ticks) * 2)
    ax.set_xlabel("parameter tensors (8 MiB in all; a difference <= 0 is drawn at 0.001)")
    ax.set_ylabel("(DDP step - compute-only step) / tensors (us)")
    ax.set_title("DDP's cost per parameter tensor, world 2")
    ax.grid(True, which="both", alpha=0.3)
    if many_points:
        ax.legend(fontsize=8)
    ax = axes[1]
    pts = size_points + many_points
    labels, series = [], {f"{n}": [] for n in names}
    series["ddp.cpp view"] = []
    for p in pts:
        a = summarize(records, {"point": p["name"], "impl": "ddp.cpp", "world": 2, "mode": "nosync", "view": False})
        if not a:
            continue
        labels.append(p["name"])
        for n in names:
            ta = summarize(records, {"point": p["name"], "impl": n, "world": 2, "mode": "nosync", "view": False})
            tb = summarize(records, {"point": p["name"], "impl": n, "world": 2, "mode": "ddp", "view": False})
            series[n].append(tb["step"] / ta["step"] if ta and tb else float("nan"))
        v = summarize(records, {"point": p["name"], "impl": "ddp.cpp", "world": 2, "mode": "ddp", "view": True})
        series["ddp.cpp view"].append(v["step"] / a["step"] if v else float("nan"))
    keys = ["ddp.cpp", "ddp.cpp view"] + names[1:]
    w = 0.8 / len(keys)
    for k_i, k in enumerate(keys):
        ax.bar([i + k_i * w for i in range(len(labels))], series[k], w, label=k)
    ax.axhline(1.10, color="gray", ls=":", label="issue 29 target 1.10x")
    ax.axhline(1.0, color="black", lw=0.5)
    finite = [v for k in keys for v in series[k] if v == v]
    if finite:
        ax.set_ylim(min(0.8, min(finite) - 0.05), max(finite) + 0.1)
    ax.set_xticks([i + 0.4 - w / 2 for i in range(len(labels))])
    ax.set_xticklabels(labels, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("DDP step / compute-only step")
    ax.set_title("DDP overhead at world 2 (1 thread per rank)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    f2 = os.path.join(out, "cost-ddp.png")
    fig.savefig(f2, dpi=90)
    plt.close(fig)
    files.append(f2)
    return files


def point_from_name(name):
    """'gpt w512 d6 c64', 'mlp h4096', 'many 256' -> the point."""
    kind, rest = name.split(" ", 1)
    if kind == "many":
        return many(int(rest))
    if kind == "mlp":
        return mlp(int(rest[1:]))
    w, dd, c = (int(x[1:]) for x in rest.split())
    return gpt(w, dd, c)


def report_again(d):
    with open(os.path.join(d, "records.jsonl")) as f:
        records = [json.loads(l) for l in f if l.strip()]
    with open(os.path.join(d, "meta.json")) as f:
        m = json.load(f)
    points, seen = [], set()
    for r in records:
        if r["point"] not in seen:
            seen.add(r["point"])
            points.append(point_from_name(r["point"]))
    impls = []
    for r in records:
        if r["impl"] != "ddp.cpp" and r["impl"] not in [i for i, _ in impls]:
            impls.append((r["impl"], ""))
    size_points = [p for p in points if p["kind"] != "many"]
    many_points = [p for p in points if p["kind"] == "many"]
    text = tables(records, size_points, many_points, impls, m["peak"], m["meta"])
    with open(os.path.join(d, "tables.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    files = plots(records, size_points, many_points, impls, m["peak"], d)
    print("bench_cost_curve: wrote " + ", ".join([os.path.join(d, "tables.md")] + files))


# ---- main ----------------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default="")
    ap.add_argument("--passes", type=int, default=0, help="default 3 (--quick, --smoke: 1)")
    ap.add_argument("--quick", action="store_true", help="1 pass, fewer points, shorter runs (a few minutes)")
    ap.add_argument("--smoke", action="store_true", help="seconds: two tiny points, ddp.cpp and one PyTorch run")
    ap.add_argument("--run-seconds", type=float, default=0, help="measured time aimed at per run (default 1.0)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-torch2", action="store_true")
    ap.add_argument("--no-torch1", action="store_true", help="skip Debian's PyTorch 1.13 (2.x only)")
    ap.add_argument("--points", default="", help="these points instead, comma-separated names as in the tables "
                    "('gpt w512 d6 c64,mlp h4096,many 256')")
    ap.add_argument("--no-size", action="store_true", help="skip (a), the model-size points")
    ap.add_argument("--no-many", action="store_true", help="skip (b), the parameter-count points")
    ap.add_argument("--nice", type=int, default=None, help="own session with this autogroup nice (root for < 0)")
    ap.add_argument("--report", default="", metavar="DIR",
                    help="no runs: the tables and plots again from DIR's records.jsonl and meta.json")
    a = ap.parse_args()
    if a.report:
        report_again(a.report)
        return

    if a.nice is not None and not os.environ.get("COST_CURVE_OWN_SESSION"):
        env = dict(os.environ, COST_CURVE_OWN_SESSION="1")
        os.execvpe("setsid", ["setsid", "--wait", sys.executable, *sys.argv], env)
    if a.nice is not None:
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(a.nice))
        except OSError as e:
            print(f"bench_cost_curve: warning: autogroup nice {a.nice} not set ({e})", file=sys.stderr)

    mode_name = "smoke" if a.smoke else ("quick" if a.quick else "full")
    passes = a.passes or (1 if (a.quick or a.smoke) else 3)
    run_s = a.run_seconds or (0.1 if a.smoke else (0.4 if a.quick else 1.0))
    if a.smoke:
        size_points, many_points = [mlp(1024)], [many(16)]
    elif a.quick:
        size_points = [mlp(1024), gpt(128, 2, 64)]
        many_points = [many(16), many(4096)]
    else:
        # The grid is 3 widths x 2 depths x 2 contexts; on this 2-core machine the points with width 512
        # at depth 6 or context 256 take seconds a step (PyTorch more), so the grid is walked along each axis
        # from the two smaller widths instead: width (d2 c64), depth (d6 c64), context (d2 c256).
        size_points = [mlp(1024), mlp(4096), gpt(128, 2, 64), gpt(256, 2, 64), gpt(512, 2, 64), gpt(128, 6, 64),
                       gpt(256, 6, 64), gpt(128, 2, 256), gpt(256, 2, 256)]
        many_points = [many(16), many(256), many(4096)]
    if a.points:
        chosen = [point_from_name(n.strip()) for n in a.points.split(",") if n.strip()]
        size_points = [p for p in chosen if p["kind"] != "many"]
        many_points = [p for p in chosen if p["kind"] == "many"]
    if a.no_size:
        size_points = []
    if a.no_many:
        many_points = []

    out = a.out or os.path.join(ROOT, "runs", "cost-curve-" + time.strftime("%Y-%m-%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    runner = Runner(a)
    for prog in ("bench_e2e", "ddprun", "bench_micro_ops"):
        if not os.access(f"{runner.build}/bin/{prog}", os.X_OK):
            sys.exit(f"bench_cost_curve: {runner.build}/bin/{prog} is missing: cmake --build {a.build} --target {prog}")
    impls = torch_pythons(a)
    if a.smoke:
        impls = impls[:1]
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip() or "cpu"
    machine = f"{cpu}, {os.cpu_count()} cores, host {os.uname().nodename}"
    meta = {"date_start": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "load_start": load_str(),
            "uptime_start": sh("uptime"), "machine": machine, "passes": passes,
            "coretype": runner.env.get("OPENBLAS_CORETYPE", ""), "mode": mode_name,
            "command": " ".join(["tools/bench_cost_curve.py"] + sys.argv[1:])}
    print(f"bench_cost_curve ({mode_name}): {meta['date_start']}, {machine}; uptime: {meta['uptime_start']}")
    print(f"  implementations: ddp.cpp, " + ", ".join(f"{n} ({py})" for n, py in impls))
    print(f"  points: {', '.join(p['name'] for p in size_points + many_points)}; {passes} pass(es); out {out}")

    peak_args = (0.01, 1) if a.smoke else ((0.1, 2) if a.quick else (0.3, 3))
    peak = {"before": measure_peak(runner, *peak_args)}
    print("  sgemm peak before (GFLOP/s): " + ", ".join(f"{k} {v:.1f}" for k, v in peak["before"].items()))

    records = []
    rec_path = os.path.join(out, "records.jsonl")
    open(rec_path, "w").close()
    combos_size = [(1, "nosync", False), (2, "nosync", False), (2, "ddp", False), (2, "ddp", True)]
    combos_many = [(2, "nosync", False), (2, "ddp", False)] + ([] if a.smoke else [(2, "ddp", True)])
    k = 0
    for ps in range(1, passes + 1):
        for p in size_points + many_points:
            combos = combos_many if p["kind"] == "many" else combos_size
            all_impls = [("ddp.cpp", None)] + impls
            k += 1
            order = all_impls[k % len(all_impls):] + all_impls[:k % len(all_impls)]
            round_trip = runner.round_trip_ns()  # per point and pass: where the vCPUs were
            for world, mode, view in combos:
                fl = est_flops(p)
                rate = 60e9 if world == 1 else 35e9
                est = fl / rate if fl else (0.02 + 10e-6 * p["tensors"])  # many: 8 MiB streamed per add, per-op cost
                steps = int(min(80, max(3 if not a.smoke else 2, round(run_s / est))))
                if a.smoke:
                    steps = 2
                for name, py in order:
                    if view and name != "ddp.cpp":
                        continue  # PyTorch in its default mode only (the comparison is ddp.cpp's two modes)
                    if a.smoke and name != "ddp.cpp" and world != 1:
                        continue
                    t0 = time.time()
                    r = runner.ddpcpp(p, world, mode, view, steps) if py is None else runner.twin(py, p, world, mode,
                                                                                                view, steps)
                    r.update({"pass": ps, "point": p["name"], "impl": name, "world": world, "mode": mode,
                              "view": view, "steps": steps, "wall_s": time.time() - t0, "load": load_str(),
                              "round_trip_ns": round_trip})
                    records.append(r)
                    with open(rec_path, "a") as f:
                        f.write(json.dumps(r) + "\n")
                    print(f"  pass {ps} {p['name']:16} w{world} {mode:6}{' view' if view else '     '} {name:12} "
                          f"{r['step'] * 1e3:9.2f} ms (p10-p90 {r['p10'] * 1e3:.2f}-{r['p90'] * 1e3:.2f}), "
                          f"{steps} steps, {r['wall_s']:.1f} s", flush=True)

    peak["after"] = peak["before"] if a.smoke else measure_peak(runner, *peak_args)
    peak["best"] = {k2: max(peak["before"][k2], peak["after"][k2]) for k2 in peak["before"]}
    print("  sgemm peak after (GFLOP/s): " + ", ".join(f"{k2} {v:.1f}" for k2, v in peak["after"].items()))
    meta.update({"date_end": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "load_end": load_str(),
                 "uptime_end": sh("uptime")})
    text = tables(records, size_points, many_points, impls, peak, meta)
    with open(os.path.join(out, "tables.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump({"meta": meta, "peak": peak}, f, indent=1)
    print()
    print(text)
    files = plots(records, size_points, many_points, impls, peak, out)
    print(f"bench_cost_curve: uptime at the end: {meta['uptime_end']}")
    print(f"bench_cost_curve: wrote {rec_path}, {os.path.join(out, 'tables.md')}" +
          "".join(f", {f}" for f in files))
    if a.smoke:  # the ctest check: every artefact is there and the tables have their rows
        assert len(records) >= 7, records
        assert "#### Model size" in text and "#### Parameter count" in text and "#### DDP overhead" in text, text
        assert "| mlp h1024 |" in text and "| 16 | ddp.cpp |" in text, text
        try:
            import matplotlib  # noqa: F401
            for f in ("cost-size.png", "cost-ddp.png"):
                assert os.path.getsize(os.path.join(out, f)) > 10000, f
        except ImportError:
            pass
        print("bench_cost_curve: smoke check passed")


if __name__ == "__main__":
    main()
