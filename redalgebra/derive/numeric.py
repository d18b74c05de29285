"""NumPy evaluators of the derived forms, in float64 or float32.

They run the very programs the code generator prints, so they are the
executable meaning of a :class:`~.fused.FusedCascade`:

* :meth:`Evaluator.incremental` — the sequential loop, ``state = update(state, e)``;
* :meth:`Evaluator.segmented` — any segmentation, each segment's state by the
  incremental or the non-incremental form, combined by any merge tree;
* :meth:`Evaluator.nonincremental` — the segment staged, its reductions in
  sequence, no corrections;
* :meth:`Evaluator.naive` — the one-pass ``(⊕ G) ⊗ H`` form, which overflows
  and is here to show why the incremental form exists.

A state is a dict: reduction name → ``(rows, 1, width)`` array, plus
``"NAME.index"`` for top-k.
"""

from __future__ import annotations

import random

import numpy as np

from ..ir.nodes import POSITION
from ..ir.reference import _width, bind, check_keep, collect, eval_expr, reduce_axis, run_unfused
from .fused import FusedCascade, combine
from .program import Program, TopKMerge


def run_program(program: Program, env: dict, dtype) -> dict:
    """Evaluate the program's steps in order over ``env`` (extended in place and returned)."""
    with np.errstate(all="ignore"):
        for sym, expr in program.steps:
            if isinstance(expr, TopKMerge):
                env[sym.name], env[sym.name + ".index"] = _topk_merge(expr, env, dtype)
            else:
                env[sym.name] = eval_expr(expr, env, dtype)
    return env


def _topk_merge(expr: TopKMerge, env: dict, dtype):
    k, left, right, left_index, right_index = expr.args
    lv, rv = eval_expr(left, env, dtype), eval_expr(right, env, dtype)
    li, ri = env[left_index.name], env[right_index.name]
    shape = np.broadcast_shapes(lv.shape[:-1], rv.shape[:-1])
    values = np.concatenate([np.broadcast_to(lv, shape + lv.shape[-1:]), np.broadcast_to(rv, shape + rv.shape[-1:])], -1)
    index = np.concatenate([np.broadcast_to(li, shape + li.shape[-1:]), np.broadcast_to(ri, shape + ri.shape[-1:])], -1)
    # an empty slot (index -1) stays -inf whatever its correction made of it (0 or NaN where a max reached +inf or NaN)
    values = np.where(index < 0, -np.inf, values)
    index = np.where(np.isneginf(values), -1, index)  # -inf is the identity: no element (as in the reference)
    rank = np.where(index < 0, np.iinfo(np.int64).max, index)  # ties: the lower index first, padding last
    # the reference's order: NaN above every number (NaNs by index), then the numbers descending
    nan = np.isnan(values)
    order = np.lexsort((rank, np.where(nan, 0.0, -values.astype(np.float64)), ~nan), axis=-1)[..., :int(k)]
    return np.take_along_axis(values, order, -1), np.take_along_axis(index, order, -1)


