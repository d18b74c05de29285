"""Weights given K-major — ``W.T[None]`` of an (n, L) matrix, how PyTorch's ``Linear`` holds its weight: the
products of ``columns_wgmma`` (FP8 and exact) and ``columns_mma`` read them as the (n, L) rows they are
(``Spec.k_major``: no transposing kernel or copy) where no row is read past its end; elsewhere they are copied (host
arrays) or refused by name (raw device arrays; torch views are copied)."""

import re

import numpy as np
import pytest

from redalgebra.runtime import as_e4m3, compile
from redalgebra.runtime import backends
from redalgebra.runtime.call_layout import _alignment, k_major
from redalgebra.runtime.compile import KMajorUnread, _KMajorRows
from redalgebra.runtime.formats import to_float
from redalgebra.runtime.ptx import signature
from tests.catalogue import fused
from tests.runtime.test_columns import _problem, _reference


def _fp8_problem(rows, length, n):
    inputs, params = _problem("fp8_quant_gemm", rows, length, n, "bfloat16")
    w = as_e4m3(to_float(inputs["w"]))
    lying = as_e4m3(np.ascontiguousarray(w.bits[0].T).T[None])  # the same bytes, K-major
    assert lying.bits.shape == w.bits.shape and k_major(lying.bits) and not k_major(w.bits)
    return inputs, params, w, lying


@pytest.mark.parametrize("rows,length,n,read", [
    (17, 256, 72, True),    # two tiles of 128: read as it lies; 72 rows of the weights (not a multiple of 16)
    (5, 200, 72, False),    # L not a multiple of the tile: the rows would be read past their end; transposed instead
])
def test_the_fp8_product_reads_k_major_weights_as_they_lie(rows, length, n, read):
    inputs, params, w, lying = _fp8_problem(rows, length, n)
    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", fp8_products=True)
    ref = _reference("fp8_quant_gemm", dict(inputs, w=w), params, None, rows)["y"]
    got = kernel(dict(inputs, w=lying), params)["y"]
    assert np.nanmax(np.abs(got - ref)) <= 1e-5 * np.nanmax(np.abs(ref))
    np.testing.assert_array_equal(got, kernel(dict(inputs, w=w), params)["y"])  # the same sums, in the same order
    spec = kernel._planned(dict(inputs, w=lying), params, None)[0]
    assert spec.k_major == (("w",) if read else ())
    source = kernel.source(spec, "columns_wgmma").source
    assert ("def transpose(" in source) == (not read) and ("wt" in source) == (not read)


def test_k_major_weights_run_the_same_product_kernel_on_their_own_rows(monkeypatch):
    # the product kernel is the transposed weights' one, reading ``w`` (bound as its (n, L) rows, typed as the scratch
    # ``wt`` is: 2-D C-contiguous bytes) where that one reads ``wt``; no transposing kernel, no scratch for it
    monkeypatch.setattr(backends, "_capability", lambda: (9, 0))
    kernel = compile(fused("fp8_quant_gemm"), "cuda", "columns_wgmma", fp8_products=True)
    args = (4096, 7168, {"x": "bfloat16", "w": "e4m3"}, {"n": 7168})
    src_t = kernel.source(kernel.spec_for(*args, reps={"w": 4096})[1], "columns_wgmma")
    strategy, spec, _ = kernel.spec_for(*args, reps={"w": 4096}, k_major=("w",))
    assert strategy == "columns_wgmma" and spec.k_major == ("w",) and spec.fp8_products
    src_k = kernel.source(spec, strategy)
    entries_t, entries_k = {e[0]: e for e in src_t.entries}, {e[0]: e for e in src_k.entries}
    assert set(entries_t) - set(entries_k) == {"transpose"} and "wt" not in {name for name, *_ in src_k.scratch}
    assert entries_k["tiles"][1] == tuple(a for a in entries_t["tiles"][1] if a != "wt")

    def body(source, name):
        text = source.split(f"def {name}(")[1]
        return text[text.index("\n"):].split("\ndef ")[0]
    assert body(src_k.source, "tiles") == re.sub(r"\bwt\b", "w", body(src_t.source, "tiles"))
    assert re.search(r"\bwt\b", body(src_t.source, "tiles"))
    types_k = dict(zip(entries_k["tiles"][1], signature(kernel.fused, spec, entries_k["tiles"][1], src_k.scratch)))
    types_t = dict(zip(entries_t["tiles"][1], signature(kernel.fused, spec, entries_t["tiles"][1], src_t.scratch)))
    assert types_k["w"] == types_t["wt"] and types_k["w"].ndim == 2 and types_k["w"].layout == "C"
    # the exact product reads them along their rows too, e4m3 widened row by row into float16 rows (its own kernel:
    # test_the_exact_product_reads_k_major_weights_along_their_rows)
    for options in ({}, {"fp8_products": False}):
        k = compile(fused("fp8_quant_gemm"), "cuda", "columns_wgmma", **options)
        spec = k.spec_for(*args, reps={"w": 4096}, k_major=("w",))[1]
        assert spec.k_major == ("w",) and not spec.fp8_products


