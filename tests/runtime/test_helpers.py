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
