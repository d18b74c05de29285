"""The calling conventions of a compiled kernel: strides, odd shapes, and clear errors for bad input."""

import numpy as np
import pytest

from redalgebra import EvaluationError
from redalgebra.runtime import compile
from tests.catalogue import fused


def softmax(a):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


X = np.random.default_rng(3).normal(size=(6, 40)).astype(np.float32)
VIEWS = {"transposed": X.T, "every other column": X[:, ::2], "every other row": X[::2], "one element": X[:, :1],
         "one row": X[4:5]}


@pytest.mark.parametrize("backend", ["cpu", "cudasim"])
@pytest.mark.parametrize("view", VIEWS)
def test_views_that_are_not_contiguous_compute_the_reference(backend, view):
    a = VIEWS[view]
    y = compile(fused("safe_softmax"), backend)({"x": a})["y"]
    assert np.allclose(np.asarray(y, np.float64), softmax(a.astype(np.float64)), atol=1e-6)


@pytest.mark.parametrize("a,message", [
    (X[0], r"must be a 2-D array \(rows, L\), got shape \(40,\)"),
    (np.zeros((0, 40), np.float32), r"shape \(0, 40\): rows, the axis .* at least one entry"),
    (np.zeros((3, 0), np.float32), r"shape \(3, 0\)"),
    (X.astype(np.float64), "dtype float64"),
])
def test_shapes_and_dtypes_a_kernel_cannot_take_are_named(a, message):
    with pytest.raises(EvaluationError, match=message):
        compile(fused("safe_softmax"), "cpu")({"x": a})


def test_a_mask_of_another_shape_is_refused_not_read_out_of_bounds():
    k = compile(fused("safe_softmax"), "cudasim")
    k({"x": X}, keep=np.ones((6, 40), bool))  # a right mask first: the call's layout is cached, not its checks
    with pytest.raises(EvaluationError, match=r"keep must be \(rows, L\) = \(6, 40\).*\(6, 39\)"):
        k({"x": X}, keep=np.ones((6, 39), bool))


def test_inputs_of_different_lengths_name_both():
    with pytest.raises(EvaluationError, match=r"input v must be .*L = 40, got \(6, 39, 4\)"):
        compile(fused("decode_attention"), "cpu")(
            {"k": np.zeros((6, 40, 4), np.float32), "v": np.zeros((6, 39, 4), np.float32)},
            {"q": np.zeros(4, np.float32), "scale": 1.0})
