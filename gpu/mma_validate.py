"""The tensor-core strategies (``mma``, ``wgmma``) on the GPU against the float64 reference, rows sharing their keys.

Run on the GPU machine:
    python3 gpu/mma_validate.py --out gpu/results/h200/mma_validate.csv
    python3 gpu/mma_validate.py --strategy wgmma --out gpu/results/h200/wgmma_validate.csv
Each case: ``groups`` groups of ``R`` rows sharing one key/value row per element (a head's queries over its
K/V), odd lengths and row counts (partial tiles), masks with a fully masked row, bfloat16 and float16, a query
that is not exact in 16 bits (the residual product), and the catalogue's attention variants (ALiBi with
positions, soft-capping). Prints one line per case and exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from redalgebra import derive, evaluate, parse, workloads  # noqa: E402
from redalgebra.codegen.strategies.wgmma_policy import _gating  # noqa: E402
from redalgebra.runtime import compile  # noqa: E402
from redalgebra.runtime.check import STORE_ROUNDING, TOLERANCE  # noqa: E402
from redalgebra.runtime.formats import as_bfloat16, bfloat16_to_float  # noqa: E402
from redalgebra.workloads.masks import CAUSAL_ATTENTION as CAUSAL, query_positions  # noqa: E402
from validate import finish  # noqa: E402


# (workload, groups, rows per group, L, d, dtype, masked, query exact in 16 bits); "causal": CAUSAL, the rows of a
# group at the group's last positions (more rows than keys: the first rows see no key)
SMALL = [  # for compute-sanitizer (each access checked: slow): partial tiles and row blocks, masks, both types
    ("attention", 2, 70, 130, 64, "float16", True, False),
    ("attention", 1, 64, 64, 128, "bfloat16", False, True),
    ("alibi_attention", 2, 20, 77, 32, "bfloat16", True, True),
    ("softcap_attention", 1, 16, 1, 16, "float16", False, False),
    ("causal", 2, 70, 200, 64, "float16", False, True),
    # more row tiles than an H200 has multiprocessors: blocks walking row tiles (--persistent) take two of them
    ("attention", 140, 40, 70, 16, "float16", True, False),
    ("causal", 140, 40, 70, 128, "float16", False, True),
    # rows of 10 and 12 16-byte chunks, copied as if of 16 (the padding's copies never issued)
    ("attention", 2, 70, 256, 80, "float16", True, True),
    ("causal", 2, 70, 200, 96, "bfloat16", False, True),
    # vector sums of 192 and 256 held whole by a producer block's consumers (tiles of 32)
    ("attention", 2, 70, 130, 256, "float16", True, True),
    ("causal", 2, 70, 200, 192, "bfloat16", False, True),
    # heads of a multiple of 8, not of 16: staged as the next multiple of 16, the padding's chunk copied as no bytes
    ("attention", 2, 70, 130, 72, "float16", True, False),
    ("causal", 2, 70, 200, 40, "bfloat16", False, True),
]
CASES = [
    ("attention", 4, 64, 512, 64, "float16", False, True),
    ("attention", 2, 100, 1001, 128, "bfloat16", False, True),
    ("attention", 3, 37, 77, 128, "float16", True, False),
    ("attention", 1, 200, 1, 64, "bfloat16", False, False),
    ("attention", 2, 16, 4096, 128, "float16", False, True),
    ("alibi_attention", 2, 70, 333, 64, "bfloat16", True, True),
    ("softcap_attention", 2, 65, 257, 128, "float16", False, False),
    ("attention", 8, 64, 200, 16, "bfloat16", True, True),
    ("causal", 2, 200, 333, 64, "float16", False, True),
    ("causal", 1, 300, 257, 128, "bfloat16", True, True),
    ("attention", 150, 130, 129, 64, "float16", True, False),
    # causal row tiles of unequal counts, more of them than multiprocessors: walked in a snake where blocks walk
    ("causal", 60, 300, 300, 128, "float16", False, True),
    ("attention", 100, 256, 2047, 128, "bfloat16", False, True),
    ("attention", 32, 128, 2048, 80, "float16", False, True),
    ("attention", 3, 100, 1001, 96, "bfloat16", True, False),
    ("causal", 8, 256, 1024, 80, "bfloat16", False, True),
    ("attention", 16, 128, 2048, 256, "float16", False, True),
    ("attention", 2, 100, 1001, 192, "bfloat16", True, False),
    ("causal", 4, 256, 1024, 256, "bfloat16", False, True),
    ("attention", 16, 128, 2048, 72, "bfloat16", False, True),
    ("attention", 3, 100, 1001, 88, "float16", True, False),
    ("causal", 8, 256, 1024, 40, "float16", False, True),
    ("attention", 2, 100, 1001, 136, "bfloat16", True, False),
]


def cascade(name):
    return parse(CAUSAL) if name == "causal" else workloads.get(name).cascade


def problem(name, groups, R, L, d, dtype, masked, exact, rng):
    c = cascade(name)
    inputs = {}
    for s in c.inputs:
        a = rng.normal(size=(groups, L, d)).astype(np.float32)
        inputs[s.name] = as_bfloat16(a) if dtype == "bfloat16" else a.astype(np.float16)
    rows = groups * R
    params = {}
    for p in c.params:
        if p.size is not None:
            q = rng.normal(size=(rows, d)).astype(np.float32)
            if exact:  # as a model holds it: the 16-bit value, widened
                q = bfloat16_to_float(as_bfloat16(q).bits) if dtype == "bfloat16" else q.astype(np.float16).astype(np.float32)
            params[p.name] = q
        elif p.name == "qpos":
            params[p.name] = (query_positions(R, L, groups).astype(np.float32) if name == "causal" else np.float32(L // 2))
        elif p.name == "scale":
            params[p.name] = np.float32(d ** -0.5)
        else:
            params[p.name] = np.float32(0.3 if p.name == "slope" else 5.0)
    keep = None
    if masked:
        keep = rng.random((rows, L)) > 0.3
        keep[min(1, rows - 1)] = False
    return inputs, params, keep


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="gpu/results/h200/mma_validate.csv")
    ap.add_argument("--small", action="store_true", help="the small cases, for compute-sanitizer")
    ap.add_argument("--strategy", default="mma", choices=("mma", "wgmma"))
    ap.add_argument("--threads", type=int, help="threads per block (the strategy's default if not given)")
    ap.add_argument("--tile", type=int, help="elements a tile (wgmma with threads=384: 64 or 128)")
    ap.add_argument("--persistent", action="store_true",
                    help="blocks walking row tiles (wgmma's producer block) where the cascade has no gate")
    ap.add_argument("--out-dtype", choices=("float16", "bfloat16"),
                    help="the outputs stored in this 16-bit type by the kernels (out_dtype): one more rounding allowed")
    ap.add_argument("--query16", action="store_true",
                    help="a query exact in float16 given as a float16 device array (wgmma stages it as it is)")
    ap.add_argument("--only", help="comma-separated workloads: the cases of these only (e.g. causal)")
    ap.add_argument("--widths", help="comma-separated head dimensions: the cases of these only (e.g. 80,96)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    failures, rows_out = 0, []
    for name, groups, R, L, d, dtype, masked, exact in SMALL if args.small else CASES:
        if args.only and name not in args.only.split(",") or args.widths and str(d) not in args.widths.split(","):
            continue
        fused = derive(cascade(name))
        inputs, params, keep = problem(name, groups, R, L, d, dtype, masked, exact, rng)
        t0 = time.time()
        walk = True if args.persistent and not _gating(fused) else None
        kernel = compile(fused, "cuda", args.strategy, threads=args.threads, tile=args.tile, persistent=walk,
                         out_dtype=args.out_dtype)
        given = params
        if args.query16 and exact and dtype == "float16":  # (the same values, read as they are)
            from numba import cuda
            given = {k: cuda.to_device(np.ascontiguousarray(v.astype(np.float16))) if np.ndim(v) == 2 else v
                     for k, v in params.items()}
        out = kernel(inputs, given, keep)
        wide = {k: np.repeat(np.asarray(bfloat16_to_float(v.bits) if hasattr(v, "bits") else v, np.float64), R, 0)
                for k, v in inputs.items()}
        ref = evaluate(fused.cascade, wide, params, keep)
        tol = TOLERANCE[dtype] + STORE_ROUNDING[dtype]  # the factors rounded to 16 bits once (see the strategy)
        tol += STORE_ROUNDING[args.out_dtype] if args.out_dtype else 0.0  # (and the outputs, where asked)
        for o, got in out.items():
            got = bfloat16_to_float(got.bits) if hasattr(got, "bits") else got
            got, want = np.asarray(got, np.float64), ref[o]
            fin = np.isfinite(want)
            scale = np.abs(want[fin]).max() if fin.any() else 1.0
            err = float(np.abs(got - want)[fin].max() / scale) if fin.any() else 0.0
            same_nan = bool(np.array_equal(np.isnan(got), np.isnan(want)))
            ok = err <= tol and same_nan
            failures += not ok
            line = (f"{'PASS' if ok else 'FAIL'} {name:<18} groups {groups:>2} R {R:>4} L {L:>5} d {d:>3} {dtype:<8} "
                    f"{'masked' if masked else '      '} {'q16' if exact else 'q32'} {o}: err {err:.2e} (tol {tol:.1e}) "
                    f"nan-agree {same_nan}  {time.time() - t0:.1f} s")
            print(line, flush=True)
            rows_out.append(dict(strategy=args.strategy, workload=name, groups=groups, R=R, L=L, d=d, dtype=dtype, masked=masked,
                                 query16=exact, output=o, error=f"{err:.3e}", tolerance=tol, passed=ok))
    return finish(rows_out, failures, Path(args.out))


if __name__ == "__main__":
    sys.exit(main())
