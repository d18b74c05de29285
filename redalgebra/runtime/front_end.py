"""numba's front end in linear time where it grows faster than a kernel's size.

A generated tensor-core kernel is one Python function of 1000-1500 lines (unrolled fragments, a few hundred
variables assigned more than once), a vector kernel one of many small blocks (branches on the lanes' slots).
numba-cuda 0.30 spends most of such a compile in three passes whose work grows as a product of the function's
sizes (profiled on the development machine):

- lowering's search for the variables assigned once (``Lower._find_singly_assigned_variable``) scans, for each
  variable defined in one block, every assignment of that block: 18 of 68 s for prefill attention's ``wgmma`` kernel
  (under the profiler);
- the SSA reconstruction (``core.ssa``) hands, for each variable assigned more than once, every statement of every
  block to its handlers twice, though only the statements that name that variable can change: 17 of those 68 s;
- the liveness of the dead-variable pass (``core.analysis.compute_live_map``) sweeps the blocks in order until
  nothing grows, as many sweeps as the longest path against that order: 11 of 28 s for MLA's ``vrows`` kernel.

:func:`install` counts each block's assignments once (as numba 0.68's own lowering does), hands the SSA handlers only
the statements that name the variable being renamed (the others, and the blocks where it does not occur, are kept as
they are), and computes the liveness by worklists (the same least fixed point). numba 0.68's CPU compiler has the
same SSA pass (its lowering and liveness are already linear), patched the same way. The compiled code is numba's:
every kernel that the PTX tests compile gave the same PTX, text for text (the order of its ``NumbaEnv``
declarations aside, which moves between runs of the unpatched compiler too), and the tests compare a sample. Each
patch is applied only where the function is the one it was written from (a hash of its source); any other version
of numba is left as it is.
"""

from __future__ import annotations

import contextvars
import hashlib
import inspect
import threading
from collections import Counter, defaultdict

#: sha256 (first 16 hex digits) of the sources these patches were written from: numba-cuda 0.30's lowering and
#: liveness; the SSA pass's two functions, by the module they are in (numba-cuda 0.30's, numba 0.68's).
LOWER_FIND_SINGLY_ASSIGNED = "c3b499f765172885"
LIVE_MAP = "cdb51290c1658e92"
SSA = {"numba.cuda.core.ssa": ("aa09fda773d906df", "66a25c0bc90d6ed1"),
       "numba.core.ssa": ("c497422bcf049990", "d17efdbed57062bf")}

_installed: dict = {}  # compiler ("cuda", "cpu") -> the patches applied to it
_INSTALLING = threading.Lock()
#: Within one SSA reconstruction: each variable's blocks (labels) where a statement names it, and the names of each
#: statement met (statements compared by identity).
_OCCURS: contextvars.ContextVar = contextvars.ContextVar("occurs", default=None)


def written_from(function, digest: str) -> bool:
    """Whether ``function``'s source is the one a patch was written from (``digest``: the sha256 of its source, first
    16 hex digits)."""
    if hasattr(function, "__wrapped__"):  # a wrapper (a patch, ours or another's): getsource would read what it wraps
        return False
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return False
    return hashlib.sha256(source.encode()).hexdigest()[:16] == digest


def install(compiler: str = "cuda") -> tuple:
    """Apply the patches that apply to this numba-cuda (``compiler="cuda"``: importing it, so only where the real
    CUDA back end is wanted) or this numba's CPU compiler (``"cpu"``), once a process; returns the names of those
    applied."""
    with _INSTALLING:
        if compiler not in _installed:
            _installed[compiler] = _install(compiler)
        return _installed[compiler]


def _install(compiler: str) -> tuple:
    import importlib

    applied = []
    prefix = "numba.cuda" if compiler == "cuda" else "numba"
    ssa = lowering = analysis = ir_utils = None
    try:
        ssa = importlib.import_module(f"{prefix}.core.ssa")
        if compiler == "cuda":
            lowering, analysis, ir_utils = (importlib.import_module(f"numba.cuda.{m}")
                                            for m in ("lowering", "core.analysis", "core.ir_utils"))
    except ImportError:  # another layout of numba: nothing to do
        ssa = lowering = analysis = ir_utils = None
    if lowering is not None and written_from(lowering.Lower._find_singly_assigned_variable, LOWER_FIND_SINGLY_ASSIGNED):
        lowering.Lower._find_singly_assigned_variable = _find_singly_assigned_variable(lowering)
        applied.append("lowering")
    if analysis is not None:
        if written_from(analysis.compute_live_map, LIVE_MAP) and ir_utils.compute_live_map is analysis.compute_live_map:
            analysis.compute_live_map = ir_utils.compute_live_map = _live_map(analysis.compute_live_map)
            applied.append("liveness")
    run, rewrite = SSA[f"{prefix}.core.ssa"]
    if ssa is not None and written_from(ssa._run_ssa, run) and written_from(ssa._run_block_rewrite, rewrite):
        ssa._run_ssa, ssa._run_block_rewrite = _ssa_run(ssa._run_ssa), _block_rewrite(ssa, ssa._run_block_rewrite)
        applied.append("ssa")
    return tuple(applied)


