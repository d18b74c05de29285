"""A NaN in the input is propagated as the float64 reference propagates it, wherever it sits in the row."""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import redalgebra as ra
from redalgebra.runtime.formats import to_float
from tests.catalogue import fused

MAX_ONLY = "input x\nreduce m = max(x)\nreduce n = min(x)\nout y = m - n\n"
FP8 = "input x\nreduce a = max(abs(x))\nout q = fp8(x * 448 / max(a, 1e-12))\nout s = max(a, 1e-12) / 448\n"


@pytest.mark.parametrize("backend,strategy", [("cpu", "row"), ("cudasim", "rows"), ("cudasim", "tile")])
@pytest.mark.parametrize("cascade", ["safe_softmax", "logsumexp", "max_only", "fp8"])
def test_a_nan_anywhere_in_a_row_gives_the_references_nans(backend, strategy, cascade):
    f = {"max_only": lambda: ra.derive(ra.parse(MAX_ONLY)), "fp8": lambda: ra.derive(ra.parse(FP8))}.get(
        cascade, lambda: fused(cascade))()
    kernel = ra.compile(f, backend, strategy)
    for pos in (0, 17, 36):  # first (the running max still -inf), middle, last
        x = np.random.default_rng(pos).normal(size=(3, 37)).astype(np.float32)
        x[1, pos] = np.nan
        got = kernel({"x": x})
        want = ra.evaluate(f.cascade, {"x": x.astype(np.float64)}, {})
        for name, value in got.items():
            g, w = to_float(value).astype(np.float64), np.asarray(want[name])
            assert np.array_equal(np.isnan(g), np.isnan(w)), (pos, name, g, w)
            assert np.isnan(w[1]).all() and not np.isnan(w[[0, 2]]).any()  # the row with the NaN, only it


ABSMAX_MAX = "input x\nreduce a = max(abs(x))\nreduce b = max(x * a)\nreduce s = sum(x * a)\nout y = b\nout z = s\n"


@pytest.mark.parametrize("backend,strategy", [("cpu", "row"), ("cudasim", "tile"), ("cudasim", "rows")])
def test_a_factor_that_is_zero_on_a_row_of_zeros_gives_the_references_zero(backend, strategy):
    # a = max|x| is 0 on the zero row: b = max(x·a) and s = sum(x·a) are 0 there (were NaN: a_n/a_a = 0/0)
    f = ra.derive(ra.parse(ABSMAX_MAX))
    x = np.random.default_rng(0).normal(size=(3, 37)).astype(np.float32)
    x[1] = 0.0
    got = ra.compile(f, backend, strategy)({"x": x})
    want = ra.evaluate(f.source, {"x": x.astype(np.float64)}, {})
    for name in ("y", "z"):
        np.testing.assert_allclose(to_float(got[name]).ravel(), np.ravel(want[name]), rtol=1e-5, atol=1e-6)
    assert to_float(got["y"]).ravel()[1] == 0.0


UNDERFLOW = "input x\nreduce s = sum(exp(x))\nreduce t = sum(x / s)\nout y = t * s\n"


@pytest.mark.parametrize("backend,strategy", [("cpu", "row"), ("cudasim", "tile")])
def test_a_sum_that_float32_rounds_to_zero_is_not_taken_for_an_empty_row(backend, strategy):
    # exp(-110) is 0 in float32: s is 0 on a row of 5 elements; the reference (float64) gives y = -550.
    # float32 cannot hold s, so the kernel cannot give -550 either, but it must not give a silent 0 (the
    # emptiness test on s == 0 did): an element count says the row is not empty, and y is NaN, as the
    # unfused float32 computation gives
    f = ra.derive(ra.parse(UNDERFLOW))
    assert "count" in {r.name for r in f.cascade.reductions} and f.source is not None
    x = np.full((2, 5), -110.0, np.float32)
    x[0] = np.linspace(0, 1, 5)  # an ordinary row beside it: y = sum(x) = 2.5
    got = to_float(ra.compile(f, backend, strategy)({"x": x})["y"]).ravel()
    want = np.ravel(ra.evaluate(f.source, {"x": x.astype(np.float64)}, {})["y"])
    assert np.isclose(got[0], want[0], rtol=1e-5) and want[1] == pytest.approx(-550.0)
    assert np.isnan(got[1])


