"""The cases of ``sanitize.py``: every strategy × distinct fusable cascade at hostile small shapes, their
problems and kernels, and the plan that groups cases running the same kernel and estimates their cost."""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from redalgebra import RedalgebraError, workloads
from redalgebra.derive import derive

ROWS = 5                                 # not a multiple of the rows a block takes (warp: 4, rows: 2 … 64)
FULLY_MASKED = (1, -1)                   # rows whose keep is all zeros (the others: 20 % of elements masked)
SIZES = {"d": 16, "r": 48, "e": 8, "n": 5}        # lanes: a partial slot (16 < 32; 48 = 32 + 16)
SIZES_FOR = {"alibi_attention": {"d": 32}}        # lanes without the component guard (a multiple of 32)
BF16 = ("rows", "vrows", "auto")                  # strategies also run with bfloat16 inputs
#: strategies that take 16-bit inputs only (and e4m3): bfloat16, plain and masked; e4m3 masked (its weights as bytes)
ONLY16 = ("columns_mma", "columns_wgmma")
#: columns a multiple of 16 (16-byte rows of e4m3): a partial second warp (columns_mma)
SIZES_OF = {"columns_mma": {"n": 80}, "columns_wgmma": {"n": 80}}
#: Variants: options that reach paths the default policy does not take at these lengths, and whether they
#: run with the mask only (each is a kernel of its own; ``segments`` is a launch argument, not compiled in).
VARIANTS = {"rows": (("group=4+tile=1", True), ("group=128", True)),  # (columns_mma's: in ONLY16's kinds)
            "split": (("segments=3", False),), "split_lanes": (("segments=3", False),),
            "vrows": (("segments=3", False), ("segments=1+threads=256", True))}

# -- cases ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One kernel call: a cascade, a strategy (with a variant's options), a dtype, a shape, masked or not."""

    workload: str
    strategy: str
    variant: str
    dtype: str
    masked: bool
    rows: int
    length: int

    @property
    def options(self) -> dict:
        return {k: int(v) for k, v in (kv.split("=") for kv in self.variant.split("+") if kv)}

    @property
    def label(self) -> str:
        return self.strategy + (f"@{self.variant}" if self.variant else "")

    @property
    def shape(self) -> str:
        return f"{self.rows}x{self.length}"

    @property
    def cid(self) -> str:
        return f"{self.workload}/{self.label}/{self.dtype}/{'masked' if self.masked else 'plain'}/{self.shape}"


def distinct_workloads(names) -> list[str]:
    """Catalogue names, the first of each distinct cascade text (decode_attention is attention's text)."""
    seen, out = set(), []
    for name in names:
        text = workloads.get(name).text
        if text not in seen:
            seen.add(text)
            out.append(name)
    return out


def enumerate_cases(names, strategies, lengths, rows: int = ROWS) -> list[Case]:
    """Every workload × strategy × length: float32 plain and masked; bfloat16 masked (``rows``, ``auto``);
    the strategy's variants (float32; masked only where each is a kernel of its own)."""
    out = []
    for w in names:
        for s in strategies:
            kinds = [("", "float32", False), ("", "float32", True)] + [("", "bfloat16", True)] * (s in BF16)
            if s in ONLY16:
                kinds = [("", "bfloat16", False), ("", "bfloat16", True), ("segments=3", "bfloat16", True),
                         ("", "e4m3", True)]
            for variant, masked_only in VARIANTS.get(s, ()):
                kinds += [(variant, "float32", True)] + [(variant, "float32", False)] * (not masked_only)
            for variant, dtype, masked in kinds:
                out += [Case(w, s, variant, dtype, masked, rows, n) for n in lengths]
    return out


@lru_cache(maxsize=None)
def fused_of(name: str):
    return derive(workloads.get(name).cascade)


