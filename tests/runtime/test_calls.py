"""The calling conventions of a compiled kernel: strides, odd shapes, and clear errors for bad input."""

import numpy as np
import pytest

from redalgebra import EvaluationError, RedalgebraError
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


def test_outputs_are_written_into_arrays_given_as_out():
    f = fused("safe_softmax")
    x = np.random.default_rng(3).normal(size=(4, 33)).astype(np.float32)
    want = np.exp(x - x.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    for backend in ("cpu", "cudasim"):
        y = np.full((4, 33), np.nan, np.float32)
        got = compile(f, backend)({"x": x}, out={"y": y})
        assert got["y"] is y
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-7)
    kernel = compile(f, "cpu")
    with pytest.raises(EvaluationError, match=r"out\['y'\] must be a contiguous \(4, 33\) array of float32"):
        kernel({"x": x}, out={"y": np.zeros((4, 33), np.float64)})
    with pytest.raises(EvaluationError, match="out: no output named"):
        kernel({"x": x}, out={"z": np.zeros((4, 33), np.float32)})
    with pytest.raises(EvaluationError, match="strided"):
        kernel({"x": x}, out={"y": np.zeros((4, 66), np.float32)[:, ::2]})


def test_a_device_out_array_off_a_16_byte_boundary_is_refused_by_name():
    # the kernels store 16 bytes at a time: on the GPU a contiguous slice starting 4 bytes past a boundary would fault
    from redalgebra.runtime.outputs import given_outputs

    class DeviceArray:  # what the check reads of a device array (its CUDA array interface)
        def __init__(self, address):
            self.shape = (4, 33)
            self.__cuda_array_interface__ = {"shape": (4, 33), "typestr": "<f4", "data": (address, False),
                                             "strides": None, "version": 3}
    shapes = {"y": ((4, 33), np.float32)}
    assert given_outputs({"y": DeviceArray(1 << 20)}, shapes, True)["y"].shape == (4, 33)
    with pytest.raises(EvaluationError, match=r"out\['y'\] must start on a 16-byte boundary .* 4 bytes past one"):
        given_outputs({"y": DeviceArray((1 << 20) + 4)}, shapes, True)


def test_device_arrays_that_numba_would_not_type_c_contiguous_are_recognised():
    # on real CUDA such an input is refused by name (torch views are copied on the device first): the
    # kernels' loads index rows by their length. numba's rules: a stride of 0 is a broadcast, never
    # contiguous; a dimension of size 1 may have any other stride
    from types import SimpleNamespace

    from redalgebra.runtime.compile import _c_contiguous

    def dev(shape, strides):
        return SimpleNamespace(__cuda_array_interface__={"shape": shape, "strides": strides})

    assert _c_contiguous(dev((4, 8), None), 4) and _c_contiguous(dev((4, 8), (32, 4)), 4)
    assert _c_contiguous(dev((1, 8), (999, 4)), 4)
    assert not _c_contiguous(dev((4, 8), (64, 4)), 4)  # a slice of wider rows
    assert not _c_contiguous(dev((1, 8), (0, 4)), 4) and not _c_contiguous(dev((4, 8), (0, 4)), 4)  # broadcasts
    assert not _c_contiguous(dev((4, 8), (4, 16)), 4)  # a transposed view


def test_a_device_vector_param_must_be_contiguous_and_aligned_for_16_byte_loads():
    # the tensor-core kernels read a vector param's rows (attention's queries) four float32 at a time
    from redalgebra.runtime.arguments import bound_param

    class DeviceArray:  # what the call reads of a device array (its CUDA array interface)
        def __init__(self, shape, strides=None, address=1 << 20):
            self.shape = shape
            self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (address, False),
                                             "strides": strides, "version": 3}
    kernel = compile(fused("attention"), "cpu")
    q = next(p for p in kernel.fused.cascade.params if p.name == "q")
    good = DeviceArray((4, 16))
    assert bound_param(q, good, 4) is good
    spelled = DeviceArray((4, 16), (64, 4))  # C strides spelled out
    assert bound_param(q, spelled, 4) is spelled
    for bad, why in ((DeviceArray((4, 16), (128, 4)), r"strides \(128, 4\)"),  # a slice of wider rows
                     (DeviceArray((4, 16), None, (1 << 20) + 4), "strides None, address 0x100004")):
        with pytest.raises(EvaluationError, match=f"param q: a device array must be C-contiguous and start 16-byte "
                                                  f"aligned \\({why}"):
            bound_param(q, bad, 4)


