"""LaTeX as a reader writes numbers: powers of ten, not fractions of huge integers."""

import sympy as sp

import redalgebra as ra
from redalgebra.ir.printer import latex

x, a = sp.symbols("x a", real=True)


def test_power_of_ten_fractions_print_as_powers_of_ten():
    assert latex(sp.Rational(1, 10**12)) == "10^{-12}"
    assert latex(sp.Rational(-25, 10**6)) == r"-2.5 \cdot 10^{-5}"
    assert latex(sp.Max(sp.Rational(1, 10**12), a)) == r"\max\left(10^{-12}, a\right)"
    assert latex(sp.Rational(1, 7)) == r"\frac{1}{7}" and latex(x / 448) == r"\frac{x}{448}"  # others as SymPy


def test_every_latex_view_uses_it():
    fused = ra.derive(ra.parse("input x\nreduce a = max(abs(x))\nout q = fp8(x * 448 / max(a, 1e-12))\n"))
    for text in (fused.cascade._repr_latex_(), fused._repr_markdown_()):
        assert "10^{-12}" in text and "1000000000000" not in text
