"""Bars of "best peer / nmsparse" per matrix and kernel, from the CSV files that
bench/kernels_vs_peers.sh writes (OUT=...; columns kernel,matrix,system,seconds,checksum).

    python bench/plot_peers.py bench/results/2026-11-28-zen5/*.csv -o bench/results/2026-11-28-zen5/peers.svg

The best peer follows the script's rule: the fastest of the peers, with scipy's SpGEMM (rows
left unsorted) replaced by `scipy+sort`. Above 1, nmsparse is faster. Needs matplotlib.
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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="+")
    parser.add_argument("-o", "--out", required=True)
    args = parser.parse_args()
    data = ratios(args.csv)
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
    fig.savefig(args.out)


if __name__ == "__main__":
    main()