TOPK = "input x\nreduce t = topk(4, x)\nout w = t\nout z = t / sum(t)\n"


@pytest.mark.parametrize("backend,strategy,group", [("cpu", "row", None), ("cpu", "levels", None),
                                                    ("cudasim", "rows", 8), ("cudasim", "tile", None),
                                                    ("cudasim", "lanes", None)])
def test_a_top_k_ranks_nan_above_every_number_on_every_back_end(backend, strategy, group):
    # the reference's order (NumPy's argmax, PyTorch's topk): NaNs first, by index, then the numbers; a masked
    # element or a row shorter than k is -inf with index -1. Every kernel selects by the same order: before,
    # the kernels never selected a NaN (index -1 and -inf where the reference has the NaN's index and NaN)
    f = ra.derive(ra.parse(TOPK))
    kernel = ra.compile(f, backend, strategy, **({"group": group, "threads": 32} if group else {}))
    x = np.random.default_rng(1).normal(size=(6, 13)).astype(np.float32)
    x[0, [2, 9]] = np.nan  # two NaNs, then numbers
    x[1, :11] = np.nan  # more NaNs than k
    x[2] = np.nan  # all NaN
    x[3, 12] = np.nan  # the last element
    x[4, [0, 1, 5]] = [np.nan, np.inf, np.inf]  # NaN above +inf
    keep = np.ones(x.shape, bool)
    keep[5, 3:] = False  # three elements kept: a masked slot below the numbers, a NaN among them
    x[5, [0, 7]] = np.nan
    got = kernel({"x": x}, keep=keep)
    want = ra.evaluate(f.cascade, {"x": x.astype(np.float64)}, {}, keep=keep)
    np.testing.assert_array_equal(got["t.index"], want["t.index"])
    for name in ("w", "z"):
        g, w = to_float(got[name]).astype(np.float64), np.asarray(want[name]).reshape(np.shape(got[name]))
        assert np.array_equal(np.isnan(g), np.isnan(w)), (name, g, w)
        np.testing.assert_allclose(g[~np.isnan(w)], w[~np.isnan(w)], rtol=1e-5)


EXP_TOPK = "input x\nreduce m = max(x)\nreduce t = topk(4, exp(x - m))\nout w = t\n"


@pytest.mark.parametrize("backend,strategy", [("cpu", "row"), ("cudasim", "tile"), ("cudasim", "lanes"),
                                              ("cudasim", "block")])
def test_a_corrected_top_k_keeps_its_empty_slots_at_minus_infinity_where_the_max_is_infinite_or_nan(backend,
                                                                                                       strategy):
    # the one-pass forms (warned: their corrections do not exist on such rows) correct the list by exp(m_old - m_new),
    # 0 or NaN where the max reaches +inf or NaN: an empty slot (-inf, -1) became NaN beside its index -1, and a
    # slot's NaN made its element drop out (index -1 where the reference has it). Empty slots stay -inf now
    import warnings

    f = ra.derive(ra.parse(EXP_TOPK))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ra.errors.ExactnessHint)
        kernel = ra.compile(f, backend, strategy)
    x = np.array([[0, 1], [np.inf, 2], [np.inf, np.inf], [np.nan, 1]], np.float32)
    got = kernel({"x": x})
    want = ra.evaluate(f, {"x": x.astype(np.float64)})
    np.testing.assert_array_equal(got["t.index"], want["t.index"])
    w = to_float(got["w"])
    assert np.array_equal(w[got["t.index"] < 0], np.full(int((got["t.index"] < 0).sum()), -np.inf))
    assert np.array_equal(np.isnan(w[:, :1]), np.isnan(np.asarray(want["w"])[:, :1]))


