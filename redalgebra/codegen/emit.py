"""Program → statements: the per-row pieces every kernel skeleton is assembled from.

Naming in generated code: state ``s_r`` (scalars in registers, vectors and
top-k lists in local arrays, top-k indices ``si_r``), the other state of a merge
``o_r``/``oi_r``, new scalars ``n_r``, element registers ``e_x``, scalar params
``p_x``, temporaries ``t_c0``.  Vector element inputs are read from global
memory where they are used (``float32(v[rr_v, l, j])``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


from ..errors import RedalgebraError

from ..derive import FusedCascade
from ..derive.program import Program, TopKMerge
from .printer import Access, Constants, lane_loop, print_expr


@dataclass(frozen=True)
class Spec:
    """Compile-time facts of one kernel: concrete sizes, input dtypes, masking, launch shape."""

    sizes: tuple = ()            # ((dimension name, int), ...)
    dtypes: tuple = ()           # ((input name, "float32" | "float16" | "bfloat16" | "e4m3"), ...)
    has_keep: bool = False
    threads: int = 128
    tile: int = 1                # elements per thread per chunk (tile); staged elements (nonincremental)
    fast_exp: bool = False       # exp by the hardware's approximate ex2 (libdevice fast_expf), CUDA only
    # the ``rows`` strategy (see codegen/strategies/rows.py):
    group: int = 0               # threads per row (0: the whole block)
    vec: int = 1                 # elements per wide load of the first input (16 bytes: 4 float32, 8 bf16/f16)
    shifted: bool = False        # rows start off the 16-byte grid: each row's first chunk is partial
    resident: bool = True        # the whole row fits in the registers (read once); else passes, read twice (staged:
    #                              once a reduction, and once for the per-element outputs)
    out_dtypes: tuple = ()       # ((output name, "float32" | "bfloat16" | "float16" | "e4m3"), ...)
    staged: bool = False         # one reduction at a time, each reduced over the group by its monoid instead of
    #                              the derived merge: resident rows (a top-k by repeated arg-max selection), and rows
    #                              in passes whose one-pass form is inexact (a pass a reduction; a top-k by lists)
    min_blocks: int = 0          # launch bounds: fit the registers so that this many blocks share a
    #                              multiprocessor (0: the compiler's choice for the block size alone)
    wide_rows: bool = False      # rows: 2**31 rows or more (a row's index arithmetic in 64 bits; 32 below)
    persistent: bool = False     # rows: each block walks rows (blockIdx, + gridDim, …) and the grid is capped at
    #                              multiprocessors × min_blocks: no block launched per row
    segments: int = 1            # vrows, columns: blocks per row (> 1: a partial kernel per segment, then a combine)
    batch: int = 1               # columns: rows processed together by a block (they share its vector reads)
    shared: int = 0              # bytes of dynamic shared memory per block (mma: the staged tiles)
    stages: int = 2              # mma, wgmma: tiles of the vector inputs in shared memory (stages - 1 loading ahead)
    pre_vec: int = 1             # columns, columns_mma: elements per wide load of the scalar reductions' kernel
    cluster: bool = False        # mma, wgmma with segments: a row tile's segments launched as one thread-block cluster
    #                              (sm_90), merged through distributed shared memory by the partial kernel itself: no
    #                              partial states in global memory, no combine kernel (:mod:`.strategies.tile_segments`)
    dependent: bool = False      # a module's kernels after its first may start while the one before runs (Hopper's
    #                              programmatic dependent launch): they wait for it (grid_wait) before reading it
    unroll: int = 0              # columns_mma: steps of 16 elements a warp loads before their products (0: its UNROLL)
    warm_all: bool = False       # columns_mma, dependent: each block brings its whole segment of weights into L2 while
    #                              the factors' kernel runs (else its first PREFETCH_ROWS rows' lines)
    row_threads: int = 0         # columns_wgmma, columns_mma: the block of their scalars-and-factors kernel, a block a row
    row_spec: tuple = ()         # columns_wgmma: ((field, value), ...) of the ``rows`` kernel that computes the scalars
    #                              and writes the factors from a row held in registers (empty: the block-a-row kernel)
    fp8_products: bool = False   # columns_wgmma: the product on the FP8 instruction (e4m3 factors, the e4m3 weights
    #                              transposed), its sums promoted to float32 every tile of 128 elements
    producer: bool = False       # columns_wgmma: the 16-bit product's copies by a producer warpgroup (named barriers;
    #                              the FP8 product's always are): :mod:`.strategies.producer`
    k_major: tuple = ()          # columns_wgmma with fp8_products: the weights (by name) given K-major — shape (1, L, n),
    #                              the axis innermost (``W.T`` of an (n, L) matrix) — and read as the (n, L) rows the
    #                              FP8 instruction takes: no transposing kernel
    row_chunk: int = 0           # columns_wgmma: rows a chunk of the module's launch — the factors' kernel and the
    #                              product launched chunk after chunk, each chunk's factors made while the product of
    #                              the chunk before runs (0: the whole call at once); :mod:`.strategies.chunks`
    max_registers: int = 0       # columns_wgmma: registers a thread of the product at most (0: ptxas's choice)
    tile_factors: str = ""       # columns_wgmma: no factors kernel: the product's blocks stage this input (the
    #                              activations), turn it into the factors' row-free part in place, fold the scalar
    #                              reductions on the way and scale the sums by the row's part in the epilogue
    #                              (:func:`tile_factors.split_scale`); "": the factors kernel

    @property
    def launch_bounds(self) -> str:
        """numba's ``launch_bounds`` for this kernel: the block size, and the blocks per multiprocessor if asked."""
        return f"({self.threads}, {self.min_blocks})" if self.min_blocks else str(self.threads)

    @property
    def size_of(self) -> dict:
        return dict(self.sizes)


