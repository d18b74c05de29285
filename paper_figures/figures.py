"""The paper's figures, drawn from the committed GPU results only (no GPU needed).

    python3 paper_figures/figures.py [--csv gpu/results/h200/bench.csv ...] [--out paper_figures/out]
    redalgebra figures [same options]

1. ``speedup``     — speedup over PyTorch eager per workload and shape, one bar per system;
2. ``levels``      — the fusion-level ablation on safe softmax (thread / warp / block / tile /
                     multi-block / unfused) across row lengths;
3. ``incremental`` — incremental (tile) against non-incremental across row lengths, marking where
                     the non-incremental form no longer fits on chip;
4. ``roofline``    — achieved GB/s of every memory-bound kernel against the copy bandwidth.

Each is written as PNG and PDF. The data layer (``load``, ``speedups``, ``series``) is separate
from the drawing so that tests can check the numbers a figure shows against the CSV.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CSV = ROOT / "gpu" / "results" / "h200" / "bench.csv"
#: Every committed run of the bench's cases, oldest first: a case measured again in a later run (ours and its
#: baselines, in one process) replaces the earlier run's rows of that case whole. Left out: runs of candidate
#: subsets only (``bench_vrows_candidates``, ``bench_vrows_segments``, ``bench_columns1``/``2`` of kernels since
#: replaced, ``bench_prefill_mma2``: two shapes, a rows-per-warp trial, ``bench_prefill_wgmma4``/``5``: trials between
#: the serialization fixes, ``bench_prefill_causal1``: before the stages, ``bench_prefill_wgmma8``/``9``: between the
#: two passes, ``bench_columns_mma3``: a segment sweep, ``bench_columns_mma8``/``9``: e4m3 kernels since replaced,
#: ``bench_levels64k``: ``rows`` alone on a fusion-levels case whose other strategies the figure draws,
#: ``bench_columns_direct1``-``4``: ``columns_mma``'s direct products before their last change,
#: ``bench_columns_wgmma_rowfactors``: a regression since fixed, ``bench_mla_fresh``: MLA before the combine's change,
#: ``bench_prefill_fresh``: prefill before the pipelined order, ``bench_prefill_pipe3``: a variant taken back,
#: ``bench_mla_segs``: a segment sweep, ``bench_rescale``/``bench_mla_rescale``/``bench_mla_groups4``: changes taken
#: back)
#: and the early ablations.
DEFAULT_CSVS = (DEFAULT_CSV, *(DEFAULT_CSV.with_name(f"{name}.csv") for name in
                               ("bench_rows", "bench_rows2", "bench_short_rows", "bench_rows3", "bench_rows4",
                                "bench_rows5", "bench_decode2", "bench_rows6", "bench_rows7", "bench_vrows",
                                "bench_columns3", "bench_moe_wide", "bench_prefill_mma1", "bench_prefill_wgmma1",
                                "bench_prefill_wgmma2", "bench_prefill_wgmma3", "bench_prefill_wgmma6",
                                "bench_prefill_wgmma10", "bench_prefill_wgmma12", "bench_prefill_wgmma13",
                                "bench_prefill_wgmma14", "bench_columns_mma1", "bench_columns_mma2",
                                "bench_columns_mma4", "bench_columns_mma5", "bench_columns_mma6",
                                "bench_prefill_wgmma15", "bench_prefill_wgmma16", "bench_columns_mma7",
                                "bench_columns_mma10", "bench_columns_mma11", "bench_softmax_bf16",
                                "bench_moe_select", "bench_moe_select_qwen", "bench_columns_mma256",
                                "bench_columns_wgmma3", "bench_columns_wgmma4", "bench_moe_branchfree",
                                "bench_columns_wgmma5", "bench_mla_wgmma1", "bench_mla_wgmma2",
                                "bench_columns_direct5", "bench_columns_direct6", "bench_columns_wgmma_rowfactors2",
                                "bench_prefill_pipe", "bench_mla_combine", "bench_fp8_small", "bench_mla_sched",
                                "bench_prefill_sched", "bench_causal_prefix", "bench_causal_open", "bench_pdl",
                                "bench_late_small", "bench_late_mla", "bench_late_b", "bench_late_bf16",
                                "bench_gated_b", "bench_swap_b", "bench_epilogue", "bench_invariants",
                                "bench_rowkernel", "s9_v2_bench_tf", "s10_bench_bf16out", "s11_bench_fp8_final",
                                "s11_bench_softmax", "s13_run2_bench_gemm", "s13_run5_bench_quant",
                                "s14_run2_bench_norm", "s14_run4_bench_fp8", "s15_bench_fp8_kmajor", "s18_run1_bench",
                                "s18_run2_bench_fp8", "s19_run1_targets", "s19_run2_normgemm", "s19_run3_fp8mma",
                                "s19_run4_fp8mid", "s19_run5_fp8mid", "s20_run1_fp8mid", "s20_run2_fp8k",
                                "s20_run2_normk")))
ABLATION, INCREMENTAL = "softmax_levels", "softmax_incremental"
COMPUTE_BOUND = {"attention", "causal_attention", "mla_decode", "fp8_quant_gemm"}  # judged by FLOP/s, left out of the roofline
OVERHEAD = "call_overhead"  # host time per call, not a kernel: in no figure
OURS = "redalgebra (tuned)"


def load(*paths: Path) -> list[dict]:
    """The benchmark rows, numbers as floats (NaN where a system did not run). Several files: each case
    (workload, shape, dtype) is taken whole from the last file that has it, so every ratio still comes
    from one run."""
    paths = paths or DEFAULT_CSVS
    merged: "OrderedDict[tuple, list]" = OrderedDict()
    for path in paths:
        cases: "OrderedDict[tuple, list]" = OrderedDict()
        for r in _load_one(path):
            cases.setdefault((r["case"], r["shape"], r["dtype"]), []).append(r)
        merged.update(cases)
    return [r for rows in merged.values() for r in rows]


def _load_one(path: Path) -> list[dict]:
    if not Path(path).exists():
        raise FileNotFoundError(f"no benchmark results at {path}: run `redalgebra bench` on a GPU machine first")
    rows = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            for key in ("ms", "gbps", "frac_copy", "tflops", "copy_gbps", "max_err", "bytes", "flops"):
                r[key] = float(r[key]) if r.get(key) not in (None, "") else math.nan
            rows.append(r)
    if not rows:
        raise ValueError(f"{path} has no rows")
    return rows


def _label(r: dict) -> str:
    return f"{r['case']}\n{r['shape']} {r['dtype']}"


def _is_eager(system: str) -> bool:
    return system.startswith("eager")


def speedups(rows: list[dict]) -> "OrderedDict[str, dict[str, float]]":
    """``{case label: {system: eager time / system time}}`` for the main cases (not the ablations).

    Our kernels appear once, as the autotuner's choice; a system that did not run is left out.
    """
    out: OrderedDict = OrderedDict()
    for r in rows:
        if r["case"] in (ABLATION, INCREMENTAL, OVERHEAD) or r["kind"] in ("candidate", "call"):
            continue
        out.setdefault(_label(r), {})[r["system"]] = r["ms"]
    result = OrderedDict()
    for label, times in out.items():
        eager = next((ms for s, ms in times.items() if _is_eager(s)), math.nan)
        result[label] = {("eager" if _is_eager(s) else s): eager / ms for s, ms in times.items() if ms == ms and ms > 0}
    return result


def series(rows: list[dict], case: str, value: str = "gbps") -> "OrderedDict[str, list[tuple]]":
    """``{system: [(row length, value, valid), ...]}`` for an ablation case, sorted by length.

    ``valid`` is ``ok``, ``FAIL`` (the kernel ran but missed the float64 check) or ``error`` (it could
    not be built for that length, e.g. a row that does not fit on chip).
    """
    out: OrderedDict = OrderedDict()
    for r in rows:
        if r["case"] != case or r["kind"] == "tuned":
            continue
        length = int(r["shape"].split("x")[1])
        system = r["config"] or r["system"]
        out.setdefault(system, []).append((length, r[value], r["valid"] or "ok"))
    for pts in out.values():
        pts.sort()
    return out


# -- drawing -------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, name: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    for p in paths:
        fig.savefig(p, bbox_inches="tight", dpi=130)
    _plt().close(fig)
    return paths


def _subtitle(rows) -> str:
    r = rows[0]
    return f"{r['device']}, torch {r['torch']}, numba-cuda {r['numba_cuda']}; copy {r['copy_gbps']:.0f} GB/s"


def draw_speedup(rows, out: Path) -> list[Path]:
    plt = _plt()
    data = speedups(rows)
    systems = list(OrderedDict.fromkeys(s for v in data.values() for s in v))
    systems.sort(key=lambda s: (s == OURS, s))  # ours last, on the right of each group
    fig, ax = plt.subplots(figsize=(max(10, 0.55 * len(data)), 5.5))
    width = 0.8 / max(len(v) for v in data.values())
    cmap = plt.get_cmap("tab10")
    color = {s: "black" if s == OURS else cmap(i % 10) for i, s in enumerate(systems)}
    labelled = set()
    for k, values in enumerate(data.values()):
        present = [s for s in systems if s in values]  # each group centred on its own bars
        for i, system in enumerate(present):
            ax.bar(k + (i - (len(present) - 1) / 2) * width, values[system], width, color=color[system],
                   label=None if system in labelled else system)
            labelled.add(system)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(data)))
    ax.set_xticklabels(list(data), rotation=75, ha="right", fontsize=6)
    ax.set_ylabel("speedup over PyTorch eager (log)")
    ax.set_title("Speedup over PyTorch eager per workload and shape (log scale; above the line: faster than eager;"
                 " redalgebra in black)\n" + _subtitle(rows), fontsize=9)
    ax.grid(axis="y", which="both", alpha=0.2)
    _legend_outside(ax)
    return _save(fig, out, "fig1_speedup")


#: How a point that was not timed is marked: its own legend entry, no text over the plot.
_NOT_TIMED = {"FAIL": ("X", "ran, missed its float64 check: not timed"),
              "error": ("s", "not built: the row does not fit on chip")}


def _lines(ax, data, copy):
    """One line per system (GB/s against row length); points that were not timed marked at the foot of the
    axis in the system's colour, explained once in the legend."""
    marked = set()
    for system, pts in data.items():
        good = [(x, y) for x, y, v in pts if v == "ok" and y == y]
        line, = ax.plot(*zip(*good), marker="o", label=system) if good else ax.plot([], [], label=system)
        for x, _, v in pts:
            if v != "ok":
                marker, _ = _NOT_TIMED.get(v, _NOT_TIMED["FAIL"])
                ax.plot([x], [0.04 * copy], marker=marker, ms=8, mfc="none", mew=1.5, color=line.get_color(), ls="")
                marked.add(v if v in _NOT_TIMED else "FAIL")
    for v in sorted(marked):
        marker, text = _NOT_TIMED[v]
        ax.plot([], [], marker=marker, ms=8, mfc="none", mew=1.5, color="gray", ls="", label=text)
    ax.axhline(copy, color="black", ls="--", lw=0.8, label=f"copy bandwidth ({copy:.0f} GB/s)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("row length (elements)")
    ax.set_ylabel("achieved GB/s (read + write; higher is better)")
    ax.set_ylim(0, 1.1 * copy)
    ax.grid(axis="y", alpha=0.3)


def _legend_outside(ax):
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def draw_levels(rows, out: Path) -> list[Path]:
    plt = _plt()
    data = series(rows, ABLATION)
    if not data:
        raise ValueError(f"no {ABLATION} rows in the results")
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    _lines(ax, data, rows[0]["copy_gbps"])
    ax.set_title("Safe softmax at each fusion level: achieved bandwidth against row length\n"
                 "(float32, 2^26 elements in all; config@N = threads per block)\n" + _subtitle(rows), fontsize=9)
    _legend_outside(ax)
    return _save(fig, out, "fig2_fusion_levels")


def draw_incremental(rows, out: Path) -> list[Path]:
    plt = _plt()
    data = series(rows, INCREMENTAL)
    if not data:
        raise ValueError(f"no {INCREMENTAL} rows in the results")
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    _lines(ax, data, rows[0]["copy_gbps"])
    refused = [x for pts in data.values() for x, _, v in pts if v == "error"]
    if refused:
        ax.axvspan(min(refused) / 1.4, max(refused) * 1.4, color="gray", alpha=0.15,
                   label="non-incremental row no longer fits in shared memory")
    ax.set_title("Safe softmax, incremental (tile, rows) against non-incremental (row staged on chip):\n"
                 "achieved bandwidth against row length (float32)\n" + _subtitle(rows), fontsize=9)
    _legend_outside(ax)
    return _save(fig, out, "fig3_incremental")


def draw_roofline(rows, out: Path) -> list[Path]:
    plt = _plt()
    copy = rows[0]["copy_gbps"]
    memory = [r for r in rows if r["case"] not in COMPUTE_BOUND | {ABLATION, INCREMENTAL, OVERHEAD}
              and r["kind"] not in ("candidate", "call")
              and r["gbps"] == r["gbps"]]
    labels = list(OrderedDict.fromkeys(_label(r) for r in memory))
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(labels)), 5))
    systems = list(OrderedDict.fromkeys(r["system"] for r in memory))
    markers = "osD^v<>ph*"
    for i, system in enumerate(systems):
        pts = [(labels.index(_label(r)), r["gbps"]) for r in memory if r["system"] == system]
        ax.scatter(*zip(*pts), marker=markers[i % len(markers)], s=60 if system == OURS else 30,
                   color="black" if system == OURS else None, label=system, zorder=3)
    ax.axhline(copy, color="black", ls="--", lw=0.8, label=f"copy {copy:.0f} GB/s")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=75, ha="right", fontsize=6)
    ax.set_yscale("log")  # the routers: a few MB per launch-bound call, 10-250 GB/s beside thousands
    ax.set_ylim(min(r["gbps"] for r in memory) / 2, 2 * max(copy, max(r["gbps"] for r in memory)))
    ax.grid(axis="y", which="both", alpha=0.2)
    ax.set_ylabel("achieved GB/s, log scale (bytes each system moves)")
    ax.set_title("Memory-bound kernels: achieved bandwidth of each system against the copy bandwidth (log scale)\n"
                 + _subtitle(rows), fontsize=9)
    _legend_outside(ax)
    return _save(fig, out, "fig4_roofline")


FIGURES = {"speedup": draw_speedup, "levels": draw_levels, "incremental": draw_incremental, "roofline": draw_roofline}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="redalgebra figures", description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", action="append", help="benchmark results; repeat for several runs, later ones replacing "
                    "earlier ones case by case (default: the committed H200 runs)")
    ap.add_argument("--out", default=str(ROOT / "paper_figures" / "out"), help="directory for the PNG and PDF files")
    ap.add_argument("--only", default=",".join(FIGURES), help=f"comma-separated subset of {', '.join(FIGURES)}")
    args = ap.parse_args(argv)
    try:
        rows = load(*[Path(p) for p in args.csv or DEFAULT_CSVS])
    except (OSError, ValueError) as err:
        print(f"redalgebra figures: {err}", file=sys.stderr)
        return 2
    unknown = [n for n in args.only.split(",") if n not in FIGURES]
    if unknown:
        print(f"redalgebra figures: unknown figure(s) {unknown}; choose from {list(FIGURES)}", file=sys.stderr)
        return 2
    for name in args.only.split(","):
        for path in FIGURES[name](rows, Path(args.out)):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
