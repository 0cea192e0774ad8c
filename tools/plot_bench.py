#!/usr/bin/env python3
"""plot_bench.py - summary table and plots of a tools/bench.sh run (JSON lines written by bench_e2e,
bench_allreduce and bucket_sim --validate-json).

    python3 tools/plot_bench.py runs/bench-DATE.json --table          # text summary (standard library only)
    python3 tools/plot_bench.py runs/bench-DATE.json --plots runs/     # PNGs (needs python3-matplotlib)

Plots: <prefix>-sweep.png (per configuration, world 2: measured step time with its p10-p90 spread and exposed
communication against the bucket cap, and the simulator's prediction when present) and <prefix>-scaling.png
(throughput against world size, ddp, nosync, nooverlap and unused, with the ideal for the cores in use: one
rank already runs several BLAS threads). Legends sit below the panels; the sweep's scale follows the medians
(whiskers cut by it are labelled). Installs nothing: tools/ddp installs python3-matplotlib.
"""
import argparse
import json
import os
import sys


def load(path, program="plot_bench"):
    """The JSON lines of `path`; a line that is not JSON ends the program, named `program`, with its number."""
    recs = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{program}: {path} line {n} is not JSON ({e}); expected one record a line")
    return recs


METRICS = ("step_s", "forward_s", "backward_s", "backward_compute_s", "communication_s", "exposed_communication_s",
           "optimizer_s", "samples_per_s", "tokens_per_s", "tflops_per_rank")


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def merge_repeats(e2e):
    """Runs of the same (config, world, mode, cap) from several passes -> one record of medians of each
    statistic, in first-seen order; 'runs' counts them."""
    groups, order = {}, []
    for r in e2e:
        key = (r["config"], r["world"], r["mode"], r["bucket_cap_mb"])
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(r)
    out = []
    for key in order:
        runs = groups[key]
        m = dict(runs[-1])
        m["runs"] = len(runs)
        for k in METRICS:
            if k in m:
                m[k] = {s: median([r[k][s] for r in runs]) for s in m[k]}
        out.append(m)
    return out


def rate_key(r):
    return "tokens_per_s" if "tokens_per_s" in r else "samples_per_s"


def table(recs):
    e2e = merge_repeats([r for r in recs if r.get("kind") == "e2e"])
    if not e2e:
        print("plot_bench: no bench_e2e records")
        return
    hdr = (f"{'config':6} {'world':>5} {'mode':10} {'cap_MB':>7} {'bkts':>4} {'runs':>4} {'step_ms':>9} {'p10':>8} {'p90':>8} "
           f"{'fwd_ms':>8} {'bwd_ms':>8} {'comm_ms':>8} {'exposed':>8} {'opt_ms':>7} {'rate/s':>10} {'GF/s':>6}")
    print(hdr)
    print("-" * len(hdr))
    for r in e2e:
        s = r["step_s"]
        unit = "tok" if rate_key(r) == "tokens_per_s" else "smp"
        print(f"{r['config']:6} {r['world']:5d} {r['mode']:10} {r['bucket_cap_mb']:7.3g} {r.get('buckets', 0):4d} "
              f"{r['runs']:4d} "
              f"{s['median'] * 1e3:9.2f} {s['p10'] * 1e3:8.2f} {s['p90'] * 1e3:8.2f} "
              f"{r['forward_s']['median'] * 1e3:8.2f} {r['backward_compute_s']['median'] * 1e3:8.2f} "
              f"{r['communication_s']['median'] * 1e3:8.2f} {r['exposed_communication_s']['median'] * 1e3:8.2f} "
              f"{r['optimizer_s']['median'] * 1e3:7.2f} {r[rate_key(r)]['median']:8.0f}{unit} "
              f"{r['tflops_per_rank']['median'] * 1e3:6.2f}")
    nets = [r for r in recs if r.get("kind") == "allreduce"]
    for n in nets:
        fit = n.get("fit")
        if fit:
            print(f"all-reduce ({n['backend']}, world {n['world']}): ring fit alpha {fit['alpha_s'] * 1e3:.3f} ms, "
                  f"B {fit['bandwidth_bytes_per_s'] / 1e9:.3f} GB/s")


