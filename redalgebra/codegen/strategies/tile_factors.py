"""``columns_wgmma``'s factors computed in its product's tiles: no factors kernel (:attr:`Spec.tile_factors`).

Where the factor is a row scale times a part of
the elements alone, ``F = E(x, g, …) · S(scalar reductions, params)`` (RMSNorm's ``g · x`` and
``1 / sqrt(ss / h + eps)``: :func:`split_scale`, a SymPy ``as_independent`` on the reductions' symbols), and the scalar
reductions read the elements alone, ``Σ F w = S · Σ E w``, and no factors kernel is needed: the blocks copy the
activations ``x`` themselves (16-bit, rows on the 16-byte grid) into the factor tile's place — a ring of their own,
a stage more than the weights' and a tile further ahead — and each thread reads its own copies of tile ``t + 1``
back while tile ``t``'s products run, folds each element into its rows' states of the scalar reductions (any monoid
with a binary op: a sum of squares, a max), loads the elements' other inputs (RMSNorm's ``g``) and writes ``E`` in the
weights' 16-bit type where ``x`` was; the ``fence.proxy.async`` and barrier at the top of the next iteration hand the
tile to ``wgmma``. After the last tile the 8 lanes that copied a row's chunks combine their states by
shuffles, park them in shared memory, and the epilogue scales each row's sums by ``S``. The activations are read
once per column block, as the factors were; the factors' write and read (a 64 MB round trip at RMSNorm M4096) and a
kernel launch are gone. It takes one segment (``S`` needs the whole row) and no mask; elsewhere (FP8's
``fp8(x · 448 / a)``, which does not separate) the factors kernel stays. ``E`` is rounded once to 16 bits, as the
whole factor was. **Off by default** (:data:`TILE_FACTORS`): on the H200 this product took 334-352 us at RMSNorm
M4096 K = N = 4096 against 218-224 us for the factors kernel and the plain product together (four layouts of the
pass tried; the first, with 32-bit shared accesses between the copies' wait and the barrier, 452 us). ``ncu``: issue
every 5.5 cycles a warp, the largest stall (34 %) waiting on L1TEX results — the pass's loads of ``g`` from global
memory, or the copies' waits; not separated. Next: the other inputs staged or prefetched a tile ahead, and the
factors kept in registers (``wgmma``'s A operand from registers, as FlashAttention 3's ``P · V``); not built.

:class:`TileFactors` is the kernel's part of it (a mixin of :class:`~.columns_wgmma.ColumnsWgmmaKernel`, which lays
out the rings and calls these pieces from its loop); :func:`choose` is the launch policy's.
"""

from __future__ import annotations

import sympy as sp

from ...derive import FusedCascade
from ...errors import RedalgebraError
from ..states import ScalarState, identity_text
from ..tree import Assign, Barrier, Call, If, Load, Shared
from . import VEC, Problem
from .columns import split_body
from .products import KINDS
from .wgmma import ROW

#: Elements of a staged tile (one 128-byte swizzled row of 16-bit values).
BK = ROW
#: Whether :func:`choose` computes the factors in the product's tiles where the cascade allows
#: (:attr:`Spec.tile_factors`); else the factors kernel always. Off: on the H200 the product with the factors in its
#: tiles took 334-352 us at RMSNorm M4096 K = N = 4096, against 192-202 us for the product alone and 218-224 us for
#: the module with its factors kernel (``gpu/rowfactors_sweep.py normgemm 2 tiles auto``; gpu/README.md). Read by
#: :func:`choose` only (the GPU scripts' hook).
TILE_FACTORS = False


