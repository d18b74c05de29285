"""Where a prepared launch's time goes, kernel by kernel: each kernel's start and end within a call, from the CUDA
profiler's trace (CUPTI, through ``torch.profiler``), over back-to-back calls.

    python3 gpu/timeline.py fp8gemm 6 columns_mma [--calls 100]

GROUP INDEX CONFIG as for ``kernel_profile.py``. For each kernel of the module it prints the median (over the calls)
of its start and end in µs from the start of the call's first kernel, and its duration; then the median period from
one call's first kernel to the next's, which is what ``bench.py`` times back to back. Overlapping kernels (a
dependent launch running under the one before) show as a start before the previous kernel's end. The profiler adds a
little to each launch; compare the rows of one run with each other, not with another script's times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import profiled  # noqa: E402


def kernel_spans(run, calls: int) -> list[tuple[str, float, float]]:
    """``(name, start µs, end µs)`` of every kernel ``run()`` launched over ``calls`` calls, in start order."""
    prof = profiled(run, calls, warmup=10)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.loads(Path(f.name).read_text())["traceEvents"]
    spans = [(e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
             if e.get("cat") == "kernel" and "dur" in e]
    return sorted(spans, key=lambda s: s[1])


def table(spans: list, per_call: int) -> list[str]:
    """The median start, end and duration of each of a call's ``per_call`` kernels, relative to the call's first
    kernel's start, and the median period between calls."""
    if len(spans) % per_call:
        return [f"{len(spans)} kernels traced, not a multiple of the {per_call} a call launches: not tabulated"]
    calls = [spans[i:i + per_call] for i in range(0, len(spans), per_call)]
    lines = [f"{'kernel':<48} {'start':>8} {'end':>8} {'alone':>8}   (µs, medians over {len(calls)} calls)"]
    for k in range(per_call):
        starts = [c[k][1] - c[0][1] for c in calls]
        ends = [c[k][2] - c[0][1] for c in calls]
        lines.append(f"{calls[0][k][0][-48:]:<48} {statistics.median(starts):8.2f} {statistics.median(ends):8.2f} "
                     f"{statistics.median(e - s for s, e in zip(starts, ends)):8.2f}")
    periods = [b[0][1] - a[0][1] for a, b in zip(calls, calls[1:])]
    lines.append(f"call to call: {statistics.median(periods):.2f} µs; the last kernel's end to the next call's first "
                 f"start: {statistics.median(b[0][1] - a[-1][2] for a, b in zip(calls, calls[1:])):.2f} µs")
    return lines


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("group")
    ap.add_argument("index", type=int)
    ap.add_argument("config")
    ap.add_argument("--calls", type=int, default=100)
    a = ap.parse_args(argv)
    from bench import prepared_case  # (here: the table above is tested without a GPU, bench's imports need one)

    case, runner, kernel, launch = prepared_case(a.group, a.index, a.config)
    print(case.name, case.shape, a.config, "err", runner.validate(case, launch))
    spans = kernel_spans(lambda: launch.run(0), a.calls)
    print("\n".join(table(spans, len(launch.driver))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