class _Device:
    """What the call reads of a device array: its CUDA array interface."""

    def __init__(self, shape, strides, typestr="|u1", address=1 << 20):
        self.shape = shape
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": typestr,
                                         "data": (address, False), "version": 3}


def test_k_major_layouts_are_recognised_and_bound_as_their_rows():
    assert k_major(_Device((1, 256, 72), (18432, 1, 256))) and k_major(np.zeros((72, 256), np.uint8).T[None])
    assert not k_major(_Device((1, 256, 72), None)) and not k_major(np.zeros((1, 256, 72), np.uint8))
    assert not k_major(_Device((2, 256, 72), (18432, 1, 256)))  # one matrix for all rows only
    assert not k_major(_Device((1, 256, 72), (18432, 1, 512)))  # a slice of longer rows
    assert not k_major(_Device((1, 256, 1), (256, 1, 256)))     # one column: C-contiguous as well
    rows = _KMajorRows(_Device((1, 256, 72), (18432, 1, 256), address=(1 << 20) + 16))
    face = rows.__cuda_array_interface__
    assert rows.shape == face["shape"] == (72, 256) and face["strides"] is None and face["data"][0] == (1 << 20) + 16
    # judged as the rows it is read as: aligned where its first byte is
    c = fused("fp8_quant_gemm").cascade
    x = _Device((8, 256), None, "<i2")
    for address, aligned in (((1 << 20), True), ((1 << 20) + 8, False)):
        w = _Device((1, 256, 72), (18432, 1, 256), address=address)
        assert _alignment({"x": x, "w": w}, c, 256, {"x": 1, "w": 8}, True, ("w",))[:2] == (aligned, aligned)


def test_a_raw_device_array_k_major_is_refused_by_name_where_it_is_not_read_so(monkeypatch):
    monkeypatch.setattr(backends, "_capability", lambda: (9, 0))
    kernel = compile(fused("fp8_quant_gemm"), "cuda", "columns_wgmma")  # the exact product
    x = as_e4m3(_Device((8, 256), None, "|u1"))  # (its dtype aside, as the layout reads it)
    w = as_e4m3(_Device((1, 256, 72), (18432, 1, 256)))
    # 16-bit weights whose axis is not whole tiles of 64: their rows would be read past their end
    w16 = _Device((1, 200, 72), (28800, 2, 400), "<f2")
    with pytest.raises(KMajorUnread, match="input w is a device array laid out K-major .* columns_wgmma .* 16-bit "
                                           "ones with L a multiple of 64.* and columns_mma .* read weights so"):
        kernel._layout({"x": _Device((8, 200), None, "<f2"), "w": w16}, {}, None)
    assert kernel._layout({"x": x, "w": w}, {}, None)[0].k_major == ("w",)  # e4m3: widened row by row
    with pytest.raises(KMajorUnread):  # L not a multiple of 128, even with fp8_products
        compile(fused("fp8_quant_gemm"), "cuda", "columns_wgmma", fp8_products=True)._layout(
            {"x": as_e4m3(_Device((8, 200), None)), "w": as_e4m3(_Device((1, 200, 72), (14400, 1, 200)))}, {}, None)
    spec = compile(fused("fp8_quant_gemm"), "cuda", "columns_wgmma", fp8_products=True)._layout(
        {"x": x, "w": w}, {}, None)[0]
    assert spec.k_major == ("w",)


def test_k_major_weights_off_the_16_byte_grid_are_copied_not_refused(monkeypatch):
    # a raw device array is refused by name (a torch view is then copied, to fresh aligned memory), never with the
    # strategy's own alignment message
    monkeypatch.setattr(backends, "_capability", lambda: (9, 0))
    kernel = compile(fused("fp8_quant_gemm"), "cuda", "columns_wgmma", fp8_products=True)
    x = as_e4m3(_Device((8, 256), None))
    w = as_e4m3(_Device((1, 256, 72), (18432, 1, 256), address=(1 << 20) + 8))
    with pytest.raises(KMajorUnread, match="input w is a device array laid out K-major .* 16-byte"):
        kernel._layout({"x": x, "w": w}, {}, None)


