"""The one catalogue of cascades the tests parametrize over, and random inputs for any cascade."""

from functools import lru_cache

import numpy as np

from redalgebra import workloads
from redalgebra.derive import derive

WORKLOADS = workloads.names()
FUSABLE = workloads.names(fusable=True)
NOT_FUSABLE = workloads.names(fusable=False)


@lru_cache(maxsize=None)
def fused(name: str):
    """``derive`` of a catalogue cascade, once per test session."""
    return derive(workloads.get(name).cascade)


def random_inputs(cascade, rows: int, length: int, rng, scale: float = 3.0, dtype=np.float64):
    """Normal inputs of the cascade's layout (their magnitudes, signed as declared: ``input x >= 0``); vector sizes
    3, 4, …; params positive where signed; integer params (a label, a query's position) one per row, in
    ``[0, length)``."""
    dims, inputs = {}, {}
    for s in cascade.inputs:
        shape = (rows, length) if s.size is None else (rows, length, dims.setdefault(s.size, 3 + len(dims)))
        x = rng.normal(size=shape) * scale
        sign = getattr(s, "sign", None)
        x = abs(x) if sign in (">=0", ">0") else -abs(x) if sign in ("<=0", "<0") else x
        inputs[s.name] = x.astype(dtype)
    params = {}
    for p in cascade.params:
        if p.integer:
            params[p.name] = rng.integers(0, length, size=rows)
        elif p.size is None:
            params[p.name] = abs(rng.normal()) + 0.1
        else:
            params[p.name] = rng.normal(size=dims.setdefault(p.size, 3 + len(dims))).astype(dtype)
    return inputs, params
