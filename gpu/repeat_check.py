"""The public call made again and again on torch tensors, every call's outputs against float64: what a module keeps
between calls (scratch it writes whole before reading it, kept per stream) must not leak from one call into the
next.

    python3 gpu/repeat_check.py fp8gemm 7 columns_mma [fp8gemm 6 columns_mma ...]   # GROUP INDEX CONFIG, repeated

GROUP, INDEX and CONFIG as for ``kernel_steps.py``. Each case is called six times, its input copies in turn, two calls
on the current stream, two on a side stream, two on the current one again (one after another: this checks what is
kept, not calls running at once); each call's outputs are held to the case's tolerance as ``bench.py`` validates (a NaN
where the reference has none fails). Prints one line per case and exits 1 if any call is off.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import prepared_case, worst_error  # noqa: E402
from cases import as_tensors  # noqa: E402


def main(argv) -> int:
    if not argv or len(argv) % 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
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
        ok = all(e <= case.tol for e in errors)
        bad += not ok
        print(f"{'PASS' if ok else 'FAIL'} {case.name} {case.shape} {config}: errors "
              f"{' '.join(f'{e:.1e}' for e in errors)} (tol {case.tol:.0e})", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
