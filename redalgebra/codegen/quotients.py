"""``fp8(n / d)`` by a row constant ``d``: rounded as the division is, without dividing.

A per-token quantiser divides every element by the row's scale (``fp8(x * 448 / max(a, 1e-12))``), and the
reference divides: multiplying by a hoisted reciprocal instead rounds otherwise at some e4m3 boundaries (exact ties
among them, which bfloat16 inputs can reach), and an IEEE division an element costs its instructions (on the H200 a
quantiser of 16384 × 7168 bfloat16 took 142.7 µs divided, 108.2 multiplying by the reciprocal; ``gpu/README.md``).
So the ``rows`` kernels write::

    fp8(n * d**-1)  ->  fp8(Quotient8(n, d, Reciprocal8(d)))

``d`` and ``Reciprocal8(d)`` (``1/d`` correctly rounded, or NaN out of range) are row constants, hoisted as any other;
``Quotient8`` prints as ``rt_q8(n, d, r)``: the product ``n * r`` corrected twice by its remainder (two FMAs each),
which is the float32 quotient itself wherever e4m3 can tell (``codegen.helpers.QUOTIENT_HELPERS`` says why, from
Markstein's theorem). Whatever stores the value (e4m3 bytes, or wider after ``rt_fp8``), it is that quotient's
rounding. A quotient whose divisor varies along the row is ``Quotient8(n, d)``, divided whole, as written.

Only the ``rows`` kernels rewrite so; the other strategies print ``fp8(x * 448 / a)`` as divisions, except the fused
incremental forms, which multiply by the running scale's reciprocal (exact in ℝ only, as they are documented).
"""

from __future__ import annotations

import sympy as sp

from ..ir.functions import RoundE4M3


class Quotient8(sp.Function):
    """``n / d`` up to e4m3 rounding (codegen only): ``(n, d, Reciprocal8(d))``, or ``(n, d)`` where it is to be
    divided (printed ``n/d``: kept apart so that the hoisting keeps ``d`` a divisor, not its reciprocal)."""

    nargs = (2, 3)

    def _eval_is_real(self):
        return True


class CheckedQuotient8(Quotient8):
    """``Quotient8(n, d, r)`` that tests ``r`` itself, an element at a time (``rt_q8c``: divided where it is NaN), where
    the kernel does not test it once a row (values stored wider: measured faster so on the H200)."""

    nargs = 3


class Reciprocal8(sp.Function):
    """``1 / d`` correctly rounded, or NaN where ``|d|`` is out of the fast quotient's range (codegen only)."""

    nargs = 1

    def _eval_is_real(self):
        return True


def e4m3_quotients(expr: sp.Expr, fixed) -> sp.Expr:
    """``expr`` with every ``fp8(n * d**-k…)`` whose divisors read only names for which ``fixed(names)`` holds (and
    whose numerator does not) written ``fp8(Quotient8(n, d, Reciprocal8(d)))``. The numerator and the
    divisor split as the printer splits a product (a rational's denominator divides), so each is computed in the order
    it prints. A quotient whose divisor varies along the row is ``fp8(Quotient8(n, d))`` whole, divided: ``x / (a *
    y)``, not ``(x / y) / a`` nor ``x * (1/a) / y``, which the hoisting of ``1/a`` would make of it."""
    def names(e) -> set:
        return {s.name for s in e.free_symbols}

    def rewrite(node):
        num, den = [], []
        varying = False
        for f in sp.Mul.make_args(node.args[0]):
            if f.is_Pow and f.exp.is_Integer and f.exp < 0 and names(f):
                varying |= not fixed(names(f))
                den.append(f.base if f.exp == -1 else sp.Pow(f.base, -f.exp, evaluate=False))
            elif f.is_Rational and not f.is_Integer and max(abs(f.p), f.q) <= 2**24:
                if f.p != 1:
                    num.append(sp.Integer(f.p))
                den.append(sp.Integer(f.q))
            else:
                num.append(f)
        n = sp.Mul(*num)
        if not any(names(f) for f in den) or not names(n) or (fixed(names(n)) and not varying):
            return node
        d = sp.Mul(*den, evaluate=False) if len(den) > 1 else den[0]
        return RoundE4M3(Quotient8(n, d) if varying else Quotient8(n, d, Reciprocal8(d)))

    return expr.replace(lambda e: isinstance(e, RoundE4M3), rewrite)
