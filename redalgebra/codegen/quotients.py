"""``fp8(n / d)`` by a row constant ``d``: rounded as the division is, at the lowest cost measured.

A per-token quantiser divides every element by the row's scale (``fp8(x * 448 / max(a, 1e-12))``), and the
reference divides: multiplying by a hoisted reciprocal instead rounds otherwise at some e4m3 boundaries (exact ties
among them, which bfloat16 inputs can reach), so the kernels do not. Two exact forms, chosen by what stores the
value (``strategies/rows.py``):

- stored wider (rounded by ``rt_fp8``, then stored as 16 or 32 bits: ``columns_wgmma``'s float16 factors)::

      fp8(n * d**-1)  ->  fp8(Quotient8(n, d, Reciprocal8(d)))

  ``d`` and ``Reciprocal8(d)`` (``1/d`` correctly rounded) are row constants, hoisted as any other; ``Quotient8``
  prints as ``rt_q8(n, d, r)`` or, two elements at a time, ``rt_q8x2``: the product ``n * r`` where it is sure to
  round to e4m3 as the quotient does, the division elsewhere (``codegen.helpers.QUOTIENT_HELPERS`` and
  ``runtime.intrinsics.e4m3_sure`` say why).
- stored as e4m3 bytes (the store rounds: the FP8 products' factors, a quantiser's output): ``Quotient8(n, d)``,
  divided, ``d`` kept a divisor by the hoisting. So is a quotient whose divisor varies along the row, wherever it is.

The tested product runs on the simulator and on GPUs from sm_89 on (it converts to e4m3); elsewhere the portable
``rt_q8`` divides. Only the ``rows`` kernels rewrite so; the other strategies print ``fp8(x * 448 / a)`` as divisions,
except the fused incremental forms, which multiply by the running scale's reciprocal (exact in ℝ only, as they are
documented).

On the H200 (M4096 × K7168 factors, ``gpu/README.md``): float16 factors 59.1 µs divided, 50.1 with ``rt_q8x2``
(53.5 testing the bits one element at a time); e4m3 factors 44.0 µs divided, 54.1 with ``rt_q8x2`` (50.1 one at a
time), and 34 with the reciprocal's product alone, which is not exact.
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


class Reciprocal8(sp.Function):
    """``1 / d`` correctly rounded, or NaN where ``|d|`` is out of the fast quotient's range (codegen only)."""

    nargs = 1

    def _eval_is_real(self):
        return True


def e4m3_quotients(expr: sp.Expr, fixed, product: bool = True) -> sp.Expr:
    """``expr`` with every ``fp8(n * d**-k…)`` whose divisors read only names for which ``fixed(names)`` holds (and
    whose numerator does not) written ``fp8(Quotient8(n, d, Reciprocal8(d)))``; ``product=False``: the outermost one,
    where it is ``expr`` itself (rounded by the store), ``fp8(Quotient8(n, d))``, divided. The numerator and the
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

    out = expr.replace(lambda e: isinstance(e, RoundE4M3), rewrite)
    if not product and isinstance(out, RoundE4M3) and isinstance(out.args[0], Quotient8):
        q = out.args[0]
        out = RoundE4M3(Quotient8(*q.args[:2]))
    return out
