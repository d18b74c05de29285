"""FP8 e4m3 inputs (``as_e4m3``, torch's ``float8_e4m3fn``): read exactly by every back end, refused with a message
where they cannot be."""

import numpy as np
import pytest

import redalgebra as ra
from redalgebra import EvaluationError, RedalgebraError
from redalgebra.runtime import E4M3, as_e4m3
from redalgebra.runtime.check import check
from redalgebra.runtime.formats import e4m3_to_float
from tests.catalogue import fused

CODES = ra.parse("input x\nreduce m = max(x)\nout y = x\nout z = m\n", name="e4m3_codes")


def _value(code: int) -> float:
    """An e4m3 byte's value, written from the format's definition (sign, 4 exponent bits of bias 7, 3 mantissa
    bits; exponent 0 subnormal; 0x7F and 0xFF NaN)."""
    if code & 0x7F == 0x7F:
        return float("nan")
    e, m = (code >> 3) & 0xF, code & 7
    mag = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -mag if code & 0x80 else mag


@pytest.mark.parametrize("backend,strategy", [("cpu", None), ("cudasim", "rows"), ("cudasim", "thread")])
def test_every_code_is_read_exactly(backend, strategy):
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
    want = np.array([_value(c) for c in range(256)], np.float32).reshape(16, 16)
    out = ra.compile(ra.derive(CODES), backend, strategy)({"x": as_e4m3(codes)}, {})
    y = np.asarray(out["y"])
    assert y.dtype == np.float32  # an e4m3 input's per-element outputs are float32, not e4m3
    np.testing.assert_array_equal(y, want)
    assert np.array_equal(np.signbit(y), np.signbit(want))  # 0x80 is -0
    np.testing.assert_array_equal(out["z"], np.fmax.reduce(want, axis=1) * np.where(np.isnan(want).any(1), np.nan, 1))
    np.testing.assert_array_equal(e4m3_to_float(codes), want)


@pytest.mark.parametrize("backend,strategy,name", [("cpu", None, "fp8_quant_gemm"), ("cudasim", "columns", "fp8_quant_gemm"),
                                                   ("cudasim", "vrows", "decode_attention")])
def test_cascades_with_e4m3_inputs_match_the_reference(backend, strategy, name):
    results = check(fused(name), backend, strategy, shapes=((3, 37), (2, 130)), dtypes=("e4m3",))
    assert results and all(r.passed for r in results), [r.line() for r in results]


def test_as_e4m3_rounds_floats_takes_bytes_and_refuses_the_rest():
    x = np.array([0.1, -3.3, 500.0, np.nan], np.float32)
    e = as_e4m3(x)
    assert isinstance(e, E4M3) and e.dtype == "e4m3" and e.bits.dtype == np.uint8
    np.testing.assert_array_equal(e4m3_to_float(e.bits), [0.1015625, -3.25, 448.0, np.nan])  # nearest; saturating
    assert as_e4m3(e.bits).bits is e.bits
    with pytest.raises(RedalgebraError, match="8-bit integer bytes"):
        as_e4m3(np.zeros(3, np.int16))
    with pytest.raises(EvaluationError, match="as_e4m3"):  # raw bytes are not taken for values
        ra.compile(fused("safe_softmax"), "cpu")({"x": np.zeros((2, 4), np.uint8)})


SCALED = """\
# FP8 quantisation + GEMM with e4m3 weights and their per-tensor scale, as a user writes it
input x
input w[n]
param sw > 0
reduce a = max(abs(x))
reduce acc = sum(fp8(x * 448 / max(a, 1e-12)) * w)
out y = acc * max(a, 1e-12) / 448 * sw
"""


def test_a_weight_scale_is_a_param_of_the_cascade():
    results = check(ra.derive(ra.parse(SCALED, name="fp8_gemm_scaled")), "cudasim", "columns_mma",
                    shapes=((3, 70),), dtypes=("e4m3",))
    assert results and all(r.passed for r in results), [r.line() for r in results]


BIASED = """\
input k[d]
input v[d]
input b
param q[d]
param scale > 0
let s = dot(q, k) * scale + b
reduce m = max(s)
reduce l = sum(exp(s - m))
reduce o = sum(exp(s - m) * v)
out y = o / l
"""


@pytest.mark.parametrize("strategy", ["mma", "wgmma"])
def test_the_tensor_core_kernels_read_an_e4m3_per_element_input_as_its_values(strategy):
    from redalgebra.runtime import as_bfloat16
    from redalgebra.runtime.formats import to_float

    f = ra.derive(ra.parse(BIASED, name="biased"))
    rng = np.random.default_rng(0)
    k, v = (as_bfloat16(rng.normal(size=(1, 64, 16)).astype(np.float32)) for _ in range(2))  # shared by 16 rows
    b = as_e4m3(rng.normal(size=(16, 64)).astype(np.float32) * 2)
    params = {"q": rng.normal(size=(16, 16)).astype(np.float32), "scale": np.float32(0.25)}
    wide = {name: np.broadcast_to(to_float(a).astype(np.float64), (16,) + a.shape[1:])
            for name, a in (("k", k), ("v", v), ("b", b))}
    want = ra.evaluate(f.cascade, wide, params)["y"]
    got = ra.compile(f, "cudasim", strategy)({"k": k, "v": v, "b": b}, params)["y"]
    # the probabilities enter P·V rounded to bfloat16 (2^-9 each); the bug this guards against was off by 3
    assert np.abs(np.asarray(got) - want).max() <= 2.0 ** -8 * np.abs(want).max()
