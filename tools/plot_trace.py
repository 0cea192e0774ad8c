#!/usr/bin/env python3
"""plot_trace.py TRACE.json [MORE.json ...] OUT.png [--iteration N] [--align common|rank] - draws one training
step of a ddp.cpp Chrome trace as a timeline picture: per rank a compute lane (data, forward, backward with the
exposed communication marked on it, clip_grad_norm_, optimizer, zero_grad; gradient-ready ticks) and a comm
lane (each bucket's all-reduce, labelled with its index, bytes and parameter range where there is room;
buckets in flight at the same time on rows of their own).

--align common (the default): every rank on one time axis, rank 0's clock (the offsets train and bench_e2e
estimate at start-up, docs/trace.md "One clock"), starting when the first rank began the step, so a rank
waiting for a slower one shows as what it is. --align rank: each rank from its own step start (the shape of
each rank's step, without the waiting between ranks).
Input: a merged trace (train --trace writes one), or each rank's file (t.rank0.json t.rank1.json), which are
put on the common clock here as merge_chrome_traces does. A world of one has no comm lane (its all-reduces are
no-ops). The legend sits below the picture. Needs Debian's python3-matplotlib (tools/ddp bench installs it)."""
import json
import sys

from python_deps import require

require("matplotlib", "python3-matplotlib", "plot_trace.py")  # one line naming the interpreter, not a traceback
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Drawing order on the compute lane: later categories are drawn over earlier ones (exposed over backward).
COLORS = {"data": "#937860", "forward": "#4c72b0", "backward": "#55a868", "exposed": "#c44e52",
          "clip": "#da8bc3", "optimizer": "#8172b2", "zero_grad": "#8c8c8c", "gather wait": "#17becf",
          "comm": "#dd8452", "gather": "#1f9e89"}
LABELS = {"exposed": "exposed comm (waiting for buckets)", "clip": "clip_grad_norm_",
          "gather wait": "waiting for a parameter all-gather (ZeRO)", "gather": "parameter all-gather (ZeRO)",
          "comm": "gradient all-reduce / reduce-scatter"}
COMM_CATS = ("comm", "gather")  # drawn on the comm lane; everything else in COLORS on the compute lane
HATCHED = ("exposed", "gather wait")  # waiting, drawn over the compute it interrupts


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


def clock_of(other):
    """A per-rank file's clock sync (offset_us, error_bound_us, reference_start_unix_us), or None."""
    c = other.get("clock")
    if isinstance(c, dict) and all(k in c for k in ("offset_us", "error_bound_us", "reference_start_unix_us")):
        return c
    return None


def load(paths):
    """[(events, otherData)] of the files -> (events on one axis, otherData, clock description)."""
    docs = []
    for p in paths:
        d = json.load(open(p))
        docs.append((d["traceEvents"] if isinstance(d, dict) else d, d.get("otherData", {}) if isinstance(d, dict) else {}))
    if len(docs) == 1:
        events, other = docs[0]
        c = other.get("clock", {})
        if c.get("alignment") == "common":
            return events, other, f"rank 0's clock, offsets within ±{c.get('max_error_bound_us', 0):.0f} us"
        if c.get("alignment") == "wall" or "ranks" in other:
            return events, other, "wall clocks (no clock sync recorded)"
        return events, other, "one rank"
    clocks = [clock_of(o) for _, o in docs]
    common = all(clocks) and len({c["reference_start_unix_us"] for c in clocks}) == 1
    starts = [o.get("start_unix_us", 0) for _, o in docs]
    events, ranks, world = [], [], None
    for (evs, o), c, start in zip(docs, clocks, starts):
        shift = c["offset_us"] if common else start - min(starts)
        for e in evs:
            if "ts" in e:
                e = dict(e, ts=e["ts"] + shift)
            events.append(e)
        ranks.append(o.get("rank"))
        world = o.get("world_size", world)
    other = {"ranks": ranks, "world_size": world}
    bound = max(c["error_bound_us"] for c in clocks) if common else None
    return events, other, (f"rank 0's clock, offsets within ±{bound:.0f} us" if common
                           else "wall clocks (no clock sync recorded)")


