"""Timing on the GPU machine: CUDA-event medians, the copy bandwidth of the same run, CSV rows.

Rules (shared GPU notes): warm up, time many launches, take the median; rotate
among input copies whose total exceeds the L2 cache; measure the copy bandwidth
in the same process and report every kernel as GB/s and as a fraction of it.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

L2_BYTES = 60 * 2**20


def median_ms(fn, reps: int = 30, warmup: int = 3) -> float:
    """Median time of ``fn()`` in milliseconds, by CUDA events around each call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copies_for(nbytes: int) -> int:
    """How many input copies to rotate among so that they do not fit in L2 together."""
    return max(1, -(-4 * L2_BYTES // max(nbytes, 1)))


def rotating(fns):
    """One callable cycling through ``fns`` (each bound to its own input copy)."""
    state = {"i": 0}

    def call():
        fns[state["i"] % len(fns)]()
        state["i"] += 1
    return call


def copy_bandwidth(nbytes: int = 2**31) -> float:
    """Device-to-device copy in GB/s, counting bytes read and written."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), reps=20)
    return 2 * nbytes / ms / 1e6


@dataclass
class Row:
    case: str
    system: str
    shape: str
    dtype: str
    ms: float
    bytes: int
    flops: float = 0.0
    gbps: float = 0.0
    frac_copy: float = 0.0
    tflops: float = 0.0
    note: str = ""
    meta: dict = field(default_factory=dict)

    def finish(self, copy_gbps: float) -> "Row":
        self.gbps = self.bytes / self.ms / 1e6
        self.frac_copy = self.gbps / copy_gbps
        self.tflops = self.flops / self.ms / 1e9 if self.flops else 0.0
        return self


def write_csv(rows: list[Row], path: Path, meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        fields = list(meta) + [k for k in asdict(rows[0]) if k != "meta"]
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for r in rows:
            d = asdict(r)
            d.pop("meta")
            w.writerow({**meta, **d})


def environment() -> dict:
    import numba
    try:
        import numba_cuda
        ncuda = numba_cuda.__version__
    except Exception:  # noqa: BLE001
        ncuda = "?"
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "numba": numba.__version__,
            "numba_cuda": ncuda}
