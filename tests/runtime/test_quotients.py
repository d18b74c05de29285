"""``fp8(n / d)`` by a row constant in the ``rows`` kernels: divided where the store rounds to e4m3 bytes; where the
value is rounded by ``rt_fp8`` and stored wider, the product ``n * (1/d)`` where it is sure to round to e4m3 as the
quotient does, the division elsewhere (``codegen.quotients``, ``intrinsics.e4m3_sure``). The kernels' quantised values
equal those of the float32 division bit for bit, on the values where a product alone would not."""

import re

import numpy as np
import pytest

from redalgebra import derive, parse
from redalgebra.runtime import compile
from redalgebra.runtime.formats import e4m3_bits
from redalgebra.runtime.intrinsics import _sim_e4m3_sure

FP8_QUANT = "input x\nreduce a = max(abs(x))\nout q = fp8(x * 448 / max(a, 1e-12))\n"
TINY, HUGE = np.float32(2.0 ** -126), np.float32(2.0 ** 126)


def _recip(d):
    """``rt_recip8``: 1/d correctly rounded where |d| is in [2^-126, 2^126), else NaN."""
    with np.errstate(all="ignore"):
        return np.where((np.abs(d) >= TINY) & (np.abs(d) < HUGE), np.float32(1) / d, np.float32(np.nan)).astype(np.float32)


def _midpoints() -> np.ndarray:
    """Every midpoint between neighbouring positive e4m3 values (the rounding boundaries), as float32."""
    values = np.unique(np.abs(np.array([v for v in _decode(np.arange(256, dtype=np.uint8)) if np.isfinite(v)])))
    return ((values[1:] + values[:-1]) / 2).astype(np.float32)


def _decode(bits):
    from redalgebra.runtime.formats import e4m3_to_float
    return e4m3_to_float(bits)


def _quotient_case(n, d):
    """(e4m3 of the product where sure else of the quotient, e4m3 of the quotient, how many were sure)."""
    n, d = np.asarray(n, np.float32), np.asarray(d, np.float32)
    with np.errstate(all="ignore"):
        q = (n * _recip(d)).astype(np.float32)
        exact = (n / d).astype(np.float32)
    sure = np.array([r == r and _sim_e4m3_sure(v, v) for v, r in zip(q, _recip(np.broadcast_to(d, q.shape)))])
    fast = np.where(sure, q, exact)
    return e4m3_bits(fast), e4m3_bits(exact), int(sure.sum())


