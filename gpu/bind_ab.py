"""The public call's host time with a binding that sets only the pointers that changed (``DriverStep.bind``, as
committed) against one that sets every pointer on every call (the binding before), alternating in one process.

    python3 gpu/bind_ab.py [--calls 2000] [--rounds 3]

For the small cases whose calls the host bounds: RMSNorm + GEMM and FP8 quantisation + GEMM at 16 tokens
(``columns_mma``, three kernels). Prints, a round each, the wall time per call back to back and the host's time per
call in bursts (``call_cost.per_call_us``, ``host_us``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import prepared_case  # noqa: E402
from call_cost import host_us, per_call_us  # noqa: E402
from cases import as_tensors  # noqa: E402

from redalgebra.runtime.driver import DriverStep  # noqa: E402

CASES = (("normgemm", 1, "columns_mma"), ("fp8gemm", 7, "columns_mma"))


def every_pointer(self, pointers: dict) -> None:
    """The binding before: every named pointer set on every call (and recorded as held, so that the committed binding
    stays right when the rounds switch back to it)."""
    for name, fields in self.pointers.items():
        ptr = pointers.get(name)
        if ptr is not None:
            self._held[name] = ptr
            for field in fields:
                field.value = ptr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    changed = DriverStep.bind
    for group, index, config in CASES:
        case, _, kernel, _ = prepared_case(group, index, config)
        inputs, params, _ = case.copies[0]
        tensors = as_tensors(inputs)
        call = lambda: kernel(tensors, params)  # noqa: E731
        call()
        for r in range(args.rounds):
            for label, bind in (("changed pointers", changed), ("every pointer", every_pointer)):
                DriverStep.bind = bind
                wall, host = per_call_us(call, args.calls), host_us(call)
                print(f"{case.name} {case.shape} {config} round {r}: {label:>16}: wall {wall:6.1f} us a call, "
                      f"host {host:6.1f} us", flush=True)
        DriverStep.bind = changed
    return 0


if __name__ == "__main__":
    sys.exit(main())