class Evaluator:
    """Bound inputs of one cascade, and the derived forms evaluated over them."""

    def __init__(self, fused: FusedCascade, inputs: dict, params: dict | None = None, keep=None, dtype=np.float64):
        self.fused, self.dtype = fused, dtype
        env, self.rows, self.length = bind(fused.cascade, inputs, params or {}, dtype)
        self.keep = check_keep(keep, self.rows, self.length)
        self.params = {p.name: env[p.name] for p in fused.cascade.params}
        self.elements = run_program(fused.prologue, env, dtype)
        self.widths = {r.name: self._width(r.name) for r in fused.cascade.reductions}

    # -- helpers ------------------------------------------------------------------------------
    def _width(self, name: str) -> int:
        size = self.fused.cascade.sizes[name]
        if self.fused.monoid(name).k is not None:
            return self.fused.monoid(name).k
        if size is None:
            return 1
        return next(self.elements[s.name].shape[-1] for s in (*self.fused.cascade.inputs, *self.fused.cascade.params)
                    if s.size == size)

    def _at(self, l: int) -> dict:
        env = dict(self.params)
        for s in self.fused.cascade.inputs:
            env[s.name] = self.elements[s.name][:, l:l + 1]
        for sym in self.fused.prologue.results:
            env[sym.name] = self.elements[sym.name][:, l:l + 1]
        env[POSITION] = self.elements[POSITION][:, l:l + 1]  # the index in the whole row, not in a segment
        env["element.index"] = np.full((self.rows, 1, 1), l)
        return env

    def _states(self, env: dict, suffix: str) -> dict:
        out = {}
        for name, w in self.widths.items():
            out[name] = np.broadcast_to(env[f"{name}_{suffix}"], (self.rows, 1, w)).astype(self.dtype)
            if f"{name}_{suffix}.index" in env:
                out[f"{name}.index"] = env[f"{name}_{suffix}.index"]
        return out

    @staticmethod
    def _named(state: dict, suffix: str) -> dict:
        return {(f"{k}_{suffix}" if "." not in k else k.replace(".", f"_{suffix}.")): v for k, v in state.items()}

    # -- the forms -------------------------------------------------------------------------------
    def identity(self) -> dict:
        state = {}
        for name, w in self.widths.items():
            state[name] = np.full((self.rows, 1, w), float(self.fused.identity[name]), dtype=self.dtype)
            if self.fused.monoid(name).k is not None:
                state[f"{name}.index"] = np.full((self.rows, 1, w), -1)
        return state

    def lift(self, l: int) -> dict:
        env = run_program(self.fused.lift, self._at(l), self.dtype)
        state = self.identity()
        for name, w in self.widths.items():
            value = np.broadcast_to(env[f"{name}_n"], (self.rows, 1, 1 if self.fused.monoid(name).k else w))
            if self.fused.monoid(name).k is not None:
                state[name][..., :1] = value
                state[f"{name}.index"][..., :1] = l
            else:
                state[name] = value.astype(self.dtype)
        return self._masked(state, self.identity(), l)

    def _masked(self, new: dict, old: dict, l: int) -> dict:
        if self.keep is None:
            return new
        kept = self.keep[:, l, None, None]
        return {k: np.where(kept, new[k], old[k]) for k in new}

    def update(self, state: dict, l: int) -> dict:
        env = run_program(self.fused.update, {**self._at(l), **self._named(state, "a")}, self.dtype)
        return self._masked(self._states(env, "n"), state, l)

    def merge(self, a: dict, b: dict) -> dict:
        env = run_program(self.fused.merge, {**self.params, **self._named(a, "a"), **self._named(b, "b")}, self.dtype)
        return self._states(env, "n")

    def incremental(self, lo: int = 0, hi: int | None = None) -> dict:
        state = self.identity()
        for l in range(lo, self.length if hi is None else hi):
            state = self.update(state, l)
        return state

    def nonincremental(self, lo: int = 0, hi: int | None = None) -> dict:
        """The segment's state by the unfused sequence over the staged segment (no corrections)."""
        hi = self.length if hi is None else hi
        if hi <= lo:
            return self.identity()
        env = dict(self.params)
        for s in self.fused.cascade.inputs:
            env[s.name] = self.elements[s.name][:, lo:hi]
        env[POSITION] = self.elements[POSITION][:, lo:hi]
        keep = None if self.keep is None else self.keep[:, lo:hi]
        out = run_unfused(self.fused.cascade, env, keep, self.dtype)
        state = {name: np.asarray(out[name], dtype=self.dtype) for name in self.widths}
        for name in self.widths:
            if f"{name}.index" in out:
                state[f"{name}.index"] = np.where(out[f"{name}.index"] >= 0, out[f"{name}.index"] + lo, -1)
        return state

    def segmented(self, bounds: list[int], form: str = "incremental", rng: random.Random | None = None) -> dict:
        """Segments ``[b_0, b_1), [b_1, b_2), …`` each by ``form``, merged by a random tree (``rng``) or left to right."""
        run = self.incremental if form == "incremental" else self.nonincremental
        states = [run(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
        while len(states) > 1:
            i = rng.randrange(len(states) - 1) if rng else 0
            a, b = states[i], states[i + 1]
            if rng and rng.random() < 0.5:
                a, b = b, a  # commutativity: either order
            states[i:i + 2] = [self.merge(a, b)]
        return states[0]

    def finalize(self, state: dict) -> dict:
        """Outputs from a root state, in the reference's layout (reductions included)."""
        env = {**self.params, **{k: v for k, v in state.items()}}
        for s in self.fused.cascade.inputs:
            env[s.name] = self.elements[s.name]
        for sym in self.fused.prologue.results:
            env[sym.name] = self.elements[sym.name]
        env[POSITION] = self.elements[POSITION]
        run_program(self.fused.finalize, env, self.dtype)
        for o in self.fused.cascade.outputs:
            span = self.length if o.name in self.fused.per_element_outputs else 1
            # (the reference's layout: a constant output, a number, has its rows and width too)
            env[o.name] = np.broadcast_to(env[o.name], (self.rows, span, _width(o, self.fused.cascade, env)))
        return collect(self.fused.cascade, env)

    def naive(self) -> dict:
        """The one-pass form ``r_i = (⊕_l G_i(e_l)) ⊗ H_i(D)``: exact in ℝ, overflows in floating point."""
        env = {**self.params, **self.elements}
        shape = (self.rows, self.length)
        with np.errstate(all="ignore"):
            for ra in self.fused.reductions:
                body = self.fused.bodies[ra.name] if not ra.deps else ra.G
                values = np.broadcast_to(eval_expr(body, env, self.dtype), shape + (self._body_width(ra.name),))
                out = reduce_axis(ra.monoid, values, self.keep)
                if ra.monoid.k is not None:
                    out, env[f"{ra.name}.index"] = out
                env[ra.name] = out if not ra.deps else combine(ra.otimes, out, eval_expr(ra.H, env, self.dtype))
        state = {name: env[name] for name in self.widths}
        state.update({k: v for k, v in env.items() if k.endswith(".index")})
        return self.finalize(state)

    def _body_width(self, name: str) -> int:
        return 1 if self.fused.monoid(name).k is not None else self.widths[name]


def random_bounds(length: int, rng: random.Random, max_segments: int = 6) -> list[int]:
    """Random segment boundaries ``0 = b_0 <= … <= b_n = length`` (empty segments allowed)."""
    cuts = sorted(rng.randint(0, length) for _ in range(rng.randint(0, max_segments - 1)))
    return [0, *cuts, length]


__all__ = ["Evaluator", "random_bounds", "run_program"]
