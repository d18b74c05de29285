"""``columns_mma`` (or ``columns_wgmma``) on the GPU against the float64 reference: shared weights, odd lengths,
masks, segments.

    python3 gpu/columns_mma_check.py [--strategy columns_wgmma] [--dtype e4m3] [--quick] [--from N] [--only N]
                                     [--persistent] [--tile-factors] [--alone]
    compute-sanitizer --tool memcheck python3 gpu/columns_mma_check.py
    compute-sanitizer --tool racecheck python3 gpu/columns_mma_check.py

Small shapes (the sanitizers run them slowly); prints one line per case and exits 1 if any case is off.
``--persistent``: ``columns_wgmma``'s product with a block a multiprocessor walking the tiles. ``--tile-factors``:
``columns_wgmma``'s factors computed in its product's tiles where the cascade allows (``TILE_FACTORS``). ``--only N``:
case N alone (0-based). ``--alone``: no comparison with ``columns_mma`` (a module fewer to build a case: the device's
time goes further).
"""

from __future__ import annotations

import sys

import numpy as np

import redalgebra as ra
from redalgebra import evaluate, workloads
from redalgebra.runtime.formats import as_bfloat16, as_e4m3, bfloat16_to_float, to_float

#: (workload, rows, length, columns, weights' dtype, segments, masked)
CASES = [("fp8_quant_gemm", 17, 1001, 72, "bfloat16", None, True),   # a partial row block, tile, column warp
         ("fp8_quant_gemm", 1, 7168, 256, "float16", 3, False),       # three segments, one token
         ("fp8_quant_gemm", 40, 64, 8, "bfloat16", None, False),      # one tile, eight columns
         ("rmsnorm_gemm", 5, 333, 136, "bfloat16", 2, True),
         ("fp8_quant_gemm", 17, 1001, 80, "e4m3", None, True),        # e4m3 weights (x in bfloat16)
         ("fp8_quant_gemm", 3, 7168, 512, "e4m3", 3, False),
         ("fp8_quant_gemm", 16, 2048, 1024, "e4m3", None, False),      # sixteen tokens, segments chosen
         ("fp8_quant_gemm", 1, 7168, 1000, "float16", None, True)]     # one token, a partial column block
#: ``columns_wgmma``'s (128 rows a block, 16-bit weights): partial row and column blocks, the last tile partial, masks
WGMMA_CASES = [("fp8_quant_gemm", 300, 1001, 264, "float16", None, True),
               ("fp8_quant_gemm", 130, 7168, 512, "bfloat16", 3, False),
               ("rmsnorm_gemm", 129, 333, 520, "bfloat16", 2, True),
               ("fp8_quant_gemm", 512, 2048, 1024, "float16", None, False),
               # e4m3 weights widened to float16 first (72 columns: rows not of 16 bytes, an element a thread)
               ("fp8_quant_gemm", 300, 1001, 72, "e4m3", None, True),
               ("fp8_quant_gemm", 260, 7168, 520, "e4m3", 3, False),
               # no mask: the scalars and factors by a rows kernel (8 and 14 KB rows, a partial last block of rows), the
               # factors' padding past a row of 1000 (24 zeros a row to the tiles of 64)
               ("rmsnorm_gemm", 4100, 4096, 264, "bfloat16", None, False),
               ("fp8_quant_gemm", 4100, 7168, 136, "bfloat16", None, False),
               ("rmsnorm_gemm", 200, 1000, 136, "bfloat16", None, False),
               # more tiles than multiprocessors: with --persistent each block walks several (a partial column block;
               # segments, a mask)
               ("rmsnorm_gemm", 1030, 200, 4104, "bfloat16", None, False),
               ("fp8_quant_gemm", 700, 1001, 4104, "float16", 2, True),
               # RMSNorm's factors computed in the product's tiles (one segment, rows on the 16-byte grid; the 1030-row
               # case above too): a partial block of rows, 80 tiles
               ("rmsnorm_gemm", 600, 1024, 4096, "bfloat16", None, False)]


