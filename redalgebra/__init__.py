"""redalgebra: fuse cascaded reductions, with proofs.

The public API is this one list; everything else is reachable through the
layer packages (``redalgebra.ir``, ``redalgebra.algebra``, …), which data
flows through in that order (see ``redalgebra/README.md``).
"""

from . import workloads
from .algebra import (Counterexample, Proof, monoids, prove_distributes, prove_equal, prove_monoid,
                      user_monoid)
from .derive import Analysis, FusedCascade, analyze, derive
from .errors import (BudgetExhausted, CascadeError, CascadeSyntaxError, EvaluationError, LimitError, MonoidError,
                     NotFusableError, RedalgebraError)
from .ir import Cascade, CascadeBuilder, build_graph, evaluate, parse, reduction_dependencies
from .plotting import draw
from .runtime import as_bfloat16, as_e4m3, compile, torch_op  # noqa: A004 - compile: the contract's name (DESIGN §4)

__version__ = "0.1.0"

__all__ = [
    # ir
    "Cascade", "CascadeBuilder", "build_graph", "draw", "evaluate", "parse", "reduction_dependencies",
    # algebra
    "Counterexample", "Proof", "monoids", "prove_distributes", "prove_equal", "prove_monoid", "user_monoid",
    # derive
    "Analysis", "FusedCascade", "analyze", "derive",
    # runtime
    "as_bfloat16", "as_e4m3", "compile", "torch_op",
    # catalogue
    "workloads",
    # errors
    "BudgetExhausted", "CascadeError", "CascadeSyntaxError", "EvaluationError", "LimitError", "MonoidError",
    "NotFusableError", "RedalgebraError",
]
