#!/usr/bin/env python3
"""vscopy_medians.py BENCH_MICRO_OPS [RUNS] [-- extra bench_micro_ops flags] - the kernels-against-copy table of
docs/benchmarks.md: runs `BENCH_MICRO_OPS --benchmark_filter=Kernel_VsCopy --benchmark_min_time=0.1` RUNS times
back to back (default 3), reads the "CPU kernels on float32 arrays" table each run prints (kernel, size,
threads, ms, GB/s, copy GB/s, vs copy), and prints one markdown row per kernel: the medians over the runs of the
ms and of the ratio (kernel GB/s / copy GB/s measured in the same loop), per size and thread count, ratios below
0.5 in bold, then each ratio's spread over the runs. Extra flags after `--` replace the default flags (e.g.
`-- --benchmark_filter='Kernel_VsCopy/1/' --benchmark_min_time=0.01`). Set OPENBLAS_CORETYPE as `tools/ddp bench`
does for figures comparable with the page."""
import statistics
import subprocess
import sys

TABLE_TITLE = "CPU kernels on float32 arrays"


def parse_table(text):
    """The kernel rows of one run: {(kernel, size, threads): (ms, ratio)}, in the order printed."""
    rows, inside = {}, False
    for line in text.splitlines():
        if line.startswith(TABLE_TITLE):
            inside = True
            continue
        if not inside:
            continue
        fields = line.split()
        if not fields or fields[0] == "kernel":
            if not fields:
                inside = False
            continue
        if len(fields) < 7:
            inside = False
            continue
        # the kernel's name has blanks; the last six fields are size, threads, ms, GB/s, copy GB/s, vs copy
        name = " ".join(fields[:-6])
        size, threads, ms, ratio = fields[-6], fields[-5], float(fields[-4]), float(fields[-1])
        rows[(name, size, threads)] = (ms, ratio)
    return rows


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    binary = argv[1]
    rest = argv[2:]
    runs = 3
    if rest and rest[0] != "--":
        if not rest[0].isdigit() or int(rest[0]) < 1:
            print(f"vscopy_medians: RUNS must be a positive integer, got '{rest[0]}'", file=sys.stderr)
            return 2
        runs, rest = int(rest[0]), rest[1:]
    flags = ["--benchmark_filter=Kernel_VsCopy", "--benchmark_min_time=0.1"]
    if rest and rest[0] == "--":
        flags = rest[1:]
    all_runs = []
    for i in range(runs):
        try:
            out = subprocess.run([binary] + flags, check=True, capture_output=True, text=True).stdout
        except FileNotFoundError:
            print(f"vscopy_medians: {binary} does not exist; build it: cmake --build BUILD --target bench_micro_ops",
                  file=sys.stderr)
            return 1
        except subprocess.CalledProcessError as e:
            print(e.stdout + e.stderr, file=sys.stderr)
            print(f"vscopy_medians: run {i + 1} of {binary} failed with exit code {e.returncode} (above)",
                  file=sys.stderr)
            return 1
        rows = parse_table(out)
        if not rows:
            print(f"vscopy_medians: run {i + 1} printed no '{TABLE_TITLE}' table: does the filter select "
                  f"Kernel_VsCopy? flags: {' '.join(flags)}", file=sys.stderr)
            return 1
        all_runs.append(rows)

    keys = list(all_runs[0])
    kernels = list(dict.fromkeys(k[0] for k in keys))
    columns = list(dict.fromkeys((k[1], k[2]) for k in keys))
    header = " | ".join(f"{size}, {threads} thread{'s' if threads != '1' else ''}" for size, threads in columns)
    print(f"medians of {runs} run(s) of {binary} {' '.join(flags)} (ms / kernel GB/s over copy GB/s)\n")
    print(f"| kernel | {header} |")
    print("|---|" + "---:|" * len(columns))
    spreads = []
    for kernel in kernels:
        cells = []
        for size, threads in columns:
            samples = [r[(kernel, size, threads)] for r in all_runs if (kernel, size, threads) in r]
            if not samples:
                cells.append("-")
                continue
            ms = statistics.median(s[0] for s in samples)
            ratio = statistics.median(s[1] for s in samples)
            text = f"{ratio:.2f}"
            cells.append(f"{ms:.3f} / " + (f"**{text}**" if ratio < 0.5 else text))
            spreads.append(f"{kernel} {size} {threads}t: " + " ".join(f"{s[1]:.2f}" for s in samples))
        print(f"| {kernel} | " + " | ".join(cells) + " |")
    print("\nratios of each run:")
    for line in spreads:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