def plots(recs, out_dir, prefix):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench: matplotlib is not importable (apt-get install python3-matplotlib); no plots")
        return []
    e2e = merge_repeats([r for r in recs if r.get("kind") == "e2e"])
    preds = [r for r in recs if r.get("kind") == "sim_validation"]
    configs = sorted({r["config"] for r in e2e})
    written = []

    # Bucket sweep: world 2, mode ddp, step and exposed communication against the cap.
    fig, axes = plt.subplots(1, max(len(configs), 1), figsize=(6 * max(len(configs), 1), 4.5), squeeze=False)
    for ax, cfg in zip(axes[0], configs):
        pts = {}
        for r in e2e:
            if r["config"] == cfg and r["world"] == 2 and r["mode"] == "ddp":
                pts[r["bucket_cap_mb"]] = r  # the last record per cap
        if not pts:
            ax.set_title(f"{cfg}: no world-2 ddp records")
            continue
        caps = sorted(pts)
        med = [pts[c]["step_s"]["median"] * 1e3 for c in caps]
        lo = [m - pts[c]["step_s"]["p10"] * 1e3 for m, c in zip(med, caps)]
        hi = [pts[c]["step_s"]["p90"] * 1e3 - m for m, c in zip(med, caps)]
        ax.errorbar(caps, med, yerr=[lo, hi], marker="o", capsize=3, label="step, measured (p10-p90)")
        tops = list(med)
        ax.plot(caps, [pts[c]["exposed_communication_s"]["median"] * 1e3 for c in caps], marker="s",
                label="exposed communication, measured")
        pp = {p["bucket_cap_mb"]: p for p in preds if p["config"] == cfg and p["world"] == 2 and p["mode"] == "ddp"}
        if pp:
            pc = sorted(pp)
            ax.plot(pc, [pp[c]["predicted_s"] * 1e3 for c in pc], "k--", marker="x", label="step, simulator")
            ax.plot(pc, [pp[c]["exposed_predicted_s"] * 1e3 for c in pc], ":", color="gray", marker="x",
                    label="exposed, simulator")
        if pp:
            tops += [pp[c]["predicted_s"] * 1e3 for c in pc]
        ns = [r for r in e2e if r["config"] == cfg and r["world"] == 2 and r["mode"] == "nosync"]
        if ns:
            ax.axhline(ns[-1]["step_s"]["median"] * 1e3, color="green", lw=0.8, label="step without communication")
            tops.append(ns[-1]["step_s"]["median"] * 1e3)
        # The scale follows the medians: one noisy run's p90 whisker must not flatten the panel. Whiskers cut
        # by the top are marked with their value.
        top = 1.35 * max(tops)
        ax.set_ylim(0, top)
        for c, m, h in zip(caps, med, hi):
            if m + h > top:
                ax.annotate(f"p90 {m + h:.0f} ms", (c, top), xytext=(6, -12), textcoords="offset points",
                            ha="left", fontsize=7, arrowprops=dict(arrowstyle="->", lw=0.6))
        ax.set_xscale("log")
        ax.set_xlabel("bucket cap (MiB)")
        ax.set_ylabel("ms")
        ax.set_title(f"{cfg}: 2 ranks, bucket sweep")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    fig.tight_layout()
    path = os.path.join(out_dir, f"{prefix}-sweep.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    # Scaling: global throughput against world size (cap 25), ddp vs nosync vs nooverlap.
    fig, axes = plt.subplots(1, max(len(configs), 1), figsize=(6 * max(len(configs), 1), 4.5), squeeze=False)
    for ax, cfg in zip(axes[0], configs):
        for mode, style in (("nosync", "g--"), ("ddp", "b-"), ("nooverlap", "r-."), ("unused", "m:")):
            pts = {}
            for r in e2e:
                if r["config"] == cfg and r["mode"] == mode and r["bucket_cap_mb"] == 25:
                    pts[r["world"]] = r
            if not pts:
                continue
            ws = sorted(pts)
            ax.plot(ws, [pts[w][rate_key(pts[w])]["median"] for w in ws], style, marker="o", label=mode)
        # The ideal is not "linear from 1 rank": one rank already uses several BLAS threads. Perfect scaling
        # keeps the throughput per core in use, so the ideal at world w is world 1's rate x (cores used at w /
        # cores used at 1), cores = ranks x BLAS threads per rank (recorded by bench_e2e as "threads").
        cores = {r["world"]: r["world"] * r.get("threads", 1) for r in e2e if r["config"] == cfg}
        one = [r for r in e2e if r["config"] == cfg and r["world"] == 1 and r["mode"] == "nosync"]
        if one and 1 in cores:
            base = one[-1][rate_key(one[-1])]["median"]
            ws = sorted(cores)
            ax.plot(ws, [base * cores[w] / cores[1] for w in ws], color="gray", lw=0.8,
                    label="ideal: world 1's rate per core x cores used")
        unit = "tokens/s" if cfg != "mlp" else "samples/s"
        threads = {r["world"]: r.get("threads", "?") for r in e2e if r["config"] == cfg}
        ws = sorted(threads)
        ax.set_xticks(ws)
        ax.set_xticklabels([f"{w} rank{'s' if w > 1 else ''}\n{threads[w]} BLAS thread{'s' if threads[w] != 1 else ''}"
                            f"{' each' if w > 1 else ''}" for w in ws])
        ax.set_ylabel(f"{unit}, all ranks")
        ax.set_ylim(bottom=0)
        ncores = {r.get("machine", {}).get("cores") for r in e2e if r["config"] == cfg} - {None}
        ax.set_title(f"{cfg}: throughput vs world size" + (f" ({ncores.pop()} cores)" if len(ncores) == 1 else ""))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    fig.tight_layout()
    path = os.path.join(out_dir, f"{prefix}-scaling.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", help="JSON lines file from tools/bench.sh")
    ap.add_argument("--table", action="store_true", help="print the summary table")
    ap.add_argument("--plots", metavar="DIR", help="write PNG plots into DIR")
    ap.add_argument("--prefix", help="file name prefix of the plots (default: the JSON file's stem)")
    a = ap.parse_args()
    if not os.path.exists(a.json):
        sys.exit(f"plot_bench: {a.json} does not exist")
    recs = load(a.json)
    if a.table or not a.plots:
        table(recs)
    if a.plots:
        prefix = a.prefix or os.path.splitext(os.path.basename(a.json))[0]
        for p in plots(recs, a.plots, prefix):
            print(f"plot_bench: wrote {p}")


if __name__ == "__main__":
    main()
