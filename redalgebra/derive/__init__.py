"""The derivation engine: fusion analysis and the fused, incremental and merge forms.

Owns: preparation of bodies and sign facts (:mod:`.prepare`), the analysis
that chooses ⊗ by proof (:mod:`.analysis`), stable-simplification rules
(:mod:`.rules`), straight-line programs (:mod:`.program`), the derivation of
:class:`FusedCascade` (:mod:`.fused`) and NumPy evaluators of every derived
form (:mod:`.numeric`).

May import: :mod:`redalgebra.ir`, :mod:`redalgebra.algebra`, sympy, numpy;
never numba, torch or matplotlib.
"""

from .analysis import Analysis, ReductionAnalysis, analyze
from .fused import FusedCascade, derive, unfused
from .numeric import Evaluator, random_bounds
from .prepare import real_arithmetic

__all__ = ["Analysis", "Evaluator", "FusedCascade", "ReductionAnalysis", "analyze", "derive", "random_bounds",
           "real_arithmetic", "unfused"]
