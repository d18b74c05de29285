"""numba's front end patched to linear time (:mod:`redalgebra.runtime.front_end`): the same compiled code as
unpatched, and other versions of numba left alone."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from redalgebra.runtime import front_end

# A kernel's PTX from the patched and the unpatched compiler in one process (the order of PTX declarations follows
# Python's string hashes, fixed within a process): the legacy warp kernel (top-k: loops, many variables assigned
# more than once) and split_lanes (segments and their merge).
# (Every kernel test_ptx compiles, attention and MLA on wgmma among them, was compared so when the patches were
# written: the same PTX, the order of its NumbaEnv declarations aside, which moves between runs unpatched too.)
SAME_PTX = textwrap.dedent("""
    import os, re, sys
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    from redalgebra import workloads
    from redalgebra.derive import derive
    from redalgebra.runtime import front_end
    from redalgebra.runtime.backends import cuda_module
    from redalgebra.runtime.compile import compile
    from redalgebra.runtime.ptx import compile_ptx

    cuda_module("ptx")
    assert front_end._installed["cuda"] == ("lowering", "liveness", "ssa"), front_end._installed
    from numba.cuda import lowering
    from numba.cuda.core import analysis, ir_utils, ssa
    patched = (lowering.Lower._find_singly_assigned_variable, analysis.compute_live_map, ssa._run_ssa,
               ssa._run_block_rewrite)
    originals = tuple(f.__wrapped__ for f in patched)

    def ptx(name, strategy, rows, length, dtypes, sizes, reps):
        # (each compile numbers its functions and shared arrays afresh: the numbers are taken out)
        f = derive(workloads.get(name).cascade)
        resolved, spec, _ = compile(f, "cuda", strategy).spec_for(rows, length, dtypes, sizes, reps=reps)
        text = compile_ptx(f, resolved, spec)
        text = re.sub(r"_cudapy_smem_[0-9]+", "_cudapy_smem_", re.sub(r"B[0-9]+v[0-9]+B", "BvB", text)).splitlines()
        # (the order of the module's global declarations follows objects' addresses: it moves between compiles)
        return [ln for ln in text if not ln.startswith(".common")], sorted(ln for ln in text if ln.startswith(".common"))

    def swap(functions):
        lowering.Lower._find_singly_assigned_variable, live, ssa._run_ssa, ssa._run_block_rewrite = functions
        analysis.compute_live_map = ir_utils.compute_live_map = live

    jobs = [("moe_routing", "warp", 64, 256, {"x": "bfloat16"}, {}, None),
            ("decode_attention", "split_lanes", 64, 256, {"k": "bfloat16", "v": "bfloat16"}, {"d": 64}, None)]
    for job in jobs:
        got = ptx(*job)
        swap(originals)
        want = ptx(*job)
        swap(patched)
        assert got == want, job[:2]
        assert any(".entry" in ln for ln in got[0])
    print("same")
""")


def test_the_patched_cuda_front_end_compiles_the_same_ptx():
    pytest.importorskip("numba.cuda")
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(root)
    proc = subprocess.run([sys.executable, "-c", SAME_PTX], capture_output=True, text=True, env=env, timeout=600)
    if "libNVVM" in proc.stderr or "NvvmSupportError" in proc.stderr:
        pytest.skip("no libNVVM here to compile PTX")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("same"), proc.stderr[-3000:]


def _loops(x, k):
    # loops, a branch and variables assigned more than once in several blocks: the SSA pass's violators
    total, best, at = 0.0, -np.inf, -1
    for i in range(x.size):
        v = x[i] * k
        if v > best:
            best, at = v, i
        t = v * v
        total += t
        t = total - v
        total = t + v
    for j in range(3):
        best = best + j
    return total, best, at


def test_the_patched_cpu_ssa_pass_gives_numba_the_same_llvm():
    import numba
    from numba.core import ssa

    front_end.install("cpu")
    if "ssa" not in front_end._installed["cpu"]:
        pytest.skip("another numba: its SSA pass is left as it is")
    x = np.linspace(-1.0, 2.0, 17)
    got = numba.njit(_loops)
    patched = (ssa._run_ssa, ssa._run_block_rewrite)
    assert got(x, 1.5) == _loops(x, 1.5)
    ssa._run_ssa, ssa._run_block_rewrite = ssa._run_ssa.__wrapped__, ssa._run_block_rewrite.__wrapped__
    try:
        want = numba.njit(_loops)
        assert want(x, 1.5) == _loops(x, 1.5)
    finally:
        ssa._run_ssa, ssa._run_block_rewrite = patched
    (got_ir,), (want_ir,) = got.inspect_llvm().values(), want.inspect_llvm().values()
    # (each compile numbers its function afresh: the numbers are taken out; the order of the module's global
    # declarations follows objects' addresses, which move between compiles)
    def norm(ir):
        lines = re.sub(r"B[0-9]+v[0-9]+B", "BvB", ir).splitlines()
        return [ln for ln in lines if not ln.startswith("@")], sorted(ln for ln in lines if ln.startswith("@"))
    assert norm(got_ir) == norm(want_ir)


def test_a_numba_whose_functions_differ_is_left_as_it_is(monkeypatch):
    # the digests are of the sources the patches were written from: another source is not patched
    from numba.core import ssa

    monkeypatch.setattr(front_end, "_installed", {})
    monkeypatch.setitem(front_end.SSA, "numba.core.ssa", ("0" * 16, "0" * 16))
    before = (ssa._run_ssa, ssa._run_block_rewrite)
    assert front_end.install("cpu") == ()
    assert (ssa._run_ssa, ssa._run_block_rewrite) == before
    assert not front_end.written_from(len, "0" * 16)  # (a builtin has no source: not the one written from)