def human_bytes(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def bucket_label(e, width_ms, span_ms, fig_w_in):
    """The longest label of the bucket that fits its bar: index, bytes and parameter range; index; nothing."""
    a = e.get("args", {})
    chars = width_ms / span_ms * fig_w_in * 72 / 4.2  # about 4.2 points per character at font size 6-7
    full = f"b{a.get('bucket', '?')}"
    choices = [full]
    if "bytes" in a:
        choices.insert(0, f"{full} {human_bytes(a['bytes'])}")
    if "first_param" in a:
        rng = a["first_param"] if a.get("first_param") == a.get("last_param") else \
            f"{a['first_param']}..{a.get('last_param', '')}"
        choices.insert(0, f"{choices[0]} {rng}")
    for text in choices:
        if len(text) + 1 <= chars:
            return text
    return None


def main():
    args = sys.argv[1:]

    def option(flag):
        """The value after `flag` (removed from args), or None."""
        if flag not in args:
            return None
        i = args.index(flag)
        if i + 1 >= len(args):
            sys.exit(f"plot_trace.py: {flag} needs a value (see the usage: plot_trace.py --help)")
        value = args[i + 1]
        del args[i:i + 2]
        return value

    want, align = option("--iteration"), option("--align") or "common"
    if want is not None:
        if not want.lstrip("-").isdigit():
            sys.exit(f"plot_trace.py: --iteration {want}: give an iteration number (train's step, from 1)")
        want = int(want)
    if align not in ("common", "rank"):
        sys.exit(f"plot_trace.py: --align {align}: give 'common' (one clock, the default) or 'rank'")
    if "--help" in args or "-h" in args:
        print(__doc__)
        return
    if len(args) < 2:
        sys.exit(__doc__)
    paths, out = args[:-1], args[-1]
    events, other, clock_text = load(paths)
    name = paths[0] if len(paths) == 1 else " + ".join(paths)
    iters = [e for e in events if e.get("cat") == "iteration" and e.get("ph") == "X"]
    if not iters:
        sys.exit(f"{name}: no iteration markers (was it written by train/bench_e2e with --trace?)")
    ids = sorted({e["args"]["iteration"] for e in iters})
    it = want if want is not None else ids[len(ids) // 2]
    windows = {e["pid"]: (e["ts"], e["ts"] + e["dur"]) for e in iters if e["args"]["iteration"] == it}
    if not windows:
        sys.exit(f"{name}: no iteration {it}; the trace has iterations {ids[0]}..{ids[-1]}")
    ranks = sorted(windows)
    # A world of one (recorded by the writer; older traces: one rank and no sign of more) has no comm lane.
    world = other.get("world_size") or len(other.get("ranks", [])) or (1 if len(ranks) == 1 else len(ranks))
    show_comm = world > 1
    common = align == "common"
    if common:  # one origin for all ranks: the first rank's start of the step
        origin = {r: min(w[0] for w in windows.values()) for r in ranks}
        span_ms = (max(w[1] for w in windows.values()) - min(w[0] for w in windows.values())) / 1e3
    else:
        origin = {r: windows[r][0] for r in ranks}
        span_ms = max(t1 - t0 for t0, t1 in windows.values()) / 1e3
    lane_h = 0.9
    fig_w = 12
    fig_h = 1.8 + (1.1 if show_comm else 0.6) * len(ranks)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    yticks, ylabels = [], []
    order = {c: k for k, c in enumerate(COLORS)}
    for k, r in enumerate(ranks):
        t0, t1 = windows[r]
        o = origin[r]
        base = (len(ranks) - 1 - k) * (2.5 if show_comm else 1.4)
        compute_y = base + (1.1 if show_comm else 0)
        mine = [e for e in events if e.get("pid") == r and e.get("ph") in ("X", "i") and t0 <= e["ts"] <= t1]
        comm, compute = [], []
        for e in mine:
            cat = e.get("cat")
            if e["ph"] == "X" and cat in COMM_CATS:
                comm.append((e["ts"], e["ts"] + e["dur"], e))
            elif e["ph"] == "X" and cat in COLORS:
                compute.append(e)
            elif e["ph"] == "i" and e.get("name", "").startswith("ready "):
                x = (e["ts"] - o) / 1e3
                ax.plot([x, x], [compute_y, compute_y + lane_h], color="black", linewidth=0.4)
        for e in sorted(compute, key=lambda e: order[e["cat"]]):
            exposed = e["cat"] in HATCHED
            ax.broken_barh([((e["ts"] - o) / 1e3, e["dur"] / 1e3)],
                           (compute_y + (0.15 * lane_h if exposed else 0), lane_h * (0.7 if exposed else 1)),
                           color=COLORS[e["cat"]], hatch="////" if exposed else None, edgecolor="white",
                           linewidth=0)
        if common:  # where this rank's step begins and ends on the common axis
            for t in (t0, t1):
                x = (t - o) / 1e3
                ax.plot([x, x], [base - 0.05, compute_y + lane_h + 0.05], color="#444444", linewidth=0.8,
                        linestyle=":")
        if show_comm:
            placed, nrows = rows_for(comm)
            h = lane_h / nrows
            for row, e in placed:
                y = base + lane_h - (row + 1) * h
                x, w = (e["ts"] - o) / 1e3, e["dur"] / 1e3
                ax.broken_barh([(x, w)], (y + 0.05 * h, 0.9 * h), color=COLORS[e["cat"]], edgecolor="white",
                               linewidth=0.5)
                label = bucket_label(e, w, span_ms, fig_w)
                if label:
                    ax.text(x, y + 0.5 * h, " " + label, fontsize=7 if nrows < 3 else 6, va="center",
                            clip_on=True)
            yticks.append(base + lane_h / 2)
            ylabels.append(f"rank {r} comm" + (f" ({nrows} in flight)" if nrows > 1 else ""))
        yticks.append(compute_y + lane_h / 2)
        ylabels.append(f"rank {r} compute")
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels)
    ax.set_xlabel("ms since the first rank began the step (one clock for all ranks)" if common
                  else "ms since each rank began its step")
    ax.set_xlim(-0.01 * span_ms, 1.01 * span_ms)
    present = {e.get("cat") for e in events if e.get("ph") == "X"}
    shown = [c for c in COLORS if c in present and (show_comm or c not in COMM_CATS)]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[c], hatch="////" if c in HATCHED else None)
               for c in shown]
    handles.append(plt.Line2D([0], [0], color="black", linewidth=0.8))
    names = [LABELS.get(c, c) for c in shown] + ["gradient ready"]
    if common:
        handles.append(plt.Line2D([0], [0], color="#444444", linewidth=0.8, linestyle=":"))
        names.append("rank's step begin/end")
    fig.legend(handles, names, loc="lower center", fontsize=8, ncol=min(len(handles), 6), frameon=False)
    title = f"{name}: iteration {it}"
    if not show_comm:
        title += " (world of one: no communication)"
    elif common:
        title += f"\n{clock_text}"
    else:
        title += " (each rank from its own step start)"
    ax.set_title(title, fontsize=10)
    legend_rows = (len(handles) + 5) // 6
    fig.tight_layout(rect=(0, 0.07 * legend_rows * 4.0 / fig_h, 1, 1))
    fig.savefig(out, dpi=110)
    print(f"wrote {out} (iteration {it}, ranks {ranks}, {'common clock' if common else 'per-rank alignment'})")


if __name__ == "__main__":
    main()
