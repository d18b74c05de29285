"""Which cascades and calls the tensor-core strategies (:mod:`.mma`, :mod:`.wgmma`) take.

Both build the same kernel from the same forms: rows that share their element vectors, dot products of a vector
param and a vector input, vector sums of a factor times a vector input, scalar reductions by add, max or min.
:func:`refusal` says why a cascade has another form, :func:`applicable` why a call does not suit (types, sizes,
alignment, shared memory, float16's range), :func:`gate` finds the condition that lets whole tiles be skipped
(a causal mask), :func:`dots` names the products.
"""

from __future__ import annotations

import sympy as sp

from ...derive import FusedCascade
from ...ir.functions import Dot, VSum
from . import Problem
from .base import named_nodes
from .columns import split_body

#: The vector types the tensor cores take, and the name of their instructions.
KINDS = {"bfloat16": "bf16", "float16": "f16"}

#: The widest vector a warp's accumulators hold (16 rows × 128 columns: 64 float32 per thread per vector).
MOST_COMPONENTS = 128

#: Dynamic shared memory a Hopper block may opt into (227 KB).
SHARED_LIMIT = 232448

#: Wider vector sums (MLA's 512-wide values) are split by columns across two warpgroups (``wgmma``), each holding
#: at most WIDEST / 2 columns (128 float32 a thread) in whole 64-column blocks of the staged tile.
WIDEST, WIDE_MULTIPLE = 512, 128

#: ... or, in a block with a producer warpgroup (``wgmma``, ``threads=384``), held whole by each consumer warpgroup up
#: to this many components in all (128 float32 a thread: the producer's registers handed to the consumers, tiles of
#: 64 or, where three stages of 64 would not fit beside the query's rows, 32 elements: attention above 192
#: components, ``wgmma_policy._tile``), whatever their width's multiple (d = 192, 256).
PRODUCER_COMPONENTS = 256