def problem(case: Case):
    """Inputs, params and keep (None unmasked), the same for a case on any machine (seeded by its id)."""
    from redalgebra.runtime.check import random_problem

    from redalgebra.codegen.strategies import get

    rng = np.random.default_rng(zlib.crc32(case.cid.encode()))
    sizes = {**SIZES, **SIZES_FOR.get(case.workload, {}), **SIZES_OF.get(case.strategy, {})}
    c = fused_of(case.workload).cascade
    # a strategy whose blocks share each vector row (columns_mma) gets its vector inputs once for all rows
    shared = case.strategy != "auto" and get(case.strategy).shared_vectors and any(s.size is None for s in c.inputs)
    inputs, params, keep = random_problem(fused_of(case.workload), case.rows, case.length, rng, case.dtype, sizes,
                                          masked=case.masked, shared=shared)
    if keep is not None:
        for r in FULLY_MASKED:
            if -case.rows <= r < case.rows:
                keep[r] = False
    return inputs, params, keep


_KERNELS: dict = {}


def kernel_of(case: Case, backend: str):
    from redalgebra.runtime import compile

    key = (case.workload, case.strategy, case.variant, backend)
    if key not in _KERNELS:
        _KERNELS[key] = compile(fused_of(case.workload), backend, case.strategy, **case.options)
    return _KERNELS[key]


# -- the plan: which kernel each case runs, grouped ----------------------------------------------------------
@dataclass
class Group:
    """The cases that run one kernel (one compile per tool)."""

    gid: str
    workload: str
    strategy: str           # the registered strategy that runs (``auto`` resolved)
    kernels: int            # kernels in the module (split: 2, unfused: one per reduction + the epilogue)
    lines: int              # lines of generated source (what compiling costs grows with)
    shared: bool            # declares shared memory (racecheck has something to check)
    sync: bool              # barriers or warp shuffles (synccheck has something to check)
    cases: list = field(default_factory=list)


def features(source: str) -> tuple[bool, bool]:
    return "shared.array" in source, any(s in source for s in ("syncthreads", "syncwarp", "shfl_"))


def plan(cases, backend: str) -> tuple[list[Group], dict]:
    """Cases grouped by the kernel they run, in first-seen order; and ``{cid: reason}`` for refused cases."""
    groups: dict = {}
    refused = {}
    for case in cases:
        kernel = kernel_of(case, backend)
        try:
            inputs, params, keep = problem(case)
            spec, *_, resolved, _extra = kernel.layout(inputs, params, keep)
            key = (case.workload, resolved, spec)
            if key not in groups:
                src = kernel.source(spec, resolved)
                gid = hashlib.sha1(repr(key).encode()).hexdigest()[:12]
                groups[key] = Group(gid, case.workload, resolved, max(1, len(src.entries)), src.source.count("\n"),
                                    *features(src.source))
        except RedalgebraError as err:
            refused[case.cid] = str(err)
            continue
        groups[key].cases.append(case)
    return list(groups.values()), refused


def runs_under(group: Group, tool: str, all_kernels: bool) -> bool:
    if all_kernels or tool in ("memcheck", "initcheck", "none"):
        return True
    return group.shared if tool == "racecheck" else group.sync


def priority(group: Group) -> tuple:
    """Plain float32 kernels first, then masked, the variants, bfloat16: what a short budget leaves out comes last."""
    c = group.cases[0]
    return c.dtype != "float32", bool(c.variant), c.masked


def compile_cost(group: Group, compile_s: float) -> float:
    """Estimated seconds to compile and load the group's kernel: ``compile_s`` per 900 lines of generated
    source, at least 15 % of it (numba-cuda's NVVM on the development machine, 2026-11-30: 0.1–1.5 s at
    150–300 lines, 4.6 s at 450, 6.5 s at 550, 8–12 s at 800–1050; the GPU machine also runs ptxas)."""
    return compile_s * max(0.15, group.lines / 900)


def cost(group: Group, compile_s: float, case_s: float) -> float:
    return compile_cost(group, compile_s) + len(group.cases) * case_s


def schedule(costs, jobs: int) -> float:
    """Makespan of the longest-first greedy assignment of ``costs`` to ``jobs`` workers."""
    loads = [0.0] * max(jobs, 1)
    for c in sorted(costs, reverse=True):
        loads[loads.index(min(loads))] += c
    return max(loads)
