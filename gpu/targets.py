"""The tensor-core workloads' targets, and their table from one benchmark run.

    python3 gpu/bench.py --targets [--retune] [--out gpu/results/h200/targets.csv]

runs the cases below (each our tuned configuration unless ``--retune``, and its baselines, in one process) and then
prints the table :func:`table` makes and writes it beside the CSV (``targets.md``). A target is a ratio to the best
of some baselines of the same case in the same run (``ours: kernel`` is the prepared launch, ``per call`` the public
call on torch tensors), or a fraction of the copy bandwidth measured at the run's start.

Pure Python (no torch): the rows are :class:`harness.Row`-like objects with ``shape``, ``dtype``, ``system``, ``ms`` and
``frac_copy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

OURS, PER_CALL = "redalgebra (tuned)", "redalgebra per call"
SDPA = ("sdpa flash", "sdpa cudnn")
FP8_SMALL = ("torch.compile quant + torch._scaled_mm",)
FP8_LARGE = ("torch._scaled_mm alone (x quantised beforehand)",)
K_MAJOR = "K7168 N7168 e4m3 weights K-major"


@dataclass(frozen=True)
class Target:
    """``ours ≥ least ×`` the fastest of ``baselines`` on case ``index`` of bench's ``group`` (``baselines`` empty:
    ours at ``least`` of the copy bandwidth or more); ``shape``: words the case's shape and dtype hold (a case list
    reordered shows as the wrong case, not as another case's numbers)."""

    label: str
    group: str
    index: int
    baselines: tuple
    least: float
    shape: str = ""


TARGETS = (
    Target("prefill LLaMA-65B L2048 fp16, vs flash", "prefill", 2, ("sdpa flash",), 1.1, "L2048 D128 Q2048 float16"),
    Target("prefill LLaMA-65B L2048 fp16, vs cuDNN", "prefill", 2, ("sdpa cudnn",), 0.8, "L2048 D128 Q2048 float16"),
    Target("prefill LLaMA-65B L4096 fp16, vs flash", "prefill", 3, ("sdpa flash",), 1.1, "L4096 D128 Q4096 float16"),
    Target("prefill LLaMA-65B L4096 fp16, vs cuDNN", "prefill", 3, ("sdpa cudnn",), 0.8, "L4096 D128 Q4096 float16"),
    Target("prefill LLaMA-65B L2048 bf16, vs flash", "prefill_bf16", 0, ("sdpa flash",), 1.1,
           "L2048 D128 Q2048 bfloat16"),
    Target("prefill LLaMA-65B L2048 bf16, vs cuDNN", "prefill_bf16", 0, ("sdpa cudnn",), 0.8,
           "L2048 D128 Q2048 bfloat16"),
    Target("prefill LLaMA-65B L2048 causal, vs flash", "prefill_causal", 0, ("sdpa flash",), 1.1, "L2048 D128 Q2048"),
    Target("prefill LLaMA-65B L2048 causal, vs cuDNN", "prefill_causal", 0, ("sdpa cudnn",), 0.8, "L2048 D128 Q2048"),
    Target("prefill LLaMA-65B L4096 causal, vs flash", "prefill_causal", 1, ("sdpa flash",), 1.1, "L4096 D128 Q4096"),
    Target("prefill LLaMA-65B L4096 causal, vs cuDNN", "prefill_causal", 1, ("sdpa cudnn",), 0.8, "L4096 D128 Q4096"),
    Target("prefill BERT-base, vs the best SDPA", "prefill", 0, SDPA, 1.0, "BERT-base"),
    Target("prefill ViT-L, vs the best SDPA", "prefill", 1, SDPA, 1.0, "ViT-L"),
    Target("MLA decode B4, vs eager", "mla", 0, ("eager",), 2.0, "B4 H128"),
    Target("MLA decode B4, of copy", "mla", 0, (), 0.7, "B4 H128"),
    Target("MLA decode B16, vs eager", "mla", 1, ("eager",), 2.0, "B16 H128"),
    Target("MLA decode B16, of copy", "mla", 1, (), 0.7, "B16 H128"),
    Target("FP8 quant + GEMM M1 (e4m3, K-major)", "fp8gemm", 6, FP8_SMALL, 3.0, f"M1 {K_MAJOR}"),
    Target("FP8 quant + GEMM M16 (e4m3, K-major)", "fp8gemm", 7, FP8_SMALL, 3.0, f"M16 {K_MAJOR}"),
    Target("FP8 quant + GEMM M4096 (e4m3, K-major)", "fp8gemm", 5, FP8_LARGE, 0.8, f"M4096 {K_MAJOR}"),
    Target("RMSNorm + GEMM M16", "normgemm", 1, ("torch.compile",), 1.0, "M16 K4096"),
    Target("RMSNorm + GEMM M4096", "normgemm", 2, ("torch.compile",), 1.0, "M4096 K4096"),
)