@dataclass
class Layout:
    """What each name of the cascade is in the kernel."""

    fused: FusedCascade
    spec: Spec
    scalar_state: list = field(default_factory=list)
    vector_state: dict = field(default_factory=dict)   # reduction -> size constant
    topk_state: dict = field(default_factory=dict)     # reduction -> K constant
    constants: dict = field(default_factory=dict)      # constant name -> int value
    # Lane mode: vectors shared by a warp's lanes (lane ``lane`` holds components ``lane + 32 t``);
    # ``lane_sum`` is how a value is summed over the lanes (a format with ``{v}``), None otherwise.
    lane_sum: str | None = None

    @classmethod
    def of(cls, fused: FusedCascade, spec: Spec, lane_sum: str | None = None) -> "Layout":
        lay = cls(fused, spec, lane_sum=lane_sum)
        sizes = fused.cascade.sizes
        for name, value in spec.sizes:
            lay.constants[f"D_{name}"] = value
        for r in fused.cascade.reductions:
            if r.monoid.k is not None:
                lay.topk_state[r.name] = f"K_{r.name}"
                lay.constants[f"K_{r.name}"] = r.monoid.k
            elif sizes[r.name] is not None:
                lay.vector_state[r.name] = lay.size_const(sizes[r.name])
            else:
                lay.scalar_state.append(r.name)
        return lay

    def load(self, name: str) -> str:
        """The function that widens one stored element of input ``name`` to float32."""
        return {"bfloat16": "rt_bf16", "e4m3": "rt_e4m3"}.get(dict(self.spec.dtypes).get(name), "float32")

    def size_const(self, size) -> str:
        if isinstance(size, int):
            self.constants[f"D_{size}"] = size
            return f"D_{size}"
        if f"D_{size}" not in self.constants:
            raise RedalgebraError(f"no value given for the size {size!r}")
        return f"D_{size}"

    @property
    def lanes(self) -> bool:
        return self.lane_sum is not None

    # -- vectors of state: whole per thread, or shared by a warp's lanes -------------------------
    def slots(self, size: str) -> str:
        """The constant naming how many components of a vector of ``size`` one lane holds."""
        name = "V_" + size[2:]
        self.constants[name] = -(-self.constants[size] // 32)
        return name

    def state_length(self, size: str) -> str:
        """The local-array length of one vector state: all of it, or one lane's slots."""
        return self.slots(size) if self.lanes else size

    def vector_loop(self, size: str, body: list[str]) -> list[str]:
        """``body`` once per component ``j`` this thread holds (slot ``t`` in lane mode)."""
        if not self.lanes:
            return [f"for j in range({size}):"] + ["    " + ln for ln in body]
        return lane_loop("j", self.slots(size), size, self.whole_slots(size), body)

    def whole_slots(self, size: str) -> bool:
        """Whether every lane's every slot holds a component (the size is a multiple of 32)."""
        return self.constants[size] % 32 == 0

    def state_ref(self, prefix: str, r: str, template: bool = False) -> str:
        """The current component of the vector state ``prefix_r`` (a ``{j}``/``{t}`` template if asked)."""
        index = "t" if self.lanes else "j"
        return f"{prefix}_{r}[{{{index}}}]" if template else f"{prefix}_{r}[{index}]"

    # -- access tables -------------------------------------------------------------------------
    def base_access(self) -> Access:
        acc = Access(exp="fast_expf" if self.spec.fast_exp else "math.exp", lane_sum=self.lane_sum)
        c = self.fused.cascade
        for s in c.inputs:
            if s.size is None:
                acc.scalar[s.name] = f"e_{s.name}"
            else:
                acc.vector[s.name] = f"{self.load(s.name)}({s.name}[rr_{s.name}, l, {{j}}])"
                acc.size[s.name] = self.size_const(s.size)
        for p in c.params:
            if p.size is None:
                acc.scalar[p.name] = f"p_{p.name}"
            else:
                acc.vector[p.name] = f"{p.name}[row, {{j}}]"
                acc.size[p.name] = self.size_const(p.size)
        for sym in self.fused.prologue.results:
            acc.scalar[sym.name] = f"e_{sym.name}"
        acc.scalar["element.index"] = "l"
        # pos: the element's index in the whole row, as float32 (an int64 l would promote arithmetic to float64;
        # exact below 2**24); integer params are read like the scalar params above
        acc.scalar["pos"] = "float32(l)"
        if self.lanes:
            split = set(acc.size.values()) | set(self.vector_state.values())  # never top-k lists: every lane has them
            acc.slots = {size: self.slots(size) for size in split}
            acc.whole = {size for size in split if self.whole_slots(size)}
        return acc

    def state_access(self, acc: Access, suffix: str, prefix: str) -> None:
        """Map ``r_<suffix>`` (or plain ``r`` when suffix is empty) to the state named ``prefix_r``."""
        for r in self.fused.cascade.reductions:
            key = f"{r.name}_{suffix}" if suffix else r.name
            if r.name in self.vector_state:
                acc.vector[key] = self.state_ref(prefix, r.name, template=True)
                acc.size[key] = self.vector_state[r.name]
            elif r.name in self.topk_state:
                acc.vector[key] = f"{prefix}_{r.name}[{{j}}]"
                acc.size[key] = self.topk_state[r.name]
            else:
                acc.scalar[key] = f"{prefix}_{r.name}"

    def temps_access(self, acc: Access, program: Program) -> None:
        results = set(program.results)
        for sym, _ in program.steps:
            if sym not in results:
                acc.scalar[sym.name] = f"t_{sym.name}"


def emit_program(program: Program, acc: Access, consts: Constants, lay: Layout, counter, mode: str) -> list[str]:
    """Statements for a program; ``mode`` is ``update`` (the right side is one element) or ``merge``."""
    lines: list[str] = []
    new_scalars = []
    for sym, expr in program.steps:
        name = sym.name
        if isinstance(expr, TopKMerge):
            lines += _topk_step(name, expr, acc, consts, lay, counter, mode)
            continue
        red = name[:-2] if name.endswith("_n") else None
        if red is not None and red in lay.vector_state:
            size = lay.vector_state[red]
            pre, text = print_expr(expr, acc, consts, "j", counter)
            lines += pre + lay.vector_loop(size, [f"{lay.state_ref('s', red)} = {text}"])
            acc.vector[name], acc.size[name] = lay.state_ref("s", red, template=True), size  # updated in place
            continue
        pre, text = print_expr(expr, acc, consts, None, counter)
        target = f"n_{red}" if red is not None else f"t_{name}"
        lines += pre + [f"{target} = {text}"]
        if red is not None:
            acc.scalar[name] = target
            new_scalars.append(red)
    lines += [f"s_{r} = n_{r}" for r in new_scalars]
    return lines


def _topk_step(name, expr, acc, consts, lay, counter, mode) -> list[str]:
    k, left, right = expr.args[:3]
    red = name[:-2]
    size = lay.topk_state[red]
    pre, ltext = print_expr(left, acc, consts, "j", counter)
    # (an empty slot stays -inf: the correction of 0 or NaN that a max at +inf or NaN makes would not keep it)
    lines = pre + [f"for j in range({size}):", f"    s_{red}[j] = (NEG_INF if si_{red}[j] < 0 else {ltext})",
                   f"    if s_{red}[j] == NEG_INF:", f"        si_{red}[j] = -1"]
    if mode == "update":
        pre, rtext = print_expr(right, acc, consts, None, counter)
        return lines + pre + [f"rt_topk_insert(s_{red}, si_{red}, {rtext}, l)"]
    pre, rtext = print_expr(right, acc, consts, "j", counter)
    return lines + pre + [f"for j in range({size}):", f"    o_{red}[j] = (NEG_INF if oi_{red}[j] < 0 else {rtext})",
                          f"    if o_{red}[j] == NEG_INF:", f"        oi_{red}[j] = -1",
                          f"rt_topk_merge(s_{red}, si_{red}, o_{red}, oi_{red})"]


def update_access(lay: Layout) -> Access:
    acc = lay.base_access()
    lay.state_access(acc, "a", "s")
    lay.temps_access(acc, lay.fused.update)
    return acc


def merge_access(lay: Layout) -> Access:
    acc = lay.base_access()
    lay.state_access(acc, "a", "s")
    lay.state_access(acc, "b", "o")
    lay.temps_access(acc, lay.fused.merge)
    return acc


def final_access(lay: Layout) -> Access:
    acc = lay.base_access()
    lay.state_access(acc, "", "s")
    for o in lay.fused.cascade.outputs:
        acc.scalar[o.name] = f"y_{o.name}"
    return acc


def element_loads(lay: Layout, consts: Constants, counter, acc: Access | None = None) -> list[str]:
    """Registers for one element ``l``: scalar inputs, then the prologue's atoms (read through ``acc``)."""
    lines = [f"e_{s.name} = {lay.load(s.name)}({s.name}[rr_{s.name}, l])"
             for s in lay.fused.cascade.inputs if s.size is None]
    acc = acc or lay.base_access()
    for sym, expr in lay.fused.prologue.steps:
        pre, text = print_expr(expr, acc, consts, None, counter)
        lines += pre + [f"e_{sym.name} = {text}"]
    return lines


def identity_value(lay: Layout, name: str, consts: Constants) -> str:
    from .states import identity_text  # the one spelling of an identity (states imports this module's printer)

    return identity_text(lay.fused, name, consts)
