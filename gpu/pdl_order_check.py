"""Whether a kernel launched after a chain of dependent launches waits for every kernel of the chain, or only for the
one launched just before it — what ``codegen/strategies/chunks.py`` must not rely on (its factors' last block waits
for the product before them, so that each product's end implies every earlier one's).

Three kernels on one stream: A (one thread, long; lets the next launch start at once, then sets a flag at its end),
B (launched dependent on A; never waits, ends at once), C (launched after B: normally, or dependent with a wait).
C reads A's flag: 0 means C ran before A ended, so a wait covers only the kernel launched just before it.

    python3 gpu/pdl_order_check.py

Prints what C saw for each launch of C and stream; exits 1 where C ran before A ended (then the factors' wait is
needed), 0 where it never did (then the wait may be dropped, if it costs anything: time both).
"""

from __future__ import annotations

import sys

import numpy as np
from numba import cuda

from redalgebra.runtime.driver import DriverStep
from redalgebra.runtime.sync import grid_launch, grid_wait


@cuda.jit
def long_first(flag, n):
    grid_launch()
    acc = flag[2]
    for _ in range(n):
        acc = acc * 0.9999999 + 1.0
    flag[1] = acc
    cuda.threadfence()
    flag[0] = 1.0


@cuda.jit
def short_second(b):
    grid_launch()
    b[0] = 1.0


@cuda.jit
def third_plain(flag, res):
    res[0] = flag[0]


@cuda.jit
def third_waiting(flag, res):
    grid_wait()
    res[0] = flag[0]


def _handle(stream) -> int:
    """A numba stream's ``CUstream`` as an integer (a ctypes pointer or a binding's handle object)."""
    h = stream.handle
    value = getattr(h, "value", None)
    return int(value) if value is not None else int(h)


def main() -> int:
    early = False
    own = cuda.stream()  # (kept alive through the launches)
    for name, stream in (("legacy stream", 0), ("a stream of its own", _handle(own))):
        for how, third, dependent in (("launched normally", third_plain, False),
                                      ("dependent, waiting", third_waiting, True)):
            seen = []
            for _ in range(3):
                flag, b = cuda.to_device(np.zeros(3)), cuda.to_device(np.zeros(1))
                res = cuda.to_device(np.full(1, -1.0))
                first = DriverStep(long_first[1, 1], (flag, np.int64(50_000_000)), ("flag", "n"))
                second = DriverStep(short_second[1, 1], (b,), ("b",), dependent=True)
                last = DriverStep(third[1, 1], (flag, res), ("flag", "res"), dependent=dependent)
                for step in (first, second, last):
                    step.launch(stream)
                cuda.synchronize()
                seen.append(float(res.copy_to_host()[0]))
            early |= 0.0 in seen
            print(f"{name}, the third kernel {how}: saw the first's end flag {seen}", flush=True)
    print("a wait covers only the kernel launched just before it" if early else
          "the third kernel never ran before the first ended")
    return 1 if early else 0


if __name__ == "__main__":
    sys.exit(main())
