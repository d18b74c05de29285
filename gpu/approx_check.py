"""The float32 intrinsics without a slow path, against NumPy's correctly rounded results, on the GPU.

    python3 gpu/approx_check.py [--count 16777216]

``sqrt_full`` (``sqrt.approx.f32``) and ``div_full`` (``div.full.f32``) replace the IEEE square root and division in
kernels with ``wgmma`` (their slow paths are subroutine calls, which make ptxas serialize the ``wgmma``s). Prints the
largest distance in ulp (units in the last place: the distance between the bit patterns of two finite floats of one
sign) over random positive normal inputs of every exponent, over subnormal ones, and the special values' results.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import cuda

from redalgebra.runtime.intrinsics import div_full, sqrt_full


@cuda.jit
def both(x, y, root, quotient):
    i = cuda.grid(1)
    if i < x.size:
        root[i] = sqrt_full(x[i])
        quotient[i] = div_full(x[i], y[i])


def ulps(got, want) -> np.ndarray:
    """|bits(got) - bits(want)| where both are finite and of one sign; inf where they are not alike."""
    g, w = got.view(np.int32).astype(np.int64), want.view(np.int32).astype(np.int64)
    alike = np.isfinite(got) & np.isfinite(want) & (np.signbit(got) == np.signbit(want))
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    return np.where(same, 0, np.where(alike, np.abs(g - w), np.inf))


def run(x, y) -> tuple:
    root, quotient = cuda.device_array_like(x), cuda.device_array_like(x)
    both[-(-x.size // 256), 256](cuda.to_device(x), cuda.to_device(y), root, quotient)
    with np.errstate(all="ignore"):
        return root.copy_to_host(), np.sqrt(x), quotient.copy_to_host(), (x / y).astype(np.float32)


def main(argv) -> int:
    count = int(argv[argv.index("--count") + 1]) if "--count" in argv else 1 << 24
    rng = np.random.default_rng(0)
    normal = rng.integers(0x00800000, 0x7F800000, count, dtype=np.int64).astype(np.int32).view(np.float32)
    subnormal = rng.integers(1, 0x00800000, count // 16, dtype=np.int64).astype(np.int32).view(np.float32)
    ok = True
    for label, x in (("normal", normal), ("subnormal", subnormal)):
        y = rng.permutation(normal)[:x.size]
        root, want_root, quotient, want_quotient = run(x, y)
        r, q = ulps(root, want_root), ulps(quotient, want_quotient)
        fin = np.isfinite(want_quotient) & (np.abs(want_quotient) >= np.float32(2.0 ** -126))  # (normal quotients)
        print(f"{label} inputs ({x.size}): sqrt_full max {r.max():.0f} ulp ({np.mean(r > 0):.2%} not correctly "
              f"rounded); div_full max {q[fin].max():.0f} ulp over normal quotients", flush=True)
        ok &= bool(np.isfinite(r).all())
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1.0, 4.0, 2.0 ** -149], np.float32)
    root, want_root, _, _ = run(special, np.ones_like(special))
    print("special: " + ", ".join(f"sqrt({a}) = {b} (NumPy {c})" for a, b, c in zip(special, root, want_root)))
    same = (root == want_root) | (np.isnan(root) & np.isnan(want_root))
    ok &= bool(same[:8].all())  # (the subnormal's may flush: printed, not asserted)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
