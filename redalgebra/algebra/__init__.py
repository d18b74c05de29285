"""The monoid catalogue and the prover.

Owns: the catalogue (:mod:`.catalogue`), proof values (:mod:`.proof`), the
identity prover (:mod:`.prover`), the laws of monoids and distributivity
(:mod:`.laws`) and the time budgets that turn a long computation into an
"unknown" verdict (:mod:`.budget`).

May import: :mod:`redalgebra.ir`, sympy, numpy; never numba, torch or
matplotlib.
"""

from .catalogue import lookup, monoids, user_monoid
from .laws import monoid_laws, prove_associative, prove_commutative, prove_distributes, prove_identity, prove_monoid
from .proof import Counterexample, Proof
from .prover import prove_equal

__all__ = ["Counterexample", "Proof", "lookup", "monoid_laws", "monoids", "prove_associative", "prove_commutative",
           "prove_distributes", "prove_equal", "prove_identity", "prove_monoid", "user_monoid"]
