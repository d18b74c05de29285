"""What a row tile costs besides its tiles: prefill attention (d = 128, 64 heads of ``Q`` queries) timed at several
key lengths, with and without a causal mask, on one configuration, and each family fitted to

    time = blocks' share of (F · row tiles + t · tiles)

(least squares over the lengths; ``F``: a row tile's own cost — its query staged, the pipeline's fill and drain, its
outputs —, ``t``: a tile's), both per multiprocessor, in microseconds.

    python3 gpu/rowtile_cost.py [--config wgmma@384x128] [--queries 2048] [--lengths 512,1024,2048,4096]

With a causal mask the queries are the last ``Q`` positions of ``L`` keys, so a row tile of rows ``i`` sees
``(L - Q) / 128`` whole tiles, then its diagonal's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np



def tile_counts(queries: int, length: int, causal: bool, bm: int = 128, bn: int = 128) -> tuple[int, int]:
    """(row tiles, live tiles) of one head: a causal row tile sees the keys up to its last row's position."""
    rows = -(-queries // bm)
    if not causal:
        return rows, rows * -(-length // bn)
    live = sum(-(-(length - queries + min(queries, (r + 1) * bm)) // bn) for r in range(rows))
    return rows, live


def fit(xs: list, ys: list) -> tuple[float, float, float]:
    """(F, t, the worst relative misfit) of ``ys ≈ F · rows + t · tiles`` for ``xs`` = [(rows, tiles), ...]."""
    (f, t), *_ = np.linalg.lstsq(np.array(xs, float), np.array(ys, float), rcond=None)
    model = np.array(xs, float) @ (f, t)
    return float(f), float(t), max(abs(a - b) / b for a, b in zip(model, ys))


def main(argv) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench import Runner
    from cases import case_attention

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="wgmma@384x128")
    ap.add_argument("--queries", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--lengths", default="512,1024,2048,3072,4096")
    args = ap.parse_args(argv)
    runner = Runner(1.0, Path("/nonexistent/autotune.json"), True)
    import torch
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for causal in (False, True):
        xs, ys = [], []
        for length in (int(x) for x in args.lengths.split(",")):
            if length < args.queries and causal:
                continue
            case = case_attention(1, args.heads, args.queries, length, 128, (args.config,), "causal_attention" if causal
                                  else "attention", "rowtile", causal=causal)
            row = runner.ours(case, args.config, "candidate", case.reps)
            rt, live = tile_counts(args.queries, length, causal)
            xs.append((rt * args.heads / sms, live * args.heads / sms))
            ys.append(row.ms * 1e3)
            print(f"{'causal' if causal else 'full  '} Q{args.queries} L{length}: {row.ms:.4f} ms ({row.valid}, err "
                  f"{row.max_err:.1e}); a multiprocessor's row tiles {xs[-1][0]:.2f}, tiles {xs[-1][1]:.1f}", flush=True)
        if len(xs) >= 2:
            f, t, worst = fit(xs, ys)
            print(f"  fit ({'causal' if causal else 'full'}): F = {f:.2f} us a row tile, t = {t:.3f} us a tile "
                  f"(worst misfit {100 * worst:.1f} %)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
