"""Kernel source from a FusedCascade: pure functions, no numba import.

Owns: the float32 SymPy printer (:mod:`.printer`), the per-row statements
built from the derived programs (:mod:`.emit`), device helpers
(:mod:`.helpers`) and the kernel skeletons (:mod:`.kernels`).

May import: :mod:`redalgebra.ir`, :mod:`redalgebra.derive`, sympy; the
generated text imports numba, this package never does.
"""

from .emit import Spec
from .kernels import STRATEGIES, KernelSource, generate

__all__ = ["STRATEGIES", "KernelSource", "Spec", "generate"]
