"""MLA's segments merged in a thread-block cluster: how many clusters the GPU runs at once, and the step timed.

    python3 gpu/cluster_probe.py [--pick 0,1] [--segments 2,3,4,8,16]

For each MLA case picked (bench's ``mla`` group: 0 = B4, 1 = B16, float16 query) and each count of segments: the
clusters of that many blocks the GPU runs at once for the kernel as built (``cuOccupancyMaxActiveClusters``, its own
block and shared memory) against the clusters the call launches (a row tile each), then the prepared launch timed
(CUDA events, 200 back-to-back launches after 20, the median of 5) with the cluster merge and with the combine kernel.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import prepared_case  # noqa: E402
from kernel_steps import time_launches  # noqa: E402


def active_clusters(step) -> int:
    """``cuOccupancyMaxActiveClusters`` of a cluster-launched driver step (its function, grid, block, shared memory and
    cluster attribute)."""
    from redalgebra.runtime.driver import LaunchConfig

    lib = ctypes.CDLL("libcuda.so.1")
    query = lib.cuOccupancyMaxActiveClusters
    query.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(LaunchConfig)]
    count = ctypes.c_int()
    code = query(ctypes.byref(count), ctypes.c_void_p(step.function), ctypes.byref(step._config))
    return count.value if code == 0 else -code


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pick", default="0,1")
    ap.add_argument("--segments", default="2,3,4,8,16")
    args = ap.parse_args(argv)
    for index in map(int, args.pick.split(",")):
        for nseg in map(int, args.segments.split(",")):
            line = []
            for flag in ("cluster", "nocluster"):
                case, _, _, launch = prepared_case("mla", index, f"wgmma+{flag}@256s{nseg}")
                times = sorted(time_launches(launch.run) for _ in range(5))
                line.append(f"{flag} {times[2]:7.1f} us")
                if flag == "cluster":
                    step = launch.driver[0]
                    grid = step.grid
                    line.append(f"clusters launched {grid[0] * grid[1] // nseg:4d}, at once {active_clusters(step):4d}")
            print(f"{case.shape:40} segments {nseg:2d}: " + "; ".join(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
