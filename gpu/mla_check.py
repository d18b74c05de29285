"""MLA decode (and other wide vector sums) on ``wgmma`` against the float64 reference: the vector sums split by columns
across two warpgroups, segments merged by the combine kernel (the default, launched while the partial kernel runs) and
in a thread-block cluster (``cluster=True``: the quick cases both ways), the float32 query's residual by ``mma.sync``.

    python3 gpu/mla_check.py                       # every case
    python3 gpu/mla_check.py --quick               # the small ones (for compute-sanitizer)
    python3 gpu/mla_check.py --long                # the others
    compute-sanitizer --tool racecheck python3 gpu/mla_check.py --quick
    python3 gpu/mla_check.py --quick --simulator    # here, without a GPU (minutes)

Prints one line per case and exits 1 if any case is off. The factors enter ``P · V`` in the values' 16-bit type (as
FlashMLA's do): the tolerance allows that rounding once, as ``check`` does.
"""

from __future__ import annotations

import sys

import numpy as np

import redalgebra as ra
from redalgebra import evaluate, workloads
from redalgebra.runtime.check import STORE_ROUNDING, TOLERANCE
from redalgebra.runtime.formats import as_bfloat16, to_float

#: (batch, heads, length, rank, rope, dtype, query, segments, quick); the query: ``float32`` (not exact in 16 bits),
#: ``exact`` (float32 values exact in the 16-bit type: no residual) or ``16-bit`` (given in the keys' 16-bit type, as
#: a model holds it: staged as its words are)
CASES = [(2, 20, 70, 256, 16, "float16", "float32", 3, True),       # a partial row block, the residual staged
         (1, 64, 130, 512, 64, "float16", "float32", 2, True),      # MLA's widths: the residual by mma.sync
         (2, 20, 70, 256, 24, "bfloat16", "16-bit", 3, True),       # a 16-bit query, its rope's padding
         (1, 50, 130, 512, 40, "float16", "16-bit", 2, True),       # six 16-byte chunks a rope row: a guarded round
         (3, 128, 1001, 512, 64, "bfloat16", "exact", None, False),  # odd length, auto's segments
         (4, 128, 4096, 512, 64, "float16", "exact", None, False),   # DeepSeek-R1 B4
         (4, 128, 4096, 512, 64, "float16", "16-bit", None, False),  # B4 with the query as the model holds it
         (16, 128, 4096, 512, 64, "float16", "float32", None, False),  # B16, a float32 query
         (16, 128, 4096, 512, 64, "float16", "16-bit", None, False),  # B16, a float16 query
         (1, 128, 5000, 384, 32, "bfloat16", "exact", 5, False)]     # another cascade shape: 384 + 32


def run(batch, heads, length, rank, rope, dtype, query, segments, seed=0, backend="cuda",
        cluster=None) -> tuple[bool, float]:
    rng = np.random.default_rng(seed)
    np_dtype = np.float16 if dtype == "float16" else np.float32
    c = rng.normal(size=(batch, length, rank)).astype(np_dtype)
    kr = rng.normal(size=(batch, length, rope)).astype(np_dtype)
    if dtype == "bfloat16":
        c, kr = as_bfloat16(c), as_bfloat16(kr)
    qc = (rng.normal(size=(batch * heads, rank)) * 0.2).astype(np.float32)
    qr = (rng.normal(size=(batch * heads, rope)) * 0.2).astype(np.float32)
    if query != "float32":  # values of the 16-bit type: no residual
        qc, qr = (np.asarray(to_float(as_bfloat16(q)) if dtype == "bfloat16" else q.astype(np.float16), np.float32)
                  for q in (qc, qr))
    params = {"qc": qc, "qr": qr, "scale": np.float32((rank + rope) ** -0.5)}
    given = params
    if query == "16-bit":  # the same values given in the keys' type, staged as they are
        given = {**params, **{k: as_bfloat16(params[k]) if dtype == "bfloat16" else params[k].astype(np.float16)
                              for k in ("qc", "qr")}}
    options = ({} if segments is None else {"segments": segments}) | ({} if cluster is None else {"cluster": cluster})
    kernel = ra.compile(ra.derive(workloads.get("mla_decode").cascade), backend, "wgmma", **options)
    got = np.asarray(kernel({"c": c, "kr": kr}, given)["y"], np.float64)
    wide = {k: np.repeat(np.asarray(to_float(v) if dtype == "bfloat16" else v, np.float64), heads, 0)
            for k, v in (("c", c), ("kr", kr))}
    want = evaluate(workloads.get("mla_decode").cascade, wide, params)["y"]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    return err <= TOLERANCE[dtype] + STORE_ROUNDING[dtype], err


def main() -> int:
    quick, long = "--quick" in sys.argv, "--long" in sys.argv
    backend = "cudasim" if "--simulator" in sys.argv else "cuda"
    bad = 0
    for case in CASES:
        if (quick and not case[-1]) or (long and case[-1]):
            continue
        for cluster in ((True, False) if case[-1] else (None,)):  # (the long ones as the policy builds them)
            ok, err = run(*case[:-1], backend=backend, cluster=cluster)
            bad += not ok
            print(f"{'PASS' if ok else 'FAIL'} B{case[0]} H{case[1]} L{case[2]} r{case[3]}+{case[4]} {case[5]} "
                  f"{case[6]} query, segments {case[7] or 'auto'}, "
                  f"{'the policy' if cluster is None else 'cluster' if cluster else 'combine kernel'}"
                  f": max error {err:.2e} of the largest output", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
