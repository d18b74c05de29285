"""``rows``: a group of threads per row, the row's elements in registers, moved 16 bytes at a time.

The kernel of DESIGN §3a for cascades whose elements are scalars (softmax, logsumexp, cross-entropy,
quantisers, routers):

1. A group of ``G`` threads owns a row (``G`` = the block, or a fraction of it so that one block
   takes several short rows). The row is cut into *chunks* of ``V`` elements, 16 bytes of the first
   input (4 float32, 8 bfloat16/float16); thread ``t`` of the group takes chunks ``t, t + G, …``, so
   the group's loads are coalesced and each is one 128-bit instruction. A row that does not start
   on the 16-byte grid (an odd length) gets a partial first chunk (``shifted``), and the last chunk
   may be partial: partial chunks are read element by element, any length and pitch work.
2. Each thread holds ``TILE`` chunks in registers and reduces them with the non-incremental form —
   every reduction in turn over the registers, dependencies taken from the thread's own partial
   state, an element whose dependency is at an identity it cannot reach contributing ``0_i``. That
   is the state of the thread's segment; rows longer than the group's registers are walked in
   passes whose states are merged with the derived merge. A row held in registers (*staged*) is
   reduced one reduction at a time instead, each with its dependencies final — the level order, the
   cascade as written — and so is a row read in passes where the one-pass form computes otherwise
   than the reference (a top-k of corrected values: a pass over the row a reduction;
   ``rows_staged.py``).
3. The group's states meet by the derived merge over a butterfly of shuffles (every lane ends with
   the row's state), then across the group's warps through shared memory and a second butterfly.
4. Outputs: per-element outputs from the registers when the row was resident (read once), else
   from a second pass; stored in the output's dtype (the input's by default, ``e4m3`` bytes for an
   ``fp8(…)`` output) with one 128-bit (or 32-bit for bytes) store per chunk where aligned.

Many 16-bit rows of 8-32 KB are walked by *persistent* blocks: the grid is as many blocks as fit on
the GPU at once (registers capped for 2048 resident threads per multiprocessor, 1024 for several inputs) and each block takes
rows ``blockIdx, blockIdx + gridDim, …``, rather than one block launched per row or group of rows.
"""

from __future__ import annotations

import functools

import sympy as sp

from ...derive import FusedCascade
from ...derive.fused import as_written
from ...derive.prepare import casts_in_reductions
from ...errors import RedalgebraError
from ...ir.functions import Dot, RoundE4M3, VSum
from ..emit import Spec
from ..printer import invariants, print_expr
from ..quotients import CheckedQuotient8, Quotient8, e4m3_quotients
from ..states import ScalarState, TopKState, bind_program, merge_stmts, require_scalar_elements, states_of
from ..tree import Assign, Barrier, Comment, For, If, Load, Store
from . import VEC, Strategy, register
from .base import TreeKernel
from .rows_policy import configure, scalar_reductions
from .rows_staged import RowsStaged

#: Independent partial states per scalar reduction in a thread's fold (chains of dependent adds, maxes).
ACC = 4
#: Input elements a thread holds at once in the outputs' passes over a row too long for its registers (``out_tile``):
#: LayerNorm over 65536 float32 (x, a weight and a bias: 96 at the reductions' 8 chunks of 4) spilled 732/816 bytes a
#: thread at 1024 threads (64 registers); 2 chunks a pass: 20/36. Softmax's one input keeps its 8.
OUT_VALUES = 32
#: Widths of the stores of one chunk of ``V`` elements, by (output dtype, V): elements per store.
WIDE_STORES = {("float32", 4): 4, ("bfloat16", 8): 8, ("float16", 8): 8, ("e4m3", 4): 4, ("e4m3", 8): 4,
               # 16-bit values from chunks of 16 e4m3 inputs (columns_wgmma's factors): two 16-byte stores
               ("bfloat16", 16): 8, ("float16", 16): 8}