def split_scale(fused: FusedCascade):
    """``(E, S)`` with the vector reduction's factor ``E * S``: ``E`` of the elements alone (no reduction's value), ``S``
    of the row's scalar reductions and scalar params alone (RMSNorm's ``g * x`` and ``1 / sqrt(ss / h + eps)``), where
    the scalar reductions read the elements alone (no reduction's value: each thread folds the elements it stages,
    and the threads' states meet at the end); None otherwise (an FP8 cast of ``x * 448 / a`` does not separate).
    Then ``Σ F w = S · Σ E w``: the product's blocks need no factors kernel (:attr:`Spec.tile_factors`)."""
    c = fused.cascade
    reds = {r.name for r in c.reductions}
    scal = [r for r in c.reductions if c.sizes[r.name] is None]
    vred = [r for r in c.reductions if c.sizes[r.name] is not None]
    if not scal or len(vred) != 1:
        return None
    if any(r.monoid.op is None or _names(fused.bodies[r.name]) & reds for r in scal):
        return None
    factor, _ = split_body(fused.bodies[vred[0].name], {s.name for s in c.inputs if s.size is not None})
    if factor is None:
        return None
    deps = [s for s in factor.free_symbols if s.name in reds]
    element, scale = factor.as_independent(*deps, as_Add=False)
    row = {r.name for r in scal} | {p.name for p in c.params if p.size is None}
    if _names(element) & reds or not _names(scale) <= row:
        return None
    return element, scale


def _names(expr) -> set:
    return {s.name for s in expr.free_symbols}


def staged_input(fused: FusedCascade, dtypes: dict, reps: dict) -> str | None:
    """The per-element input the product's blocks stage with ``cp.async`` under :attr:`Spec.tile_factors`: of the
    factor's row-free part, the one the fewest rows share (the activations, not RMSNorm's weight ``g``), if 16-bit
    (it is turned into the factors in place, in the same 128 bytes a row); None otherwise."""
    parts = split_scale(fused)
    if parts is None:
        return None
    names = element_names(fused, parts[0])
    ins = [s.name for s in fused.cascade.inputs if s.size is None and s.name in names]
    if not ins:
        return None
    x = min(ins, key=lambda n: reps.get(n, 1))
    return x if dtypes.get(x) in ("bfloat16", "float16") else None


def element_names(fused: FusedCascade, expr) -> set:
    """The names ``expr`` reads, through the per-element lets it reads (element atoms: no reduction in them)."""
    names = _names(expr)
    for sym, e in reversed(fused.prologue.steps):
        if sym.name in names:
            names |= _names(e)
    return names


def choose(fused: FusedCascade, p: Problem, nseg: int) -> str:
    """The input the product's blocks stage and turn into factors (:attr:`Spec.tile_factors`), or "" for the factors
    kernel: where the factor separates (:func:`split_scale`), the axis is one segment (the row's scale needs the
    whole row; few blocks split it), no mask, every row on the 16-byte grid (the activations copied 16 bytes at a
    time) and the elements' inputs of 2 or 4 bytes."""
    if not TILE_FACTORS or nseg > 1 or p.has_keep or not (p.vec_ok and p.pitch_ok):
        return ""
    dtypes = dict(p.dtypes)
    if any(dtypes.get(s.name, "float32") not in ("bfloat16", "float16", "float32")
           for s in fused.cascade.inputs if s.size is None):
        return ""
    return staged_input(fused, dtypes, dict(p.reps)) or ""


