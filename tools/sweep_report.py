#!/usr/bin/env python3
"""sweep_report.py - the tables and plots of a tools/sweep.sh run (`tools/ddp bench --sweep`).

    python3 tools/sweep_report.py OUT/sweep.json --calibration runs/calibration/allreduce-shm-HOST-w2.json --out OUT

Reads the bench_e2e records (kind e2e) and the simulator's rows (kind sim_validation, bucket_sim --validate
--validate-json) of one sweep. Per point (config, world, mode, bucket cap, first-bucket cap) the runs of all
rounds are merged: the measured step is the median of the runs' medians, p10-p90 the medians of the runs' p10
and p90 (the spread inside a run), "rounds" the lowest and highest run median (the drift between rounds).
Prints, and writes to OUT/sweep-table.md, one table per configuration: setting, buckets, measured step,
spread, the simulator's predicted step with the bench_allreduce calibration of the backend in use and its
error, the in-training calibration's prediction beside it, then the measured and predicted best bucket cap and
whether they are within one sweep step. Draws OUT/sweep-<config>.png: per setting the measured step as
stacked phases (forward, backward compute, exposed communication, optimizer, the rest) with the p10-p90
whisker and the simulator's predicted steps on the same axes. Standard library only for the table; the plots
need matplotlib (python3-matplotlib) and are skipped with a note without it.
"""
import argparse
import json
import os
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_bench  # noqa: E402  (tools/plot_bench.py: the JSON-lines reader and median, shared)


def load(path):
    return plot_bench.load(path, "sweep_report")


median = plot_bench.median


def key_of(r):
    return (r["config"], r["world"], r["mode"], float(r["bucket_cap_mb"]), float(r.get("first_bucket_mb", 1.0)))


PHASES = (("forward_s", "forward + loss", "#4C72B0"),
          ("backward_compute_s", "backward compute", "#DD8452"),
          ("exposed_communication_s", "exposed communication", "#C44E52"),
          ("optimizer_s", "optimizer + zero_grad", "#55A868"))


def merge(e2e):
    """Runs of one point -> {key: point}, first-seen order kept in the returned list of keys."""
    groups, order = {}, []
    for r in e2e:
        k = key_of(r)
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append(r)
    points = {}
    for k, runs in groups.items():
        meds = [r["step_s"]["median"] for r in runs]
        p = {"runs": len(runs), "buckets": runs[-1].get("buckets", 0), "backend": runs[-1].get("backend", "?"),
             "step": median(meds), "p10": median([r["step_s"]["p10"] for r in runs]),
             "p90": median([r["step_s"]["p90"] for r in runs]), "round_lo": min(meds), "round_hi": max(meds),
             "steps": runs[-1].get("steps", 0)}
        for name, _, _ in PHASES:
            p[name] = median([r[name]["median"] for r in runs])
        points[k] = p
    return points, order


def label_of(k, first_bucket_group=False):
    """The setting's name; first_bucket_group: it stands among the first-bucket caps (named by its first cap)."""
    config, world, mode, cap, first = k
    if first_bucket_group and world == 2 and mode == "ddp":
        return f"first bucket {first:g} MiB, cap {cap:g} MiB"
    if mode == "nosync":
        return f"world {world}, no communication (nosync)"
    if world == 1:
        return f"world 1, {mode}, cap {cap:g} MiB"
    if mode == "nooverlap":
        return f"overlap off (nooverlap), cap {cap:g} MiB"
    if first != 1.0:
        return f"first bucket {first:g} MiB, cap {cap:g} MiB"
    return f"cap {cap:g} MiB"


def tick_of(k):
    """The setting's short name under a bar (two lines)."""
    config, world, mode, cap, first = k
    if mode == "nosync":
        return f"world {world}\nnosync"
    if world == 1:
        return f"world 1\n{mode}, cap {cap:g}"
    if mode == "nooverlap":
        return f"overlap off\ncap {cap:g}"
    return f"first bucket {first:g}\ncap {cap:g}"


def sweep_keys(points, config):
    """The bucket-cap sweep of a configuration: ddp at world 2 with the default first bucket, by cap."""
    return sorted((k for k in points if k[0] == config and k[1] == 2 and k[2] == "ddp" and k[4] == 1.0),
                  key=lambda k: k[3])


def other_keys(points, config):
    """First-bucket caps (ddp world 2 at the same cap), overlap off, nosync, world 1: in that order."""
    ks = [k for k in points if k[0] == config]
    first = sorted((k for k in ks if k[1] == 2 and k[2] == "ddp" and k[3] == 25.0), key=lambda k: k[4])
    rest = ([k for k in ks if k[1] == 2 and k[2] == "nooverlap"] + [k for k in ks if k[1] == 2 and k[2] == "nosync"] +
            sorted((k for k in ks if k[1] == 1), key=lambda k: k[2]))
    return first + rest