def test_only_the_weights_the_product_reads_are_read_k_major():
    # a cascade with a second vector input: neither is read K-major (the product's are not told apart by position)
    text = ("input x\ninput v[n]\ninput w[n]\nreduce a = max(abs(x))\n"
            "reduce acc = sum(w*fp8(448*x/max(1e-12, a)))\nout y = acc*max(1e-12, a)/448\n")
    from redalgebra import derive, parse
    kernel = compile(derive(parse(text)), "cudasim", "columns_wgmma", fp8_products=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(17, 256)).astype(np.float32)
    lying = as_e4m3(np.ascontiguousarray(as_e4m3(rng.normal(size=(72, 256)).astype(np.float32)).bits).T[None])
    for v_major in (True, False):
        inputs = {"x": x, "v": lying if v_major else as_e4m3(np.ascontiguousarray(lying.bits)),
                  "w": as_e4m3(np.ascontiguousarray(lying.bits)) if v_major else lying}
        assert kernel._planned(inputs, {}, None)[0].k_major == ()


def test_host_k_major_weights_not_read_so_are_judged_as_the_copy_they_become():
    # L = 200 (not a multiple of 128): the host array is copied contiguous, and planned as that copy (16-byte loads of
    # the factors' rows), not as the (n, L) rows it would have been read as
    inputs, params, w, lying = _fp8_problem(5, 200, 72)
    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_wgmma", fp8_products=True)
    spec_lying = kernel._planned(dict(inputs, w=lying), params, None)[0]
    spec_given = kernel._planned(dict(inputs, w=w), params, None)[0]
    assert spec_lying == spec_given and spec_lying.k_major == ()


@pytest.mark.parametrize("name,dtype,rows,length,n,options", [
    # e4m3 rows widened: L = 72 is not whole 16-byte chunks (a load an element) nor whole tiles (the padding's zeros
    # read), one partial column block; then 16-byte chunks (L = 80, a tile and a partial one) over two row blocks and
    # a partial column block (80 = 64 + 16); then the axis in two segments (each block's tiles from its segment's
    # start). (n = 80, a multiple of 16: the contiguous weights compared with are widened 16 elements a thread, not a
    # thread an element as at n = 8)
    ("fp8_quant_gemm", "e4m3", 3, 72, 8, {}),
    ("fp8_quant_gemm", "e4m3", 17, 80, 80, {}),
    ("fp8_quant_gemm", "e4m3", 5, 100, 16, {"segments": 2}),
    # 16-bit rows read as they lie (whole tiles of 64); RMSNorm's rounded factors; blocks walking the output's tiles
    # (the next tile's first copies issued while this one's outputs are stored)
    ("rmsnorm_gemm", "bfloat16", 9, 128, 40, {}),
    ("rmsnorm_gemm", "bfloat16", 9, 256, 40, {"persistent": True}),
])
def test_the_exact_product_reads_k_major_weights_along_their_rows(name, dtype, rows, length, n, options):
    # a Linear layer's (n, L) weight given as W.T[None]: the weight tile is K-major as the factor tile is (wgmma_ss),
    # no transposing copy; the same sums, in the same order, as the contiguous weights' (the simulator poisons the
    # widened rows' scratch, so a pad left unwritten shows as NaN)
    inputs, params = _problem(name, rows, length, n, "bfloat16")
    w = as_e4m3(to_float(inputs["w"])) if dtype == "e4m3" else inputs["w"]
    lying = type(w)(np.ascontiguousarray(w.bits[0].T).T[None])
    kernel = compile(fused(name), "cudasim", "columns_wgmma", **options)
    spec = kernel._planned(dict(inputs, w=lying), params, None)[0]
    assert spec.k_major == ("w",) and not spec.fp8_products
    assert spec.segments == options.get("segments", 1) and spec.persistent == options.get("persistent", False)
    got = kernel(dict(inputs, w=lying), params)["y"]
    ref = _reference(name, dict(inputs, w=w), params, None, rows)["y"]
    tol = 2 ** -9 + 1e-5 if name == "rmsnorm_gemm" else 1e-5  # (RMSNorm: its factors rounded to bfloat16)
    assert np.nanmax(np.abs(got - ref)) <= tol * np.nanmax(np.abs(ref))
    np.testing.assert_array_equal(got, kernel(dict(inputs, w=w), params)["y"])
    source = kernel.source(spec, "columns_wgmma").source
    tiles = source.split("def tiles(")[1].split("\ndef ")[0]
    op = "wgmma_ss_f16(" if dtype == "e4m3" else "wgmma_ss_bf16("
    assert op in tiles and "wgmma_sst_" not in tiles
    assert ("def widen(" in source) == (dtype == "e4m3")