def test_sure_products_round_to_e4m3_as_the_quotients_do():
    rng = np.random.default_rng(7)
    count = 40_000
    # divisors: bfloat16-like scales, then float32 of every magnitude, the fast range's edges and beyond it; quotients
    # in e4m3's range, a fifth of them scaled down into its subnormals and below
    with np.errstate(all="ignore"):
        d = np.concatenate([rng.uniform(1e-3, 1e3, count // 2),
                            np.exp2(rng.uniform(-140, 140, count // 2)) * rng.choice([-1, 1], count // 2)])
        scale = np.where(rng.random(count) < 0.2, np.exp2(-rng.integers(0, 40, count).astype(float)), 1.0)
        d = d.astype(np.float32)
        n = (d.astype(np.float64) * rng.uniform(-450, 450, count) * scale).astype(np.float32)
    fast, exact, sure = _quotient_case(n, d)
    np.testing.assert_array_equal(fast, exact)
    assert sure > count * 0.7  # the product is taken for most: the division is the exception


def test_quotients_next_to_every_rounding_boundary_take_the_division_where_the_product_would_round_otherwise():
    mids = _midpoints()
    rng = np.random.default_rng(11)
    n, d = [], []
    for m in mids:
        dd = rng.uniform(1, 2, 6).astype(np.float32) * np.float32(2.0 ** rng.integers(-20, 20))
        base = (m.astype(np.float64) * dd.astype(np.float64)).astype(np.float32)
        for k in range(-6, 7):
            n.append((base.view(np.int32) + k).view(np.float32))
            d.append(dd)
    n, d = np.concatenate(n), np.concatenate(d)
    fast, exact, _ = _quotient_case(n, d)
    np.testing.assert_array_equal(fast, exact)
    with np.errstate(all="ignore"):
        product = e4m3_bits((n * _recip(d)).astype(np.float32))
    assert (product != exact).sum() > 50  # the product alone would round some of these to the other side


@pytest.mark.parametrize("q,want", [(0.0, True), (-0.0, True), (448.0, True), (3e38, True), (np.inf, True),
                                    (np.nan, True), (1.0625, False), (1.0625 * (1 + 2.0 ** -22), False), (1.0625 * (1 + 2.0 ** -20), True), (1.5, True),
                                    (-432.0, False), (2.0 ** -10, False), (2.0 ** -10 * (1 + 2.0 ** -19), True),
                                    (1e-30, True)])
def test_sure_brackets_each_value_by_two_to_the_minus_21(q, want):
    # 1.0625 is the midpoint between 1 and 1.125 (2^-22 past it is inside the bracket), 432 between 416 and 448, 2^-10
    # between 0 and e4m3's least subnormal;
    # 2^-20 beyond a midpoint is outside the bracket; everything past 448 saturates to it
    assert _sim_e4m3_sure(np.float32(q), np.float32(q)) is want
    assert _sim_e4m3_sure(np.float32(1.5), np.float32(q)) is want  # a pair is sure where both are


def _float32_quantised(x):
    a = np.maximum(np.abs(x).max(axis=1, keepdims=True), np.float32(1e-12)).astype(np.float32)
    with np.errstate(all="ignore"):
        return e4m3_bits(((x * np.float32(448)).astype(np.float32) / a).astype(np.float32))


def _assert_quantised_as_divided(kernel, x):
    """The kernel's ``q`` equals the float32 division's e4m3 rounding: bit for bit where stored as bytes; as values
    where stored as float32 (the simulator's portable rounding gives +0 for a negative value that rounds to 0)."""
    q, want = np.asarray(kernel({"x": x})["q"]), _float32_quantised(x)
    if q.dtype == np.uint8:
        np.testing.assert_array_equal(q, want)
    else:
        np.testing.assert_array_equal(q, _decode(want))
    return q if q.dtype == np.uint8 else e4m3_bits(q)


@pytest.mark.parametrize("out_dtype,form", [(None, "/r_h0"), ("float32", "rt_q8x2(_K")])
def test_the_rows_kernel_quantises_as_the_float32_division_bit_for_bit(out_dtype, form):
    # stored as e4m3 bytes the quotient is divided (the store rounds); stored wider, rounded by rt_fp8, it is the
    # product by the reciprocal where e4m3_sure says so, the division elsewhere
    kernel = compile(derive(parse(FP8_QUANT)), "cudasim", "rows", out_dtype=out_dtype)
    src = kernel.source(kernel._layout({"x": np.zeros((3, 40), np.float32)}, {}, None)[0], "rows").source
    assert form in src and bool(re.search(r"r_h\d+ = rt_recip8\(", src)) == (out_dtype is not None)
    rng = np.random.default_rng(3)
    # rows whose largest |x| is 3 · 2^k: 448 x / a is then within a few steps of e4m3 boundaries for chosen x
    mids = _midpoints()
    x = np.zeros((6, 40), np.float32)
    for r in range(6):
        a = np.float32(3 * 2.0 ** (r - 2))
        pick = rng.choice(mids[mids < 440], 38)
        target = (pick.astype(np.float64) * a / 448).astype(np.float32)
        x[r, :38] = (target.view(np.int32) + rng.integers(-3, 4, 38, dtype=np.int32)).view(np.float32) * rng.choice([-1, 1], 38)
        x[r, 38], x[r, 39] = a, 0.0
    x[5, 10] = np.float32(1e-30)  # far below e4m3's least subnormal: sure (an e4m3 zero either way)
    got = _assert_quantised_as_divided(kernel, x)
    with np.errstate(all="ignore"):  # (the reciprocal's product alone differs on some of these)
        a = np.maximum(np.abs(x).max(axis=1, keepdims=True), np.float32(1e-12)).astype(np.float32)
        product = e4m3_bits((x * np.float32(448) * (np.float32(1) / a)).astype(np.float32))
    assert (product != got).any()


@pytest.mark.parametrize("out_dtype", [None, "float32"])
def test_rows_of_zeros_infinities_and_nans_quantise_as_the_division_does(out_dtype):
    x = np.array([[0.0, -0.0, 0.0, 0.0],
                  [1.0, np.inf, -2.0, 0.0],
                  [np.nan, 1.0, 2.0, 3.0],
                  [3e38, -1e38, 1.0, 1e-40],   # a scale past rt_recip8's range: every quotient divided
                  [1e-39, -2e-39, 0.0, 1e-45]], np.float32)
    kernel = compile(derive(parse(FP8_QUANT)), "cudasim", "rows", out_dtype=out_dtype)
    _assert_quantised_as_divided(kernel, x)


def test_an_fp8_quotient_inside_another_fp8_or_by_a_varying_divisor_computes_as_written():
    # the inner quotient of an e4m3 output is tested (three arguments), the outer rounded by the store; a divisor
    # that varies along the row is not split off: x / (a * y) is not (x / y) / a in float32
    rng = np.random.default_rng(9)
    y = rng.uniform(0.5, 2, size=(4, 70)).astype(np.float32)
    mids = _midpoints()
    # x / (a y) within a few steps of e4m3 boundaries, a = 1000 (the last column)
    target = (rng.choice(mids[mids < 0.4], (4, 70)) * 1000.0 * y.astype(np.float64)).astype(np.float32)
    x = (target.view(np.int32) + rng.integers(-3, 4, (4, 70), dtype=np.int32)).view(np.float32)
    x[:, -1] = 1000
    a = np.abs(x).max(axis=1, keepdims=True).astype(np.float32)
    with np.errstate(all="ignore"):
        inner = _decode(e4m3_bits((x / a).astype(np.float32)))
        cases = [("input x\nreduce a = max(abs(x))\nout q = fp8(fp8(x / a) * 3)\n", {"x": x},
                  e4m3_bits((inner * np.float32(3)).astype(np.float32))),
                 ("input x\ninput y\nreduce a = max(abs(x))\nout q = fp8(x / (a * y))\n", {"x": x, "y": y},
                  e4m3_bits((x / (a * y).astype(np.float32)).astype(np.float32)))]
    for text, inputs, want in cases:
        for out_dtype in (None, "float32"):
            kernel = compile(derive(parse(text)), "cudasim", "rows", out_dtype=out_dtype)
            q = np.asarray(kernel(inputs)["q"])
            np.testing.assert_array_equal(q if q.dtype == np.uint8 else e4m3_bits(q), want, err_msg=f"{text} {out_dtype}")


def test_the_fast_quotient_is_kept_to_gpus_that_convert_to_e4m3():
    # e4m3_sure's conversion needs sm_89: on older GPUs the quotients divide
    kernel = compile(derive(parse(FP8_QUANT)), "cuda", "rows", out_dtype="float32")
    src = kernel.source(kernel.spec_for(3, 64, {"x": "float32"})[1], "rows").source
    assert "e4m3_sure(q0, q1)" in src and re.search(
        r"\nif not \(config\.ENABLE_CUDASIM or fp8_in_hardware\(\)\):[^\n]*\n"
        r"    rt_q8, rt_q8x2 = rt_q8_divided, rt_q8x2_divided", src)
    # (the legacy one-kernel modules print no quotient and carry none of it)
    legacy = compile(derive(parse(FP8_QUANT)), "cuda", "block")
    assert "rt_q8" not in legacy.source(legacy.spec_for(3, 64, {"x": "float32"})[1], "block").source