class RowsKernel(RowsStaged, TreeKernel):
    """Builds the statement tree of one ``rows`` kernel."""

    def __init__(self, fused: FusedCascade, spec: Spec):
        require_scalar_elements(fused, "rows")
        super().__init__(fused, spec)
        self.states = states_of(fused, self.consts, self.lay.size_const)
        self.group = spec.group or spec.threads
        if spec.threads % self.group or self.group & (self.group - 1) or (self.group > 32 and self.group % 32):
            raise RedalgebraError(f"rows: a group of {self.group} threads must be a power of two dividing the block "
                                  f"of {spec.threads}")
        self.vec, self.tile = spec.vec, spec.tile
        self.dtypes = dict(spec.dtypes)
        self.out_dtypes = dict(spec.out_dtypes)
        self.scalars = [s.name for s in self.c.inputs]
        self.varying = set(fused.per_element_outputs)
        self.hoisted: dict = {}  # row constants of the per-element outputs: symbol name -> register
        self.named: dict = {}    # the same where ``divisors``: expression -> register (the printer names it)
        self.cached: dict = {}   # staged: per-element terms computed once -> their symbol (registers t<n>_<i>_<c>)
        # Set by a module that runs this kernel as one of its own (columns_wgmma's factors):
        self.arrays: dict = {}   # per-element output -> the array it is stored in (``out_<name>`` otherwise)
        self.padded: dict = {}   # per-element output -> its array's row width where wider than the row: the
        #                          columns past the row's end are written as zeros (a GEMM's tiles read them)
        self.divisors = False    # a row constant that divides is hoisted as the divisor, not as its reciprocal:
        #                          each element is divided by it, as written (x * 448 / a, not x * 448 * (1 / a))

    # -- access to one element's registers ---------------------------------------------------------
    def element_access(self, i: int, c: int, prefix: str = "o"):
        acc = self.lay.base_access()
        for name in self.scalars + [s.name for s in self.f.prologue.results]:
            acc.scalar[name] = f"e_{name}_{i}_{c}"
        acc.scalar["element.index"] = f"(c0_{i} + {c})"
        # float32 (an int64 index would make a comparison float64), converted once per chunk: exact below 2**24
        acc.scalar["pos"] = f"(fc0_{i} + {self.consts.name(float(c))})" if c else f"fc0_{i}"
        acc.scalar.update(self.hoisted)
        acc.named = self.named
        acc.scalar.update({t.name: f"{t.name[2:]}_{i}_{c}" for t in self.cached.values()})
        if self.spec.fast_exp:
            acc.exp = "fast_exp"
        return bind_program(acc, self.f.update, self.states, {"": prefix})

    # -- the pieces ----------------------------------------------------------------------------------
    def threads_setup(self) -> list:
        g, rows_per_block = self.group, self.spec.threads // self.group
        return [Assign("tid", "cuda.threadIdx.x"), Assign("lane", "tid % 32"), Assign("warp", "tid // 32"),
                Assign("gt", f"tid % {g}" if rows_per_block > 1 else "tid"),
                Assign("grp", f"tid // {g}" if rows_per_block > 1 else "0")]

    def setup(self, block: str = "cuda.blockIdx.x") -> list:
        """The row of this thread's group (in the ``block``-th run of a block's rows) and its constants."""
        rows_per_block = self.spec.threads // self.group
        out = [Assign("row", f"{block} * {rows_per_block} + grp"), Assign("live", "row < rows"),
               Comment("a group past the last row still takes part in the shuffles, on the last row's data"),
               Assign("row", "min(row, rows - 1)")]
        out += [Assign(f"p_{p.name}", f"{p.name}[row]") for p in self.c.params if p.size is None]
        # (a 32-bit division: numba's 64-bit one is a subroutine call, some hundred instructions a thread; a call of
        # 2**31 rows or more keeps it, Spec.wide_rows)
        out += [Assign(f"rr_{s}", f"row // rep_{s}" if self.spec.wide_rows else
                       f"int32(uint32(row) // uint32(rep_{s}))") for s in self.scalars]
        lo = f"-((row * length) % {self.vec})" if self.spec.shifted and self.vec > 1 else "0"
        return out + [Assign("lo", lo), Assign("nch", f"(length - lo + {self.vec - 1}) // {self.vec}")]

    @functools.cached_property
    def early(self) -> list:
        """The inputs the reductions read (through the prologue's lets too), loaded with the row; the others (a
        LayerNorm's weight and bias) are loaded where the per-element outputs are computed, not held in registers
        through the reductions (LayerNorm's resident 4096 bf16 at 64 registers: 112/108 bytes spilled a thread
        with them held, 64/60 so; RMSNorm's 0)."""
        read = set()
        for e in [*self.f.bodies.values(), *(e for _, e in self.f.prologue.steps)]:
            read |= {x.name for x in e.free_symbols}
        return [s for s in self.scalars if s in read]

    def load_chunk(self, i: int, chunk: str | None, names: list | None = None) -> list:
        """Chunk ``chunk`` of the inputs ``names`` (all by default; the prologue's lets computed from them) into
        registers ``e_<input>_<i>_<c>`` (zeros outside the row); ``chunk`` None: the chunk already placed
        (``c0_<i>``), the inputs that :attr:`early` left out."""
        v = self.vec
        out = [] if chunk is None else [
            Assign(f"c0_{i}", f"lo + {v} * ({chunk})"), Assign(f"full_{i}", f"c0_{i} >= 0 and c0_{i} + {v} <= length"),
            Assign(f"fc0_{i}", f"float32(c0_{i})")]  # for ``pos``; dropped by the compiler when unused
        wide, narrow = [], []
        for s in self.scalars if names is None else names:
            regs = tuple(f"e_{s}_{i}_{c}" for c in range(v))
            dtype = self.dtypes.get(s, "float32")
            each = [If(f"c0_{i} + {c} >= 0 and c0_{i} + {c} < length",
                       (Load((regs[c],), s, f"rr_{s}", f"c0_{i} + {c}", dtype),), (Assign(regs[c], self.consts.name(0.0)),))
                    for c in range(v)]
            narrow += each
            wide += [Load(regs, s, f"rr_{s}", f"c0_{i}", dtype)] if VEC.get(dtype) == v else \
                [Load((regs[c],), s, f"rr_{s}", f"c0_{i} + {c}", dtype) for c in range(v)]
        out.append(If(f"full_{i}", tuple(wide), tuple(narrow)))
        if chunk is None:
            return out
        for i_c in range(v):
            acc = self.element_access(i, i_c)
            for sym, expr in self.f.prologue.steps:
                pre, text = print_expr(expr, acc, self.consts, None, self.counter, tree=True)
                out += pre + [Assign(f"e_{sym.name}_{i}_{i_c}", text)]
        return out

    def ok(self, i: int, c: int) -> str:
        """Whether register ``(i, c)`` holds an element of the row (and the mask keeps it)."""
        ok = f"c0_{i} + {c} >= 0 and c0_{i} + {c} < length"
        return f"{ok} and keep[row, c0_{i} + {c}] != 0" if self.spec.has_keep else ok

    def segment_state(self) -> list:
        """The registers' state in ``o_*`` by the non-incremental form, guarded at unreachable identities.

        Two copies of the folds: one for a thread whose chunks are all whole (no per-element test:
        the common case, branch-free), one testing each element (a partial chunk, or a mask).
        A reduction whose dependencies sit at an identity they cannot leave (``degenerate``, e.g. a
        max of -inf) folds nothing: the test is made once per reduction, not per element.
        Scalar states fold into ``ACC`` independent partial states (one chain of dependent
        instructions each), combined by the monoid at the end.
        """
        return self.whole_or_tested(self.folds)

    def folds(self, guarded: bool) -> list:
        out = []
        for st in self.states.values():
            out += st.init("o")
        for r in self.c.reductions:
            stmts = self.fold_reduction(r, self.f.bodies[r.name], guarded, "o")
            cond = self.degenerate(r.name)
            if cond is not None:
                pre, text = print_expr(cond, self.element_access(0, 0), self.consts, None, self.counter, tree=True)
                stmts = pre + [If(f"not ({text})", tuple(stmts))]
            out += stmts
        return out

    def fold_reduction(self, r, body, guarded: bool, deps: str) -> list:
        """``o_<r> ← o_<r> ⊕ body`` over every register, the dependencies read from the ``deps`` states; a
        scalar state folds into ``ACC`` independent partial states, combined by the monoid at the end."""
        st = self.states[r.name]
        elements = [(i, c) for i in range(self.tile) for c in range(self.vec)]
        split = type(st) is ScalarState and len(elements) > 1
        lanes = min(ACC, len(elements)) if split else 1
        stmts = [Assign(f"o{a}_{r.name}", st.identity) for a in range(1, lanes)]
        for k, (i, c) in enumerate(elements):
            acc = self.element_access(i, c, deps)
            prefix = f"o{k % lanes}" if k % lanes else "o"
            fold = st.fold(prefix, r.monoid, body, acc, self.consts, self.counter, f"(c0_{i} + {c})")
            stmts += [If(self.ok(i, c), tuple(fold))] if guarded else fold
        for a in range(1, lanes):
            acc = self.lay.base_access()
            acc.scalar[f"__part{a}"] = f"o{a}_{r.name}"
            stmts += st.fold("o", r.monoid, sp.Symbol(f"__part{a}", extended_real=True), acc, self.consts,
                             self.counter, "-1")
        return stmts

    def degenerate(self, name: str):
        """The condition on the dependencies' states under which reduction ``name`` folds only its identity."""
        if name not in self.f.degenerate:
            return None
        cond = self.f.degenerate[name].xreplace(
            {sp.Symbol(f"{d}_a", extended_real=True): sp.Symbol(d, extended_real=True) for d in self.states})
        return None if cond == sp.false else cond

    def merge(self) -> list:
        """``s ← merge(s, o)`` by the derived merge program."""
        acc = bind_program(self.lay.base_access(), self.f.merge, self.states, {"a": "s", "b": "o"})
        if self.spec.fast_exp:
            acc.exp = "fast_exp"
        return merge_stmts(self.f.merge, acc, self.consts, self.states, self.counter)

    def butterfly(self, width: int, states: dict | None = None, merge=None) -> list:
        out = []
        off = width // 2
        while off >= 1:
            for st in (self.states if states is None else states).values():
                out += st.shuffle("s", "o", str(off))
            out += (merge or self.merge)()
            off //= 2
        return out

    def group_merge(self, states: dict | None = None, merge=None) -> list:
        """Every thread of the group ends with the row's state in ``s_*``: ``states`` (all) merged by ``merge``
        (statements ``s ← merge(s, o)``; the derived merge)."""
        g = self.group
        states = self.states if states is None else states
        out = self.butterfly(min(g, 32), states, merge)
        if g <= 32:
            return out
        per_group, warps = g // 32, self.spec.threads // 32
        park, fetch = [], []
        for st in states.values():
            out += st.shared("sh", str(warps))
            park += st.park("s", "sh", "warp")
            fetch += st.fetch("sh", f"grp * {per_group} + lane % {per_group}", "s")
        # every aligned run of ``per_group`` lanes holds the group's warps' states: a butterfly over it
        return out + [If("lane == 0", tuple(park)), Barrier(), *fetch] + self.butterfly(per_group, states, merge)

    def passes(self, body_of_chunks) -> list:
        """``body_of_chunks`` over this thread's chunks: once when resident, else a loop of passes."""
        step = self.group * self.tile
        if self.spec.resident:
            return body_of_chunks("gt")
        return [For("base", "0", "nch", tuple(body_of_chunks("base + gt")), str(step))]

    def chunks(self, first: str, names: list | None = None) -> list:
        out = []
        for i in range(self.tile):
            out += self.load_chunk(i, f"{first} + {self.group * i}", names)
        return out

    # -- outputs ---------------------------------------------------------------------------------------
    def final_access(self):
        acc = bind_program(self.lay.base_access(), self.f.finalize, self.states, {"": "s"})
        if self.spec.fast_exp:
            acc.exp = "fast_exp"
        return acc

    def row_outputs(self) -> list:
        acc = self.final_access()
        sizes, lead, vector = self.c.sizes, [], []
        for sym, expr in self.f.finalize.steps:
            if sym.name in self.varying:
                continue
            if sizes[sym.name] is None:
                pre, text = print_expr(expr, acc, self.consts, None, self.counter, tree=True)
                lead += pre + [Assign(f"out_{sym.name}[row]", text)]
            else:
                sums, expr = self.row_sums(expr, acc)
                vector += self.spread(self.lay.size_const(sizes[sym.name]),
                                      lambda j, sym=sym, expr=expr: self.vector_store(sym, expr, acc, j), sums)
        for r, st in self.states.items():
            if hasattr(st, "index"):
                vector += self.spread(st.size, lambda j, r=r, st=st: [Assign(f"out_{r}_index[row, {j}]",
                                                                            f"{st.index('s')}[{j}]")])
        return [If("live and gt == 0", tuple(lead))] * bool(lead) + ([If("live", tuple(vector))] if vector else [])

    def scalar_values(self, registers: dict) -> list:
        """Statements binding, in every thread after :meth:`body`, the row's scalar outputs named in ``registers``
        (``{output: register}``): the block's reduction leaves the row's final state in every thread, so a kernel
        that goes on after this body reads them there rather than from the outputs it stores (written by one
        thread, read back by all behind a barrier). The same text as :meth:`row_outputs`' stores: the same bits."""
        acc, out, bound = self.final_access(), [], set()
        for sym, expr in self.f.finalize.steps:
            if sym.name in registers and sym.name not in self.varying and self.c.sizes[sym.name] is None:
                pre, text = print_expr(expr, acc, self.consts, None, self.counter, tree=True)
                out += pre + [Assign(registers[sym.name], text)]
                bound.add(sym.name)
        if bound != set(registers):
            raise RedalgebraError(f"rows: {sorted(set(registers) - bound)} are not scalar outputs of {self.c.name}")
        return out

    def row_sums(self, expr, acc) -> tuple[list, sp.Basic]:
        """(statements, ``expr``): the sums over a vector inside a vector output's expression (``sum(t)`` in
        ``t / sum(t)``) computed once for the row into registers ``r_sum<n>``, and ``expr`` reading them, rather
        than a loop for every component (k loops of k, each a few blocks of numba's IR, for a router's k weights)."""
        found: dict = {}

        def visit(e):
            if isinstance(e, (Dot, VSum)):
                if e not in found:
                    found[e] = sp.Symbol(f"__sum{next(self.counter)}", real=True)
                return found[e]
            return e.func(*[visit(a) for a in e.args]) if e.args else e

        expr = visit(expr)
        out = []
        for value, name in found.items():
            pre, text = print_expr(value, acc, self.consts, None, self.counter, tree=True)
            acc.scalar[name.name] = reg = f"r{name.name[1:]}"
            out += pre + [Assign(reg, text)]
        return out, expr

    def vector_store(self, sym, expr, acc, j: str) -> list:
        pre, text = print_expr(expr, acc, self.consts, j, self.counter, tree=True)
        return pre + [Assign(f"out_{sym.name}[row, {j}]", text)]

    def spread(self, size: str, store, pre: list = ()) -> list:
        """``store(j)`` for ``j`` over a vector, spread over the group's threads, after ``pre`` (what the stores
        read). Unrolled (a constant index each) when the size is small, so that per-thread arrays such as a top-k
        list are promoted to registers rather than kept in local memory.

        With a top-k state, one thread stores every component (under one test): the group's threads hold the same
        top k but not always in the same order (merged lists rescaled by a correction can tie where they did
        not, and the merge is then order-dependent), so components taken from different threads could
        repeat an element and drop another."""
        n = self.lay.constants.get(size)
        one = any(isinstance(st, TopKState) for st in self.states.values())
        step = 1 if one else self.group
        if n is None or n > 64:
            stores = [For("j", "0" if one else "gt", size, tuple(store("j")), str(step))]
        elif one:
            stores = [s for j in range(n) for s in store(str(j))]
        else:
            stores = [If(f"gt == {j % self.group}", tuple(store(str(j)))) for j in range(n)]
        return [If("gt == 0", tuple([*pre, *stores]))] if one else [*pre, *stores]

    def element_outputs(self) -> tuple[list, list]:
        """(row-invariant temporaries computed once, the per-chunk stores)."""
        acc = self.final_access()
        # fp8 of a quotient by a row constant, rounded as the division is without dividing (quotients.py)
        fixed = self.element_names().isdisjoint
        hoisted, exprs = self._hoist([(s, e4m3_quotients(e.xreplace(self.cached), fixed))
                                      for s, e in self.f.finalize.steps if s.name in self.varying], acc)
        # (each rt_q8's third argument: its Reciprocal8, or the name the hoisting gave it)
        reciprocals = sorted({q.args[2] for _, e in exprs for q in e.atoms(Quotient8) if len(q.args) == 3}, key=str)
        if not reciprocals:
            return hoisted, self.stores(exprs)
        if any(self.out_dtypes.get(s.name) != "e4m3" for s, e in exprs if e.atoms(Quotient8)):
            # values stored wider: each quotient tests the reciprocal (rt_q8c; H200, the exact product's float16
            # factors M4096 x K7168: 50.1 us so, 58.7 with the row's test below; gpu/README.md)
            return hoisted, self.stores(_requotient(exprs, CheckedQuotient8))
        # rt_q8 takes the row's reciprocal as it is: a row whose divisor is out of its range (rt_recip8's NaN) is
        # divided, tested once a row here, not once an element (H200, the quantiser 16384 x 7168: 139.0 us so,
        # 146.9 testing it an element at a time)
        pre, guard = [], []
        for r in reciprocals:
            before, text = print_expr(r, self.element_access(0, 0, "s"), self.consts, None, self.counter, tree=True)
            pre += before
            guard.append(f"{text} == {text}")
        divided = _requotient(exprs, lambda n, d, r: Quotient8(n, d))
        return hoisted, pre + [If(" and ".join(guard), tuple(self.stores(exprs)), tuple(self.stores(divided)))]

    def stores(self, exprs) -> list:
        """The per-chunk stores of the per-element outputs ``exprs`` ((symbol, expression) pairs)."""
        stores = []
        for i in range(self.tile):
            wide, narrow = [], []
            for sym, expr in exprs:
                dtype = self.out_dtypes.get(sym.name, "float32")
                if dtype == "e4m3" and isinstance(expr, RoundE4M3):
                    expr = expr.args[0]  # the byte conversion rounds (to nearest even, saturating)
                values = [f"y_{sym.name}_{c}" for c in range(self.vec)]
                for c in range(self.vec):
                    pre, text = print_expr(expr, self.element_access(i, c, "s"), self.consts, None, self.counter, tree=True)
                    wide += pre + [Assign(values[c], text)]
                    narrow.append(If(f"c0_{i} + {c} >= 0 and c0_{i} + {c} < length",
                                     tuple(pre + [Store(self.array(sym.name), "row", f"c0_{i} + {c}", (text,), dtype)])))
                width = WIDE_STORES.get((dtype, self.vec), 1)
                wide += [Store(self.array(sym.name), "row", f"c0_{i} + {k}", tuple(values[k:k + width]), dtype)
                         for k in range(0, self.vec, width)]
            stores.append(If(f"full_{i}", tuple(wide), tuple(narrow)))
        return stores

    def array(self, output: str) -> str:
        """The array a per-element output is stored in."""
        return self.arrays.get(output, f"out_{output}")

    def padding(self) -> list:
        """Zeros in the columns of :attr:`padded` arrays past the row's end, spread over the group."""
        zero = self.consts.name(0.0)
        return [For("kz", "length + gt", width, (Store(self.array(name), "row", "kz", (zero,),
                                                        self.out_dtypes.get(name, "float32")),), str(self.group))
                for name, width in self.padded.items()]

    def _hoist(self, steps, acc):
        """Subexpressions of the per-element outputs that do not vary along the row, computed once (registers
        ``r_h<n>``): with :attr:`divisors` named where the printer meets them (a divisor stays a division), else
        replaced by symbols in the returned steps."""
        if self.divisors:
            hoisted, named = self.hoist([e for _, e in steps], self.element_names().isdisjoint, acc, "r_h")
            self.named.update(named)
            return hoisted, steps
        found = invariants([e for _, e in steps], self.element_names().isdisjoint)
        hoisted = []
        for value, n in found.items():
            pre, text = self.print(value, acc)
            hoisted += pre + [Assign(f"r_h{n}", text)]
            self.hoisted[f"h{n}"] = f"r_h{n}"
        symbols = {value: sp.Symbol(f"h{n}", real=True) for value, n in found.items()}
        return hoisted, [(sym, expr.xreplace(symbols)) for sym, expr in steps]

    # -- the kernel ----------------------------------------------------------------------------------
    def body(self) -> list:
        # built afresh each time: the terms computed once and the row constants are named as the body is built
        self.cached, self.hoisted, self.named = {}, {}, {}
        if not self.spec.persistent:
            return self.threads_setup() + self.row_body(self.setup())
        # each block walks runs of rows; the barrier at the end keeps a warp that starts the next row
        # from refilling a shared box that a slower warp has still to read for this one
        rows_per_block = self.spec.threads // self.group
        end = [Barrier()] if self.group > 32 else []
        return self.threads_setup() + [For("run", "cuda.blockIdx.x", f"(rows + {rows_per_block - 1}) // {rows_per_block}",
                                           tuple(self.row_body(self.setup("run")) + end), "cuda.gridDim.x")]

    def row_body(self, out: list) -> list:
        """The statements of one row, after ``out`` (the row's setup)."""
        for st in self.states.values():
            out += st.declare("s") + st.declare("o")
        for st in self.states.values():
            out += st.init("s")
        if self.spec.staged:
            out += (self.chunks("gt", self.early) if self.spec.resident else []) + self.staged()
        else:
            # resident: the one segment's state is the row's (no merge with the empty running state)
            fold = (lambda: self.copy_state("o", "s")) if self.spec.resident else self.merge
            out += self.passes(lambda first: self.chunks(first, self.early) + self.segment_state() + fold())
            out += self.group_merge()
        out += self.row_outputs()
        if self.varying:
            if self.spec.resident:
                late = [n for n in self.scalars if n not in self.early]
                hoisted, stores = self.element_outputs()
                if late:
                    stores = [st for i in range(self.tile) for st in self.load_chunk(i, None, late)] + stores
            else:
                hoisted, stores = self.output_passes()
            out += hoisted + [If("live", tuple(stores + self.padding()))]
        return out

    def output_passes(self) -> tuple[list, list]:
        """(row constants, the per-element outputs) of a row read in passes: a second walk over the row, in steps of
        ``out_tile`` chunks a thread (fewer than the reductions' ``tile`` where the outputs read several inputs)."""
        tile, self.tile = self.tile, self.out_tile()
        try:
            hoisted, stores = self.element_outputs()
            return hoisted, self.passes(lambda first: self.chunks(first) + stores)
        finally:
            self.tile = tile

    def out_tile(self) -> int:
        """Chunks a thread loads at once in the outputs' passes: every input's ``vec`` elements of each are held
        together, and at most :data:`OUT_VALUES` of them (a thread's registers at 1024 threads a block)."""
        return max(1, min(self.tile, OUT_VALUES // (self.vec * max(1, len(self.scalars)))))

    def copy_state(self, src: str, dst: str) -> list:
        return [stmt for st in self.states.values() for stmt in st.copy(src, dst)]


def _requotient(exprs, make) -> list:
    """``exprs`` ((symbol, expression) pairs) with every ``Quotient8(n, d, r)`` made ``make(n, d, r)``."""
    return [(s, e.replace(lambda q: isinstance(q, Quotient8) and len(q.args) == 3, lambda q: make(*q.args)))
            for s, e in exprs]


# -- signature, grid, registration (the launch policy: rows_policy.py) ------------------------------------------------------------
def _outputs(fused, k: RowsKernel) -> tuple:
    c, varying = fused.cascade, set(fused.per_element_outputs)
    specs = [(o.name, "element" if o.name in varying else "row",
              None if c.sizes[o.name] is None else k.lay.size_const(c.sizes[o.name])) for o in c.outputs]
    return tuple(specs + [(f"{r}.index", "index", st.size) for r, st in k.states.items() if hasattr(st, "index")])


def build(fused: FusedCascade, spec: Spec, target: str):
    from ..kernels import kernel_args
    from ..module import assemble

    if target == "cpu":
        raise RedalgebraError("the rows strategy is CUDA-only (a group of threads per row)")
    if spec.staged:
        # a resident row's reductions run one at a time, each with its dependencies final: the level order, so the
        # cascade as written (a multi-term sum summed as written, never as partial sums combined at the end, which
        # cancel where its terms nearly do), with one reduction fewer where derive added an element count. Not where
        # the written form has a vector reduction that derive made a let (sum(exp(x - m) * q) = q * sum(exp(x - m)):
        # the staged kernel reduces scalars and top-k lists only)
        written = as_written(fused)
        if scalar_reductions(written):
            fused = written
    k = RowsKernel(fused, spec)
    tree = k.body()
    return assemble(fused, spec, target, "rows", [("kernel", kernel_args(fused.cascade), "rows", tree)], k.consts,
                    k.lay.constants, _outputs(fused, k), {n: d for n, d in spec.out_dtypes if d != "float32"})


def grid(rows: int, spec: Spec, named) -> dict:
    per = spec.threads // (spec.group or spec.threads)
    return {"rows": (-(-rows // per), spec.threads)}


# final_scales: the outputs are computed from the row's final state (after the whole row is reduced, in registers or in
# passes), so a cast in the outputs rounds at the row's final scale, as the unfused form does; a cast inside a
# reduction's body that depends on a running scale makes the one-pass form inexact, so a cascade of scalar reductions
# is staged (the level order); only one with vector reductions folds such a cast at a running scale
register(Strategy("rows", "cuda", "a group of threads per row, the row in registers, 128-bit loads and stores, "
                  "outputs in the input's dtype", build, configure, grid,
                  final_scales=lambda fused: scalar_reductions(fused) or not casts_in_reductions(fused.cascade)))
