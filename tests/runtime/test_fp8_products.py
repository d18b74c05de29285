"""The product on the FP8 instruction (``compile(..., fp8_products=True)``): the simulator against float64, where
it applies and where the exact product runs instead, and the simulator's report of a stage reused while products
still read it."""

import numpy as np
import pytest

from redalgebra.runtime import as_bfloat16, as_e4m3, compile
from redalgebra.runtime.formats import to_float
from redalgebra import RedalgebraError
from tests.catalogue import fused
from tests.runtime.test_columns import _problem, _reference

@pytest.mark.parametrize("rows,length,n,segments,lying", [
    # the product on the FP8 instruction (fp8_products): the e4m3 weights transposed to rows by a kernel of the module
    # (72 columns: rows not of 16 bytes, two 8-byte loads a chunk), three tiles of 128; 256 columns in 16-byte
    # chunks, five tiles in three segments of two, two and one; 2 row blocks x 2 column blocks (128 columns and 8:
    # group 16 past 128 columns) x 2 segments
    (17, 300, 72, None, False),
    (5, 640, 256, 3, False),
    (20, 300, 136, 2, False),
    # The cases below are about the product's tiles, not the transposing kernel (run above, in both of its forms: rows
    # of 16-byte chunks and rows not of them): their weights are given K-major (lying), as a Linear layer holds them,
    # and read as they lie (L whole tiles of 128) by the same product kernel, reading w where it reads wt
    # (test_k_major.py); the transposing kernel, most of the simulator's time for these shapes, is not run.
    # Six tiles in one segment: every stage of the producer's ring of four reused (the simulator reports a copy into a
    # stage that a group of products not yet waited for reads), its last tiles signalled after its loop
    (16, 768, 64, 1, True),
    # the GPU's block: two consumer warpgroups taking turns, five tiles (the producer's ring wrapped)
    (65, 640, 64, 1, True),
    # the GPU's 128 columns a block (group 16): four tiles in one segment (the ring full once). (Segments of which the
    # last has no tile: test_fp8_products_blocks_walk_the_output_tiles_with_the_ring_running_on[1-9-640-72-4], whose
    # block-a-tile run launches segment 4's empty tiles and combines it; group 16 with a partial column block of 8:
    # the cases of 136 columns here)
    (5, 512, 136, 1, True),
])
def test_columns_wgmma_multiplies_e4m3_on_the_fp8_instruction_when_asked(rows, length, n, segments, lying):
    inputs, params = _problem("fp8_quant_gemm", rows, length, n, "bfloat16")
    inputs["w"] = as_e4m3(to_float(inputs["w"]))
    ref = _reference("fp8_quant_gemm", inputs, params, None, rows)["y"]
    if lying:  # the same bytes, K-major
        inputs["w"] = as_e4m3(np.ascontiguousarray(inputs["w"].bits[0].T).T[None])
    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", segments=segments, fp8_products=True,
                     threads=256 if rows > 64 else None, group=16 if n > 128 else None)
    assert kernel._planned(inputs, params, None)[0].k_major == (("w",) if lying else ())
    out = kernel(inputs, params)["y"]
    # the simulator's FP8 instruction sums exactly (the H200's keeps about 14 bits: gpu/fp8_products_check.py), so
    # this checks the layout, the transpose and the sums' promotion, at float32's tolerance
    assert np.nanmax(np.abs(out - ref)) <= 1e-5 * np.nanmax(np.abs(ref))
    # (the weights' contiguous layout: the module with its transposing kernel)
    source = kernel.source(*kernel.spec_for(rows, length, {"x": "bfloat16", "w": "e4m3"}, {"n": n},
                                            reps={"w": rows})[1::-1]).source
    assert "wgmma_ss_e4m3(" in source and "wgmma_sst_f16(" not in source
    assert ("ld_w4_stream_at(w" in source) == (n % 16 == 0)


