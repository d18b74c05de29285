"""Kernel source from a FusedCascade: pure functions, no numba import.

Owns: the float32 SymPy printer (:mod:`.printer`), the per-row statements
built from the derived programs (:mod:`.emit`), device helpers
(:mod:`.helpers`), the kernel skeletons (:mod:`.kernels`), kernels as statement trees
(:mod:`.tree`, printed per back end; :mod:`.states` the kinds of reduction state, :mod:`.module`
the module around them) and the registry of strategies (:mod:`.strategies`, one module per family).

May import: :mod:`redalgebra.ir`, :mod:`redalgebra.derive`, sympy; the
generated text imports numba, this package never does.
"""

from .emit import Spec
from .kernels import KernelSource, generate
from .strategies import REGISTRY, Problem, Strategy

__all__ = ["KernelSource", "Problem", "REGISTRY", "Spec", "Strategy", "generate"]
