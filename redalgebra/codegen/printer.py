"""A SymPy printer that writes numba-compatible float32 Python.

* Every number becomes a named ``np.float32`` module constant (``_K0 = np.float32(448.0)``):
  a Python float literal is float64 and would promote the whole expression,
  and an integer times a float32 is float64 in numba.
* ``exp``, ``tanh`` and ``erf`` become ``math.*`` (numba picks the float32
  overload); ``log``, ``log1p`` and ``sqrt`` become helpers with IEEE edge
  results on every target (the simulator's ``math.log(0)`` raises), ``floor``
  and ``round`` helpers that return a float32 (numba's ``math.floor`` returns
  an integer); ``sigmoid`` is printed as ``1/(1 + exp(-x))``; ``abs``,
  ``max``, ``min`` stay builtins; guards become conditional expressions.
* Symbols are looked up in an access table: a state variable, a register, an
  element read from global memory (``k[rr, l, j]``), a param (``q[row, j]``).
  A vector symbol is printed at the current component index; ``dot`` and
  ``vsum`` become loops emitted as pre-statements before the line that uses them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import sympy as sp
from sympy.printing.str import StrPrinter

from ..errors import RedalgebraError
from ..ir.functions import Dot, Sigmoid, VSum
from ..ir.parser import EXP_HIGH, EXP_LOW, FLOAT32_INF, FLOAT32_ZERO

_FUNCTIONS = {"exp": "math.exp", "log": "rt_log", "Log1p": "rt_log1p", "sqrt": "rt_sqrt", "tanh": "math.tanh",
              "erf": "math.erf", "floor": "rt_floor", "RoundHalfEven": "rt_round"}


@dataclass
class Access:
    """How each symbol is read: ``scalar[name]`` is text; ``vector[name]`` is text with ``{j}``."""

    scalar: dict = field(default_factory=dict)
    vector: dict = field(default_factory=dict)
    size: dict = field(default_factory=dict)   # vector name -> size constant (text)
    exp: str = "math.exp"                      # the exponential's function (a fast one on the GPU)
    div: str | None = None                     # a function to divide by (None: ``/``): ``div_full`` where an IEEE
    #                                            division's slow-path call would serialize Hopper's wgmma
    sqrt: str = "rt_sqrt"                      # the square root's function: ``sqrt_full`` where div is ``div_full``
    select: str | None = None                  # a branch-free select ``f(c, a, b)`` for conditionals, with ``&``/``|``
    #                                            for and/or (None: Python's conditional expressions): both sides are
    #                                            evaluated, so only where both are safe to compute (registers only)
    # Lane mode (the ``lanes`` strategy): a warp shares each vector, lane ``lane`` holding the
    # components ``lane + 32 t``; ``slots`` maps a size constant to its slot count, templates may
    # use ``{t}`` (the slot) besides ``{j}`` (the component), and ``lane_sum`` (a format with
    # ``{v}``) sums a value over the warp's lanes, which completes a dot product.
    slots: dict = field(default_factory=dict)
    whole: set = field(default_factory=set)    # sizes that are a multiple of 32: no guard on the last slot
    lane_sum: str | None = None
    # subexpressions computed once beforehand (a row's invariants, out of its elements' code): ``{expr: register}``
    named: dict = field(default_factory=dict)
    # with the fast exponential: ``{register of z: register of -z·log2(e)}`` — ``exp(x - z)`` is then printed
    # ``ex2(fma32(x, LOG2E, -z·log2(e)))``, one fused multiply-add an element instead of a subtraction and a product
    shifted: dict = field(default_factory=dict)

    def is_vector(self, expr: sp.Basic) -> bool:
        """True when ``expr`` has a vector symbol outside a dot/vsum (so it is itself a vector)."""
        if isinstance(expr, (Dot, VSum)):
            return False
        if isinstance(expr, sp.Symbol):
            return expr.name in self.vector
        return any(self.is_vector(a) for a in expr.args)

    def vector_size(self, expr: sp.Basic) -> str:
        for s in sp.preorder_traversal(expr):
            if isinstance(s, sp.Symbol) and s.name in self.vector:
                return self.size[s.name]
        raise RedalgebraError(f"{expr} is not a vector")


def _out_of_float32(shown: str, past: bool) -> RedalgebraError:
    """The refusal of a constant of the derived form that float32, where the kernels compute, makes inf (``past``)
    or 0."""
    return RedalgebraError(f"the derived form holds the constant {shown}, which is {'past' if past else 'below'} "
                           f"float32's range (about 1.4e-45 to 3.4e38 in size), where the kernels compute: it would "
                           f"be {'inf' if past else '0'} there and the float64 reference would not agree; scale the "
                           f"cascade")


class Constants:
    """The float32 constants a module needs, each named once."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def name(self, value) -> str:
        """The constant's name; its value is what float32 makes of ``value`` (a number, or SymPy's), refused where
        that is inf or 0 and ``value`` is neither (1e400, 1e-400: the float64 reference would not agree)."""
        exact = Fraction(int(value.p), int(value.q)) if isinstance(value, sp.Rational) else None
        try:
            value = float(value)
        except OverflowError:  # an integer beyond float64 (10**400)
            value = float("inf") if value > 0 else float("-inf")
        with np.errstate(over="ignore", under="ignore"):
            held = float(np.float32(value))
        past = abs(exact) >= FLOAT32_INF if exact is not None else math.isinf(held) and math.isfinite(value)
        below = 0 < abs(exact) <= FLOAT32_ZERO if exact is not None else held == 0 and value != 0
        if past or below:  # (a let or a dot's factor folded into another constant, 1e30 · 1e30: past the parser)
            shown = str(sp.Float(sp.Rational(exact.numerator, exact.denominator), 3)) if exact is not None else \
                f"{value:.3g}"
            raise _out_of_float32(shown, past)
        value = held
        # the shortest text of the float32 value (1e-12, not 9.99999996e-13)
        key = str(np.float32(value)) if np.isfinite(value) else {"inf": "np.inf", "-inf": "-np.inf"}.get(
            repr(value), "np.nan")
        if key not in self.names:
            self.names[key] = f"_K{len(self.names)}"
        return self.names[key]

    def lines(self) -> list[str]:
        return [f"{n} = np.float32({k})" for k, n in self.names.items()]