def test_masked_experts_are_ranked_at_zero_by_auto_and_named_in_the_one_pass_forms_warning():
    # fewer finite logits than k: the reference ranks the -inf ones at softmax value 0 (lower index first); a one-pass
    # form skips a segment of them as empty, keeps -inf among its top k, and the router's weights come out NaN — the
    # warning of a one-pass strategy says so, and auto (the level order on the CPU) is exact
    c = ra.workloads.get("moe_routing").cascade
    f = ra.derive(c)
    g = np.full((2, 16), -np.inf, np.float32)
    g[0, :5] = [0.3, -1.2, 0.8, 0.1, -0.4]
    g[1, 3] = 2.0  # one live expert, the rest masked
    want = ra.evaluate(c, {"g": g.astype(np.float64)})
    got = ra.compile(f, "cpu")({"g": g})
    np.testing.assert_array_equal(got["t.index"], want["t.index"])
    np.testing.assert_allclose(got["w"], want["w"], rtol=1e-6, atol=0)
    with pytest.warns(ra.errors.ExactnessHint, match="fewer finite elements than k"):
        ra.compile(f, "cpu", "row")


_SPECIAL = st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 2.0, -1.0])


@settings(max_examples=25, deadline=None)
@given(data=st.data(), k=st.sampled_from([2, 5]), rows=st.integers(1, 6), length=st.integers(1, 12))  # (two k: kernels compiled)
def test_a_top_k_of_special_values_selects_what_the_reference_selects(data, k, rows, length):
    # NaN, ±inf, signed zeros and ties in any mix, a mask: the CPU's row and levels kernels and the simulator's rows
    # kernel in groups of 8 lanes (four rows a warp, so a warp mixes rows with and without NaN) against the reference
    values = data.draw(st.lists(st.one_of(st.just(np.nan), _SPECIAL, st.floats(-4, 4, width=32)),
                                min_size=rows * length, max_size=rows * length))  # (NaN a third of the values and more)
    x = np.array(values, np.float32).reshape(rows, length)
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=rows * length, max_size=rows * length))).reshape(x.shape)
    f = _topk_of(k)
    want = ra.evaluate(f.cascade, {"x": x.astype(np.float64)}, {}, keep=keep)
    for kernel in _topk_kernels(k):
        got = kernel({"x": x}, keep=keep)
        np.testing.assert_array_equal(got["t.index"], want["t.index"], err_msg=kernel.strategy)
        np.testing.assert_array_equal(to_float(got["w"]), np.asarray(want["w"], np.float32).reshape(got["w"].shape),
                                      err_msg=kernel.strategy)


@functools.lru_cache(maxsize=None)
def _topk_of(k: int):
    return ra.derive(ra.parse(f"input x\nreduce t = topk({k}, x)\nout w = t\n"))


@functools.lru_cache(maxsize=None)
def _topk_kernels(k: int) -> tuple:
    f = _topk_of(k)
    return (ra.compile(f, "cpu", "row"), ra.compile(f, "cpu", "levels"),
            ra.compile(f, "cudasim", "rows", group=8, threads=32))


def test_the_simulator_rounds_a_float32_exp_to_float32_as_the_gpu_does():
    # math.exp returns float64: a simulated register held exp(-136) apart from the 0 it is in float32 while the
    # top-k's lists held float32, so the resident row's selection ranked the underflowed values neither by index nor
    # by value, and disagreed with the same kernel over the row in passes. In float32 they are all 0: by index
    f = ra.derive(ra.parse("input g\nreduce m = max(g)\nreduce u = topk(21, exp(g - m))\nout v = u\n"))
    x = np.zeros((1, 33), np.float32)
    x[0, np.r_[0:5, 6:33]] = -np.linspace(136, 320, 32, dtype=np.float32)[np.random.default_rng(0).permutation(32)]
    got = []
    for tile in (1, 2):
        kernel = ra.compile(f, "cudasim", "rows", group=8, threads=32, tile=tile)
        assert kernel._layout({"g": x}, {}, None)[0].resident == (tile == 2)
        got.append(kernel({"g": x})["u.index"][0])
    np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_array_equal(got[1], [5, *range(5), *range(6, 21)])
