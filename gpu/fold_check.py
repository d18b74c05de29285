"""``columns_mma``'s segments added by the last block of each tile (``columns_mma.FOLD_SEGMENTS``) on the GPU: each
shape's outputs against the same module with the combine kernel (bit for bit: the same sums in the same order) and
against the float64 reference, through NumPy inputs and through torch tensors, each called three times (the tile
counts are kept scratch, not zero-filled by the call: the factors' kernel zeroes them every call).

    python3 gpu/fold_check.py
    compute-sanitizer --tool memcheck python3 gpu/fold_check.py --small
    NUMBA_ENABLE_CUDASIM=1 python3 gpu/fold_check.py --simulator     # the script itself, on a machine without a GPU

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
    outs, specs, built = {}, {}, columns_mma.FOLD_SEGMENTS
    for fold in (True, False):
        columns_mma.FOLD_SEGMENTS = fold  # (read when the module is built)
        try:
            kernel = ra.compile(f, BACKEND, "columns_mma", segments=segments)
            specs[fold] = kernel._planned(inputs, params, None)[0]
            calls = [np.asarray(kernel(inputs, params)["y"], np.float64) for _ in range(3)]
        finally:
            columns_mma.FOLD_SEGMENTS = built
        outs[fold] = calls
        if fold:
            folded = kernel
    got, combined = outs[True], outs[False]
    picked = sorted({0, rows // 2, rows - 1})  # (a reference of a few rows: they are independent)
    want = evaluate(c, {k: v[picked] if v.shape[0] == rows else v for k, v in wide.items()},
                    {k: np.float64(v) for k, v in params.items()}, None)["y"]
    # (FP8's factors are exact; RMSNorm's are rounded to bfloat16, 2^-9 each, as PyTorch rounds its normalised row)
    tol = 1e-5 if name == "fp8_quant_gemm" else 2.0 ** -8
    err = float(np.max(np.abs(got[0][picked] - want)) / np.max(np.abs(want)))
    same = all(np.array_equal(g, combined[0]) for g in got + combined)
    ok = specs[True].segments > 1 and same and err <= tol
    line = (f"{name} {rows}x{length}x{n} {dtype}, {specs[True].segments} segments: max error {err:.2e}; three calls "
            f"each, against the combine kernel: {'same' if same else 'DIFFERENT'}")
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
    columns_mma.FOLD_SEGMENTS = True  # (the torch call's module is built at its first call: folded too)
    try:
        for _ in range(3):  # (the kept counts: the same stream's scratch, call after call)
            t = folded(tin, params)["y"]
            agree &= np.array_equal(t.float().cpu().numpy().astype(np.float64), got[0]) if t.dtype == torch.float32 \
                else float(np.max(np.abs(t.float().cpu().numpy() - got[0])) / np.max(np.abs(got[0]))) <= 2.0 ** -8
    finally:
        columns_mma.FOLD_SEGMENTS = built
    ok &= agree
    print(f"{'PASS' if ok else 'FAIL'} {line}; torch calls: {'agree' if agree else 'DIFFER'}", flush=True)
    return ok


def main() -> int:
    global BACKEND
    cases = SMALL if "--small" in sys.argv else CASES
    if "--simulator" in sys.argv:
        BACKEND, cases = "cudasim", SIMULATED
    return 1 if sum(not run(*case) for case in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