def _find_singly_assigned_variable(lowering):
    """``Lower._find_singly_assigned_variable`` with each block's assignments counted once: the variables defined in
    one block, used in no other (the use map lists uses before a local definition) and assigned once there."""
    ir = lowering.ir

    def find(self):
        sav = set()
        if not self.func_ir.func_id.is_generator:
            blocks = self.func_ir.blocks
            use_defs = lowering.compute_use_defs(blocks)
            alloca_vars = lowering.must_use_alloca(blocks)
            defined, used = defaultdict(set), defaultdict(set)
            for label, names in use_defs.defmap.items():
                for name in names:
                    defined[name].add(label)
            for label, names in use_defs.usemap.items():
                for name in names:
                    used[name].add(label)
            counts: dict = {}
            for name, labels in defined.items():
                if name in alloca_vars or len(labels) != 1 or used[name]:
                    continue
                (label,) = labels
                if label not in counts:
                    counts[label] = Counter(s.target.name for s in self.blocks[label].find_insts(ir.assign_types))
                if counts[label][name] == 1:
                    sav.add(name)
        self._singly_assigned_vars = sav
        self._blk_local_varmap = {}
    find.__wrapped__ = lowering.Lower._find_singly_assigned_variable
    return find


def _live_map(original):
    """``analysis.compute_live_map`` by worklists: the definitions that reach each block's entry (forward from the
    blocks that define or use a variable, in topological order), then the variables live at each block's entry
    (backward, in the reverse order). Each is the least fixed point of the same monotone equations from the same
    start as numba-cuda's sweeps in block order until nothing grows, which on a kernel of many blocks take as many
    sweeps as the longest path against their order; a worklist revisits only the blocks whose input grew."""
    from collections import deque

    def fixed_point(order, edges, update):
        queued, work = set(order), deque(order)
        while work:
            label = work.popleft()
            queued.discard(label)
            for other, _ in edges(label):
                if update(label, other) and other not in queued:
                    queued.add(other)
                    work.append(other)

    def compute(cfg, blocks, var_use_map, var_def_map):
        order = list(cfg.topo_order())
        seen = set(order)
        order += [label for label in blocks if label not in seen]
        reach = defaultdict(set)
        for label in var_def_map:
            reach[label] |= var_def_map[label] | var_use_map[label]

        def forward(label, succ) -> bool:  # whether succ's definitions grew, and it passes them on
            if label not in var_def_map or reach[label] <= reach[succ]:
                return False
            reach[succ] |= reach[label]
            return succ in var_def_map

        fixed_point([label for label in order if label in var_def_map], cfg.successors, forward)
        live = {label: set(var_use_map[label]) for label in blocks}

        def backward(label, pred) -> bool:
            grown = (live[label] & reach[pred]) - var_def_map[pred] - live[pred]
            live[pred] |= grown
            return bool(grown)

        fixed_point([label for label in reversed(order) if label in live], cfg.predecessors, backward)
        return live
    compute.__wrapped__ = original
    return compute


def _ssa_run(original):
    """``ssa._run_ssa`` with each variable's blocks found first (a statement's variables do not change while other
    variables are renamed: only the renamed one's occurrences are rewritten, and phi nodes name only it)."""
    def run(blocks):
        occurs = defaultdict(set)
        for label, block in blocks.items():
            for stmt in block.body:
                for var in stmt.list_vars():
                    occurs[var.name].add(label)
        token = _OCCURS.set((occurs, {}))  # (and each statement's names, for this function's rewrites)
        try:
            return original(blocks)
        finally:
            _OCCURS.reset(token)
    run.__wrapped__ = original
    return run


def _block_rewrite(ssa, original):
    """``ssa._run_block_rewrite`` that hands its handler only the statements naming the variable being renamed, in
    the blocks where it occurs; every other statement is kept as it is, and the other blocks are copied (both of the
    SSA's rewriting handlers return a statement that does not name the variable unchanged)."""
    ir = ssa.ir
    assigns = getattr(ir, "assign_types", ir.Assign)  # (what the version's own block pass dispatches on)

    def rewrite(blocks, states, handler):
        found = _OCCURS.get()
        name = states.get("varname")
        if found is None or name is None:
            return original(blocks, states, handler)
        occurs, names = found

        def named(stmt) -> frozenset:
            got = names.get(stmt)
            if got is None:
                names[stmt] = got = frozenset(v.name for v in stmt.list_vars())
            return got

        labels = occurs.get(name, ())
        out = {}
        for label, block in blocks.items():
            out[label] = new = ir.Block(scope=block.scope, loc=block.loc)
            if label not in labels:
                new.body = list(block.body)
                continue
            states["label"], states["block"] = label, block
            new.body = [stmt if name not in named(stmt) else
                        handler.on_assign(states, stmt) if isinstance(stmt, assigns) else
                        handler.on_other(states, stmt) for stmt in block.body]
        return out
    rewrite.__wrapped__ = original
    return rewrite
