"""FP8 e4m3 inputs on the GPU: every one of the 256 codes decoded exactly, and cascades with e4m3 inputs against the
float64 reference.

    python3 gpu/e4m3_check.py [--backend cuda|cudasim]

1. **The codes.** A 16 × 16 array holding the bytes 0 … 255 goes through ``out y = x`` (with a reduction beside it) under
   every strategy that reads scalar elements: each output must equal the code's value bit for bit (sign of zero and
   NaN included). This covers the scalar decoders (the generated helper and ``ld_e4m3``) and the 16-byte
   ``ld_e4m3x16``.
2. **Cascades.** ``check`` (the random problems of ``redalgebra check``, every input e4m3) for the strategies that
   read e4m3 vector inputs.

Prints one line per case; exits 1 if any fails.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import redalgebra as ra
from redalgebra import workloads
from redalgebra.runtime.check import check
from redalgebra.runtime.formats import as_e4m3, e4m3_to_float

CODES = ra.parse("input x\nreduce m = max(x)\nout y = x\nout z = m\n", name="e4m3_codes")
SCALAR = ("rows", "thread", "warp", "block", "tile", "lanes", "split")
CASCADES = (("fp8_quant_gemm", ("columns", "columns_mma", "vrows", "lanes")), ("decode_attention", ("vrows",)))


def codes(backend: str) -> int:
    fused = ra.derive(CODES)
    data = np.arange(256, dtype=np.uint8).reshape(16, 16)
    bad = 0
    for strategy in SCALAR:
        y = np.asarray(ra.compile(fused, backend, strategy)({"x": as_e4m3(data)}, {})["y"], np.float32)
        want = e4m3_to_float(data)  # (after the compile: the decoder's import picks the simulator or not)
        ok = np.array_equal(y, want, equal_nan=True) and np.array_equal(np.signbit(y), np.signbit(want))
        bad += not ok
        wrong = int(np.sum(~((y == want) | (np.isnan(y) & np.isnan(want)))))
        print(f"{'PASS' if ok else 'FAIL'} codes 0..255 through {strategy}: {wrong} values differ")
    return bad


def cascades(backend: str) -> int:
    bad = 0
    for name, strategies in CASCADES:
        fused = ra.derive(workloads.get(name).cascade)
        for strategy in strategies:
            for r in check(fused, backend, strategy, dtypes=("e4m3",)):
                bad += not r.passed
                print(("PASS " if r.passed else "FAIL ") + r.line())
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda", choices=("cuda", "cudasim"))
    args = ap.parse_args()
    bad = codes(args.backend) + cascades(args.backend)
    print(f"{'all passed' if not bad else f'{bad} failed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