def staged(n: int) -> int:
    """The components a vector of ``n`` is staged and multiplied as: the next multiple of 16 (one ``k16`` step of the
    instructions a 16 components). A width of a multiple of 8 but not of 16 (Stable Diffusion's 40, SigLIP's 72,
    ViT-g's 88: rows of whole 16-byte chunks) is padded in shared memory by one chunk of zeros a row, which its
    copies zero-fill (``cp.async`` of no bytes) and its params' stores write; the padding's products add zeros, its
    output columns are not stored."""
    return -(-n // 16) * 16


def wide_refusal(name: str) -> str:
    """Why ``name`` takes no block for vector sums that :func:`column_groups` does not split."""
    return (f"{name}: vector sums of at most {MOST_COMPONENTS} components ({PRODUCER_COMPONENTS} with a producer "
            f"warpgroup, threads=384; 96 in the simulator), or multiples of {WIDE_MULTIPLE} up to {WIDEST} in all "
            f"(split across two warpgroups); use vrows")


def column_groups(widths, most: int = MOST_COMPONENTS) -> int | None:
    """Warpgroups that share a row tile, each with its share of the vector sums' columns: 1 up to
    :data:`MOST_COMPONENTS` wide, or ``most`` in all (:data:`PRODUCER_COMPONENTS` in a producer block), as staged
    (:func:`staged`), 2 for multiples of :data:`WIDE_MULTIPLE` up to :data:`WIDEST` (at most WIDEST columns in all:
    never a padded width, whose padding would fall in the last group's columns); None: no split holds them.
    ``widths``: the sums' own components."""
    widths = list(widths)
    held = [staged(w) for w in widths]
    if max(held, default=0) <= MOST_COMPONENTS or sum(held) <= most:
        return 1
    if all(w % WIDE_MULTIPLE == 0 for w in widths) and sum(widths) <= WIDEST:
        return 2
    return None

def dots(exprs) -> dict:
    """The dot products of ``exprs``, each named (``__dot0``, …): the products a kernel computes on the tensor cores."""
    return named_nodes(exprs, (Dot,), "__dot")


def summed(exprs, names: list) -> tuple[list, dict]:
    """Dot products (``names``, their symbols) that enter only as terms of one sum — MLA's ``dot(qc, c) + dot(qr, kr)``:
    ``(groups, replace)``, each group the indices of the products that one chain of accumulators computes (the others
    alone), and the sums to replace (:func:`replace_sums`), each by its first product's symbol plus its other terms."""
    index = {s: n for n, s in enumerate(names)}
    exprs = list(exprs)
    replace, groups, taken = {}, [], set()
    for e in exprs:
        for node in sp.preorder_traversal(e):
            if not isinstance(node, sp.Add) or node in replace:
                continue
            terms = [a for a in node.args if a in index]
            if len(terms) < 2 or taken & set(terms):
                continue
            mark = sp.Dummy()
            if any(set(terms) & x.xreplace({node: mark}).free_symbols for x in exprs):
                continue  # a product read elsewhere too keeps its own value
            taken |= set(terms)
            replace[node] = sp.Add(terms[0], *[a for a in node.args if a not in terms])
            groups.append([index[t] for t in terms])
    groups += [[n] for n in range(len(names)) if names[n] not in taken]
    return sorted(groups), replace


def replace_sums(e, replace: dict):
    """``e`` with :func:`summed`'s sums replaced, nested ones too (a replacement's terms may hold another sum)."""
    while True:
        done = e.xreplace(replace)
        if done == e:
            return e
        e = done


def refusal(fused: FusedCascade, name: str = "mma") -> str | None:
    """Why the tensor-core strategy ``name`` cannot build this cascade's kernel at any size (None: it can)."""
    c = fused.cascade
    vin = {s.name for s in c.inputs if s.size is not None}
    vpar = {p.name for p in c.params if p.size is not None}
    if not vin:
        return f"the {name} strategy is for elements with vector inputs shared by rows; {c.name} has none: use rows"
    if fused.per_element_outputs:
        return f"{name} writes row outputs only; {c.name} has per-element outputs: use lanes or tile"
    if fused.rewrite is not None and any(ra.deps and ra.name not in fused.corrections for ra in fused.reductions):
        return f"{name} applies multiplicative corrections; {c.name} has centred (Welford) terms: use vrows"
    vred = {r.name for r in c.reductions if c.sizes[r.name] is not None}
    exprs = [e for _, e in fused.prologue.steps] + list(fused.bodies.values())
    for e in exprs:
        for node in sp.preorder_traversal(e):
            if isinstance(node, VSum):
                return f"{name}: a component sum ({node}) has no product form; use vrows"
            if isinstance(node, Dot):
                names = {a.name for a in node.args if isinstance(a, sp.Symbol)}
                if len(names & vpar) != 1 or len(names & vin) != 1:
                    return f"{name} multiplies a vector param by a vector input; {node} is not such a product: use vrows"
    outs = {o.name for o in c.outputs}
    for sym, e in fused.finalize.steps:
        if c.sizes.get(sym.name) is not None:
            read = {r.name for r in c.reductions if c.sizes[r.name] is not None} & {s.name for s in e.free_symbols}
            if sym.name not in outs or any(c.sizes[r] != c.sizes[sym.name] for r in read) or not read:
                return (f"{name}: the vector {sym.name} of the finalize must be an output read from vector sums of its "
                        f"own length; use vrows")
        if any(isinstance(a, (Dot, VSum)) for a in sp.preorder_traversal(e)):
            return f"{name}: a dot product in the finalize of {c.name}; use vrows"
        if {s.name for s in e.free_symbols} & (vpar | vin):
            return f"{name}: the finalize of {c.name} reads a vector param or input; use vrows"
    found = dots(exprs)
    for r in c.reductions:
        if r.monoid.k is not None:
            return f"{name} does not hold top-k states ({c.name}); use lanes"
        body = fused.bodies[r.name].xreplace(found)
        loose = {s.name for s in body.free_symbols} & (vin | vpar)
        if r.name not in vred:
            if r.monoid.name not in ("add", "max", "min"):
                return f"{name} reduces scalars by add, max or min; {r.name} is a {r.monoid.name}: use vrows"
            if loose or {s.name for s in body.free_symbols} & vred:
                return f"{name}: the scalar reduction {r.name} reads a vector beyond a dot product; use vrows"
            continue
        if r.monoid.name != "add":
            return f"{name} sums its vector reductions; {r.name} is a {r.monoid.name}: use vrows"
        factor, vector = split_body(body, vin)
        if vector is None or {s.name for s in factor.free_symbols} & (vin | vpar | vred):
            return (f"{name} needs each vector reduction's body as a scalar factor times a vector input; {r.name} = "
                    f"{fused.bodies[r.name]}: use vrows")
        ra = fused.analysis[r.name]
        if ra.deps and ra.otimes.name != "mul":
            return f"{name} scales its vector reductions; {r.name}'s correction is additive: use vrows"
    for sym, e in fused.prologue.steps:
        if {s.name for s in e.xreplace(found).free_symbols} & (vin | vpar):
            return f"{name}: the per-element let {sym.name} reads a vector beyond a dot product; use vrows"
    return None


def gate(fused: FusedCascade, prologue, bodies, factors):
    """``(let, condition)`` when an element whose condition is false adds nothing to any reduction, else None.

    A causal mask or a sliding window is written ``let sc = where(pos <= qpos, s, -inf)``: the condition reads
    only positions and the row's params, and with ``sc = -inf`` every body is its reduction's identity
    (``max(-inf)``, ``exp(-inf - m) = 0``, ``0 · v``), which is checked symbolically here. A tile whose condition
    is false for every row of the block and every element is then skipped whole (causal attention: the tiles
    above the diagonal)."""
    c = fused.cascade
    free = {p.name for p in c.params if p.size is None} | {"pos"}
    for sym, expr in prologue:
        if not (isinstance(expr, sp.Piecewise) and len(expr.args) == 2 and expr.args[1].expr == -sp.oo
                and expr.args[1].cond == sp.true):
            continue
        cond = expr.args[0].cond
        if not {s_.name for s_ in cond.free_symbols} <= free:
            continue
        empty = sym.xreplace({sym: -sp.oo})
        ok = True
        for r in c.reductions:
            body = factors[r.name][0] if r.name in factors else bodies[r.name]
            ident = sp.Integer(0) if r.name in factors else fused.identity[r.name]
            if sp.simplify(body.xreplace({sym: empty})) != ident:
                ok = False
                break
        if ok:
            return sym, cond
    return None


def prefix(cond) -> bool:
    """Whether a gate's condition holds on a prefix of the row (``pos <= qpos``, ``2 * pos < qpos + w``): one
    comparison, linear in ``pos``, true for the smaller positions — once a tile is dead for every row of a block, so
    is every later one, and the block stops there (a causal mask: half of the tiles of a square are above the
    diagonal, each of them otherwise a barrier and a test of every element for nothing)."""
    pos = next((s_ for s_ in cond.free_symbols if s_.name == "pos"), None)
    if pos is None or not isinstance(cond, (sp.LessThan, sp.StrictLessThan, sp.GreaterThan, sp.StrictGreaterThan)):
        return False
    d = sp.expand(cond.lhs - cond.rhs)
    slope = sp.diff(d, pos)
    if not slope.is_number or slope == 0 or sp.diff(d, pos, 2) != 0:
        return False
    below = isinstance(cond, (sp.LessThan, sp.StrictLessThan))  # true where d is below 0
    return bool(slope > 0) == below


def applicable(fused: FusedCascade, p: Problem, name: str, shared, wide: bool = False,
               most: int = MOST_COMPONENTS) -> str | None:
    """Why the tensor-core strategy ``name`` does not suit this call (None: it does): the cascade's form, then the
    types and sizes; ``shared(fused, problem)``: the bytes of shared memory the strategy's block needs; ``wide``: vector
    inputs of any width (a multiple of 8, :func:`staged`), vector sums split by :func:`column_groups` (one
    warpgroup's up to ``most``)."""
    reason = refusal(fused, name)
    if reason is not None:
        return reason
    c, dtypes, sizes = fused.cascade, dict(p.dtypes), dict(p.sizes)
    vin = [s for s in c.inputs if s.size is not None]
    kinds = {dtypes.get(s.name, "float32") for s in vin}
    if len(kinds) != 1 or not kinds <= set(KINDS):
        return f"{name}: the tensor cores take bfloat16 or float16 vectors of one type, got {', '.join(sorted(kinds))}"
    def length(x):
        return x if isinstance(x, int) else sizes.get(x, 0)
    for s in vin:
        n = length(s.size)
        if n % 8:  # (a row of 16-bit components starts on a 16-byte boundary only then: cp.async copies 16 bytes)
            return f"{name}: vectors of a multiple of 8 components; {s.name} has {n} (vrows takes any)"
        if staged(n) > MOST_COMPONENTS and not wide:
            return f"{name}: vectors of at most {MOST_COMPONENTS} components; {s.name} has {n}"
    if wide and column_groups((length(c.sizes[r.name]) for r in c.reductions if c.sizes[r.name] is not None),
                              most) is None:
        return wide_refusal(name)
    if not p.vec_ok:  # (with a multiple of 8 16-bit components, every element's vector then starts on one too)
        return f"{name}: the vector inputs must start on 16-byte boundaries (cp.async copies 16 bytes)"
    reps = dict(p.reps)
    if len({reps.get(s.name, 1) for s in vin}) != 1:
        return f"{name}: every vector input must be shared by the same rows"
    need = shared(fused, p)
    if need > SHARED_LIMIT:
        return (f"{name}: the staged tiles and params need {need} bytes of shared memory, more than a block has "
                f"({SHARED_LIMIT}); use vrows")
    if kinds == {"float16"}:
        for r in c.reductions:
            if c.sizes[r.name] is not None and not unit_factor(fused, r):
                return (f"{name}: float16 products need each vector sum's factors in [0, 1] with the row's largest at 1 "
                        f"(softmax's exp(s - max(s))), or float16 over- or underflows; {r.name}'s are not shown to be: "
                        f"give bfloat16 inputs or use vrows")
    return None


def unit_factor(fused: FusedCascade, r) -> bool:
    """Whether the factor ``f`` of vector sum ``r`` (``f · v``) lies in (0, 1] on every state the cascade reaches, 1 at
    its bound: with each bounding dependency written as ``m = e + u`` (``u >= 0``, :func:`~redalgebra.derive.analysis.
    bounds`), ``f`` is 1 at ``u = 0``, positive, and does not grow with ``u`` — ``exp(s - m)`` with ``m = max(s)``."""
    from ...derive.analysis import bounds

    c = fused.cascade
    factor, _ = split_body(fused.bodies[r.name], {s.name for s in c.inputs if s.size is not None})
    if factor is None:
        return False
    gap = sp.Symbol("u__gap", nonnegative=True)
    moved = {hi: lo + gap for hi, lo in bounds(c, fused.analysis[r.name].deps, factor) if isinstance(hi, sp.Symbol)}
    if len(moved) != 1:
        return False
    f = factor.xreplace(moved)
    return (sp.simplify(f.subs(gap, 0) - 1) == 0 and bool(f.is_positive)
            and bool(sp.simplify(sp.diff(f, gap)).is_nonpositive))
