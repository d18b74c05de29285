"""The float64 reference: a cascade evaluated unfused, reduction after reduction.

This is the oracle every derived form and generated kernel is checked against.
It is deliberately plain: each reduction makes a full pass over the axis with
NumPy, using the results of the reductions before it.

Array layout: a scalar input is ``(rows, L)``, a vector input ``(rows, L, d)``;
a scalar param is a number or ``(rows,)``, a vector param ``(d,)`` or
``(rows, d)``; an integer param (``param label int``) is an integer or
``(rows,)`` integers (a float that is not a whole number is an error).  ``pos``
is ``arange(L)`` in every row.  Integers are held in the evaluation dtype, so
they must be exact there (below 2**53 in float64, 2**24 in float32).
An input with fewer rows than the others (a number dividing theirs) is shared,
as a kernel call reads it: row ``r`` reads its row ``r // (rows / its rows)``.
Comparisons are 1.0 / 0.0 and ``where`` is ``np.where``.  ``keep`` (``(rows, L)`` booleans) says which elements take part;
an element left out contributes the identity of every reduction, which is the
same as a score of ``-inf`` in softmax-like cascades.  IEEE arithmetic is kept
as is: a fully masked softmax row gives ``0/0 = nan``, and the derived forms
must agree with that (or document their guard).
"""

from __future__ import annotations

import math
from functools import reduce as _fold

import numpy as np
import sympy as sp

from ..errors import EvaluationError
from .functions import Dot, Log1p, RoundE4M3, RoundHalfEven, Sigmoid, VSum
from .monoid import Monoid
from .nodes import POSITION, Cascade, Let, Output, Param, Reduction

_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum, "logaddexp": np.logaddexp}
def round_e4m3(x: np.ndarray) -> np.ndarray:
    """Round to the nearest FP8 e4m3 value (ties to even), saturating at ±448; nan stays nan."""
    x = np.asarray(x)
    dtype = np.result_type(x, np.float32)
    x = np.clip(x.astype(np.float64), -448.0, 448.0)
    mag = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    quantum = np.exp2(np.maximum(exponent, -6.0) - 3.0)  # 3 mantissa bits; subnormals below 2**-6
    return (np.round(x / quantum) * quantum).astype(dtype)


#: ``math.erf`` over an array (NumPy has no erf, and SciPy is not a dependency), accurate in float64.
_erf = np.vectorize(math.erf, otypes=[np.float64])

_RULES = {
    sp.exp: np.exp, sp.log: np.log, Log1p: np.log1p, sp.Abs: np.abs, RoundE4M3: round_e4m3,
    sp.tanh: np.tanh, Sigmoid: lambda a: 1 / (1 + np.exp(-a)), sp.erf: lambda a: _erf(a).astype(np.result_type(a)),
    sp.floor: np.floor, RoundHalfEven: np.rint,
    sp.Max: lambda *a: _fold(np.maximum, a), sp.Min: lambda *a: _fold(np.minimum, a),
    Dot: lambda a, b: np.sum(a * b, axis=-1, keepdims=True), VSum: lambda a: np.sum(a, axis=-1, keepdims=True),
    sp.Eq: np.equal, sp.Ne: np.not_equal, sp.Lt: np.less, sp.Le: np.less_equal, sp.Gt: np.greater,
    sp.Ge: np.greater_equal, sp.Or: lambda *a: _fold(np.logical_or, a),
    sp.And: lambda *a: _fold(np.logical_and, a), sp.Not: np.logical_not,
}


