"""Validate generated kernels against the float64 reference on random inputs.

Shapes are small and odd (a length-1 row, lengths that are not multiples of
a warp), with masked elements and a fully masked row.  The error of an output
is ``max |kernel - reference| / max |reference|`` over the reference's finite
entries, and NaN must appear exactly where the reference has it; top-k
indices must match exactly.  Cascades with casts (fp8) are exact in ℝ only:
they are held to the size of one rounding step and their measured difference
is reported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
import sympy as sp

from ..codegen.strategies import get as get_strategy
from ..derive import FusedCascade
from ..errors import RedalgebraError
from ..ir import Cascade, Reduction, evaluate
from ..ir.reference import bind, check_keep, eval_expr, run_unfused
from .backends import cuda_module
from .compile import compile
from .formats import Encoded, as_bfloat16, as_e4m3, to_float

TOLERANCE = {"float32": 1e-4, "float16": 1e-4, "bfloat16": 1e-4, "e4m3": 1e-4}  # against the reference on the same rounded inputs
CAST_TOLERANCE = 0.1  # e4m3 keeps 3 mantissa bits: one rounding moves a value by up to 6.25 %
# an output stored in a narrower type is rounded once more, by up to half a unit in its last place
# (relative to the value: 2^-8 of it for bfloat16, 2^-11 for float16, so at most that of the largest)
STORE_ROUNDING = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
SMALL_SIZES = {"d": 8, "r": 16, "e": 4, "n": 5}
#: The size of a vector dimension named otherwise (``input k[h]``).
OTHER_SIZE = 8


def small_sizes(c) -> dict:
    """:data:`SMALL_SIZES` and :data:`OTHER_SIZE` for every dimension name ``c`` declares."""
    named = {s.size for s in (*c.inputs, *c.params) if isinstance(s.size, str)}
    return {**{name: OTHER_SIZE for name in named}, **SMALL_SIZES}


@dataclass
class CheckResult:
    workload: str
    backend: str
    strategy: str
    rows: int
    length: int
    dtype: str
    errors: dict
    tolerance: float
    passed: bool
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        errs = ", ".join(f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}" for k, v in self.errors.items())
        verdict = "ok  " if self.passed else "FAIL"
        return (f"{verdict} {self.workload:<18} {self.backend}/{self.strategy:<12} rows={self.rows:<4} "
                f"L={self.length:<6} {self.dtype:<8} {errs}  (tol {self.tolerance:g}){' ' + self.note if self.note else ''}")


#: The stored types an input may have.
DTYPES = ("float32", "float16", "bfloat16", "e4m3")


def input_dtypes(spec: str, names, params=()) -> dict:
    """``{input: dtype}`` from a check's dtype: one of :data:`DTYPES` for every input, or comma-separated
    ``name=dtype`` items with at most one bare dtype for the inputs not named (float32 where none is given):
    ``"bfloat16,w=e4m3"`` is bfloat16 activations and e4m3 weights. ``params``: vector params that may be named too,
    in a 16-bit type (``q=float16``: a query as a model holds it); those named are in the result, the others not."""
    default, named, given = "float32", {}, {}
    items = [i.strip() for i in str(spec).split(",")]
    if not all(items):
        raise RedalgebraError(f"dtype {spec!r}: an empty item; write one of {', '.join(DTYPES)}, or name=dtype items "
                              f"separated by commas")
    bare = [item for item in items if "=" not in item]
    if len(bare) > 1:
        raise RedalgebraError(f"dtype {spec!r}: {len(bare)} bare dtypes ({', '.join(bare)}); at most one, for the "
                              f"inputs not named")
    for item in items:
        name, eq, kind = item.rpartition("=")
        if kind not in DTYPES:
            raise RedalgebraError(f"dtype {spec!r}: {kind!r} is not one of {', '.join(DTYPES)}")
        if eq and (name in named or name in given):
            raise RedalgebraError(f"dtype {spec!r}: {name} is given twice")
        if not eq:
            default = kind
        elif name in params:
            if kind not in ("float16", "bfloat16"):
                raise RedalgebraError(f"dtype {spec!r}: param {name} may be given in float16 or bfloat16 (float32 is "
                                      f"the default), not {kind!r}")
            given[name] = kind
        elif name not in names:
            extra = f"; the vector params: {', '.join(params)}" if params else ""
            what = "input or vector param" if params else "input"
            raise RedalgebraError(f"dtype {spec!r}: no {what} named {name!r} (the inputs: {', '.join(names)}{extra})")
        else:
            named[name] = kind
    return {**{n: named.get(n, default) for n in names}, **given}


def random_problem(fused: FusedCascade, rows: int, length: int, rng, dtype="float32", sizes=None, masked=True,
                   shared=False):
    """Inputs, params and a keep mask (some masked elements, the last row fully masked); ``shared``: each vector
    input given once for all rows (a weight matrix), else a row of it per row.

    With three rows or more, the first row is all zeros (signed: -0.0 and 0.0 alternate), where a result
    such as ``max(abs(x))`` is 0 on a non-empty row; the second holds a tie for its largest value and a
    subnormal float32 (1e-40)."""
    c = fused.cascade
    sizes = {**small_sizes(c), **(sizes or {})}
    kinds = input_dtypes(dtype, [s.name for s in c.inputs])
    inputs = {}
    for s in c.inputs:
        n = 1 if shared and s.size is not None else rows
        shape = (n, length) if s.size is None else (n, length, sizes.get(s.size, s.size) if isinstance(s.size, str) else s.size)
        values = rng.normal(size=shape) * 2
        if s.sign is not None:  # as declared: strictly so for > 0 and < 0
            values = (np.abs(values) + (0.01 if s.sign[1] != "=" else 0.0)) * (1 if s.sign[0] == ">" else -1)
        if n >= 3 and length >= 2:
            if s.sign not in (">0", "<0"):  # zeros are out of a strictly signed input's domain
                values[0] = np.where(np.arange(length) % 2, 0.0, -0.0).reshape((length,) + (1,) * (values.ndim - 2))
            flat = values[1].reshape(length, -1)
            flat[-1] = flat[int(np.argmax(flat[:, 0]))]  # a tie for the largest value
            flat[0, 0] = -1e-40 if (s.sign or ">")[0] == "<" else 1e-40
        kind = kinds[s.name]
        wrap = {"bfloat16": as_bfloat16, "e4m3": as_e4m3}.get(kind)
        inputs[s.name] = wrap(values.astype(np.float32)) if wrap else values.astype(kind)
    params = {}
    for p in c.params:
        if getattr(p, "integer", False):  # an index along the axis per row (a label, a query position)
            params[p.name] = rng.integers(0, max(length, 1), size=rows)
            if p.bound is not None:  # moved inside the declared bound
                op, c = p.bound
                edge = int(sp.floor(c)) + 1 if op == ">" else int(sp.ceiling(c)) if op == ">=" else \
                    int(sp.ceiling(c)) - 1 if op == "<" else int(sp.floor(c))
                params[p.name] = (np.maximum if op[0] == ">" else np.minimum)(params[p.name], edge)
        elif p.size is None:  # signs as declared; an undeclared sign is either sign
            magnitude = abs(rng.normal()) + 0.1
            sign = {">0": 1, ">=0": 1, "<0": -1, "<=0": -1}.get(p.sign, rng.choice((-1, 1)))
            params[p.name] = np.float32(sign * magnitude)
            if p.bound is not None:  # inside the declared bound: c plus or minus a margin (strictly for > and <)
                op, c = p.bound
                step = abs(magnitude) + (0.01 if len(op) == 1 else 0.0)
                params[p.name] = np.float32(float(c) + step if op[0] == ">" else float(c) - step)
        else:
            params[p.name] = rng.normal(size=sizes.get(p.size, p.size) if isinstance(p.size, str) else p.size).astype(np.float32)
    keep = None
    if masked:
        keep = rng.random((rows, length)) > 0.2
        if rows > 1:
            keep[-1] = False
    return inputs, params, keep


def picked_values(fused: FusedCascade, inputs: dict, params: dict, keep) -> dict:
    """For every top-k reduction, its body's float64 value at each element (rows, L), -inf where masked."""
    c = fused.cascade
    env, rows, length = bind(c, {k: np.asarray(v, np.float64) for k, v in inputs.items()}, params)
    env = run_unfused(c, env, check_keep(keep, rows, length))
    out = {}
    with np.errstate(all="ignore"):
        for r in c.reductions:
            if r.monoid.k is not None:
                values = np.broadcast_to(eval_expr(r.body, env), (rows, length, 1))[..., 0]
                out[r.name] = values if keep is None else np.where(keep, values, -np.inf)
    return out


