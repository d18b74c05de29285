"""The public call made again and again on torch tensors, every call's outputs against float64: what a module keeps
between calls (scratch it writes whole, counters each launch sets back to zero) must not leak from one call into the
next.

    python3 gpu/repeat_check.py fp8gemm 7 columns_mma [fp8gemm 6 columns_mma ...]   # GROUP INDEX CONFIG, repeated

GROUP, INDEX and CONFIG as for ``kernel_steps.py``. Each case is called six times, its input copies in turn (two
streams' worth: the current stream, then a side stream, then the current one again); prints one line per case and
exits 1 if any call is off by more than the case's tolerance.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import prepared_case  # noqa: E402
from cases import as_tensors  # noqa: E402


def worst_error(case, got: dict, want: dict) -> float:
    worst = 0.0
    for name in case.outputs:
        g, ref = got[name].double(), want[name].reshape(got[name].shape)
        worst = max(worst, float(((g - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()))
    return worst


def main(argv) -> int:
    bad = 0
    side = torch.cuda.Stream()
    for at in range(0, len(argv), 3):
        group, index, config = argv[at], int(argv[at + 1]), argv[at + 2]
        case, _, kernel, _ = prepared_case(group, index, config)
        copies = [(as_tensors(i), p, case.reference(*t)) for i, p, t in case.copies[:2]]
        errors = []
        for call in range(6):
            tensors, params, want = copies[call % len(copies)]
            stream = side if call in (2, 3) else torch.cuda.current_stream()
            with torch.cuda.stream(stream):
                got = kernel(tensors, params)
            stream.synchronize()
            errors.append(worst_error(case, got, want))
        ok = max(errors) <= case.tol
        bad += not ok
        print(f"{'PASS' if ok else 'FAIL'} {case.name} {case.shape} {config}: errors "
              f"{' '.join(f'{e:.1e}' for e in errors)} (tol {case.tol:.0e})", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
