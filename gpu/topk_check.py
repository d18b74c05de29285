"""Top-k selection on the GPU: the ``k`` largest values with their indices, ties to the smaller index.

    python3 gpu/topk_check.py [--backend cuda|cudasim]

A top-k cascade (``reduce t = topk(k, g)``) and the MoE router run on rows drawn from a handful of integers (ties
everywhere: bfloat16 holds them exactly), rows with one finite value (the rest ``-inf``: indices ``-1``) and
random rows, rows holding NaNs (ranked above every number, by index; some with more than k), over group sizes that select within a warp, across a warp's lanes and across warps (the
automatic launch shape and forced ones). Each output must equal a stable sort's: the values bit for bit, the
indices exactly (the router's, read in passes, up to ties its rescaling makes: each element once). Prints one line per case; exits 1 if any fails.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import redalgebra as ra
from redalgebra.runtime.formats import as_bfloat16, bf16_bits, bfloat16_to_float, to_float

TOPK = "input g\nreduce t = topk({k}, g)\nout w = t\n"
#: (rows, length, k, forced launch shape or None)
SHAPES = ((4096, 4096, 8, None), (4096, 4096, 8, dict(group=256, threads=256)), (16384, 128, 8, None),
          (999, 257, 8, None), (64, 50257, 8, None), (300, 4096, 40, None))


def rows_of(rows: int, length: int, rng) -> np.ndarray:
    g = rng.integers(-4, 4, size=(rows, length)).astype(np.float32)  # ties everywhere
    g[1::3] = rng.standard_normal((len(g[1::3]), length)).astype(np.float32) * 2
    g[2::7] = -np.inf
    g[2::7, length // 3] = 1.0
    g[3::11, rng.integers(0, length, 3)] = np.nan  # NaN ranks above every number: a row's first three
    g[5::13, : k_nan(length)] = np.nan  # more NaNs than any k
    return g


def k_nan(length: int) -> int:
    return min(length, 50)


def expected(g: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    nan = np.isnan(g)
    order = np.lexsort((np.where(nan, 0, -g.astype(np.float64)), ~nan), axis=1)[:, :k]  # NaNs first, by index
    vals = np.take_along_axis(g, order, axis=1)
    pad = k - vals.shape[1]
    vals = np.pad(vals, ((0, 0), (0, pad)), constant_values=-np.inf)
    order = np.pad(order, ((0, 0), (0, pad)))
    return vals, np.where(vals == -np.inf, -1, order)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    bad = 0
    for rows, length, k, forced in SHAPES:
        if args.backend == "cudasim":
            rows, forced = min(rows, 6), None  # (rows 3 and 5 hold NaNs)
        g = bfloat16_to_float(bf16_bits(rows_of(rows, length, rng)))  # the values the kernel reads
        fused = ra.derive(ra.parse(TOPK.format(k=k), name=f"top{k}"))
        kernel = ra.compile(fused, args.backend, "rows", **(forced or {}))
        try:
            out = kernel({"g": as_bfloat16(g)})
        except Exception as err:  # noqa: BLE001 - a kernel that fails to build is a failed case, the others still run
            bad += 1
            print(f"FAIL top{k} {rows}x{length} {forced or 'auto'}: {type(err).__name__}: {str(err)[:200]}", flush=True)
            continue
        want_v, want_i = expected(g, k)
        got_v = to_float(out["w"])
        got_i = np.asarray(out["t.index"])
        ok_v = np.array_equal(got_v, want_v, equal_nan=True)
        ok_i = np.array_equal(got_i, want_i)
        # the router: softmax, the top k, renormalised; its indices are those of the logits' top k
        router = ra.compile(ra.derive(ra.parse(ra.workloads.get("moe_routing").text.replace("topk(8,", f"topk({k},"))),
                            args.backend, "rows", **(forced or {}))
        r_i = np.asarray(router({"g": as_bfloat16(g)})["t.index"])
        # (a row of -inf but one: the router's zeros are values, ranked by index; a NaN makes the router's row NaN)
        finite = np.isfinite(g).all(axis=1)
        # a row read in passes merges lists rescaled by the softmax's correction, which can tie values that
        # differed: there the router's top k may take another of equal logits, but each element once
        exact = np.array_equal(r_i[finite], want_i[finite])
        picked = np.take_along_axis(g[finite], np.maximum(r_i[finite], 0), axis=1)
        distinct = all(len(set(r.tolist())) == len(r) for r in r_i[finite])
        ok_r = exact or (distinct and np.array_equal(picked, want_v[finite]))
        bad += not (ok_v and ok_i and ok_r)
        print(f"{'PASS' if ok_v and ok_i and ok_r else 'FAIL'} top{k} {rows}x{length} {forced or 'auto'}: values "
              f"{'=' if ok_v else '!='}, indices {'=' if ok_i else '!='}, router indices {'=' if exact else 'ties' if ok_r else '!='}"
              + ("" if ok_i else f" (rows differing: {int((got_i != want_i).any(axis=1).sum())})"), flush=True)
    print(f"{len(SHAPES) - bad} of {len(SHAPES)} passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