def fmt_err(pred, meas):
    return f"{(pred - meas) / meas * 100:+.1f}" if pred is not None else "-"


def best_index(values):
    return min(range(len(values)), key=lambda i: values[i]) if values else None


def report(recs, calibration, load_text, rounds, notes=()):
    e2e = [r for r in recs if r.get("kind") == "e2e"]
    if not e2e:
        sys.exit("sweep_report: no bench_e2e records (kind e2e) in the input")
    points, _ = merge(e2e)
    sims = {key_of(r): r for r in recs if r.get("kind") == "sim_validation"}
    lines = []
    cal_fit = calibration.get("fit", {}) if calibration else {}
    lines.append(f"Calibration: {calibration.get('_path', '?')} (bench_allreduce, backend "
                 f"{calibration.get('backend', '?')}, world {calibration.get('world', '?')}): ring, alpha "
                 f"{cal_fit.get('alpha_s', 0) * 1e3:.4g} ms, B {cal_fit.get('bandwidth_bytes_per_s', 0) / 1e9:.4g} GB/s"
                 if calibration else "Calibration: none given")
    machine = e2e[-1].get("machine", {})
    lines.append(f"Machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, host {machine.get('host', '?')}; "
                 f"backend {e2e[-1].get('backend', '?')}; {rounds} round(s); load {load_text}")
    in_training_note = None
    summaries = {}
    for config in sorted({k[0] for k in points}):
        sk, ok = sweep_keys(points, config), other_keys(points, config)
        lines.append("")
        p0 = points[(sk or ok)[0]]
        lines.append(f"### {config}: {p0['steps']} measured steps per run")
        lines.append("")
        lines.append("| setting | buckets | runs | measured ms | p10-p90 ms | rounds ms | predicted ms | error % "
                     "| in-training ms | error % |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for k in sk + [k for k in ok if k not in sk]:
            p, s = points[k], sims.get(k)
            iso = s["isolated_predicted_s"] if s else None
            trained = s["predicted_s"] if s and s.get("network", "").startswith("in-training") else None
            if s and trained is not None:
                in_training_note = s["network"]
            pred_text = f"{iso * 1e3:.2f}" if iso is not None else ("input" if k[2] == "nosync" else "-")
            buckets = "-" if k[2] == "nosync" else p["buckets"]
            lines.append(f"| {label_of(k, k not in sk)} | {buckets} | {p['runs']} | {p['step'] * 1e3:.2f} | "
                         f"{p['p10'] * 1e3:.2f}-{p['p90'] * 1e3:.2f} | {p['round_lo'] * 1e3:.2f}-{p['round_hi'] * 1e3:.2f} | "
                         f"{pred_text} | {fmt_err(iso, p['step'])} | "
                         f"{f'{trained * 1e3:.2f}' if trained is not None else '-'} | {fmt_err(trained, p['step'])} |")
        lines.append("")
        caps = [k[3] for k in sk]
        meas = [points[k]["step"] for k in sk]
        summary = {"caps": caps}
        mb = best_index(meas)
        if mb is None:
            lines.append("No bucket-cap sweep points (ddp, world 2, first bucket 1 MiB) for this configuration.")
            summaries[config] = summary
            continue
        text = (f"Measured best cap: {caps[mb]:g} MiB ({meas[mb] * 1e3:.2f} ms, {points[sk[mb]]['buckets']} buckets).")
        for name, field in (("bench_allreduce calibration", "isolated_predicted_s"), ("in-training calibration", "predicted_s")):
            preds = [sims[k][field] if k in sims else None for k in sk]
            if field == "predicted_s":
                preds = [v if k in sims and sims[k].get("network", "").startswith("in-training") else None
                         for v, k in zip(preds, sk)]
            if any(v is None for v in preds):
                continue
            pb = best_index(preds)
            # Caps whose bucket layouts are the same get the same prediction to the last bit: the simulator
            # calls them equally good, so its best is that whole set, and the distance is to the nearest.
            tied = [i for i, v in enumerate(preds) if abs(v - preds[pb]) <= 1e-9 * preds[pb]]
            apart = min(abs(i - mb) for i in tied)
            same_layout = points[sk[pb]]["buckets"] == points[sk[mb]]["buckets"]
            tie_text = (f", tied with {', '.join(f'{caps[i]:g}' for i in tied if i != pb)} MiB (the same buckets)"
                        if len(tied) > 1 else "")
            text += (f" Predicted best cap ({name}): {caps[pb]:g} MiB{tie_text} ({preds[pb] * 1e3:.2f} ms "
                     f"predicted); {'within' if apart <= 1 else 'not within'} one sweep step of the measured best "
                     f"({apart} step{'s' if apart != 1 else ''} apart)"
                     f"{'; the same bucket count' if same_layout else '; a different bucket count'}.")
            summary[field] = {"best_cap": caps[pb], "tied_caps": [caps[i] for i in tied], "steps_apart": apart,
                              "same_buckets": same_layout}
            worst = max(abs(p - m) / m * 100 for p, m in zip(preds, meas))
            text += f" Worst |error| over the cap sweep: {worst:.1f}%."
        summary["measured_best_cap"] = caps[mb]
        summaries[config] = summary
        lines.append(text)
    if in_training_note:
        lines.append("")
        lines.append(f"In-training calibration (fitted to this sweep's nooverlap runs): {in_training_note}.")
    for note in notes:
        lines.append("")
        lines.append(f"Simulator note: {note}")
    return points, sims, "\n".join(lines) + "\n", summaries


def cut_texts(fig):
    """The texts of a drawn figure (titles, legend, labels, ticks) that run past the canvas edge, by name."""
    import matplotlib.text
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    w, h = fig.bbox.width, fig.bbox.height
    cut = []
    for t in fig.findobj(matplotlib.text.Text):
        if not t.get_visible() or not t.get_text().strip():
            continue
        b = t.get_window_extent(renderer)
        if b.x0 < -0.5 or b.y0 < -0.5 or b.x1 > w + 0.5 or b.y1 > h + 0.5:
            cut.append(t.get_text().split("\n")[0][:60])
    return cut


def plot(points, sims, out_dir, calibration_text):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        print("sweep_report: matplotlib is not importable (apt-get install python3-matplotlib); no plots")
        return []
    written = []
    for config in sorted({k[0] for k in points}):
        panels = [(f"{config}: bucket cap sweep, world 2, first bucket 1 MiB", sweep_keys(points, config),
                   "bucket cap (MiB)"),
                  (f"{config}: first bucket, overlap, world size", other_keys(points, config),
                   "setting (caps in MiB)")]
        panels = [p for p in panels if p[1]]
        # One panel above the other, each as wide as its bars need (a bar about 0.85 inch), on a shared width.
        width = max(7.5, 0.85 * max(len(p[1]) for p in panels) + 1.5)
        fig, axes = plt.subplots(len(panels), 1, figsize=(width, 4.0 * len(panels) + 1.6), squeeze=False)
        handles = {}
        for ax, (title, keys, xlabel) in zip(axes[:, 0], panels):
            xs = list(range(len(keys)))
            tops = []
            for x, k in zip(xs, keys):
                p = points[k]
                bottom = 0.0
                for name, label, color in PHASES:
                    v = p[name] * 1e3
                    h = ax.bar(x, v, 0.62, bottom=bottom, color=color, edgecolor="white", linewidth=0.4)
                    handles.setdefault(label, h)
                    bottom += v
                rest = max(0.0, p["step"] * 1e3 - bottom)
                h = ax.bar(x, rest, 0.62, bottom=bottom, color="#BBBBBB", edgecolor="white", linewidth=0.4)
                handles.setdefault("rest of the step (loop, waiting for the slower rank)", h)
                tops.append(max(bottom + rest, p["step"] * 1e3))
                h = ax.errorbar(x, p["step"] * 1e3, yerr=[[p["step"] * 1e3 - p["p10"] * 1e3],
                                                          [p["p90"] * 1e3 - p["step"] * 1e3]],
                                fmt="o", color="black", ms=3, capsize=3, lw=0.8)
                handles.setdefault("measured step: median, p10-p90", h)
                s = sims.get(k)
                if s:
                    v = s["isolated_predicted_s"] * 1e3
                    ax.plot([x - 0.31, x + 0.31], [v, v], color="black", lw=2.4, zorder=5)
                    handles.setdefault("simulator: predicted step (bench_allreduce calibration)",
                                       Line2D([], [], color="black", lw=2.4))
                    tops.append(v)
                    if s.get("network", "").startswith("in-training"):
                        v2 = s["predicted_s"] * 1e3
                        h = ax.scatter([x], [v2], marker="D", s=28, facecolors="none", edgecolors="#7030A0",
                                       linewidths=1.2, zorder=6)
                        handles.setdefault("simulator: predicted step (in-training calibration)", h)
                        tops.append(v2)
            top = 1.25 * max(tops)
            ax.set_ylim(0, top)
            for x, k in zip(xs, keys):
                hi = points[k]["p90"] * 1e3
                if hi > top:
                    ax.annotate(f"p90 {hi:.0f}", (x, top), xytext=(0, -10), textcoords="offset points", ha="center",
                                fontsize=7)
            ticks = []
            for k in keys:
                p, s = points[k], sims.get(k)
                first = f"{k[3]:g}" if xlabel.startswith("bucket") else tick_of(k)
                err = f"\nerr {(s['isolated_predicted_s'] - p['step']) / p['step'] * 100:+.0f}%" if s else ""
                bkts = "" if k[2] == "nosync" else f"\n{p['buckets']} bkt{'s' if p['buckets'] != 1 else ''}"
                ticks.append(f"{first}{bkts}{err}")
            ax.set_xticks(xs)
            ax.set_xticklabels(ticks, fontsize=8)
            ax.set_xlim(-0.6, len(keys) - 0.4)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("step time (ms)")
            ax.set_title(title, fontsize=10)
            ax.grid(True, axis="y", alpha=0.3)
        # The title's calibration line wrapped to the canvas (about 0.6 em per character at 9 pt), the legend
        # in as many columns as fit its width, and the panels in what is left between them.
        chars = int(width * 72 / (9 * 0.6))
        fig.suptitle(f"{config}: measured step breakdown (stacked medians) and the simulator's prediction\n"
                     + "\n".join(textwrap.wrap(calibration_text, chars)), fontsize=9, y=0.995, va="top")
        order = [l for _, l, _ in PHASES] + ["rest of the step (loop, waiting for the slower rank)",
                                             "measured step: median, p10-p90",
                                             "simulator: predicted step (bench_allreduce calibration)",
                                             "simulator: predicted step (in-training calibration)"]
        labels = [l for l in order if l in handles]
        for ncol in (3, 2, 1):
            legend = fig.legend([handles[l] for l in labels], labels, loc="lower center", ncol=ncol, fontsize=8,
                                frameon=False, bbox_to_anchor=(0.5, 0.005))
            fig.canvas.draw()
            if legend.get_window_extent().width <= 0.98 * fig.bbox.width or ncol == 1:
                break
            legend.remove()
        legend_top = legend.get_window_extent(fig.canvas.get_renderer()).y1 / fig.bbox.height
        fig.tight_layout(rect=(0, legend_top + 0.01, 1, 1))  # tight_layout keeps clear of the suptitle itself
        path = os.path.join(out_dir, f"sweep-{config}.png")
        cut = cut_texts(fig)
        if cut:  # a picture whose title or legend runs off the canvas is an error, not a picture
            sys.exit(f"sweep_report: {path}: text cut at the canvas edge: " + "; ".join(repr(c) for c in cut))
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", help="sweep.json of tools/sweep.sh (JSON lines)")
    ap.add_argument("--calibration", help="the bench_allreduce --json calibration the simulator used")
    ap.add_argument("--out", required=True, help="folder for sweep-table.md and the PNGs")
    ap.add_argument("--load", default="not recorded", help="the machine's load, for the table's header")
    ap.add_argument("--rounds", default="?", help="rounds of the sweep, for the table's header")
    ap.add_argument("--simulator-log", help="bucket_sim --validate's output; its notes (e.g. why no in-training "
                    "calibration) go under the tables")
    a = ap.parse_args()
    if not os.path.exists(a.json):
        sys.exit(f"sweep_report: {a.json} does not exist")
    calibration = None
    if a.calibration:
        cal = [r for r in load(a.calibration) if r.get("kind") == "allreduce" and "fit" in r]
        if not cal:
            sys.exit(f"sweep_report: {a.calibration} has no all-reduce record with a fit")
        calibration = dict(cal[-1], _path=a.calibration)
    notes = []
    if a.simulator_log and os.path.exists(a.simulator_log):
        with open(a.simulator_log) as f:
            notes = [l.strip() for l in f if l.startswith("bucket_sim: no in-training network")]
    points, sims, text, _ = report(load(a.json), calibration, a.load, a.rounds, notes)
    os.makedirs(a.out, exist_ok=True)
    table_path = os.path.join(a.out, "sweep-table.md")
    with open(table_path, "w") as f:
        f.write(text)
    print(text, end="")
    print(f"sweep_report: wrote {table_path}")
    cal_text = text.splitlines()[0]
    for p in plot(points, sims, a.out, cal_text):
        print(f"sweep_report: wrote {p}")


if __name__ == "__main__":
    main()