def eval_expr(expr: sp.Expr, env: dict[str, np.ndarray], dtype=np.float64) -> np.ndarray:
    """Evaluate an expression with NumPy over arrays that broadcast on the last axis.

    Constants are made ``dtype`` so a float32 evaluation stays float32.
    Besides the cascade's functions it knows ``Piecewise`` with ``Eq``/``Or``/``And``
    conditions, which the derived formulas use for their guards.
    """
    if expr.is_Symbol:
        return env[expr.name]
    if expr.is_Number or expr in (sp.oo, -sp.oo):
        return dtype(float(expr))
    if expr is sp.true or expr is sp.false:
        return np.bool_(bool(expr))
    if isinstance(expr, sp.Piecewise):
        return _piecewise(expr, env, dtype)
    if expr.is_Mul:
        # a quotient is divided, not multiplied by a reciprocal: SymPy holds x * 448 / a as 448 * x * a**-1, and
        # 1 / a rounds, so an exact quotient (232 = 448 * 1.47265625 / 2.84375, an e4m3 tie) came out a hair above
        # itself and fp8() rounded it up where the kernels, dividing, round it to even
        over = [a.base for a in expr.args if a.is_Pow and a.exp == -1]
        top = [eval_expr(a, env, dtype) for a in expr.args if not (a.is_Pow and a.exp == -1)]
        value = _fold(np.multiply, top) if top else dtype(1)
        return value / _fold(np.multiply, [eval_expr(b, env, dtype) for b in over]) if over else value
    args = [eval_expr(a, env, dtype) for a in expr.args]
    if expr.is_Add:
        return _fold(np.add, args)
    if expr.is_Pow:
        base, exp = args
        if expr.exp == sp.Rational(1, 2):
            return np.sqrt(base)
        if expr.exp == -1:
            return dtype(1) / base
        return np.power(base, exp)
    rule = _RULES.get(expr.func) or next((f for cls, f in _RULES.items() if isinstance(expr, cls)), None)
    if rule is None:
        raise EvaluationError(f"the evaluator has no rule for {expr.func.__name__} in {expr}")
    return rule(*args)


def _piecewise(expr: sp.Piecewise, env, dtype):
    out = eval_expr(expr.args[-1][0], env, dtype)
    for value, cond in reversed(expr.args[:-1]):
        out = np.where(eval_expr(cond, env, dtype), eval_expr(value, env, dtype), out)
    return out


def reduce_axis(monoid: Monoid, values: np.ndarray, keep: np.ndarray | None):
    """Fold ``values`` (rows, L, w) over axis 1; returns (rows, 1, w) [and indices for top-k]."""
    if monoid.k is not None:
        return _topk(monoid.k, values[..., 0], keep)
    identity = float(monoid.identity)
    if keep is not None:
        values = np.where(keep[..., None], values, identity)
    if values.shape[1] == 0:
        return np.full(values.shape[:1] + (1,) + values.shape[2:], identity)
    ufunc = _UFUNCS.get(monoid.name)
    if ufunc is not None:
        return ufunc.reduce(values, axis=1, keepdims=True)
    op = sp.lambdify(monoid.op.variables, monoid.op.expr, modules="numpy")
    return _fold(op, np.moveaxis(values, 1, 0))[:, None, :]


def _topk(k: int, values: np.ndarray, keep: np.ndarray | None):
    """The k largest values per row, descending, ties to the lower index.

    NaN ranks above every number (as NumPy's ``argmax`` and ``sort`` and PyTorch's
    ``topk`` put it), NaNs by index: a NaN in a router's logits is selected and shows
    in its outputs instead of vanishing. A value of -inf (the identity: a masked
    element, or padding when the row is shorter than k) carries the index -1.
    """
    rows, length = values.shape
    if keep is not None:
        values = np.where(keep, values, -np.inf)
    padded = np.full((rows, max(length, k)), -np.inf, dtype=values.dtype)
    padded[:, :length] = values
    nan = np.isnan(padded)
    order = np.lexsort((np.where(nan, 0.0, -padded), ~nan), axis=1)[:, :k]  # stable: NaNs first, then descending
    top = np.take_along_axis(padded, order, axis=1)
    index = np.where(np.isneginf(top), -1, order)  # -inf is the identity: a masked or missing element
    return top[:, None, :], index[:, None, :]


def unbound_names(c: Cascade, inputs: dict, params: dict) -> str | None:
    """What is wrong with the names of a call's inputs and params, or None: a value missing, or a name the
    cascade does not have (a misspelt name would otherwise be ignored, silently)."""
    missing = [s.name for s in c.inputs if s.name not in inputs] + [p.name for p in c.params if p.name not in params]
    if not missing and len(inputs) == len(c.inputs) and len(params) == len(c.params):
        return None  # (the common case, in two comparisons: this runs on every call)
    unknown = [f"input {k!r}" for k in inputs if k not in {s.name for s in c.inputs}]
    unknown += [f"param {k!r}" for k in params if k not in {p.name for p in c.params}]
    if not missing and not unknown:
        return None
    said = ([f"no value given for {missing}"] if missing else []) + \
        ([f"unknown {', '.join(unknown)}"] if unknown else [])
    return (f"{c.name}: {'; '.join(said)} (inputs are {[i.name for i in c.inputs]}, params are "
            f"{[p.name for p in c.params]})")