def _same_top_k(index, want_values, element_values) -> bool:
    """The kernel's indices pick the reference's top-k values, each element once: ties may be broken
    either way, but an element picked twice (and another dropped) is wrong whatever its value."""
    rows = np.arange(index.shape[0])[:, None]
    picked = np.where(index >= 0, element_values[rows, np.maximum(index, 0)], -np.inf)
    distinct = all(len(set(r[r >= 0].tolist())) == int((r >= 0).sum()) for r in index)
    return distinct and bool(np.allclose(picked, want_values, rtol=1e-6, atol=0, equal_nan=True))


def compare(got: dict, want: dict, element_values: dict | None = None) -> tuple[dict, bool]:
    """Per-output errors and whether NaN positions and indices agree."""
    errors, structural = {}, True
    for key, g in got.items():
        g, w = np.asarray(g, dtype=np.float64), np.asarray(want[key], dtype=np.float64)
        if key.endswith(".index"):
            name = key[:-len(".index")]
            same = bool(np.array_equal(g, w))
            if not same and element_values is not None:  # a tie broken the other way is still the top k
                same = _same_top_k(g.astype(np.int64), np.asarray(want[name]), element_values[name])
                errors[key] = "ties" if same else "differ"
            else:
                errors[key] = "exact" if same else "differ"
            structural &= same
            continue
        if not np.array_equal(np.isnan(g), np.isnan(w)):
            errors[key] = "nan mismatch"
            structural = False
            continue
        infinite = np.isinf(w)
        if not np.array_equal(g[infinite], w[infinite]):  # an empty row's -inf max, a log of 0: exactly that
            errors[key] = "inf mismatch"
            structural = False
            continue
        finite = np.isfinite(w)
        scale = np.max(np.abs(w[finite])) if finite.any() else 1.0
        with np.errstate(invalid="ignore"):
            errors[key] = float(np.max(np.abs(g - w)[finite]) / max(scale, 1e-30)) if finite.any() else 0.0
    return errors, structural


