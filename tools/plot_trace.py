#!/usr/bin/env python3
"""plot_trace.py TRACE.json OUT.png [--iteration N] - draws one training step of a ddp.cpp Chrome trace as a
timeline picture: per rank a compute lane (forward, backward, optimizer; gradient-ready ticks) and a comm lane
(each bucket's all-reduce; buckets in flight at the same time on rows of their own), so the overlap of
communication with backward is visible at a glance. A world of one has no comm lane (its all-reduces are
no-ops). The legend sits below the picture. Needs Debian's python3-matplotlib (tools/ddp bench installs it)."""
import json
import sys

from python_deps import require

require("matplotlib", "python3-matplotlib", "plot_trace.py")  # one line naming the interpreter, not a traceback
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"forward": "#4c72b0", "backward": "#55a868", "optimizer": "#8172b2", "comm": "#dd8452"}


def rows_for(spans):
    """Greedy rows so that no two spans on one row overlap: [(begin, end, event)] -> [(row, event)], rows."""
    ends, placed = [], []
    for b, e, ev in sorted(spans, key=lambda s: (s[0], -s[1])):
        for k, end in enumerate(ends):
            if end <= b:
                ends[k] = e
                break
        else:
            k = len(ends)
            ends.append(e)
        placed.append((k, ev))
    return placed, max(1, len(ends))


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    path, out = args[0], args[1]
    want = int(args[args.index("--iteration") + 1]) if "--iteration" in args else None
    data = json.load(open(path))
    events = data["traceEvents"] if isinstance(data, dict) else data
    other = data.get("otherData", {}) if isinstance(data, dict) else {}
    iters = [e for e in events if e.get("cat") == "iteration" and e.get("ph") == "X"]
    if not iters:
        sys.exit(f"{path}: no iteration markers (was it written by train/bench_e2e with --trace?)")
    ids = sorted({e["args"]["iteration"] for e in iters})
    it = want if want is not None else ids[len(ids) // 2]
    windows = {e["pid"]: (e["ts"], e["ts"] + e["dur"]) for e in iters if e["args"]["iteration"] == it}
    if not windows:
        sys.exit(f"{path}: no iteration {it}; the trace has iterations {ids[0]}..{ids[-1]}")
    ranks = sorted(windows)
    # A world of one (recorded by the writer; older traces: one rank and no sign of more) has no comm lane.
    world = other.get("world_size") or len(other.get("ranks", [])) or (1 if len(ranks) == 1 else len(ranks))
    show_comm = world > 1
    lane_h = 0.9
    fig_h = 1.6 + (1.1 if show_comm else 0.6) * len(ranks)
    fig, ax = plt.subplots(figsize=(12, fig_h))
    yticks, ylabels = [], []
    span_ms = max(t1 - t0 for t0, t1 in windows.values()) / 1e3
    for k, r in enumerate(ranks):
        t0, t1 = windows[r]
        base = (len(ranks) - 1 - k) * (2.5 if show_comm else 1.4)
        compute_y = base + (1.1 if show_comm else 0)
        mine = [e for e in events if e.get("pid") == r and e.get("ph") in ("X", "i") and t0 <= e["ts"] <= t1]
        comm = []
        for e in mine:
            cat = e.get("cat")
            if e["ph"] == "X" and cat == "comm":
                comm.append((e["ts"], e["ts"] + e["dur"], e))
            elif e["ph"] == "X" and cat in COLORS:
                ax.broken_barh([((e["ts"] - t0) / 1e3, e["dur"] / 1e3)], (compute_y, lane_h), color=COLORS[cat])
            elif e["ph"] == "i" and e.get("name", "").startswith("ready "):
                x = (e["ts"] - t0) / 1e3
                ax.plot([x, x], [compute_y, compute_y + lane_h], color="black", linewidth=0.4)
        if show_comm:
            placed, nrows = rows_for(comm)
            h = lane_h / nrows
            for row, e in placed:
                y = base + lane_h - (row + 1) * h
                x, w = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
                ax.broken_barh([(x, w)], (y + 0.05 * h, 0.9 * h), color=COLORS["comm"], edgecolor="white",
                               linewidth=0.5)
                if w > 0.025 * span_ms:  # label only bars wide enough to hold it
                    ax.text(x, y + 0.5 * h, f" b{e['args'].get('bucket', '?')}", fontsize=7 if nrows < 3 else 6,
                            va="center")
            yticks.append(base + lane_h / 2)
            ylabels.append(f"rank {r} comm" + (f" ({nrows} in flight)" if nrows > 1 else ""))
        yticks.append(compute_y + lane_h / 2)
        ylabels.append(f"rank {r} compute")
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels)
    ax.set_xlabel("ms since the step began")
    ax.set_xlim(-0.01 * span_ms, 1.01 * span_ms)
    shown = [c for c in COLORS if show_comm or c != "comm"]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[c]) for c in shown]
    handles.append(plt.Line2D([0], [0], color="black", linewidth=0.8))
    fig.legend(handles, shown + ["gradient ready"], loc="lower center", fontsize=8, ncol=len(handles),
               frameon=False)
    title = f"{path}: iteration {it}"
    if not show_comm:
        title += " (world of one: no communication)"
    ax.set_title(title)
    fig.tight_layout(rect=(0, 0.07 * 4.0 / fig_h, 1, 1))
    fig.savefig(out, dpi=110)
    print(f"wrote {out} (iteration {it}, ranks {ranks})")


if __name__ == "__main__":
    main()
