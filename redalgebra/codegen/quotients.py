"""``fp8(n / d)`` by a row constant ``d``: the division made only where a product would round otherwise.

A per-token quantiser divides every element by the row's scale (``fp8(x * 448 / max(a, 1e-12))``), and the
reference divides: multiplying by a hoisted reciprocal instead rounds differently at some e4m3 boundaries, and an
IEEE division an element is the quantiser's largest cost on the GPU (an H200 measurement: 44 µs against 34 µs with
the reciprocal, M4096 × K7168). The kernels keep the division's result and most of the product's speed:

    fp8(n * d**-1)  ->  fp8(Quotient8(n, d, Reciprocal8(d)))

``d`` and ``Reciprocal8(d)`` (``1/d`` correctly rounded) are row constants, hoisted as any other; ``Quotient8`` prints
as ``rt_q8(n, d, r)``: a float32 that rounds to e4m3 as ``n / d`` does (the product ``n * r`` where that is sure, the
quotient elsewhere: ``codegen.helpers.QUOTIENT_HELPERS`` and ``runtime.intrinsics.e4m3_sure`` say why). Only
``fp8()`` of a quotient is rewritten: nothing else rounds to so few bits that the product's error could show.
"""

from __future__ import annotations

import sympy as sp

from ..ir.functions import RoundE4M3


class Quotient8(sp.Function):
    """``n / d`` up to e4m3 rounding (codegen only): ``(n, d, Reciprocal8(d))``."""

    nargs = 3

    def _eval_is_real(self):
        return True


class Reciprocal8(sp.Function):
    """``1 / d`` correctly rounded, or NaN where ``|d|`` is out of the fast quotient's range (codegen only)."""

    nargs = 1

    def _eval_is_real(self):
        return True


def e4m3_quotients(expr: sp.Expr, fixed) -> sp.Expr:
    """``expr`` with every ``fp8(n * d**-k…)`` whose divisors read only names for which ``fixed(names)`` holds (and
    whose numerator does not) written ``fp8(Quotient8(n, d, Reciprocal8(d)))``. The numerator and the divisor split
    as the printer splits a product (a rational's denominator divides), so each is computed as it was."""
    def names(e) -> set:
        return {s.name for s in e.free_symbols}

    def rewrite(node):
        num, den = [], []
        for f in sp.Mul.make_args(node.args[0]):
            if f.is_Pow and f.exp.is_Integer and f.exp < 0 and names(f) and fixed(names(f)):
                den.append(f.base if f.exp == -1 else sp.Pow(f.base, -f.exp, evaluate=False))
            elif f.is_Rational and not f.is_Integer and max(abs(f.p), f.q) <= 2**24:
                if f.p != 1:
                    num.append(sp.Integer(f.p))
                den.append(sp.Integer(f.q))
            else:
                num.append(f)
        n = sp.Mul(*num)
        if not any(names(f) for f in den) or not names(n) or fixed(names(n)):
            return node
        d = sp.Mul(*den, evaluate=False) if len(den) > 1 else den[0]
        return RoundE4M3(Quotient8(n, d, Reciprocal8(d)))

    return expr.replace(lambda e: isinstance(e, RoundE4M3), rewrite)
