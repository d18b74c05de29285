"""``columns_mma``'s products computing their own factors (``Spec.own_factors``, ``columns_mma.OWN_FACTORS_ROWS``)
on the GPU: each shape's outputs against the same cascade with the factors' kernel (bit for bit: the same factors,
the same sums in the same order) and against the float64 reference, through NumPy inputs and through torch tensors,
each called three times.

    python3 gpu/own_factors_check.py
    compute-sanitizer --tool memcheck python3 gpu/own_factors_check.py --small
    NUMBA_ENABLE_CUDASIM=1 python3 gpu/own_factors_check.py --simulator   # the script itself, without a GPU

Prints one line per case and exits 1 if any is off.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import redalgebra as ra
from redalgebra import evaluate, workloads
from redalgebra.codegen.strategies import columns_mma
from redalgebra.runtime.formats import to_float

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chunks_check import inputs_of  # noqa: E402

#: (workload, rows, length, columns, weights' dtype, segments or None for the policy's)
CASES = [("fp8_quant_gemm", 16, 7168, 7168, "e4m3", None),      # the target's shape (the policy's segments)
         ("fp8_quant_gemm", 1, 7168, 7168, "e4m3", None),
         ("rmsnorm_gemm", 16, 4096, 4096, "bfloat16", None),
         ("fp8_quant_gemm", 37, 1001, 80, "bfloat16", 3),       # three row blocks, a partial column block (lines
         ("fp8_quant_gemm", 5, 320, 144, "e4m3", 4),            # shared by two tiles' partial sums), an empty segment
         ("rmsnorm_gemm", 9, 4104, 4104, "bfloat16", 7)]
SMALL = CASES[3:5]
SIMULATED = [("fp8_quant_gemm", 19, 300, 80, "bfloat16", 3), ("fp8_quant_gemm", 1, 320, 144, "e4m3", 4)]
BACKEND = "cuda"


def run(name, rows, length, n, dtype, segments, seed=0) -> bool:
    rng = np.random.default_rng(seed)
    c = workloads.get(name).cascade
    f = ra.derive(c)
    inputs, wide, params = inputs_of(c, rows, length, n, dtype, False, rng)
    outs, specs, built = {}, {}, columns_mma.OWN_FACTORS_ROWS
    for own in (True, False):
        columns_mma.OWN_FACTORS_ROWS = rows if own else 0  # (read when the call is planned)
        try:
            kernel = ra.compile(f, BACKEND, "columns_mma", segments=segments)
            specs[own] = kernel._planned(inputs, params, None)[0]
            calls = [np.asarray(kernel(inputs, params)["y"], np.float64) for _ in range(3)]
        finally:
            columns_mma.OWN_FACTORS_ROWS = built
        outs[own] = calls
        if own:
            owned = kernel
    got, combined = outs[True], outs[False]
    picked = sorted({0, rows // 2, rows - 1})  # (a reference of a few rows: they are independent)
    want = evaluate(c, {k: v[picked] if v.shape[0] == rows else v for k, v in wide.items()},
                    {k: np.float64(v) for k, v in params.items()}, None)["y"]
    # (FP8's factors are exact; RMSNorm's are rounded to bfloat16, 2^-9 each, as PyTorch rounds its normalised row)
    tol = 1e-5 if name == "fp8_quant_gemm" else 2.0 ** -8
    err = float(np.max(np.abs(got[0][picked] - want)) / np.max(np.abs(want)))
    same = all(np.array_equal(g, combined[0]) for g in got + combined)
    ok = specs[True].own_factors and not specs[False].own_factors and same and err <= tol
    line = (f"{name} {rows}x{length}x{n} {dtype}, {specs[True].segments} segments: max error {err:.2e}; three calls "
            f"each, against the factors' kernel: {'same' if same else 'DIFFERENT'}")
    try:
        import torch
        if BACKEND != "cuda":
            raise ImportError
    except ImportError:
        print(f"{'PASS' if ok else 'FAIL'} {line}; torch not installed", flush=True)
        return ok
    tin = {s.name: torch.from_numpy(np.asarray(to_float(inputs[s.name]), np.float32)).cuda().to(
        torch.float8_e4m3fn if dtype == "e4m3" and s.size is not None else torch.bfloat16) for s in c.inputs}
    agree = True
    columns_mma.OWN_FACTORS_ROWS = rows  # (the torch call is planned at its first call: its own factors too)
    w = next(s.name for s in c.inputs if s.size is not None)
    # the weights K-major too (a Linear layer's W.T[None], read as they lie where the axis is whole tiles of 64): the
    # products' terms in another order, so within float32's rounding of the sums, not bit for bit
    lying = dict(tin, **{w: tin[w][0].t().contiguous().t()[None]})
    try:
        for _ in range(3):
            for given, exact in ((tin, True), (lying, False)):
                y = owned(given, params)["y"]
                t = y.float().cpu().numpy().astype(np.float64)
                err = float(np.max(np.abs(t - got[0])) / np.max(np.abs(got[0])))
                if y.dtype != torch.float32:  # (outputs in the input's 16-bit type)
                    exact, err = False, err / 2.0 ** -8 * 1e-6
                agree &= np.array_equal(t, got[0]) if exact else err <= 1e-6
    finally:
        columns_mma.OWN_FACTORS_ROWS = built
    ok &= agree
    verdict = "agree" if agree else "DIFFER"
    print(f"{'PASS' if ok else 'FAIL'} {line}; torch calls (weights K-major too): {verdict}", flush=True)
    return ok


def main() -> int:
    global BACKEND
    cases = SMALL if "--small" in sys.argv else CASES
    if "--simulator" in sys.argv:
        BACKEND, cases = "cudasim", SIMULATED
    return 1 if sum(not run(*case) for case in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