class TileFactors:
    """The pieces of the product's kernel under :attr:`Spec.tile_factors`: the activations' copies, the pass that turns
    them into factors folding the scalar reductions, the states' meeting and the rows' scales."""

    def tile_factor_parts(self) -> None:
        """Under :attr:`Spec.tile_factors`: the factor's parts (``element``, ``scale``), the staged input, the other
        inputs the elements read (``loaded``) and the scalar params they read (``row_params``)."""
        parts, x = split_scale(self.f), self.spec.tile_factors
        if parts is None or x not in _names(parts[0]) or self.dtypes.get(x) not in ("bfloat16", "float16") or \
                self.spec.segments > 1 or self.spec.has_keep:
            raise RedalgebraError("columns_wgmma: the factors are computed in the product's tiles only for a factor that "
                                  "is a row scale times a part of the elements alone, 16-bit activations, one segment "
                                  "and no mask")
        self.element, self.scale = parts
        self.staged = x
        used = element_names(self.f, sp.Tuple(self.element, *(self.f.bodies[r] for r in self.scalar_reds)))
        self.lets = [(sym, expr) for sym, expr in self.f.prologue.steps if sym.name in used]  # (in their order)
        if x not in used:  # (the staged input read only through a let)
            raise RedalgebraError(f"columns_wgmma: the factors' elements do not read {x}")
        self.loaded = [s_ for s_ in self.sin if s_ in used and s_ != x]
        self.row_params = [p.name for p in self.c.params if p.size is None and p.name in used]
        self.monoids = {r.name: r.monoid for r in self.c.reductions}

    def issue_x(self, tile: str) -> list:
        """Under :attr:`Spec.tile_factors`, ``cp.async`` of tile ``tile`` of the activations into their ring: whole
        chunks, or in the last tile the bytes inside the row and zeros (a chunk past the row's end copies nothing,
        from the tile's first element: a valid address)."""
        x, na = self.staged, self.chunks()[0]
        out = [Assign("kx0", f"lo + ({tile}) * {BK}"),
               Assign("sx", f"sb + (uint32({tile}) % uint32({self.xstages})) * {self.a_units}")]
        whole, partial = [], []
        for u in range(na):
            whole += self.guarded(u, self.bm * 8, Call("cp_async16_at", ("sm", f"sx + fd_{u}", x, f"fo_{u} + kx0", "16")))
            partial += self.guarded(u, self.bm * 8, Call("cp_async16_at", (
                "sm", f"sx + fd_{u}", x, f"fo_{u} + kx0 - pick(kx0 + 8 * (tid % 8) < hi, 0, 8 * (tid % 8))",
                "2 * min(max(hi - kx0 - 8 * (tid % 8), 0), 8)")))
        return out + [If(f"kx0 + {BK} <= hi", tuple(whole), tuple(partial))]

    def transform(self, tile: str) -> list:
        """Tile ``tile``'s staged activations turned into factors in place: each thread reads back its own copies (its
        ``cp.async`` wait made them visible to it), loads the other inputs of those elements, folds each element into
        its row's state ``s<u>_<r>`` of every scalar reduction and writes the factor's row-free part ``E`` in the
        weights' 16-bit type where the activations were. In the last tile, the elements past the row's end fold
        nothing and their factors are zeros."""
        na = self.chunks()[0]
        out = [Assign("kt0", f"lo + ({tile}) * {BK}"), Assign("kx", "kt0 + 8 * (tid % 8)"),
               Assign("sd", f"sb + (uint32({tile}) % uint32({self.xstages})) * {self.a_units}")]
        # every chunk's shared-memory load first, then each chunk's work: one load latency a tile, not one a chunk
        # (the loads and stores are ordered memory instructions: a chunk's load cannot pass the store before it)
        reads = [st for u in range(na) for st in self.guarded(u, self.bm * 8, Assign(
            ", ".join(f"xw{u}_{j}" for j in range(4)), f"lds_w4(sm, sd + fd_{u})"))]
        whole = [st for u in range(na) for st in self.guarded(u, self.bm * 8, *self.transform_chunk(u, False))]
        tested = [st for u in range(na) for st in self.guarded(u, self.bm * 8, *self.transform_chunk(u, True))]
        return out + reads + [If(f"kt0 + {BK} <= hi", tuple(whole), tuple(tested))]

    def transform_chunk(self, u: int, tested: bool) -> list:
        """Copy ``u``'s 8 elements (row ``ro_<u>``, elements ``kx …``), read from shared memory into ``xw<u>_*`` (one
        128-bit load): each element's folds and factor, 16 bytes written back (one 128-bit store)."""
        x, zero = self.staged, self.consts.name(0.0)
        unpack, pack = f"unpack_{KINDS[self.dtypes[x]]}x2", f"pack_{self.kind}x2"
        out = [Assign(f"xv_{2 * j}, xv_{2 * j + 1}", f"{unpack}(xw{u}_{j})") for j in range(4)]
        out += [Assign(f"p_{p}", f"p_{p}_{u}") for p in self.row_params]
        for s_ in self.loaded:
            dtype = self.dtypes.get(s_, "float32")
            names, width = [f"lv_{s_}_{c}" for c in range(8)], VEC[dtype]
            if tested:
                out += [If(f"kx + {c} < hi", (Load((names[c],), s_, f"rr_{s_}_{u}", f"kx + {c}", dtype),),
                           (Assign(names[c], zero),)) for c in range(8)]
            else:  # (16-byte loads: the rows' pitch and the chunk are on the 16-byte grid)
                out += [Load(tuple(names[c:c + width]), s_, f"rr_{s_}_{u}", f"kx + {c}", dtype) for c in range(0, 8, width)]
        acc = self.base()
        for c in range(8):
            acc.scalar["pos"], acc.scalar["element.index"] = f"float32(kx + {c})", f"kx + {c}"
            inside = [Assign(f"e_{x}", f"xv_{c}")] + [Assign(f"e_{s_}", f"lv_{s_}_{c}") for s_ in self.loaded]
            for sym, expr in self.lets:  # the element's lets, as the factors kernel computes them
                pre, text = self.print(expr, acc)
                inside += pre + [Assign(f"e_{sym.name}", text)]
            for r in self.scalar_reds:
                state = ScalarState(r, identity_text(self.f, r, self.consts))
                inside += state.fold(f"s{u}", self.monoids[r], self.f.bodies[r], acc, self.consts, self.counter,
                                     f"kx + {c}")
            pre, text = self.print(self.element, acc)
            inside += pre + [Assign(f"fv_{c}", text)]
            out += [If(f"kx + {c} < hi", tuple(inside), (Assign(f"fv_{c}", zero),))] if tested else inside
        return out + [Call("sts_w4", ("sm", f"sd + fd_{u}", *(f"{pack}(fv_{2 * j}, fv_{2 * j + 1})" for j in range(4))))]

    def states_init(self) -> list:
        """Each copy's row state of every scalar reduction at its identity."""
        return [Assign(f"s{u}_{r}", identity_text(self.f, r, self.consts))
                for u in range(self.chunks()[0]) for r in self.scalar_reds]

    def states_meet(self) -> list:
        """The 8 threads that copied a row's chunks (8 neighbouring lanes) combine their states by the monoid, and
        the first of them parks the row's final values in shared ``shr_<r>`` for the epilogue (barriers on both
        sides: a block walking tiles reads the previous tile's values in its epilogue)."""
        t, na = self.spec.threads, self.chunks()[0]
        out = [Shared(f"shr_{r}", (str(self.bm),)) for r in self.scalar_reds] + [Barrier()]
        for u in range(na):
            park = []
            for r in self.scalar_reds:
                state = ScalarState(r, identity_text(self.f, r, self.consts))
                other = sp.Symbol("__other", extended_real=True)
                for off in (1, 2, 4):
                    acc = self.lay.base_access()
                    acc.scalar[other.name] = f"o{u}_{r}"
                    out += state.shuffle(f"s{u}", f"o{u}", str(off))
                    out += state.fold(f"s{u}", self.monoids[r], other, acc, self.consts, self.counter, "-1")
                park.append(Assign(f"shr_{r}[(tid + {u * t}) // 8]", f"s{u}_{r}"))
            out.append(If("tid % 8 == 0", tuple(park)))
        return out + [Barrier()]

    def row_scale(self, acc, row: str, r0: str) -> list:
        """The row's scalar params and reductions (from ``shr_<r>``), and its scale ``rsc`` (the factor's part of the
        row alone)."""
        out = [Assign(f"p_{p.name}", f"{p.name}[{row}]") for p in self.c.params if p.size is None]
        for r in self.scalar_reds:
            out.append(Assign(f"f_{r}", f"shr_{r}[{row} - {r0}]"))
            acc.scalar[r] = f"f_{r}"
        pre, text = self.print(self.scale, acc)
        return out + pre + [Assign("rsc", text)]
