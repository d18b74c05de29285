"""``columns_wgmma``'s module launched in chunks of rows (``codegen/strategies/chunks.py``) on the GPU: each shape's
outputs against the same module launched whole (bit for bit: the same kernels on slices of the rows) and, at the rows on
both sides of each chunk's edge, against the float64 reference, through NumPy inputs and through torch tensors (a second
call with other tensors: each chunk's pointers rebound at its rows' offset).

    python3 gpu/chunks_check.py [--small] [--from N]
    compute-sanitizer --tool memcheck python3 gpu/chunks_check.py --small
    NUMBA_ENABLE_CUDASIM=1 python3 gpu/chunks_check.py --simulator     # the script itself, on a machine without a GPU

Prints one line per case and exits 1 if any is off.
"""

from __future__ import annotations

import sys

import numpy as np

import redalgebra as ra
from redalgebra import evaluate, workloads
from redalgebra.codegen.strategies import chunks
from redalgebra.runtime.formats import as_bfloat16, as_e4m3, to_float

#: (workload, rows, length, columns, weights' dtype, out_dtype, a param a row)
CASES = [("rmsnorm_gemm", 2000, 1000, 4104, "bfloat16", None, True),    # odd length (the factors' padding), 3 chunks
         ("rmsnorm_gemm", 4096, 4096, 4096, "bfloat16", "bfloat16", False),  # the target's shape, 4 chunks
         ("fp8_quant_gemm", 3000, 4096, 4096, "bfloat16", None, False),  # FP8's factors (exact), a partial last chunk
         ("fp8_quant_gemm", 2500, 1001, 4104, "e4m3", None, False)]      # e4m3 weights widened once, then the chunks
SMALL = [("rmsnorm_gemm", 1900, 200, 4104, "bfloat16", None, True)]      # 3 chunks of 896 rows (17 column blocks)
#: (the simulator's blocks of 16 rows and 64 columns, two multiprocessors: chunks of 16 rows)
SIMULATED = [("rmsnorm_gemm", 40, 100, 72, "bfloat16", None, True),
             ("fp8_quant_gemm", 70, 130, 64, "e4m3", None, False)]
BACKEND = "cuda"


def inputs_of(c, rows, length, n, dtype, per_row, rng):
    inputs, wide = {}, {}
    for s in c.inputs:
        a = rng.normal(size=(rows, length) if s.size is None else (1, length, n)).astype(np.float32)
        if s.size is None and s.name != "x":  # (RMSNorm's g: one row for every row)
            a = a[:1]
        inputs[s.name] = as_e4m3(a) if dtype == "e4m3" and s.size is not None else as_bfloat16(a)
        w = np.asarray(to_float(inputs[s.name]), np.float64)
        wide[s.name] = np.broadcast_to(w, (rows,) + w.shape[1:]) if s.size is None else w
    params = {}
    for p in c.params:
        v = np.float32(length if p.name == "h" else 1e-5)
        params[p.name] = rng.uniform(0.5, 2.0, rows).astype(np.float32) * v if per_row and p.name == "h" else v
    return inputs, wide, params


def run(name, rows, length, n, dtype, out_dtype, per_row, seed=0) -> bool:
    rng = np.random.default_rng(seed)
    c = workloads.get(name).cascade
    f = ra.derive(c)
    inputs, wide, params = inputs_of(c, rows, length, n, dtype, per_row, rng)
    chunked = ra.compile(f, BACKEND, "columns_wgmma", out_dtype=out_dtype)
    spec = chunked._planned(inputs, params, None)[0]
    got = np.asarray(chunked(inputs, params)["y"], np.float64)
    chunks.ROW_CHUNKS = False
    try:
        plain = ra.compile(f, BACKEND, "columns_wgmma", out_dtype=out_dtype)
        assert plain._planned(inputs, params, None)[0].row_chunk == 0
        whole = np.asarray(plain(inputs, params)["y"], np.float64)
    finally:
        chunks.ROW_CHUNKS = True
    # the float64 reference of the rows on each side of every chunk's edge (at most 16: a reference of every row of
    # these shapes would not fit the machine's memory; the rows are independent)
    edges = sorted({r for r0 in range(0, rows, spec.row_chunk or rows) for r in (r0, r0 + 1, r0 - 1) if 0 <= r < rows}
                   | {rows - 1})[:16]
    sub = {k: v[edges] if v.shape[0] == rows else v for k, v in wide.items()}
    want = evaluate(c, sub, {k: np.asarray(v, np.float64)[edges] if np.ndim(v) else np.float64(v)
                             for k, v in params.items()}, None)["y"]
    # (FP8's factors are exact; RMSNorm's are rounded to bfloat16, 2^-9 each, and a row's sum of them can lose a
    # little more than that against its largest output; 16-bit outputs are rounded once more)
    tol = (1e-5 if name == "fp8_quant_gemm" else 2.0 ** -8) + (2.0 ** -8 if out_dtype else 0.0)
    err = float(np.max(np.abs(got[edges] - want)) / np.max(np.abs(want)))
    same = np.array_equal(got, whole)
    ok = spec.row_chunk > 0 and same and err <= tol
    line = (f"{'PASS' if ok else 'FAIL'} {name} {rows}x{length}x{n} {dtype} out {out_dtype}: chunks of "
            f"{spec.row_chunk} rows, max_registers {spec.max_registers}; max error {err:.2e}; as launched whole: "
            f"{'same' if same else 'DIFFERENT'}")
    try:
        import torch
        if BACKEND != "cuda":
            raise ImportError
    except ImportError:
        print(line + "; torch not installed")
        return ok
    for k in range(2):  # two calls with other tensors: the chunks' pointers rebound
        scale = 1.0 + k
        tin = {}
        for s in c.inputs:
            v = inputs[s.name]
            t = torch.from_numpy(np.asarray(to_float(v), np.float32)).cuda()
            t = (t * scale if s.name == "x" else t)
            tin[s.name] = t.to(torch.float8_e4m3fn) if dtype == "e4m3" and s.size is not None else t.to(torch.bfloat16)
        ref_in = {s.name: (as_bfloat16(tin[s.name].float().cpu().numpy()) if tin[s.name].dtype == torch.bfloat16
                           else inputs[s.name]) for s in c.inputs}
        tout = chunked(tin, {p: torch.as_tensor(v).cuda() if np.ndim(v) else v for p, v in params.items()})["y"]
        host = np.asarray(chunked(ref_in, params)["y"], np.float64)
        got_t = tout.float().cpu().numpy().astype(np.float64)
        agree = np.array_equal(got_t, host) if out_dtype or tout.dtype == torch.float32 \
            else float(np.max(np.abs(got_t - host)) / np.max(np.abs(host))) <= 2.0 ** -8
        ok &= agree
        line += f"; torch call {k}: {'agrees' if agree else 'DIFFERS'}"
    print(line.replace("PASS", "PASS" if ok else "FAIL", 1), flush=True)
    return ok


def main() -> int:
    global BACKEND
    bad, cases = 0, SMALL if "--small" in sys.argv else CASES
    if "--simulator" in sys.argv:
        from redalgebra.codegen import strategies

        BACKEND, cases, strategies.SMS, chunks.IN_SIMULATOR = "cudasim", SIMULATED, 2, True
    if "--from" in sys.argv:  # the cases from the N-th on (0-based: a run cut by a time limit, resumed)
        cases = cases[int(sys.argv[sys.argv.index("--from") + 1]):]
    for case in cases:
        bad += not run(*case)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