class KernelPrinter(StrPrinter):
    """Prints one expression; loops it needs (dot, vsum) are collected in ``self.pre``."""

    printmethod = "_kernelstr"  # not the classes' own _sympystr, which prints the text format

    def __init__(self, access: Access, constants: Constants, j: str | None = None, temps=None, tree: bool = False):
        super().__init__()
        self.access, self.constants, self.j = access, constants, j
        self.pre: list = []  # text lines, or statements of codegen.tree when ``tree``
        self.temps = temps if temps is not None else iter(range(10**9))
        self.tree = tree

    def _print(self, expr, **kwargs):
        named = self.access.named.get(expr) if self.access.named else None
        if named is not None:
            return named
        if isinstance(expr, sp.Function):
            # a function is printed by this printer's own rules only: SymPy's StrPrinter has rules of its own for
            # some (Heaviside), which would write a name the kernels do not define
            for cls in type(expr).__mro__:
                method = KernelPrinter.__dict__.get(f"_print_{cls.__name__}")
                if method is not None:
                    return method(self, expr, **kwargs)
        return super()._print(expr, **kwargs)

    # -- atoms -----------------------------------------------------------------------------------
    def _print_Symbol(self, expr):
        name = expr.name
        if name in self.access.vector:
            if self.j is None:
                raise RedalgebraError(f"the vector {name} is used where a scalar is needed; wrap it in dot() or sum()")
            return self.access.vector[name].format(j=self.j, t=_slot_name(self.j))
        if name not in self.access.scalar:
            raise RedalgebraError(f"the kernel generator cannot read {name!r} here (no access rule); this cascade "
                                  f"uses it where the chosen strategy does not provide it")
        return self.access.scalar[name]

    def _number(self, value) -> str:
        return self.constants.name(value)

    _print_Integer = _print_Rational = _print_Float = _print_Zero = _number

    def _print_Half(self, expr):
        return self._number(expr)

    def _print_One(self, expr):
        return self._number(expr)

    def _print_NegativeOne(self, expr):
        return self._number(expr)

    def _print_Infinity(self, expr):
        return "POS_INF"

    def _print_NegativeInfinity(self, expr):
        return "NEG_INF"

    def _print_ComplexInfinity(self, expr):  # (1/0 of a guard's branch: no sign in the reals, NaN as IEEE's 0/0)
        return "NAN"

    def _print_NaN(self, expr):
        return "NAN"

    def _print_Exp1(self, expr):
        return self._number(sp.E.evalf(30))

    def _print_BooleanTrue(self, expr):
        return "True"

    def _print_BooleanFalse(self, expr):
        return "False"

    # -- arithmetic ------------------------------------------------------------------------------
    def _print_Mul(self, expr):
        coeff, rest = expr.as_coeff_Mul()
        if coeff == -1:
            return "-" + self.parenthesize(rest, 50)
        num, den = [], []
        for f in sp.Mul.make_args(expr):
            if f.is_Pow and f.exp.is_Integer and f.exp < 0:
                den.append(f.base if f.exp == -1 else sp.Pow(f.base, -f.exp, evaluate=False))
            elif f.is_Rational and not f.is_Integer and max(abs(f.p), f.q) <= 2**24:
                # p/q as a division of exact float32 integers, as the reference divides (x/7, not x*0.142857…)
                num.append(sp.Integer(f.p)) if f.p != 1 else None
                den.append(sp.Integer(f.q))
            else:
                num.append(f)
        ratios = []  # a state over its side's factor, divided before it multiplies (see _side)
        for d in list(den):
            n = next((n for n in num if len(num) > 1 and _side(d) and _side(n) and _side(n)[1] == _side(d)[1]
                      and _side(n)[0] != _side(d)[0]), None)
            if n is not None:
                num.remove(n)
                den.remove(d)
                ratios.append(self._quotient(self.parenthesize(n, 50), self.parenthesize(d, 60)))
        top = "*".join(ratios + [self.parenthesize(f, 50) for f in num]) or self._number(1)
        if not den:
            return top
        bottom = "*".join(self.parenthesize(f, 50) for f in den)
        if self.access.div:
            return f"{self.access.div}({top}, {bottom})"
        return f"{top}/({bottom})" if len(den) > 1 else f"{top}/{self.parenthesize(den[0], 60)}"

    def _quotient(self, top: str, bottom: str) -> str:
        """``(top / bottom)``, by :attr:`Access.div` where set."""
        return f"{self.access.div}({top}, {bottom})" if self.access.div else f"({top}/{bottom})"

    def _reciprocal(self, bottom: str) -> str:
        """``1 / bottom``, by :attr:`Access.div` where set (as every other division)."""
        if self.access.div:
            return f"{self.access.div}({self._number(1)}, {bottom})"
        return f"({self._number(1)}/{bottom})"

    def _print_Pow(self, expr):
        base, exp = expr.args
        b = self.parenthesize(base, 60)
        if exp == sp.Rational(1, 2):
            return f"{self.access.sqrt}({self._print(base)})"
        if exp == -sp.Rational(1, 2):  # (+ 0: -0.0 + 0.0 is +0.0, so x**-0.5 at -0.0 is +inf, as pow gives, not -inf)
            return self._reciprocal(f"{self.access.sqrt}({self._print(base)} + {self._number(0)})")
        if exp.is_Integer and 0 < exp <= 4:
            return "(" + "*".join([b] * int(exp)) + ")"
        if exp.is_Integer and -4 <= exp < 0:
            return self._reciprocal("(" + "*".join([b] * int(-exp)) + ")")
        return f"math.pow({self._print(base)}, {self._print(exp)})"

    # -- functions -------------------------------------------------------------------------------
    def _print_Function(self, expr):
        name = expr.func.__name__
        if name in _FUNCTIONS:
            return f"{_FUNCTIONS[name]}({self._print(expr.args[0])})"
        raise RedalgebraError(f"no kernel rule for the function {name} in {expr}")

    def _print_exp(self, expr):
        arg = expr.args[0]
        if arg.is_Rational and not EXP_LOW < arg < EXP_HIGH:  # (a let's exp(50) squared: exp(100), computed in float32)
            raise _out_of_float32(str(expr), arg > 0)
        if self.access.shifted and self.access.exp == "fast_exp" and isinstance(arg, sp.Add):
            for term in arg.args:  # a term -z with z's -z·log2(e) at hand (Access.shifted)
                z = -term
                shift = self.access.shifted.get(self.access.scalar.get(z.name)) if isinstance(z, sp.Symbol) else None
                if shift is not None:
                    rest = sp.Add(*[a for a in arg.args if a is not term])
                    return f"ex2(fma32({self._print(rest)}, LOG2E, {shift}))"
        return f"{self.access.exp}({self._print(arg)})"

    def _print_log(self, expr):
        arg = expr.args[0]
        exponents = _log_exponents(arg)
        if exponents is not None:
            # log(exp(a) + exp(b)), logsumexp's ⊕: each exp overflows float32 past 88 (and underflows below -103)
            # where the result does not; rt_logaddexp takes it as max(a, b) + log1p(exp(-|a - b|))
            a, b = (self._print(e) for e in exponents)
            return f"rt_logaddexp({a}, {b})"
        return f"rt_log({self._print(arg)})"

    def _print_Abs(self, expr):
        return f"abs({self._print(expr.args[0])})"

    def _binary_fold(self, name, args):
        out = self._print(args[0])
        for a in args[1:]:
            out = f"{name}({out}, {self._print(a)})"
        return out

    def _print_Max(self, expr):  # NaN-propagating, as the reference's max (Python's max drops a NaN)
        return self._binary_fold("rt_max", expr.args)

    def _print_Min(self, expr):
        return self._binary_fold("rt_min", expr.args)

    def _print_Sigmoid(self, expr):  # with the target's exponential (the GPU's fast one)
        return self._print(Sigmoid.quotient(expr.args[0]))

    def _print_RoundE4M3(self, expr):
        return f"rt_fp8({self._print(expr.args[0])})"

    def _print_Quotient8(self, expr):  # codegen.quotients: n / d up to e4m3 rounding; two arguments: divided
        if len(expr.args) == 2:
            n, d = expr.args
            return self._print(sp.Mul(*sp.Mul.make_args(n), sp.Pow(d, -1, evaluate=False), evaluate=False))
        return f"rt_q8({', '.join(self._print(a) for a in expr.args)})"

    def _print_CheckedQuotient8(self, expr):
        return f"rt_q8c({', '.join(self._print(a) for a in expr.args)})"

    def _print_Reciprocal8(self, expr):
        return f"rt_recip8({self._print(expr.args[0])})"

    def _print_Dot(self, expr):
        return self._loop("+", expr.args[0] * expr.args[1], self.access.vector_size(expr.args[0]))

    def _print_VSum(self, expr):
        return self._loop("+", expr.args[0], self.access.vector_size(expr.args[0]))

    def _loop(self, op, body, size) -> str:
        n = next(self.temps)
        acc, jj = f"_acc{n}", f"_j{n}"
        inner = KernelPrinter(self.access, self.constants, jj, self.temps, self.tree)
        text = inner.doprint(body)
        self.pre += inner.pre
        if self.tree:
            from .tree import Assign, For
            self.pre += [Assign(acc, self._number(0)), For(jj, "0", size, (Assign(acc, text, "+"),))]
            return acc
        if self.access.lane_sum is None or size not in self.access.slots:
            self.pre += [f"{acc} = {self._number(0)}", f"for {jj} in range({size}):", f"    {acc} += {text}"]
            return acc
        # this lane's share of the components, then the sum over the lanes
        loop = lane_loop(jj, self.access.slots[size], size, size in self.access.whole, [f"{acc} += {text}"])
        self.pre += [f"{acc} = {self._number(0)}"] + loop + [f"{acc} = {self.access.lane_sum.format(v=acc)}"]
        return acc

    # -- guards ----------------------------------------------------------------------------------
    def _print_Piecewise(self, expr):
        out = self._print(expr.args[-1][0])
        for value, cond in reversed(expr.args[:-1]):
            if self.access.select:
                out = f"{self.access.select}({self._print(cond)}, {self._print(value)}, {out})"
            else:
                out = f"({self._print(value)} if {self._print(cond)} else {out})"
        return out

    def _print_Relational(self, expr):
        op = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}[expr.rel_op]
        return f"({self._print(expr.lhs)} {op} {self._print(expr.rhs)})"

    def _print_Or(self, expr):
        return "(" + (" | " if self.access.select else " or ").join(self._print(a) for a in expr.args) + ")"

    def _print_And(self, expr):
        return "(" + (" & " if self.access.select else " and ").join(self._print(a) for a in expr.args) + ")"

    def _print_Not(self, expr):
        return f"(not {self._print(expr.args[0])})"


