"""A search for a quotient that ``rt_q8`` (``redalgebra.codegen.helpers.QUOTIENT_HELPERS``) would round otherwise than
the float32 division, on the host, exactly: float32 FMAs modelled in float64 by error-free transformations (the
product of two float32 is exact in float64; the sum is split by TwoSum and rounded once to float32, a tie settled by
its remainder), the division's correct rounding settled at ties by an exact residual.

    python3 benchmarks/quotient_search.py [--batches 40] [--size 5000000]

Significands near 2 (where ``RN(n * RN(1/d))`` is furthest from the quotient) and uniform ones, both in [1, 2): the
algorithm is scale-invariant away from float32's range limits, which ``rt_recip8``'s range keeps it from. Prints how
often the product alone is not faithful (not one of the two float32 neighbours of the quotient), and how often one
and two corrections differ from the division. A search, not a proof: the proof is in the comment on
``QUOTIENT_HELPERS``; this only looks for a counterexample to it and to a single correction.
"""

from __future__ import annotations

import argparse

import numpy as np


def _round32(hi, lo):
    """``hi + lo`` (a float64 and its exact remainder) rounded once to float32."""
    c = hi.astype(np.float32)
    c64 = c.astype(np.float64)
    up = np.nextafter(c, np.float32(np.inf))
    down = np.nextafter(c, np.float32(-np.inf))
    at_up = (hi - c64) == (up.astype(np.float64) - c64) / 2  # hi halfway between c and a neighbour: lo decides
    at_down = (c64 - hi) == (c64 - down.astype(np.float64)) / 2
    return np.where(at_up & (lo > 0), up, np.where(at_down & (lo < 0), down, c))


def fma32(a, b, c):
    p = a.astype(np.float64) * b.astype(np.float64)  # exact
    s = p + c.astype(np.float64)
    bp = s - p
    lo = (p - (s - bp)) + (c.astype(np.float64) - bp)  # TwoSum: s + lo == p + c exactly
    return _round32(s, lo)


def div32(n, d):
    """The float32 quotient correctly rounded (the float64 quotient rounded again, unless it lands on a float32
    midpoint, which an exact residual then settles)."""
    q = n.astype(np.float64) / d.astype(np.float64)
    c = q.astype(np.float32)
    c64 = c.astype(np.float64)
    up, down = np.nextafter(c, np.float32(np.inf)), np.nextafter(c, np.float32(-np.inf))
    at_up = (q - c64) == (up.astype(np.float64) - c64) / 2
    at_down = (c64 - q) == (c64 - down.astype(np.float64)) / 2
    mid = np.where(at_up, (c64 + up) / 2, np.where(at_down, (c64 + down) / 2, 0.0))
    side = np.sign(n.astype(np.float64) - mid * d.astype(np.float64))  # exact: 49-bit product, 53-bit difference
    return np.where(at_up & (side > 0), up, np.where(at_down & (side < 0), down, c))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--size", type=int, default=5_000_000)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    unfaithful = one = two = total = 0
    for _ in range(args.batches):
        m = args.size
        d = np.where(rng.random(m) < 0.3, rng.uniform(1, 2, m), 2 - rng.integers(1, 2 ** 14, m) * 2.0 ** -23)
        n = np.where(rng.random(m) < 0.4, rng.uniform(1, 2, m), 2 - rng.integers(1, 2 ** 18, m) * 2.0 ** -23)
        d, n = d.astype(np.float32), n.astype(np.float32)
        r = (np.float32(1) / d).astype(np.float32)
        q = (n * r).astype(np.float32)
        q1 = fma32(fma32(-q, d, n), r, q)
        q2 = fma32(fma32(-q1, d, n), r, q1)
        want = div32(n, d)
        exact = n.astype(np.float64) / d.astype(np.float64)  # within 2^-53: enough to tell the neighbours apart
        low, high = np.nextafter(q, np.float32(-np.inf)), np.nextafter(q, np.float32(np.inf))
        unfaithful += int((~((low.astype(np.float64) < exact) & (exact < high.astype(np.float64)))).sum())
        one += int((q1 != want).sum())
        two += int((q2 != want).sum())
        total += m
    print(f"{total} quotients: the product alone not faithful for {unfaithful}; one correction differs from the "
          f"division for {one}, two corrections for {two}")
    return 1 if two else 0


if __name__ == "__main__":
    raise SystemExit(main())
