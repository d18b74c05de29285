"""numba's disk cache of the generated kernels, across processes: run twice with the same ``REDALGEBRA_CACHE``.

    export REDALGEBRA_CACHE=$(mktemp -d)/kernels
    python3 gpu/cache_check.py --out /tmp/outs      # compiles: the first call of each case takes seconds
    python3 gpu/cache_check.py --out /tmp/outs      # loads the kernels numba kept: the first call is fast

For each case (prefill attention at d = 128 on ``wgmma``, FP8 quantisation + GEMM at one token on ``columns_mma``
with e4m3 weights, safe softmax on ``rows``), the wall clock of the first call (generation, compilation or loading,
launch, synchronised) and of the second, and the outputs: written by the first process, compared bit for bit by
the second. Prints the cache folder's numba files.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redalgebra as ra  # noqa: E402
from redalgebra.runtime.cache import cache_dir, numba_cache  # noqa: E402


def cases():
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape, dtype=torch.float16, scale=1.0):
        return (torch.randn(*shape, generator=g, device="cuda") * scale).to(dtype)

    heads, length, d = 2, 1024, 128
    k, v = randn(heads, length, d), randn(heads, length, d)
    q = randn(heads * length, d, dtype=torch.float32)
    yield "attention wgmma d128", "attention", "wgmma", {"k": k, "v": v}, {"q": q, "scale": d ** -0.5}
    x = randn(1, 7168, dtype=torch.bfloat16)
    w = randn(1, 7168, 7168, scale=0.05).to(torch.float8_e4m3fn)
    yield "fp8 quant + gemm M1 e4m3 columns_mma", "fp8_quant_gemm", "columns_mma", {"x": x, "w": w}, {}
    yield "safe softmax rows", "safe_softmax", "rows", {"x": randn(64, 4097, dtype=torch.bfloat16)}, {}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder of the outputs (written, or compared when there)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    folder = cache_dir()
    print(f"cache folder {folder} (numba's disk cache {'on' if numba_cache(str(folder / 'x.py')) else 'off'})")
    bad = 0
    for label, name, strategy, inputs, params in cases():
        kernel = ra.compile(ra.derive(ra.workloads.get(name).cascade), "cuda", strategy)
        times = []
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            got = kernel(inputs, params)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        path = out / (label.replace(" ", "_") + ".pt")
        if path.exists():
            want = torch.load(path)
            same = all(torch.equal(got[k].cpu(), want[k]) for k in want)
            bad += not same
            verdict = "bit for bit as the first process" if same else "DIFFERS from the first process"
        else:
            torch.save({k: t.cpu() for k, t in got.items()}, path)
            verdict = "written"
        print(f"{label:40} first call {times[0]:7.2f} s, second {times[1] * 1e3:7.2f} ms; outputs {verdict}", flush=True)
    kept = sorted(p.name for p in folder.rglob("*") if p.suffix in (".nbi", ".nbc"))
    print(f"numba's files in {folder}: {len(kept)} ({sum(p.endswith('.nbc') for p in kept)} compiled kernels)")
    print(f"REDALGEBRA_NUMBA_CACHE={os.environ.get('REDALGEBRA_NUMBA_CACHE', '(unset)')}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