def lane_loop(j: str, slots: str, size: str, whole: bool, body: list[str]) -> list[str]:
    """``body`` for every component ``j`` this lane holds, at slot ``t`` (``j = lane + 32 t``).

    Unguarded when every slot holds a component (``whole``): a branch between a load and its use
    would make the warp wait on each load alone.
    """
    t = _slot_name(j)
    head = [f"for {t} in range({slots}):", f"    {j} = lane + 32 * {t}"]
    if whole:
        return head + ["    " + ln for ln in body]
    return head + [f"    if {j} < {size}:"] + ["        " + ln for ln in body]


def _side(e: sp.Basic):
    """``(NAME, side)`` of a state symbol ``NAME_a``, ``NAME_b`` or ``NAME_n``, else None. In a correction
    ``r1_a · r0_n / r0_a`` (``r1 = max(G · r0)``), the state over its own side's factor, ``r1_a / r0_a``, is ⊕G of
    that side and in range wherever G is; multiplied first, ``r1_a · r0_n`` leaves float32 at ``r0 = exp(50)``, and
    ``r0_n / r0_a`` does where the two sides' factors are far apart (``exp(60) / exp(-60)``)."""
    if isinstance(e, sp.Symbol) and e.name[-2:] in ("_a", "_b", "_n"):
        return e.name[:-2], e.name[-1]
    return None