def test_the_simulator_reports_a_copy_into_a_stage_that_products_in_flight_read(monkeypatch):
    # a tile further ahead: the copies of tile t + stages - 1 go into tile t - 1's stage, whose products the loop's
    # wait (one group left in flight) has not completed. The simulator's wgmma computes when issued, so the results
    # would be right; the tracking of each group's shared-memory reads until its wait reports the race instead.
    from redalgebra.codegen.strategies.columns_wgmma import ColumnsWgmmaKernel

    check_launch = ColumnsWgmmaKernel.check_launch

    def one_ahead_too_many(self):
        check_launch(self)
        self.ahead = self.stages - 1
    monkeypatch.setattr(ColumnsWgmmaKernel, "check_launch", one_ahead_too_many)
    inputs, params = _problem("fp8_quant_gemm", 16, 640, 64, "bfloat16")
    with pytest.raises(Exception, match="a wgmma group still in flight reads"):
        compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", segments=1)(inputs, params)


def _fp8_source(name, inputs, rows, length, n, **options):
    kernel = compile(fused(name), "cudasim", "columns_wgmma", fp8_products=True, **options)
    dtypes = {k: "e4m3" if k == "w" and "E4M3" in type(v).__name__ else "bfloat16" for k, v in inputs.items()}
    return kernel.source(*kernel.spec_for(rows, length, dtypes, {"n": n}, reps={"w": rows})[1::-1]).source


def test_fp8_products_run_the_exact_product_where_the_instruction_does_not_apply():
    inputs, params = _problem("fp8_quant_gemm", 20, 64, 16, "bfloat16")  # bfloat16 weights: not e4m3
    out = compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", fp8_products=True)(inputs, params)["y"]
    ref = _reference("fp8_quant_gemm", inputs, params, None, 20)["y"]
    assert np.max(np.abs(out - ref)) <= 1e-5 * np.max(np.abs(ref))
    assert "wgmma_ss_e4m3(" not in _fp8_source("fp8_quant_gemm", inputs, 20, 64, 16)
    assert "wgmma_ss_e4m3(" not in _fp8_source("rmsnorm_gemm", _problem("rmsnorm_gemm", 4, 64, 16, "bfloat16")[0],
                                               4, 64, 16)  # RMSNorm's factors are not e4m3 values
    inputs["w"] = as_e4m3(to_float(inputs["w"]))
    assert "wgmma_ss_e4m3(" in _fp8_source("fp8_quant_gemm", inputs, 20, 64, 16)
    with pytest.raises(RedalgebraError, match="fp8_products must be True or False"):
        compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", fp8_products="yes")
    assert compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", fp8_products=np.bool_(True)).fp8_products
    with pytest.raises(RedalgebraError, match="fp8_products takes blocks of 64, 128, 160, 192 columns"):
        _fp8_source("fp8_quant_gemm", inputs, 20, 64, 16, group=32)
    with pytest.raises(RedalgebraError, match="tiles of 128 elements"):
        _fp8_source("fp8_quant_gemm", inputs, 20, 64, 16, tile=64)
    assert "while tile < total:" in _fp8_source("fp8_quant_gemm", inputs, 20, 64, 16, persistent=True)


