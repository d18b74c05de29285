"""Kernels as statement trees, printed by one printer per back end.

A kernel body is a tuple of small frozen statements — assignments, declarations, loops, branches,
loads and stores of a stated width, shuffles, barriers, calls — built by a strategy from the
derived programs (SymPy's ``codegen.ast`` is the model). Expressions inside statements are text
already printed by :mod:`.printer`; the *structure* (which loop, which load width, which shuffle)
is data, so a back end changes how a statement is spelled, never what the kernel does.

Printers:

* :class:`CudaPrinter` — Numba CUDA. Wide loads and stores become calls of the intrinsics of
  ``redalgebra.runtime.intrinsics`` (one 128-bit instruction each); shuffles are ``cuda.shfl_*``.
* :class:`SimPrinter` — the CUDA simulator, which has no warp operations: a shuffle becomes an
  exchange through a shared-memory array and two barriers (every thread of the block reaches each
  shuffle, which the tree's strategies guarantee); the intrinsics have Python stand-ins there.
* :class:`CpuPrinter` — Numba CPU (``njit``): no threads, so no shuffles or barriers may appear.

Unrolling is the builder's job (a Python loop that emits one statement per register), never a
text substitution.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import RedalgebraError

FULL_MASK = "0xFFFFFFFF"


# -- statements -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Assign:
    """``target = value``; ``op`` makes it an augmented assignment (``+=``)."""

    target: str
    value: str
    op: str = ""


@dataclass(frozen=True)
class Local:
    """A per-thread array of ``length`` elements (registers when indexed only by constants)."""

    name: str
    length: str
    dtype: str = "float32"


@dataclass(frozen=True)
class Shared:
    """A block-wide shared array of the given shape (a tuple of size expressions)."""

    name: str
    shape: tuple
    dtype: str = "float32"


@dataclass(frozen=True)
class For:
    """``for var in range(start, stop, step)`` with a body of statements."""

    var: str
    start: str
    stop: str
    body: tuple
    step: str = "1"


@dataclass(frozen=True)
class While:
    cond: str
    body: tuple


@dataclass(frozen=True)
class If:
    cond: str
    body: tuple
    orelse: tuple = ()


@dataclass(frozen=True)
class Load:
    """``targets = array[index, col : col + width]`` in one instruction of ``width`` elements.

    ``dtype`` is the stored type (``float32``, ``bfloat16``, ``float16``, ``e4m3``); the targets receive
    float32. Width 1 is a plain (widened) scalar load.
    """

    targets: tuple
    array: str
    row: str | tuple  # a tuple indexes the leading dimensions of a 3-D array: ("rr_k", "l")
    col: str
    dtype: str = "float32"

    @property
    def width(self) -> int:
        return len(self.targets)


@dataclass(frozen=True)
class Store:
    """``array[row, col : col + width] = values`` in one instruction, narrowed to ``dtype``
    (``float32``, ``bfloat16``, ``float16``, ``e4m3`` bytes)."""

    array: str
    row: str
    col: str
    values: tuple
    dtype: str = "float32"

    @property
    def width(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class Shuffle:
    """``target = value`` read from lane ``lane ^ offset`` (``xor``) of the warp, for float32 or int32."""

    target: str
    value: str
    offset: str
    dtype: str = "float32"


@dataclass(frozen=True)
class Barrier:
    """Every thread of the block waits here."""


@dataclass(frozen=True)
class Call:
    """A statement that is a call (a device helper that updates arrays in place)."""

    fn: str
    args: tuple


@dataclass(frozen=True)
class Comment:
    text: str


Stmt = Assign | Local | Shared | For | While | If | Load | Store | Shuffle | Barrier | Call | Comment

_WIDE = {("float32", 4): "ld_f32x4", ("bfloat16", 8): "ld_b16x8", ("float16", 8): "ld_h16x8",
         ("bfloat16", 2): "ld_b16x2", ("float16", 2): "ld_h16x2",
         ("e4m3", 16): "ld_e4m3x16"}
_WIDE_STORE = {("float32", 2): "st_f32x2", ("float32", 4): "st_f32x4", ("bfloat16", 8): "st_b16x8", ("float16", 8): "st_h16x8",
               ("bfloat16", 2): "st_b16x2", ("float16", 2): "st_h16x2", ("bfloat16", 4): "st_b16x4",
               ("float16", 4): "st_h16x4", ("e4m3", 4): "st_e4m3x4"}
# ``{r}`` indexes (``rr, l`` for a 3-D array), ``{rt}`` is the row as an intrinsic takes it (``(rr, l)``)
_SCALAR_LOAD = {"float32": "float32({a}[{r}, {c}])", "float16": "float32({a}[{r}, {c}])",
                "bfloat16": "ld_b16({a}, {rt}, {c})", "e4m3": "ld_e4m3({a}, {rt}, {c})"}
_SCALAR_STORE = {"float32": "{a}[{r}, {c}] = {v}", "float16": "st_h16({a}, {rt}, {c}, {v})",
                 "bfloat16": "st_b16({a}, {rt}, {c}, {v})", "e4m3": "{a}[{r}, {c}] = e4m3({v})"}


def scalar_load(dtype: str, array: str, row: str, col: str) -> str:
    """The text reading one stored element ``array[row, col]`` of ``dtype`` as float32 (``row``: an index)."""
    return _SCALAR_LOAD[dtype].format(a=array, r=row, rt=row, c=col)


#: Intrinsics a printed tree may call (imported by the generated module on the CUDA back ends).
INTRINSICS = ("ld_f32x4", "ld_b16x8", "ld_h16x8", "ld_b16x2", "ld_h16x2", "ld_e4m3", "ld_e4m3x16", "st_f32x2", "st_f32x4", "st_b16x8", "st_h16x8", "st_e4m3x4", "ld_b16",
              "st_b16", "st_h16", "st_b16x2", "st_h16x2", "st_b16x4", "st_h16x4", "e4m3", "e4m3_round", "fma32", "fp8_in_hardware", "fast_exp", "ex2", "LOG2E", "max_nan", "min_nan", "div_full", "sqrt_full", "pick", "fresh", "uniform")
#: ... and those of ``redalgebra.runtime.tensor_cores``.
TENSOR_CORES = ("cp_async16", "cp_async16_at", "e4m3_pairs", "e4m3_halves", "b16_pairs", "ld_w4_at", "ld_w4_stream_at", "ld_w2_stream_at", "st_w2_at",
                "st_w4_at", "lds_w4", "sts_w4",
                "prefetch_l2_at", "grid_wait", "grid_launch", "cp_commit", "cp_wait0", "cp_wait1", "cp_wait2", "cp_wait3", "cp_wait4", "ldsm_x4", "ldsm_x4_t", "mma_bf16", "mma_f16",
                "pack_bf16x2", "pack_f16x2", "unpack_bf16x2", "unpack_f16x2", "swizzle_pad", "wgmma_desc", "wgmma_ss_bf16",
                "wgmma_ss_f16", "wgmma_sst_bf16", "wgmma_sst_f16", "wgmma_rs_bf16", "wgmma_rs_f16", "wgmma_rsk_bf16", "wgmma_rsk_f16", "wgmma_ss_e4m3",
                "wgmma_fence", "wgmma_commit", "wgmma_wait0", "wgmma_wait1", "wgmma_hold", "fence_async", "bar_sync",
                "bar_arrive", "bar_red_or", "regs_give", "regs_take", "regs_give40", "regs_take232", "warp_sync",
                "cluster_check", "cluster_sync", "ld_cluster_f32", "ld_cluster_f32x4", "sts_f32x2")


class TreePrinter:
    """Prints statements as indented Numba Python; subclasses spell what differs per back end."""

    indent = "    "

    def lines(self, stmts) -> list[str]:
        out: list[str] = []
        for s in stmts:
            out += getattr(self, "_print_" + type(s).__name__)(s)
        return out

    def block(self, stmts) -> list[str]:
        body = self.lines(stmts)
        return [self.indent + ln for ln in body] if body else [self.indent + "pass"]

    # -- structure --------------------------------------------------------------------------------
    def _print_Assign(self, s: Assign):
        return [f"{s.target} {s.op}= {s.value}"]

    def _print_Comment(self, s: Comment):
        return [f"# {s.text}"]

    def _print_For(self, s: For):
        rng = s.stop if (s.start, s.step) == ("0", "1") else f"{s.start}, {s.stop}" + (f", {s.step}" if s.step != "1" else "")
        return [f"for {s.var} in range({rng}):"] + self.block(s.body)

    def _print_While(self, s: While):
        return [f"while {s.cond}:"] + self.block(s.body)

    def _print_If(self, s: If):
        out = [f"if {s.cond}:"] + self.block(s.body)
        return out + (["else:"] + self.block(s.orelse) if s.orelse else [])

    def _print_Call(self, s: Call):
        return [f"{s.fn}({', '.join(s.args)})"]

    # -- memory -----------------------------------------------------------------------------------
    def _print_Load(self, s: Load):
        r, rt = _rows(s.row)
        if s.width == 1:
            return [f"{s.targets[0]} = " + _SCALAR_LOAD[s.dtype].format(a=s.array, r=r, rt=rt, c=s.col)]
        fn = _WIDE.get((s.dtype, s.width))
        if fn is None:
            raise RedalgebraError(f"no {s.width}-wide load of {s.dtype}")
        return [f"{', '.join(s.targets)} = {fn}({s.array}, {rt}, {s.col})"]

    def _print_Store(self, s: Store):
        r, rt = _rows(s.row)
        if s.width == 1:
            return [_SCALAR_STORE[s.dtype].format(a=s.array, r=r, rt=rt, c=s.col, v=s.values[0])]
        fn = _WIDE_STORE.get((s.dtype, s.width))
        if fn is None:
            raise RedalgebraError(f"no {s.width}-wide store of {s.dtype}")
        return [f"{fn}({s.array}, {rt}, {s.col}, {', '.join(s.values)})"]

    def _print_Local(self, s: Local):
        return [f"{s.name} = cuda.local.array({s.length}, {s.dtype})"]

    def _print_Shared(self, s: Shared):
        shape = s.shape[0] if len(s.shape) == 1 else "(" + ", ".join(s.shape) + ")"
        return [f"{s.name} = cuda.shared.array({shape}, {s.dtype})"]

    def _print_Barrier(self, s: Barrier):
        return ["cuda.syncthreads()"]

    def _print_Shuffle(self, s: Shuffle):
        return [f"{s.target} = cuda.shfl_xor_sync({FULL_MASK}, {s.value}, {s.offset})"]


def _rows(row) -> tuple[str, str]:
    """A Load's or Store's row as an index (``r``; ``r, l``) and as the intrinsics take it (``r``; ``(r, l)``):
    a tuple indexes the leading dimensions of an array of more than two."""
    if isinstance(row, tuple):
        return ", ".join(row), f"({', '.join(row)})"
    return row, row


class CudaPrinter(TreePrinter):
    """Numba CUDA on a real GPU (or its PTX compiler)."""


#: Shuffles exchanged together by the simulator (rows of its ``shfl_f``/``shfl_i`` boxes).
SIM_SHUFFLE_SLOTS = 4


class SimPrinter(TreePrinter):
    """The CUDA simulator: shuffles exchange through ``shfl_f``/``shfl_i`` (a slot per thread and per
    shuffle of a batch). Consecutive independent shuffles share one pair of barriers — the simulator
    runs a thread per OS thread, and its barriers are what makes a shuffle slow there. In a kernel whose warps take
    roles at named barriers (a producer warpgroup's never reach the consumers' shuffles), only each warp's threads
    meet (``warp_meets``)."""

    warp_meets = False

    def lines(self, stmts) -> list[str]:
        out: list[str] = []
        batch: list[Shuffle] = []
        for s in list(stmts) + [None]:
            if isinstance(s, Shuffle) and self._joins(batch, s):
                batch.append(s)
                continue
            out += self._exchange(batch)
            batch = [s] if isinstance(s, Shuffle) else []
            if s is not None and not isinstance(s, Shuffle):
                out += getattr(self, "_print_" + type(s).__name__)(s)
        return out

    @staticmethod
    def _joins(batch: list, s: Shuffle) -> bool:
        import re

        same = [b for b in batch if b.dtype == s.dtype]
        reads_earlier = any(re.search(rf"\b{re.escape(b.target)}\b", s.value) for b in batch)
        return bool(batch) and len(same) < SIM_SHUFFLE_SLOTS and not reads_earlier

    def _exchange(self, batch: list) -> list[str]:
        if not batch:
            return []
        slots, put, get = {"float32": 0, "int32": 0}, [], []
        for s in batch:
            box, k = ("shfl_i" if s.dtype == "int32" else "shfl_f"), slots[s.dtype]
            slots[s.dtype] += 1
            put.append(f"{box}[{k}, tid] = {s.value}")
            get.append(f"{s.target} = {box}[{k}, tid ^ ({s.offset})]")
        meet = "warp_sync()" if self.warp_meets else "cuda.syncthreads()"
        return put + [meet] + get + [meet]


class CpuPrinter(TreePrinter):
    """Numba CPU: one thread per row, plain arrays, no warp or block operations."""

    def _print_Local(self, s: Local):
        return [f"{s.name} = np.empty({s.length}, np.{s.dtype})"]

    def _refuse(self, s):
        raise RedalgebraError(f"the CPU back end has no {type(s).__name__.lower()}s; this kernel is CUDA-only")

    _print_Shared = _print_Barrier = _print_Shuffle = _refuse


PRINTERS = {"cuda": CudaPrinter, "cudasim": SimPrinter, "cpu": CpuPrinter}


def walk(stmts):
    """Every statement of a tree, depth first."""
    for s in stmts:
        yield s
        for child in ("body", "orelse"):
            yield from walk(getattr(s, child, ()))
