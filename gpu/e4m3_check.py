"""FP8 e4m3 inputs on the GPU: every one of the 256 codes decoded exactly, and cascades with e4m3 inputs against the
float64 reference.

    python3 gpu/e4m3_check.py [--backend cuda|cudasim]

1. **The codes.** A 16 × 16 array holding the bytes 0 … 255 goes through ``out y = x`` (with a reduction beside it) under
   every strategy that reads scalar elements: each output must equal the code's value bit for bit (sign of zero and
   NaN included). This covers the scalar decoders (the generated helper and ``ld_e4m3``) and the 16-byte
   ``ld_e4m3x16``.
2. **Rounding to e4m3** (``fp8(x)``: the hardware's ``cvt.rn.satfinite`` on the GPU) of every code, every midpoint
   between two codes and a step either side of it, values past ±448, infinities, NaN and random values of every
   scale, against the host's rounding (``e4m3_bits``): equal bit for bit but for the sign of a zero.
3. **Cascades.** ``check`` (the random problems of ``redalgebra check``, every input e4m3) for the strategies that
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
from redalgebra.runtime.formats import as_e4m3, e4m3_bits, e4m3_to_float

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


# (fp8(x) times two, exactly: an output that is fp8(x) itself is stored as its e4m3 code, not rounded in float32)
ROUND = ra.parse("input x\nreduce m = max(x)\nout y = 2 * fp8(x)\nout z = m\n", name="e4m3_round")


def rounding(backend: str) -> int:
    values = np.sort(np.unique(e4m3_to_float(np.arange(256, dtype=np.uint8))[:127]))  # the non-negative codes
    mids = ((values[1:].astype(np.float64) + values[:-1]) / 2).astype(np.float32)
    rng = np.random.default_rng(0)
    x = np.concatenate([values, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(0)),
                        np.float32([448, 464, 479.9, 480, 500, 1e30, np.inf, np.nan, 2.0 ** -10, 2.0 ** -9.5, 1e-30]),
                        (rng.standard_normal(20000) * 10.0 ** rng.uniform(-5, 3, 20000)).astype(np.float32)])
    x = np.concatenate([x, -x]).astype(np.float32)
    x = np.pad(x, (0, -len(x) % 64)).reshape(-1, 64)
    y = np.asarray(ra.compile(ra.derive(ROUND), backend, "rows")({"x": x}, {})["y"], np.float32)
    want = 2 * e4m3_to_float(e4m3_bits(x))
    wrong = int(np.sum(~((y == want) | (np.isnan(y) & np.isnan(want)))))
    print(f"{'PASS' if not wrong else 'FAIL'} fp8(x) of {x.size} float32 values through rows: {wrong} differ")
    return int(wrong > 0)


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
    bad = codes(args.backend) + rounding(args.backend) + cascades(args.backend)
    print(f"{'all passed' if not bad else f'{bad} failed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