def run(name, rows, length, n, dtype, segments, masked, seed=0, strategy="columns_mma",
        persistent=None, compare=True) -> tuple[bool, float]:
    rng = np.random.default_rng(seed)
    c = workloads.get(name).cascade
    wide, inputs = {}, {}
    for s in c.inputs:
        a = rng.normal(size=(rows, length) if s.size is None else (1, length, n)).astype(np.float32)
        if dtype == "e4m3" and s.size is not None:  # e4m3 weights, the activations in bfloat16
            inputs[s.name] = as_e4m3(a)
            wide[s.name] = to_float(inputs[s.name]).astype(np.float64)
        elif dtype in ("bfloat16", "e4m3"):
            inputs[s.name] = as_bfloat16(a)
            wide[s.name] = bfloat16_to_float(inputs[s.name].bits).astype(np.float64)
        else:
            inputs[s.name] = a.astype(np.float16)
            wide[s.name] = inputs[s.name].astype(np.float64)
        wide[s.name] = np.broadcast_to(wide[s.name], (rows,) + wide[s.name].shape[1:])
    params = {p.name: np.float32(length if p.name == "h" else 1e-5) for p in c.params}
    keep = rng.random((rows, length)) > 0.2 if masked else None
    if keep is not None:
        keep[-1] = False
    kernel = ra.compile(ra.derive(c), "cuda", strategy, segments=segments, persistent=persistent)
    got = np.asarray(kernel(inputs, params, keep)["y"], np.float64)
    want = evaluate(c, wide, params, keep)["y"]
    if strategy != "columns_mma" and compare:  # the same factors (float32, FP8-rounded) through columns_mma: only the sums' order
        try:
            alike = np.asarray(ra.compile(ra.derive(c), "cuda", "columns_mma")(inputs, params, keep)["y"], np.float64)
            print(f"  against columns_mma: max error {np.nanmax(np.abs(got - alike)) / np.nanmax(np.abs(alike)):.2e}")
        except ra.RedalgebraError as err:  # (a shape columns_mma does not take)
            print(f"  against columns_mma: not compared ({str(err).splitlines()[0][:100]})")
    tol = 1e-5 if name == "fp8_quant_gemm" else 2.0 ** -9 + 1e-5  # FP8 factors exact; RMSNorm's rounded
    err = float(np.nanmax(np.abs(got - want)) / max(np.nanmax(np.abs(want)), 1e-30))
    return bool(err <= tol and np.array_equal(np.isnan(got), np.isnan(want))), err


def main() -> int:
    strategy = sys.argv[sys.argv.index("--strategy") + 1] if "--strategy" in sys.argv else "columns_mma"
    only = sys.argv[sys.argv.index("--dtype") + 1] if "--dtype" in sys.argv else None  # the cases of one weight type
    bad = 0
    cases = WGMMA_CASES if strategy == "columns_wgmma" else CASES
    if "--quick" in sys.argv:  # one and sixteen rows, both weight types, a mask, segments
        cases = [c for c in cases if c[1] in (1, 16) or c[4] == "e4m3" and c[6]]
    if "--from" in sys.argv:  # the cases from the N-th on (0-based: a run cut by a time limit, resumed)
        cases = cases[int(sys.argv[sys.argv.index("--from") + 1]):]
    if "--only" in sys.argv:
        at = int(sys.argv[sys.argv.index("--only") + 1])
        cases = cases[at:at + 1]
    if "--tile-factors" in sys.argv:
        from redalgebra.codegen.strategies import tile_factors

        tile_factors.TILE_FACTORS = True
    for case in cases:
        if only is not None and case[4] != only:
            continue
        ok, err = run(*case, strategy=strategy, persistent=True if "--persistent" in sys.argv else None,
                      compare="--alone" not in sys.argv)
        bad += not ok
        print(f"{'PASS' if ok else 'FAIL'} {case}: max error {err:.2e} of the largest output")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
