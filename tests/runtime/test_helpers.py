"""The device helpers every generated module carries, compiled for the CPU and checked exactly."""

import numpy as np
import pytest

from redalgebra.codegen.helpers import HELPER_CONSTANTS, HELPERS
from redalgebra.ir.reference import round_e4m3


@pytest.fixture(scope="module")
def helpers():
    namespace: dict = {}
    source = "import math\nimport numpy as np\nfrom numba import njit, int32, float32\n" + HELPER_CONSTANTS
    exec(source + HELPERS.replace("{device}", "njit"), namespace)  # noqa: S102 - our own helper text
    return namespace


def test_fp8_rounding_matches_the_reference_on_every_value_midpoint_and_edge(helpers, rng):
    every = np.unique(round_e4m3(np.linspace(-448, 448, 400001)))
    small = np.unique(round_e4m3(np.linspace(-2**-5, 2**-5, 40001)))  # the subnormals, 2^-9 apart
    values = np.unique(np.concatenate([every, small]))
    midpoints = (values[1:] + values[:-1]) / 2  # ties: to even
    edges = np.array([0.0, -0.0, 448, 449, 464, 465, 480, 1e30, -1e30, np.inf, -np.inf, np.nan, 2**-9, 2**-10,
                      3 * 2**-11, 2**-6, -(2**-6) * 1.0625])
    xs = np.concatenate([values, midpoints, edges, rng.standard_normal(20000) * 40,
                         rng.standard_normal(5000) * 1e-3]).astype(np.float32)
    rt_fp8 = helpers["rt_fp8"]
    got = np.array([rt_fp8(np.float32(x)) for x in xs], np.float32)
    want = round_e4m3(xs.astype(np.float64)).astype(np.float32)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{(~same).sum()} mismatches, e.g. {xs[~same][:5]} -> {got[~same][:5]}, want {want[~same][:5]}"
    assert len(values) > 250  # the grid really enumerated the format (253 finite values, ±0 counted once)


def _e4m3_reference(code: int) -> float:
    """An e4m3 byte's value from the format's definition (bias 7, exponent 0 subnormal, 0x7F and 0xFF NaN)."""
    if code & 0x7F == 0x7F:
        return float("nan")
    e, m = (code >> 3) & 0xF, code & 7
    mag = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -mag if code & 0x80 else mag


def test_the_e4m3_decoder_is_exact_on_every_code(helpers):
    want = np.array([_e4m3_reference(c) for c in range(256)], np.float32)
    got = np.array([helpers["rt_e4m3"](np.uint8(c)) for c in range(256)], np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_the_gpus_e4m3_decoder_text_is_exact_on_every_code():
    """The CUDA-only helper (a bit move: exponent and mantissa into a float32's, times 2^120) run as Python, with the
    bit cast and int32's wrap-around as the GPU does them; float32 products keep subnormals, as kernels compiled
    without fastmath do."""
    from types import SimpleNamespace

    from redalgebra.codegen.helpers import CUDA_HELPERS

    def int_as_float(i):
        return np.array([i], np.int32).view(np.float32)[0]
    cuda = SimpleNamespace(libdevice=SimpleNamespace(int_as_float=int_as_float), jit=lambda **_: (lambda f: f))
    namespace = {"config": SimpleNamespace(ENABLE_CUDASIM=False), "cuda": cuda,
                 "int32": lambda v: np.array(int(v) & 0xFFFFFFFF, np.uint32).view(np.int32)[()], "np": np}
    exec(HELPER_CONSTANTS + CUDA_HELPERS, namespace)  # noqa: S102 - our own helper text
    want = np.array([_e4m3_reference(c) for c in range(256)], np.float32)
    for kind in (np.uint8, np.int8):  # e4m3 bytes arrive as either
        got = np.array([namespace["rt_e4m3"](kind(np.uint8(c))) for c in range(256)], np.float32)
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))