@pytest.mark.parametrize("resident,rows,length,n,segments", [
    # 2 row blocks x 2 column blocks on 3 blocks (one walks two tiles, two one); a partial last tile of the axis
    (3, 17, 300, 72, None),
    # one block, one output tile of one axis tile (fewer than the ring's stages)
    (1, 5, 100, 40, None),
    # one block walks all 8 tiles (1 x 2 x 4 segments of 2, 2, 1 and 0 axis tiles: the ring wrapping within a tile
    # and across them, an empty output tile inside the walk; row blocks walked: the case above)
    (1, 9, 640, 72, 4),
])
def test_fp8_products_blocks_walk_the_output_tiles_with_the_ring_running_on(monkeypatch, resident, rows, length, n,
                                                                            segments, threads=None):
    # persistent: the producer copies the next output tile's first tiles while the consumers store this one; the
    # simulator's copies land at the producer's waits and its wgmma reads are tracked until waited for, so a stage
    # reused too early or read before its copies landed fails here; the same outputs as a block a tile, bit for bit
    import importlib

    monkeypatch.setattr(importlib.import_module("redalgebra.runtime.launch"), "multiprocessors", lambda cuda: resident)
    inputs, params = _problem("fp8_quant_gemm", rows, length, n, "bfloat16")
    inputs["w"] = as_e4m3(to_float(inputs["w"]))
    if rows > 5:  # the weights K-major, as a Linear layer holds them, read as they lie (no transposing kernel: it
        # took a third of the simulator's time here); the one-block case transposes them
        inputs["w"] = as_e4m3(np.ascontiguousarray(inputs["w"].bits[0].T).T[None])
    outs = []
    for persistent in (None, True):
        kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", segments=segments, fp8_products=True,
                         persistent=persistent, threads=threads)
        outs.append(kernel(inputs, params)["y"])  # (the simulator fails a launch that leaves a barrier round open)
        steps = kernel.prepare(inputs, params).steps  # the simulator's launch configurations
        grid = [tuple(c.grid_dim) for c, names, _ in steps if "fac" in names and "nseg" in names]
        spec = kernel.spec_for(rows, length, {"x": "bfloat16", "w": "e4m3"}, {"n": n}, reps={"w": rows})[1]
        tiles = -(-rows // spec.batch) * -(-n // 64) * spec.segments
        assert [g[0] for g in grid] == [min(resident, tiles) if persistent else tiles]
    ref = _reference("fp8_quant_gemm", inputs, params, None, rows)["y"]
    assert np.nanmax(np.abs(outs[1] - ref)) <= 1e-5 * np.nanmax(np.abs(ref))
    assert np.array_equal(outs[0], outs[1])


STATIC_FP8 = """input x
input w[n]
param s > 0
reduce acc = sum(fp8(x * s) * w)
out y = acc / s
"""


def test_fp8_products_take_factors_without_a_scalar_reduction():
    # a static scale: no scalar reduction, so the factors come from columns_mma's loop, stored four bytes at a time
    import redalgebra as ra
    from redalgebra import evaluate

    rows, length, n = 9, 300, 72
    rng = np.random.default_rng(3)
    x = rng.normal(size=(rows, length)).astype(np.float32)
    w = as_e4m3((rng.normal(size=(1, length, n)) * 0.05).astype(np.float32))
    params = {"s": np.full(rows, 37.0, np.float32)}
    f = ra.derive(ra.parse(STATIC_FP8, name="static_fp8"))
    kernel = compile(f, "cudasim", "columns_wgmma", fp8_products=True)
    out = kernel({"x": as_bfloat16(x), "w": w}, params)["y"]
    wide = {"x": to_float(as_bfloat16(x)).astype(np.float64), "w": np.repeat(to_float(w).astype(np.float64), rows, 0)}
    ref = evaluate(f.cascade, wide, params, None)["y"]
    assert np.max(np.abs(out - ref)) <= 1e-5 * np.max(np.abs(ref))
    source = kernel.source(*kernel.spec_for(rows, length, {"x": "bfloat16", "w": "e4m3"}, {"n": n},
                                            reps={"w": rows})[1::-1]).source
    assert "wgmma_ss_e4m3(" in source


def test_the_transposing_kernel_keeps_its_block_of_256_threads_under_other_launch_bounds():
    from redalgebra.codegen.kernels import generate
    from redalgebra.runtime.compile import compile as compile_kernel

    # (the configuration the simulator's back end chooses, printed for the GPU: no GPU needed)
    kernel = compile_kernel(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", threads=128, fp8_products=True)
    strategy, spec, _ = kernel.spec_for(4096, 1024, {"x": "bfloat16", "w": "e4m3"}, {"n": 512}, reps={"w": 4096})
    source = generate(kernel.fused, "cuda", strategy, spec).source
    assert spec.threads == 128 and "BOUNDS_transpose = {} if config.ENABLE_CUDASIM else {'launch_bounds': 256," in source
    # the product's block: its consumer warpgroup and the producer warpgroup
    assert "BOUNDS_tiles = {} if config.ENABLE_CUDASIM else {'launch_bounds': 256," in source


def test_fp8_products_two_consumer_warpgroups_walk_the_output_tiles(monkeypatch):
    # the GPU's block (two consumer warpgroups taking turns, 128 rows), a block a tile and one block walking two column
    # blocks' tiles of two axis tiles each: the turns run on across the tiles
    test_fp8_products_blocks_walk_the_output_tiles_with_the_ring_running_on(monkeypatch, 1, 65, 256, 128, None, 256)


@pytest.mark.parametrize("group", [20, 24])
def test_fp8_products_wider_than_128_columns_hand_the_producers_registers_to_the_consumers(group):
    # groups 20 and 24: 160 or 192 columns a block, m64n160k32 or m64n192k32 products, two sets of 80 or 96
    # accumulators a consumer thread, given the producer's registers (setmaxnreg); on the simulator the same sums
    # (K-major weights, a partial last column block: 40 of 160, 8 of 192), and only these blocks ask for the hand-over
    inputs, params = _problem("fp8_quant_gemm", 65, 256, 200, "bfloat16")
    inputs["w"] = as_e4m3(np.ascontiguousarray(as_e4m3(to_float(inputs["w"])).bits[0].T).T[None])
    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", fp8_products=True, group=group, threads=256)
    out = kernel(inputs, params)["y"]
    ref = _reference("fp8_quant_gemm", inputs, params, None, 65)["y"]
    assert np.max(np.abs(out - ref)) <= 1e-5 * np.max(np.abs(ref))
    source = _fp8_source("fp8_quant_gemm", inputs, 65, 256, 200, group=group, threads=256)
    # once each, the first statement of the producer's branch (warps 8 … 11: a whole warpgroup) and of the consumers'
    # (the stand-ins do nothing: where they stand is what the GPU's setmaxnreg needs)
    lines = [ln.strip() for ln in source.splitlines()]
    assert lines.count("regs_give()") == lines.count("regs_take()") == 1
    assert lines[lines.index("regs_give()") - 1] == "if warp >= 8:" and lines[lines.index("regs_take()") - 1] == "else:"
    assert "regs_give()" not in _fp8_source("fp8_quant_gemm", inputs, 65, 256, 200, group=16, threads=256)
    with pytest.raises(RedalgebraError, match="groups 20 and 24, on the FP8 instruction"):  # (16-bit products: refused)
        compile(fused("rmsnorm_gemm"), "cudasim", "columns_wgmma", group=group)(*_problem("rmsnorm_gemm", 4, 64, 200,
                                                                                           "bfloat16"))


@pytest.mark.slow
@pytest.mark.parametrize("group", [20])  # (the width the policy takes; 192 columns' hand-over: the simulator test above)
def test_the_register_hand_over_fills_the_block_and_its_ptx_assembles_without_spills(tmp_path, group):
    # the counts: the producer's 128 threads and the consumers' 256 hold what the block was launched with (384 at
    # ptxas's 168, the most 384 threads get); the PTX of the 160- or 192-column FP8 product at M4096 K = N = 7168 asks for
    # them, and ptxas, compiling the whole program as the driver's JIT does, assembles it without spilling (compiled
    # for linking, as numba-cuda's own launch is, it spills 392 bytes: gpu/README.md). No GPU needed; ptxas where
    # installed
    import os
    import re
    import shutil
    import subprocess
    import sys

    from redalgebra.runtime.sync import REGS_GIVE, REGS_TAKE

    from redalgebra.codegen.strategies.producer import PRODUCER
    from redalgebra.runtime.sync import PRODUCER_THREADS

    assert PRODUCER == PRODUCER_THREADS == 128 and 24 <= REGS_GIVE <= 168 <= REGS_TAKE <= 256
    assert 128 * REGS_GIVE + 256 * REGS_TAKE == 384 * 168 and REGS_GIVE % 8 == REGS_TAKE % 8 == 0
    # the PTX as `redalgebra ptx` writes it (a process of its own: this one runs the simulator), its summary saying
    # that the setmaxnreg ptxas ignores in the linked build is honoured where a call loads it
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    made = subprocess.run([sys.executable, "-m", "redalgebra", "ptx", "fp8_quant_gemm", "--strategy", "columns_wgmma",
                           "--dtype", "bfloat16,w=e4m3", "--shared", "--fp8-products", "--group", str(group), "--rows",
                           "4096", "--length", "7168", "--size", "n=7168", "--out", str(tmp_path / "module.ptx")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    assert "from its whole PTX, where setmaxnreg is honoured" in made.stdout, made.stdout
    tiles = next(m for m in re.split(r"(?m)^(?=\s*\.version\b)", (tmp_path / "module.ptx").read_text())
                 if re.search(r"\.entry\s+\S*tiles", m))
    assert f"setmaxnreg.dec.sync.aligned.u32 {REGS_GIVE};" in tiles and f"setmaxnreg.inc.sync.aligned.u32 {REGS_TAKE};" \
        in tiles and f"m64n{8 * group}k32.f32.e4m3.e4m3" in tiles
    ptxas = shutil.which("ptxas") or shutil.which("/usr/local/cuda/bin/ptxas")
    if ptxas is None:
        pytest.skip("no ptxas on this machine")
    # (the installed ptxas may be older than the NVVM that wrote the PTX: the kernel uses nothing past ISA 9.0)
    (tmp_path / "tiles.ptx").write_text(re.sub(r"(?m)^\.version \d+\.\d+", ".version 9.0", tiles))
    run = subprocess.run([ptxas, "-arch=sm_90a", "-O3", "-v", str(tmp_path / "tiles.ptx"), "-o",
                          str(tmp_path / "tiles.cubin")], capture_output=True, text=True, timeout=300)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-2000:]
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", log) and "Used 168 registers" in log, log[-2000:]


def test_the_fp8_products_block_width_is_the_one_whose_whole_waves_finish_first():
    # one block a multiprocessor (132 on the H200): M4096 N7168 makes 1792 tiles of 128 columns (14 waves, the last
    # 58 % full) or 1440 of 160 (11 waves, 91 %): 160, measured faster there; N4096 makes 1024 of 128 (8 waves, 97 %)
    # or 832 of 160 (7 waves, 30 % in the last): 128; few tiles (the axis in segments), walking blocks (which spill
    # at 160) and the caller's own group keep what they had. (The policy for an sm_90 GPU, read without one: an H200's
    # 132 multiprocessors unless told.)
    from redalgebra.codegen import Problem
    from redalgebra.codegen.strategies.columns_wgmma_policy import configure

    def group(rows, n, **options):
        p = Problem(rows=rows, length=7168, sizes=(("n", n),), dtypes=(("x", "bfloat16"), ("w", "e4m3")), vec_ok=True,
                    pitch_ok=True, reps=(("w", rows),),
                    options=(("cc", (9, 0)), ("simulator", False), ("fp8_products", True), *options.items()))
        return configure(fused("fp8_quant_gemm"), p)["group"]
    assert group(4096, 7168) == 20 and group(4096, 4096) == 16 and group(256, 7168) == 16
    assert group(4096, 7168, persistent=True) == 16 and group(4096, 7168, group=24) == 24
    # another GPU's multiprocessors (the call's device, option sms): N4096's 1024 tiles of 128 columns are 9.8 waves on
    # 104, its 832 of 160 exactly 8 — 160 there
    assert group(4096, 4096, sms=104) == 20 and group(4096, 4096, sms=132) == 16