def test_arguments_of_the_wrong_kind_are_named_not_raised_from_numpy_or_numba():
    # a bare array for the inputs (AttributeError), a read-only out array (numba's TypingError), a param of None
    # (silently NaN: NumPy holds None as an object, float32 makes it NaN)
    kernel = compile(fused("safe_softmax"), "cpu")
    x = np.ones((3, 7), np.float32)
    with pytest.raises(EvaluationError, match="inputs: a dict by name"):
        kernel(x)
    with pytest.raises(EvaluationError, match="params: a dict by name"):
        kernel({"x": x}, [1.0])
    read_only = np.zeros((3, 7), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(EvaluationError, match=r"out\['y'\] is read-only"):
        kernel({"x": x}, out={"y": read_only})
    scaled = compile(fused("attention"), "cpu")
    k = np.ones((2, 5, 4), np.float32)
    with pytest.raises(EvaluationError, match="param scale: a number or an array of them, got None"):
        scaled({"k": k, "v": k}, {"q": np.ones((2, 4), np.float32), "scale": None})


def test_two_outputs_given_in_one_buffer_are_refused_not_written_over_each_other():
    # out={'y': b, 'w': b} returned y holding w's values, silently
    from redalgebra import derive, parse
    from redalgebra.runtime.outputs import shared_outputs

    kernel = compile(derive(parse("input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\nout y = m\n"
                                  "out w = log(s)")), "cpu")
    x = np.random.default_rng(0).normal(size=(3, 7)).astype(np.float32)
    b = np.zeros(4, np.float32)
    for y, w in ((b[:3], b[:3]), (b[:3], b[1:])):
        with pytest.raises(EvaluationError, match=r"out\['y'\] and out\['w'\] share memory|out\['w'\] and out\['y'\]"):
            kernel({"x": x}, out={"y": y, "w": w})
    y, w = np.zeros(3, np.float32), np.zeros(3, np.float32)
    got = kernel({"x": x}, out={"y": y, "w": w})
    assert got["y"] is y and got["w"] is w and np.allclose(y, x.max(1)) and not np.allclose(w, y)
    # (address, bytes an item, shape, strides in items or None where contiguous)
    shared_outputs({"a": (100, 4, (3,), None), "b": (112, 4, (1,), None), "c": (0, 4, (0,), None)})  # adjacent; empty
    with pytest.raises(EvaluationError, match="share memory"):
        shared_outputs({"a": (100, 4, (3,), None), "b": (108, 4, (1,), None)})


def test_strided_outputs_are_refused_exactly_where_their_elements_meet(monkeypatch):
    # the tensor path takes strided out= views; a contiguous tensor and a column of it were never compared
    from redalgebra.runtime import outputs

    buffer = (1 << 40, 4, (5, 2), None)  # 5 × 2 float32s; its columns are (at, 4, (5,), (2,)), at + 4 the second
    first, second = (1 << 40, 4, (5,), (2,)), ((1 << 40) + 4, 4, (5,), (2,))
    outputs.shared_outputs({"y": first, "w": second})  # interleaved: apart, though their spans overlap
    outputs.shared_outputs({"y": (1 << 40, 4, (2, 3), (6, 2)), "w": ((1 << 40) + 4, 4, (2, 3), (6, 2))})
    for a, b in ((buffer, second), (first, first), ((1 << 40, 2, (4,), (3,)), ((1 << 40) + 12, 2, (1,), None)),
                 ((1 << 40, 4, (2, 3), (6, 2)), ((1 << 40) + 24, 4, (3,), (2,)))):
        with pytest.raises(EvaluationError, match="share memory"):
            outputs.shared_outputs({"y": a, "w": b})
    # views apart that only a search shows apart: taken; where the search may not run that far, refused, saying so
    apart = {"y": (1 << 40, 1, (5, 2), (32, 9)), "w": ((1 << 40) + 85, 1, (6, 5), (29, 25))}
    outputs.shared_outputs(apart)
    monkeypatch.setattr(outputs, "_MAX_WORK", 1)
    with pytest.raises(EvaluationError, match="may share memory"):
        outputs.shared_outputs(apart)


def test_the_reference_reads_bfloat16_and_e4m3_values_as_the_kernels_do():
    # a query given as bfloat16 (as the tensor-core kernels take it) was a TypeError from NumPy inside evaluate
    from redalgebra import as_bfloat16, as_e4m3, evaluate
    from redalgebra.runtime.formats import to_float

    rng = np.random.default_rng(1)
    k, v = rng.normal(size=(2, 3, 6, 8))
    q, scale = rng.normal(size=(3, 8)), 0.3
    c = fused("attention").cascade
    encoded = evaluate(c, {"k": as_e4m3(k), "v": v}, {"q": as_bfloat16(q), "scale": scale})["y"]
    decoded = evaluate(c, {"k": to_float(as_e4m3(k)), "v": v}, {"q": to_float(as_bfloat16(q)), "scale": scale})["y"]
    assert np.array_equal(encoded, decoded) and not np.array_equal(q, to_float(as_bfloat16(q)))


def test_a_name_the_cascade_lacks_is_refused_after_a_good_call_too():
    """A misspelt input or param is named, also where a good call of the same shapes has planned the signature
    (whose key holds only the cascade's own names)."""
    k = compile(fused("safe_softmax"), "cpu")
    k({"x": X})
    with pytest.raises(EvaluationError, match=r"unknown input 'y'"):
        k({"x": X, "y": X})
    with pytest.raises(EvaluationError, match=r"unknown param 'scale'"):
        k({"x": X}, {"scale": 2.0})
    assert k.layout({"x": X})  # (the layout a good call takes is unchanged)
    with pytest.raises(EvaluationError, match=r"unknown input 'y'"):
        k.layout({"x": X, "y": X})


def test_a_cascade_without_outputs_is_refused_not_run_for_nothing():
    # it compiled and returned {}, silently (evaluate returns its reductions); a top-k's positions are an output anyway
    from redalgebra import derive, parse

    with pytest.raises(RedalgebraError, match="has no out line.*out y = s"):
        compile(derive(parse("input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))")), "cpu")
    got = compile(derive(parse("input x\nreduce t = topk(2, x)")), "cpu")({"x": np.arange(10, dtype=np.float32).reshape(2, 5)})
    np.testing.assert_array_equal(got["t.index"], [[4, 3], [4, 3]])


def test_an_input_broadcast_over_the_rows_is_one_shared_row_only_where_the_call_stays_the_same():
    from redalgebra import derive, parse
    from redalgebra.runtime.call_layout import broadcast_rows

    kernel = compile(derive(parse("input x\ninput w\nreduce s = sum(x * w)\nout y = s")), "cpu")
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(4, 8)).astype(np.float32), rng.normal(size=(1, 8)).astype(np.float32)
    np.testing.assert_allclose(kernel({"x": x, "w": np.broadcast_to(w, (4, 8))})["y"], (x * w).sum(1), rtol=1e-5)
    with pytest.raises(EvaluationError, match="w has 3 rows, which does not divide 4"):  # (a shape error stays one)
        kernel({"x": x, "w": np.broadcast_to(w, (3, 8))})
    k, v = np.zeros((1, 5, 8), np.float32), np.zeros((16, 5, 8), np.float32)
    wide = np.broadcast_to(k, (16, 5, 8))
    # a broadcast key beside per-row values stays as given (the vector inputs shared alike: mma's rule)
    assert broadcast_rows({"k": wide, "v": v})["k"] is wide
    got = broadcast_rows({"k": wide, "v": k, "q": np.zeros((16, 8), np.float32)})
    assert got["k"].shape == (1, 5, 8)
    assert broadcast_rows({"x": np.broadcast_to(w, (4, 8))})["x"].shape == (4, 8)  # (no other input holds the rows)


@pytest.mark.parametrize("backend", ["cpu", "cudasim"])
def test_a_reciprocal_square_root_of_negative_zero_is_plus_infinity(backend):
    # x ** -0.5 was printed 1 / sqrt(x), and sqrt(-0.0) is -0.0: -inf, where pow(-0.0, -0.5) (the reference) is +inf
    from redalgebra import derive, evaluate, parse

    c = parse("input x >= 0\nreduce s = sum(x ** -0.5)\nout y = s")
    x = np.array([[-0.0, 1.0], [0.0, 4.0], [-0.0, -0.0]], np.float32)
    want = evaluate(c, {"x": x})["y"]
    assert (want == np.inf).all()
    np.testing.assert_array_equal(compile(derive(c), backend)({"x": x})["y"], want)