@pytest.mark.parametrize("name,dtype,rows,length,n,segments", [
    # e4m3 weights (16 elements of a column a lane's load): a token (one n8 tile); 9 rows (two n8 tiles, 8 columns a
    # lane) in three segments of whole super-steps of 64 (two, two and one), a partial column block (80 = 64 + 16)
    ("fp8_quant_gemm", "e4m3", 1, 128, 64, None),
    ("fp8_quant_gemm", "e4m3", 9, 320, 80, 3),
    # 16-bit weights: 8 elements a lane's load, two steps a super-step of 32; RMSNorm's rounded factors
    ("fp8_quant_gemm", "bfloat16", 3, 192, 72, 2),
    ("rmsnorm_gemm", "bfloat16", 9, 256, 40, None),
    # two row blocks of 16, the second of one row (8 e4m3 columns a lane), two segments of a super-step
    ("fp8_quant_gemm", "e4m3", 17, 128, 64, 2),
    # two warps taking 14 super-steps in turn: the loop's rest (warps of one a super-step) runs
    ("fp8_quant_gemm", "bfloat16-threads64", 2, 448, 16, None),
])
def test_columns_mma_reads_k_major_weights_as_they_lie(name, dtype, rows, length, n, segments):
    # a Linear layer's (n, L) weight given as W.T[None]: each lane loads 16 bytes of one column (consecutive elements
    # of the axis), the factors stored in the matching order; the sums are the contiguous weights' up to the float32
    # order of their terms
    dtype, _, threads = dtype.partition("-threads")
    inputs, params = _problem(name, rows, length, n, "bfloat16")
    w = as_e4m3(to_float(inputs["w"])) if dtype == "e4m3" else inputs["w"]
    lying = type(w)(np.ascontiguousarray(w.bits[0].T).T[None])
    assert k_major(lying.bits) and not k_major(w.bits)
    kernel = compile(fused(name), "cudasim", "columns_mma", segments=segments, threads=int(threads) if threads else None)
    spec = kernel._planned(dict(inputs, w=lying), params, None)[0]
    assert spec.k_major == ("w",) and (not threads or spec.threads == int(threads))
    got = kernel(dict(inputs, w=lying), params)["y"]
    given = kernel(dict(inputs, w=w), params)["y"]
    ref = _reference(name, dict(inputs, w=w), params, None, rows)["y"]
    # (RMSNorm: its factors rounded to bfloat16, as with contiguous weights)
    tol = 2 ** -9 + 1e-5 if name == "rmsnorm_gemm" else 1e-5
    assert np.nanmax(np.abs(got - ref)) <= tol * np.nanmax(np.abs(ref))
    assert np.nanmax(np.abs(got - given)) <= 1e-6 * np.nanmax(np.abs(ref))
    source = kernel.source(spec, "columns_mma").source
    assert ("e4m3_halves(" in source) == (dtype == "e4m3") and "e4m3_pairs(" not in source


@pytest.mark.parametrize("length", [200, 96])
def test_columns_mma_copies_k_major_weights_whose_axis_is_not_whole_super_steps(length):
    # L not a multiple of 64: a lane's 16 bytes of a column would run past the row's end at the last super-step; the
    # host array is copied contiguous and planned as that copy
    inputs, params = _problem("fp8_quant_gemm", 2, length, 64, "bfloat16")
    w = as_e4m3(to_float(inputs["w"]))
    lying = as_e4m3(np.ascontiguousarray(w.bits[0].T).T[None])
    kernel = compile(fused("fp8_quant_gemm"), "cudasim", "columns_mma")
    spec = kernel._planned(dict(inputs, w=lying), params, None)[0]
    assert spec.k_major == () and spec == kernel._planned(dict(inputs, w=w), params, None)[0]
    np.testing.assert_array_equal(kernel(dict(inputs, w=lying), params)["y"], kernel(dict(inputs, w=w), params)["y"])
