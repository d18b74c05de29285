"""The frozen IR of cascades.

Owns: monoid values (:mod:`.monoid`), statements and :class:`Cascade`
(:mod:`.nodes`), the text-format parser and printer, the parser's limits
(:mod:`.limits`: bounded work for any text), the builder, the dependency
graph (:mod:`.graph`) and the float64 reference evaluator.

May import: sympy, networkx, numpy and :mod:`redalgebra.errors`; never numba,
torch or matplotlib (drawing lives in :mod:`redalgebra.plotting`).
"""

from .builder import CascadeBuilder
from .functions import Dot, VSum, indicator, where
from .graph import build_graph, reduction_dependencies, reduction_graph, reduction_levels
from .monoid import ADD, LOGADDEXP, MAX, MIN, MUL, REDUCERS, Monoid, topk
from .nodes import POS, Cascade, Input, Let, Output, Param, Reduction, symbol
from .parser import parse
from .printer import to_latex, to_text
from .reference import evaluate

__all__ = ["ADD", "LOGADDEXP", "MAX", "MIN", "MUL", "POS", "REDUCERS", "Cascade", "CascadeBuilder", "Dot", "Input",
           "Let", "Monoid", "Output", "Param", "Reduction", "VSum", "build_graph", "evaluate", "indicator", "parse",
           "reduction_dependencies", "reduction_graph", "reduction_levels", "symbol", "to_latex", "to_text", "topk",
           "where"]