def magnitudes(cascade: Cascade) -> Cascade:
    """``cascade`` with every vector sum taken over its terms' magnitudes (``sum(abs(e))``). On the same inputs an
    output that is a sum of products ``Σ f·w`` becomes ``Σ |f·w|``: rounding each factor ``f`` by up to ``u |f|`` (a
    tensor-core product's 16-bit factors) moves the sum by at most ``u Σ |f·w|``, and an output ``o / l`` by
    ``u Σ |p·v| / l``. Scalar sums stay as they are: they make the factors the products round (LayerNorm's mean),
    and under abs() they would make others."""
    return Cascade(tuple(replace(s, body=sp.Abs(s.body)) if isinstance(s, Reduction) and s.monoid.name == "add"
                         and cascade.sizes.get(s.name) is not None else s
                         for s in cascade.statements), name=cascade.name)


def judge(fused: FusedCascade, raw: dict, inputs: dict, params: dict, keep, dtype: str, running: bool,
          products: bool = False):
    """(passed, per-output errors, tolerance) of a kernel's outputs ``raw`` against the float64 reference
    on the same (rounded) inputs. ``running``: fp8 rounded at a running scale (exact in ℝ only);
    ``products``: factors rounded to the inputs' 16-bit type before a tensor-core product, each element then allowed
    ``u`` of its sum's magnitudes besides (:func:`magnitudes`; the tolerance reported is the largest such
    allowance). A flat ``u`` of the largest output was not a bound: with few terms of both signs, ``Σ |f·w|`` of one
    element exceeds the largest ``|Σ f·w|`` (RMSNorm + GEMM over 37 bfloat16 terms read 4.7e-3 against 4.0e-3)."""
    stored = {k: (v.dtype if isinstance(v, Encoded) else str(np.asarray(v).dtype)) for k, v in raw.items()}
    got = {k: (v if k.endswith(".index") else to_float(v)) for k, v in raw.items()}
    exact = {k: (to_float(v) if isinstance(v, Encoded) else v).astype(np.float64)
             for k, v in inputs.items()}
    rows = max(v.shape[0] for v in exact.values())
    exact = {k: np.broadcast_to(v, (rows,) + v.shape[1:]) for k, v in exact.items()}  # inputs given once: shared
    want = evaluate(fused.source or fused.cascade, exact, params, keep=keep)  # the cascade as written
    topk = picked_values(fused, exact, params, keep) if any(r.monoid.k for r in fused.cascade.reductions) else None
    errors, structural = compare(got, want, topk)
    kinds = set(input_dtypes(dtype, list(inputs)).values())
    tol = CAST_TOLERANCE if running else max(TOLERANCE[k] for k in kinds)
    tols = {k: tol + STORE_ROUNDING.get(stored[k], 0.0) for k in errors}
    passed = structural
    if products:  # each factor of a sum moved by up to half a unit of the 16-bit type (u): u of each sum's magnitudes
        u = max(STORE_ROUNDING.get(k, 0.0) for k in kinds)
        scale = evaluate(magnitudes(fused.source or fused.cascade), exact, params, keep=keep)
        for k, v in errors.items():
            if not isinstance(v, float):
                continue
            g, w = np.asarray(got[k], dtype=np.float64), np.asarray(want[k], dtype=np.float64)
            finite = np.isfinite(w)
            if not finite.any():
                continue
            top, size = np.max(np.abs(w[finite])), np.abs(np.asarray(scale[k], dtype=np.float64)[finite])
            allowed = tols[k] * top + u * size
            passed &= bool(np.all(np.abs(g - w)[finite] <= allowed))
            tols[k] += u * float(np.max(size)) / max(top, 1e-30)
    else:
        passed &= all(v <= tols[k] for k, v in errors.items() if isinstance(v, float))
    return passed, errors, max(tols.values(), default=tol)