def cases(targets=TARGETS) -> list[tuple[str, int]]:
    """The (group, index) of every case the targets read, each once, in the targets' order."""
    return list(dict.fromkeys((t.group, t.index) for t in targets))


def _fastest(rows, system_names) -> float:
    times = [r.ms for r in rows if r.system in system_names and r.ms == r.ms and r.ms > 0]
    return min(times) if times else math.nan


def measure(target: Target, rows) -> dict:
    """The target's numbers from the rows of its case: ``ours`` and ``call`` (ms), ``base`` (ms, the fastest of its
    baselines; NaN for a copy target), ``kernel`` and ``per_call`` (the ratios, or the fractions of copy), ``met``
    (None where a number is missing)."""
    ours = next((r for r in rows if r.system == OURS), None)
    call = next((r for r in rows if r.system == PER_CALL), None)
    out = {"ours": ours.ms if ours else math.nan, "call": call.ms if call else math.nan, "base": math.nan}
    if not target.baselines:
        out["kernel"] = ours.frac_copy if ours else math.nan
        out["per_call"] = out["kernel"] * out["ours"] / out["call"] if call and ours else math.nan
    else:
        out["base"] = _fastest(rows, target.baselines)
        out["kernel"], out["per_call"] = out["base"] / out["ours"], out["base"] / out["call"]
    out["met"] = None if out["kernel"] != out["kernel"] else out["kernel"] >= target.least
    return out


def table(results: dict, targets=TARGETS) -> str:
    """A Markdown table of the targets from one run: ``results[(group, index)]``, the rows of that bench case (ours
    and its baselines)."""
    lines = ["| target | case | ours (ms) | per call (ms) | baseline (ms) | ours: kernel | per call | target | met |",
             "|---|---|---|---|---|---|---|---|---|"]
    for t in targets:
        rows = results.get((t.group, t.index))
        if not rows:
            lines.append(f"| {t.label} | not run | | | | | | {_goal(t)} | |")
            continue
        where = f"{rows[0].shape} {rows[0].dtype} "
        if t.shape not in where:
            lines.append(f"| {t.label} | wrong case: {where.strip()} (expected {t.shape}) | | | | | | {_goal(t)} | |")
            continue
        m = measure(t, rows)
        unit = "" if t.baselines else " of copy"
        met = {None: "?", True: "yes", False: "**no**"}[m["met"]]
        lines.append(f"| {t.label} | {rows[0].shape} {rows[0].dtype} | {_num(m['ours'], 4)} | {_num(m['call'], 4)} | "
                     f"{_num(m['base'], 4)} | {_ratio(m['kernel'], t)}{unit} | {_ratio(m['per_call'], t)}{unit} | "
                     f"{_goal(t)} | {met} |")
    return "\n".join(lines)


def _goal(t: Target) -> str:
    return f"≥ {t.least:.0%} of copy" if not t.baselines else f"≥ {t.least:g}×"


def _num(x: float, digits: int) -> str:
    return "—" if x != x else f"{x:.{digits}f}"


def _ratio(x: float, t: Target) -> str:
    if x != x:
        return "—"
    return f"{x:.1%}" if not t.baselines else f"{x:.2f}×"