def _slot_name(j: str | None) -> str | None:
    """The slot index that goes with the component index ``j`` in lane mode (``j`` → ``t``, ``_j0`` → ``_t0``)."""
    return None if j is None else j.replace("j", "t")


def invariants(exprs, fixed, divisors: bool = False) -> dict:
    """The largest subexpressions of ``exprs`` that are not atoms and read only names for which ``fixed(names)``
    holds (a row's scalars: computed once, not once an element), first seen first (preorder): ``{expr: n}``.
    ``divisors``: a reciprocal ``b**-k`` is taken as ``b**k``, the divisor a product prints it as
    (:meth:`KernelPrinter._print_Mul`), for naming through ``Access.named``."""
    found: dict = {}

    def walk(e):
        if e.is_Atom:
            return
        names = {s.name for s in e.free_symbols}
        if names and fixed(names):
            if divisors and e.is_Pow and e.exp.is_Integer and e.exp < 0:
                e = e.base if e.exp == -1 else sp.Pow(e.base, -e.exp, evaluate=False)
            if not e.is_Atom:  # (a divisor that is a name is read as it is)
                found.setdefault(e, len(found))
            return
        for a in e.args:
            walk(a)
    for e in exprs:
        walk(e)
    return found


def print_expr(expr: sp.Expr, access: Access, constants: Constants, j: str | None = None, temps=None,
               tree: bool = False):
    """``(pre_statements, text)`` of one expression (statements of :mod:`.tree` when ``tree``)."""
    p = KernelPrinter(access, constants, j, temps, tree)
    text = p.doprint(expr)
    return p.pre, text


def _log_exponents(arg) -> tuple | None:
    """``(a, b)`` where ``arg`` is ``exp(a) + exp(b)`` up to positive factors: ``u·exp(a')`` is ``exp(a' + log u)``
    for ``u`` SymPy knows positive. SymPy writes ``exp(log(|x| + 1) - m)`` as ``(|x| + 1)·exp(-m)``, so logsumexp's ⊕
    folding such a body, ``log(exp(s) + (|x| + 1)·exp(-m))``, no longer reads as two exponentials, and its second
    term underflows float32 below -103 where the result is finite. None where a term has no exponential factor or
    one of another sign."""
    if not isinstance(arg, sp.Add) or len(arg.args) != 2:
        return None
    out = []
    for term in arg.args:
        factors = sp.Mul.make_args(term)
        exps = [f.args[0] for f in factors if isinstance(f, sp.exp)]
        rest = [f for f in factors if not isinstance(f, sp.exp)]
        if not exps or not all(f.is_positive for f in rest):
            return None
        out.append(sp.Add(*exps, *(sp.log(f) for f in rest)))
    return tuple(out)
