"""The plots of BENCHMARKS.md, each drawn from the CSV files a benchmark writes.

    python bench/plot.py peers bench/results/2026-11-28-zen5/kv_*.csv -o bench/results/2026-11-28-zen5/peers.svg
    python bench/plot.py sweep bench/results/2026-11-28-zen5/conv_sweep.csv -o bench/results/2026-11-28-zen5/conv_sweep.svg

`peers`: bars of "best peer / nmsparse" per matrix and kernel, from bench/kernels_vs_peers.sh's
CSV files (OUT=...; columns kernel,matrix,system,seconds,checksum). The best peer follows the
script's rule: the fastest of the peers, with scipy's SpGEMM (rows left unsorted) replaced by
`scipy+sort`. Above 1, nmsparse is faster.

`sweep`: time against sparsity, one panel per problem and a curve per series, from
`cargo run --release --example conv_sweep -- OUT.csv` (columns problem,sparsity,series,ms).

Needs matplotlib.
"""

import argparse
import csv
import math
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def ratios(paths):
    """{kernel: {matrix: best peer / nmsparse}} over every file."""
    times = defaultdict(lambda: defaultdict(dict))
    for path in paths:
        for row in csv.DictReader(open(path)):
            if row["seconds"]:
                times[row["kernel"]][row["matrix"].replace(".mtx", "")][row["system"]] = float(row["seconds"])
    out = {}
    for kernel, by_matrix in times.items():
        out[kernel] = {}
        for matrix, systems in by_matrix.items():
            ours = systems.pop("nmsparse", None)
            if "scipy+sort" in systems:
                systems.pop("scipy", None)
            if ours and systems:
                out[kernel][matrix] = min(systems.values()) / ours
    return out


def peers(paths, out):
    data = ratios(paths)
    kernels = sorted(data)
    matrices = sorted({m for k in kernels for m in data[k]})
    width = 0.8 / max(1, len(kernels))
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for n, kernel in enumerate(kernels):
        values = [data[kernel].get(m, math.nan) for m in matrices]
        geo = math.exp(sum(math.log(v) for v in values if not math.isnan(v)) / sum(not math.isnan(v) for v in values))
        ax.bar([i + (n - (len(kernels) - 1) / 2) * width for i in range(len(matrices))], values, width,
               label=f"{kernel} (geometric mean {geo:.2f})")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log", base=2)
    ax.set_ylabel("best peer / nmsparse (above 1: nmsparse faster)")
    ax.set_xticks(range(len(matrices)), matrices, rotation=30, ha="right")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)


def sweep(path, out):
    curves = defaultdict(lambda: defaultdict(list))
    for row in csv.DictReader(open(path)):
        curves[row["problem"]][row["series"]].append((float(row["sparsity"]), float(row["ms"])))
    problems = list(curves)
    fig, axes = plt.subplots(1, len(problems), figsize=(4.2 * len(problems), 3.8), squeeze=False)
    for ax, problem in zip(axes[0], problems):
        for series, points in curves[problem].items():
            points.sort()
            # Sparsity on a log scale of density, so 0%, 90%, 99%, 99.9% are evenly spaced.
            xs = [-math.log10(max(1.0 - s, 1e-4)) for s, _ in points]
            ax.plot(xs, [ms for _, ms in points], marker="o", markersize=3, label=series)
        ticks = sorted({s for points in curves[problem].values() for s, _ in points})
        ax.set_xticks([-math.log10(max(1.0 - s, 1e-4)) for s in ticks], [f"{100 * s:g}%" for s in ticks],
                      rotation=45, fontsize=8)
        ax.set_yscale("log")
        ax.set_title(f"{problem} convolution")
        ax.set_xlabel("sparsity of the input")
        ax.set_ylabel("time (ms)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plot", choices=["peers", "sweep"])
    parser.add_argument("csv", nargs="+")
    parser.add_argument("-o", "--out", required=True)
    args = parser.parse_args()
    if args.plot == "peers":
        peers(args.csv, args.out)
    elif len(args.csv) == 1:
        sweep(args.csv[0], args.out)
    else:
        parser.error("sweep draws one CSV (each would overwrite the plot of the one before)")


if __name__ == "__main__":
    main()
