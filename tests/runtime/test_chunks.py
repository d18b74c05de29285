"""``columns_wgmma``'s module launched in chunks of rows (``codegen/strategies/chunks.py``): the same outputs as
launched whole, bit for bit (the simulator, two multiprocessors planned for: chunks of a few blocks of rows); the
launch's steps, their dependence and slices; the product's wait and registers; where the policy chunks and where it
does not."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from redalgebra.codegen import Spec, strategies
from redalgebra.codegen.strategies import chunks
from redalgebra.runtime import as_bfloat16, as_e4m3, compile
from redalgebra.runtime.launch import chunked_steps
from redalgebra.runtime.formats import to_float
from tests.catalogue import fused


@pytest.fixture
def two_multiprocessors(monkeypatch):
    """Launches planned for two multiprocessors, chunks in the simulator too: a chunk is a wave of the simulator's
    blocks (16 rows), 16 or 32 rows."""
    monkeypatch.setattr(strategies, "SMS", 2)
    monkeypatch.setattr(chunks, "IN_SIMULATOR", True)


def _inputs(name, rows, length, n, weights, rng):
    f = fused(name)
    inputs = {}
    for s in f.cascade.inputs:
        if s.size is not None:
            inputs[s.name] = (as_e4m3 if weights == "e4m3" else as_bfloat16)(0.1 * rng.normal(size=(1, length, n)))
        else:  # (RMSNorm's g: one row for every row)
            inputs[s.name] = as_bfloat16(rng.normal(size=(rows if s.name == "x" else 1, length)))
    # a param a row (each chunk reads its rows' slice)
    params = {"h": (length * rng.uniform(0.5, 2.0, rows)).astype(np.float32), "eps": np.float32(1e-5)} \
        if name == "rmsnorm_gemm" else {}
    return f, inputs, params


@pytest.mark.parametrize("name,rows,length,n,weights,chunk", [
    ("rmsnorm_gemm", 40, 100, 72, "bfloat16", 16),   # two column blocks: chunks of 16 rows, the last of 8
    ("fp8_quant_gemm", 70, 130, 64, "e4m3", 32),    # e4m3 weights widened once first, then chunks of 32, 32 and 6
])
def test_a_call_in_chunks_of_rows_computes_what_the_call_launched_whole_does(two_multiprocessors, monkeypatch, name,
                                                                             rows, length, n, weights, chunk):
    f, inputs, params = _inputs(name, rows, length, n, weights, np.random.default_rng(rows))
    kernel = compile(f, "cudasim", "columns_wgmma")
    spec = kernel._planned(inputs, params, None)[0]
    assert (spec.row_chunk, spec.max_registers) == (chunk, chunks.CHUNK_REGISTERS)
    launch = kernel.prepare(inputs, params)
    names = [step[0].dispatcher.__name__ for step in launch.steps]
    chunked = names[-2 * -(-rows // chunk):]
    assert chunked == ["factors", "tiles"] * -(-rows // chunk)
    assert names[:-len(chunked)] == (["widen"] if weights == "e4m3" else [])
    got = kernel(inputs, params)["y"]
    monkeypatch.setattr(chunks, "ROW_CHUNKS", False)
    whole = compile(f, "cudasim", "columns_wgmma")
    assert whole._planned(inputs, params, None)[0].row_chunk == 0
    assert np.array_equal(got, whole(inputs, params)["y"])
    # (and right: the factors rounded as the module rounds them, against the float64 reference)
    from redalgebra import evaluate

    wide = {k: np.asarray(to_float(v), np.float64) for k, v in inputs.items()}
    wide = {k: np.broadcast_to(v, (rows, length)) if v.ndim == 2 else v for k, v in wide.items()}
    ref = evaluate(f.cascade, wide, {k: np.asarray(v, np.float64) for k, v in params.items()}, None)["y"]
    assert np.max(np.abs(got - ref)) <= 2.0 ** -8 * np.max(np.abs(ref))


class _Kernel:
    """A kernel's stand-in: ``kernel[grid]`` gives (name, grid)."""

    def __init__(self, name):
        self.name = name

    def __getitem__(self, grid):
        return self.name, grid


