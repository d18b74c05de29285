"""``columns_wgmma``'s 16-bit product with a producer warpgroup (``producer.SIXTEEN_BIT``, off by default until
timed on a GPU): the same outputs, bit for bit, as the product whose threads all copy between block barriers — only
the copies' schedule differs — on the simulator, whose copies land at the producer's wait and whose ``wgmma`` reads are
tracked until their group is waited for (a stage reused too early, or read before its copies landed, fails here)."""

import numpy as np
import pytest

from redalgebra.runtime import compile
from tests.catalogue import fused
from tests.runtime.test_columns import _problem


@pytest.mark.parametrize("name,rows,length,n,segments,options", [
    # a partial last tile (300 = 4 x 64 + 44: its copies past the segment's end fill zeros), columns not of a block
    ("rmsnorm_gemm", 20, 300, 72, None, {}),
    # (two consumer warpgroups taking turns over a wrapped ring: the FP8 products' producer block, which this one
    # shares, test_fp8_products.py; this flag is off, measured slower on the H200, so its own case of them, 13 s of
    # the simulator, is left out)
    # 256 columns a block (the GPU's), segments of three tiles (the sixth a partial one, the seventh none)
    ("rmsnorm_gemm", 5, 1000, 136, 7, {"group": 32}),
])
def test_the_16_bit_product_with_a_producer_warpgroup_computes_what_the_block_barrier_loop_does(
        monkeypatch, name, rows, length, n, segments, options):
    from redalgebra.codegen.strategies import producer, tile_factors

    monkeypatch.setattr(tile_factors, "TILE_FACTORS", False)
    inputs, params = _problem(name, rows, length, n, "bfloat16")
    outs, sources = [], []
    for on in (False, True):
        monkeypatch.setattr(producer, "SIXTEEN_BIT", on)
        kernel = compile(fused(name), "cudasim", "columns_wgmma", segments=segments, **options)
        dtypes = {s: "bfloat16" for s in inputs}
        spec = kernel.spec_for(rows, length, dtypes, {"n": n}, reps={"w": rows})[1]
        assert spec.producer == on
        sources.append(kernel.source(spec, "columns_wgmma").source)
        outs.append(kernel(inputs, params)["y"])
    assert "bar_sync(" in sources[1] and "bar_sync(" not in sources[0]
    assert np.array_equal(outs[0], outs[1], equal_nan=True)
    assert np.isfinite(outs[1]).all()


@pytest.mark.parametrize("name,rows,length,n,segments,resident", [
    # one block walking 4 output tiles of 5 axis tiles each (the ring of four wrapping across them); two consumer
    # warpgroups walking: test_fp8_products.py
    ("rmsnorm_gemm", 20, 300, 72, None, 1),
])
def test_the_16_bit_producer_walking_the_output_tiles_computes_what_a_block_a_tile_does(
        monkeypatch, name, rows, length, n, segments, resident):
    import importlib

    from redalgebra.codegen.strategies import producer, tile_factors

    monkeypatch.setattr(tile_factors, "TILE_FACTORS", False)
    monkeypatch.setattr(producer, "SIXTEEN_BIT", True)
    monkeypatch.setattr(importlib.import_module("redalgebra.runtime.launch"), "multiprocessors", lambda cuda: resident)
    inputs, params = _problem(name, rows, length, n, "bfloat16")
    outs = []
    for persistent in (None, True):
        kernel = compile(fused(name), "cudasim", "columns_wgmma", segments=segments, persistent=persistent,
                         **({"threads": 256} if rows > 64 else {}))
        dtypes = {s: "bfloat16" for s in inputs}
        spec = kernel.spec_for(rows, length, dtypes, {"n": n}, reps={"w": rows})[1]
        assert spec.producer and spec.persistent == bool(persistent)
        assert ("while tile < total:" in kernel.source(spec, "columns_wgmma").source) == bool(persistent)
        outs.append(kernel(inputs, params)["y"])
    assert np.array_equal(outs[0], outs[1], equal_nan=True)
    assert np.isfinite(outs[1]).all()