def check(fused: FusedCascade, backend: str, strategy: str | None = None, shapes=((3, 37), (2, 1), (2, 130)),
          dtypes=("float32",), seed: int = 0, sizes=None, **options) -> list[CheckResult]:
    """Run the generated kernel on random problems and compare with the reference.

    ``dtypes``: one problem set per item, each as :func:`input_dtypes` reads it (``"bfloat16"``, ``"bfloat16,w=e4m3"``).
    ``options`` go to :func:`~redalgebra.runtime.compile` (``threads``, ``tile``, ``fast_exp``)."""
    if not fused.cascade.outputs:
        raise RedalgebraError(f"{fused.cascade.name}: nothing to compare — the cascade has no `out`")
    kernel = compile(fused, backend, strategy, **options)
    if backend != "cpu":  # the simulator or real CUDA chosen before the problems' bfloat16 rounding imports numba.cuda
        cuda_module(backend)
    if sizes is None and kernel.strategy != "auto":  # small vectors, rounded up to what the strategy takes
        step = get_strategy(kernel.strategy).vector_multiple
        sizes = {name: -(-n // step) * step for name, n in small_sizes(fused.cascade).items()}
    rng = np.random.default_rng(seed)
    # a strategy whose blocks share each vector row (columns_mma) is given the vector inputs once, for all rows
    # (a cascade without a per-row input then has one row: its vectors stay a row each, and the strategy says why not)
    shared = kernel.strategy != "auto" and get_strategy(kernel.strategy).shared_vectors and \
        any(s.size is None for s in fused.cascade.inputs)
    casts = fused.exact_in_reals_only
    results = []
    for dtype in dtypes:
        for rows, length in shapes:
            inputs, params, keep = random_problem(fused, rows, length, rng, dtype, sizes, shared=shared)
            raw = kernel(inputs, params, keep=keep)
            # a strategy that folds every reduction with its dependencies final rounds at the final scale
            chosen = get_strategy(kernel.resolve(rows, length, sizes))
            running = casts and not chosen.final(fused)
            passed, errors, tol = judge(fused, raw, inputs, params, keep, dtype, running, chosen.rounds(fused))
            note = "exact in ℝ; fp8 rounding at a running scale is not bitwise" if running else ""
            results.append(CheckResult(fused.cascade.name, backend, kernel.resolve(rows, length), rows, length, dtype, errors,
                                       tol, passed, note))
    return results