def bind(c: Cascade, inputs: dict, params: dict, dtype=np.float64) -> tuple[dict, int, int]:
    """Check and lay out inputs and params: ``(env, rows, L)`` with arrays ``(rows, L|1, width)``."""
    unbound = unbound_names(c, inputs, params)
    if unbound:
        raise EvaluationError(unbound)
    env, dims, arrays = {}, {}, {}
    for s in c.inputs:
        a = np.asarray(inputs[s.name], dtype=dtype)
        want = 2 if s.size is None else 3
        if a.ndim != want:
            raise EvaluationError(f"input {s.name} must be {'(rows, L)' if want == 2 else '(rows, L, size)'}, "
                                  f"got shape {a.shape}")
        arrays[s.name] = a
    rows = max(a.shape[0] for a in arrays.values())
    for s in c.params:  # (params may outnumber the rows of inputs they share, as in a call: queries of GQA and
        shape = np.shape(params[s.name])  # prefill attention over a head's keys, labels over one row of logits)
        if s.size is not None and len(shape) == 2:
            rows = max(rows, shape[0])
        elif s.size is None and len(shape) == 1 and all(shape[0] % a.shape[0] == 0 for a in arrays.values()):
            rows = max(rows, shape[0])  # (a count the inputs' rows do not divide: the param's own message, below)
    length = next(iter(arrays.values())).shape[1]
    for s in c.inputs:
        a = arrays[s.name]
        if a.shape[1] == length and 0 < a.shape[0] < rows and rows % a.shape[0] == 0:
            a = np.repeat(a, rows // a.shape[0], axis=0)  # shared: row r reads row r // (rows / its rows), as a call
        if a.shape[:2] != (rows, length):
            raise EvaluationError(f"input {s.name} has (rows, L) = {a.shape[:2]}, others have {(rows, length)} (an "
                                  f"input shared by groups of rows has a number of rows dividing theirs)")
        vector = s.size is not None
        _check_size(s, a.shape[2] if vector else None, dims)
        env[s.name] = a if vector else a[..., None]
    for s in c.params:
        value = real_values(s, params[s.name])
        value = _integers(s, value, dtype) if s.integer else value.astype(dtype)
        env[s.name] = _param(s, value, rows, dims)
    env[POSITION] = _integers(None, np.arange(length), dtype)[None, :, None]
    return env, rows, length


def real_values(p: Param, value) -> np.ndarray:
    """A param's value as an array of real numbers (exact ones — fractions, SymPy numbers — as float64); else a named
    error (None, strings, complex numbers: NumPy would take None as NaN and fail on a string with its own message)."""
    if value is None:
        raise EvaluationError(f"param {p.name}: a number or an array of them, got None")
    given = np.asarray(value)
    if given.dtype.kind == "O":  # (Fraction, Decimal, SymPy numbers: real numbers NumPy holds as objects)
        try:
            given = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            pass
    if given.dtype.kind not in "fiub":  # (strings, complex numbers, other objects: not what a float param holds)
        raise EvaluationError(f"param {p.name}: real numbers, got {given.dtype} values")
    return given


def _integers(s: Param | None, value, dtype) -> np.ndarray:
    """Integer values held in ``dtype``: an error when they are not whole numbers or not exact in ``dtype``."""
    what = "pos (the element index)" if s is None else f"param {s.name} (declared int)"
    a = np.asarray(value)
    if a.dtype.kind not in "iub":
        a = np.asarray(value, dtype=np.float64)
        if not (np.isfinite(a).all() and (a == np.round(a)).all()):
            bad = float(a[~(np.isfinite(a) & (a == np.round(a)))].flat[0])
            raise EvaluationError(f"{what} needs whole numbers, got {bad}; pass integers, e.g. a (rows,) int array")
    held = a.astype(dtype)
    if (held.astype(np.float64) != a.astype(np.float64)).any():
        raise EvaluationError(f"{what} has values too large to be exact in {np.dtype(dtype).name} "
                              f"(|value| up to {np.abs(a).max()}); evaluate in float64")
    return held


def _check_size(s, got, dims):
    if s.size is None:
        return
    want = dims.setdefault(s.size, got) if isinstance(s.size, str) else s.size
    if got != want:
        raise EvaluationError(f"{s.name} has size {got} but {s.size} = {want}")


def _param(s: Param, a: np.ndarray, rows: int, dims: dict) -> np.ndarray:
    vector = s.size is not None
    if a.ndim == (1 if vector else 0):
        a = a[None]
    if not vector and a.ndim == 2 and a.shape[1] == 1:  # (a column, (rows, 1), as a call takes it)
        a = a[:, 0]
    if a.ndim != (2 if vector else 1) or a.shape[0] not in (1, rows):
        shape = "(size,) or (rows, size)" if vector else "a number, (rows,) or (rows, 1)"
        raise EvaluationError(f"param {s.name} must be {shape}, got shape {a.shape}")
    _check_size(s, a.shape[1] if vector else None, dims)
    return a[:, None, :] if vector else a[:, None, None]


def check_keep(keep, rows: int, length: int):
    if keep is None:
        return None
    keep = np.asarray(keep, dtype=bool)
    if keep.shape != (rows, length):
        raise EvaluationError(f"keep must be (rows, L) = {(rows, length)}, got {keep.shape}")
    return keep


def run_unfused(cascade: Cascade, env: dict, keep=None, dtype=np.float64) -> dict:
    """Every statement in order over bound arrays; returns ``env`` extended with lets, reductions, outputs.

    ``env["pos"]`` holds the elements' indices; it defaults to ``arange(L)``, so a caller running a
    segment that starts at ``lo`` passes ``pos`` sliced from the row's.
    """
    env = dict(env)
    rows, length = next(env[i.name].shape[:2] for i in cascade.inputs)
    if POSITION not in env:
        env[POSITION] = np.arange(length, dtype=dtype)[None, :, None]
    varying = cascade.per_element()
    with np.errstate(all="ignore"):
        for s in cascade.statements:
            if isinstance(s, Let):
                env[s.name] = eval_expr(s.expr, env, dtype)
            elif isinstance(s, Reduction):
                body = np.broadcast_to(eval_expr(s.body, env, dtype), (rows, length, _width(s, cascade, env)))
                out = reduce_axis(s.monoid, body, keep)
                if s.monoid.k is not None:
                    out, env[f"{s.name}.index"] = out
                env[s.name] = out
            elif isinstance(s, Output):
                span = length if s.name in varying else 1
                env[s.name] = np.broadcast_to(eval_expr(s.expr, env, dtype), (rows, span, _width(s, cascade, env)))
    return env


def collect(cascade: Cascade, env: dict) -> dict[str, np.ndarray]:
    """Reductions and outputs of an evaluated env in the public layout (the ``L`` axis dropped)."""
    varying, sizes = cascade.per_element(), cascade.sizes
    result = {}
    for s in (*cascade.reductions, *cascade.outputs):
        v = env[s.name] if s.name in varying else env[s.name][:, 0, :]
        result[s.name] = v[..., 0] if sizes[s.name] is None else v
        if f"{s.name}.index" in env:
            result[f"{s.name}.index"] = env[f"{s.name}.index"][:, 0, :]
    return result


def evaluate(cascade: Cascade, inputs: dict, params: dict | None = None, keep=None,
             dtype=np.float64) -> dict[str, np.ndarray]:
    """Run the cascade unfused (float64 unless ``dtype`` says otherwise).

    Returns
    -------
    dict
        Every reduction and output by name: ``(rows,)`` for scalars,
        ``(rows, size)`` for vectors and top-k values, with an ``L`` axis after
        ``rows`` for per-element outputs; top-k indices as ``"NAME.index"``.

    ``cascade`` may also be a derived cascade (``redalgebra.derive``'s ``FusedCascade``): its cascade as written
    is run, the reference its kernels are checked against.
    """
    if not isinstance(cascade, Cascade):
        written = getattr(cascade, "source", None) or getattr(cascade, "cascade", None)
        if not isinstance(written, Cascade):  # (a FusedCascade's source, else its cascade; ir cannot import derive)
            raise EvaluationError(f"evaluate() takes a Cascade (from redalgebra.parse) or a derived cascade, got "
                                  f"{type(cascade).__name__}")
        cascade = written
    env, rows, length = bind(cascade, inputs, params or {}, dtype)
    return collect(cascade, run_unfused(cascade, env, check_keep(keep, rows, length), dtype))


def _width(s, cascade: Cascade, env: dict) -> int:
    size = cascade.sizes[s.name]
    if size is None or (isinstance(s, Reduction) and s.monoid.k is not None):
        return 1
    if isinstance(size, int):
        return size
    for t in (*cascade.inputs, *cascade.params):
        if t.size == size:
            return env[t.name].shape[-1]
    raise EvaluationError(f"cannot tell the size {size} of {s.name}")