def test_a_chunked_launch_slices_the_rows_and_starts_each_step_while_the_one_before_runs():
    module = SimpleNamespace(**{n: _Kernel(n) for n in ("widen", "factors", "tiles")})
    strategy = SimpleNamespace(chunked=("rowfactors", "tiles"),
                               grid=lambda rows, spec, named: {"widen": 3, "rowfactors": rows, "tiles": -(-rows // 16)})
    entries = (("widen", ("w", "wf"), "widen"), ("factors", ("x", "fac", "rows"), "rowfactors"),
               ("tiles", ("x", "w", "wf", "fac", "out_y", "rows"), "tiles"))
    dev = {"x": np.zeros((40, 8), np.float32), "fac": np.zeros((40, 64), np.uint16), "out_y": np.zeros((40, 4)),
           "w": np.zeros((1, 8, 4), np.float32), "wf": np.zeros((8, 4), np.float16), "rows": 40}
    # (the call's grids, as the launch computed them — a walking kernel's capped: the kernels launched once take them)
    plan = chunked_steps(module, entries, strategy, Spec(row_chunk=16), dev, 40, {"x", "fac", "out_y"}, False,
                         {"widen": 7})
    assert [(k, dependent) for k, _, _, dependent, *_ in plan] == [
        (("widen", 7), False), (("factors", 16), False), (("tiles", 1), True), (("factors", 16), True),
        (("tiles", 1), True), (("factors", 8), True), (("tiles", 1), True)]
    for c, (_, names, args, _, offsets, _) in enumerate(plan[1:]):
        r0 = 16 * (c // 2)
        got = dict(zip(names, args))
        assert got["rows"] == min(16, 40 - r0)
        for name in ("x", "fac"):  # each chunk's rows of the call's arrays, the same memory
            assert got[name].shape[0] == got["rows"] and np.shares_memory(got[name], dev[name])
            assert offsets[name] == r0 * dev[name].strides[0]
        if "w" in got:  # (the weights, read whole by every chunk, at no offset)
            assert got["w"] is dev["w"] and got["wf"] is dev["wf"] and "w" not in offsets


def test_a_chunked_launch_refuses_kernels_launched_once_after_the_chunked_ones():
    from redalgebra.errors import RedalgebraError

    module = SimpleNamespace(**{n: _Kernel(n) for n in ("combine", "tiles")})
    strategy = SimpleNamespace(chunked=("tiles",), grid=lambda rows, spec, named: {"tiles": 1, "combine": 1})
    entries = (("tiles", ("x", "rows"), "tiles"), ("combine", ("x", "rows"), "combine"))
    with pytest.raises(RedalgebraError, match="launched once first"):
        chunked_steps(module, entries, strategy, Spec(row_chunk=16), {"x": np.zeros((40, 2)), "rows": 40}, 40,
                      {"x"}, False, {"tiles": 1, "combine": 1})


def _planned(name="rmsnorm_gemm", rows=4096, length=4096, n=4096, keep=False, **options):
    f = fused(name)
    kernel = compile(f, "cuda", "columns_wgmma", **options)
    reps = {s.name: rows for s in f.cascade.inputs if s.size is not None or s.name == "g"}
    dtypes = {s.name: "bfloat16" for s in f.cascade.inputs}
    strategy, spec, _ = kernel.spec_for(rows, length, dtypes, {"n": n}, keep=keep, reps=reps, device=((9, 0), 132))
    return kernel, strategy, spec


def test_the_product_of_a_chunk_lets_the_next_factors_start_and_waits_for_its_own():
    kernel, strategy, spec = _planned()
    assert spec.row_chunk == 1024 and spec.max_registers == chunks.CHUNK_REGISTERS  # 8 row blocks of 16 column blocks
    source = kernel.source(spec, strategy).source
    tiles = source.split("\ndef tiles(")[1]
    assert [ln.strip() for ln in tiles.split("\n")[1:3]] == ["grid_launch()", "grid_wait()"]
    # the factors let the next product be scheduled at once and work without waiting (they read the call's inputs
    # only); their last block waits at its end for the product before them, so that each product's end implies the
    # earlier ones'
    factors = [ln.strip() for ln in source.split("\ndef factors(")[1].split("\n@")[0].strip().split("\n")[1:]]
    assert factors[0] == "grid_launch()" and factors[-2:] == ["if cuda.blockIdx.x == cuda.gridDim.x - 1:",
                                                                "grid_wait()"]
    assert factors.count("grid_wait()") == 1
    # the product's registers capped, without launch bounds (ptxas ignores the cap beside them)
    assert f"BOUNDS_tiles = {{}} if config.ENABLE_CUDASIM else {{'max_registers': {chunks.CHUNK_REGISTERS}, " in source
    whole = kernel.source(dataclasses.replace(spec, row_chunk=0, max_registers=0), strategy).source
    assert "grid_wait()" not in whole and "max_registers" not in whole


def test_the_chain_of_waits_is_a_setting_and_the_factors_blocks_residency_their_launch_bounds(monkeypatch):
    # chunks.CHAIN off (a timing hook): the factors' last block no longer waits for the product before them
    kernel, strategy, spec = _planned()
    monkeypatch.setattr(chunks, "CHAIN", False)
    factors = kernel.source(spec, strategy).source.split("\ndef factors(")[1].split("\n@")[0]
    assert "grid_launch()" in factors and "grid_wait()" not in factors
    # a row spec asking blocks resident (the sweeps' tTgGxXmM) bounds the factors' kernel so; none asked, none given
    def bounds(spec):
        return kernel.source(spec, strategy).source.split("BOUNDS_factors = ")[1].split("\n")[0]
    row = dict(spec.row_spec)
    assert row["min_blocks"] == 0 and f"'launch_bounds': {row['threads']}," in bounds(spec)
    asked = dataclasses.replace(spec, row_spec=tuple({**row, "min_blocks": 3}.items()))
    assert f"'launch_bounds': ({row['threads']}, 3)," in bounds(asked)


@pytest.mark.parametrize("why,rows,n,options,keep", [
    ("two waves of blocks at least", 1024 + 896, 4096, {}, False),
    ("one segment", 4096, 4096, {"segments": 2}, False),  # (each chunk's product would need its segments' sum)
    ("no mask", 4096, 4096, {}, True),
    ("the product's blocks a tile each", 4096, 4096, {"persistent": True}, False),
    ("a block of the factors beside each of the product's", 4096, 4096, {"length": 8192}, False),  # 512 threads a row
    # chunks that would cost waves of the product's blocks: 2 row blocks × 56 column blocks a chunk (16 waves against
    # 14 whole); a vocabulary's 501 column blocks (4 waves a row block: 128 against 122)
    ("no wave lost", 4096, 14336, {}, False),
    ("no wave lost", 4096, 128256, {}, False),
])
def test_the_policy_launches_the_module_whole_where_chunks_do_not_apply(why, rows, n, options, keep):
    assert _planned(rows=rows, n=n, keep=keep, **options)[2].row_chunk == 0, why


def test_chunks_are_a_wave_of_the_products_blocks(monkeypatch):
    # 4104 columns: 17 column blocks, 7 row blocks a wave of 132 multiprocessors
    assert _planned(rows=2000, n=4104)[2].row_chunk == 7 * 128
    # 11008 columns (LLaMA-7B's MLP): 43 column blocks, 3 row blocks a chunk, 11 waves chunked as whole
    assert _planned(rows=4096, n=11008)[2].row_chunk == 3 * 128
    monkeypatch.setattr(chunks, "ROW_CHUNKS", False)
    assert _planned(rows=2000, n=4104)[2].row_chunk == 0


@pytest.mark.parametrize("text,length,rowwise", [
    ("GEMMA_NORM", 90, False),         # a let over the weight (g + 1), a param a row
    ("LET_NAMED_FAC", 96, True),       # a second input a row per row (sliced with x), the element's position
    ("SOFTMAX_WEIGHTED", 70, False),   # a max and a sum of exponentials; rows off the 16-byte grid
])
def test_cascades_typed_by_a_user_run_in_chunks_as_launched_whole(two_multiprocessors, monkeypatch, text, length,
                                                                   rowwise):
    import redalgebra as ra
    from tests.runtime import test_columns_mma, test_tile_factors

    source = getattr(test_tile_factors, text, None) or getattr(test_columns_mma, text)
    f = ra.derive(ra.parse(source))
    rows, n = 40, 72
    rng = np.random.default_rng(length)
    inputs = {s.name: as_bfloat16(rng.normal(size=(rows if s.name == "x" or rowwise else 1, length)))
              for s in f.cascade.inputs if s.size is None}
    inputs["w"] = as_bfloat16(0.1 * rng.normal(size=(1, length, n)))
    params = {p.name: (length * rng.uniform(0.5, 2.0, rows)).astype(np.float32) if p.name == "h" else np.float32(1e-5)
              for p in f.cascade.params}
    kernel = compile(f, "cudasim", "columns_wgmma")
    assert kernel._planned(inputs, params, None)[0].row_chunk == 16
    got = kernel(inputs, params)["y"]
    monkeypatch.setattr(chunks, "ROW_CHUNKS", False)
    assert np.array_equal(got, compile(f, "cudasim", "columns_wgmma")(inputs, params)["y"])


def test_redalgebra_ptx_names_the_chunks_and_assembles_the_product_within_its_cap(tmp_path):
    # the offline PTX states the cap (.maxnreg) as the linked kernel has it (numba's max_registers is a link-time
    # option): ptxas's registers are the capped product's, without spills
    import subprocess
    import sys

    from tests.test_cli import _without_simulator

    out = tmp_path / "norm.ptx"
    done = subprocess.run([sys.executable, "-m", "redalgebra", "ptx", "rmsnorm_gemm", "--strategy", "columns_wgmma",
                           "--dtype", "bfloat16", "--rows", "4096", "--size", "n=4096", "--shared", "--out", str(out)],
                          capture_output=True, text=True, env=_without_simulator())
    assert done.returncode == 0, done.stderr[-3000:]
    summary = done.stdout
    assert f"chunks of 1024 rows, the product at most {chunks.CHUNK_REGISTERS} registers" in summary
    assert f".maxnreg {chunks.CHUNK_REGISTERS}" in out.read_text()
    import re

    used = re.search(r"ptxas: (\d+) registers per thread at most, (\d+)/(\d+) bytes spilled", summary)
    assert used and int(used.group(1)) <= chunks.CHUNK_REGISTERS and used.group(2, 3) == ("0", "0"), summary
