"""The level order of a multi-term sum: ``levels`` (CPU), ``unfused`` and ``rows`` over a resident row (CUDA) compute
the cascade as written (``derive.as_written``), not its partial sums, which can cancel when combined at the end; which
sums do so (``FusedCascade.combined_late``), and the CPU's ``auto`` taking the level order for them."""

import numpy as np
import pytest

from redalgebra import parse
from redalgebra.derive import derive
from redalgebra.ir import evaluate
from redalgebra.workloads.catalogue import COVARIANCE, LAYERNORM_GEMM, SOFTMAX_ENTROPY, VARIANCE_TWO_PASS


#: a term centred alone (sum((x - mean) / (3x + 1)**2)) leaves sum(x**2 / (3x + 1)**2) and mean**2 * sum(1 / (3x + 1)**2)
#: to cancel: at an offset of 1e4 and a spread of 1 the one-pass form is some 90 times the result off in float32
LATE = "input x\nreduce r0 = mean(x)\nreduce s = sum((x - r0)**2 / (3*x + 1)**2)\nout y = s\n"


@pytest.mark.parametrize("text,late", [(LATE, ("s",)), (SOFTMAX_ENTROPY, ("t",)), (VARIANCE_TWO_PASS, ()),
                                       (LAYERNORM_GEMM, ()), (COVARIANCE, ()),
                                       # r0 · (sum(x²) - r0 · sum(w)): the dependency factored out of the difference
                                       ("input x\ninput w\nreduce r0 = mean(x)\nreduce s = sum(x*x*r0 - r0*r0*w)\n"
                                        "out y = s\n", ("s",))])
def test_partial_sums_that_cancel_at_the_end_are_named(text, late):
    # the variance's power sums are centred (Chan) and its remaining part factored to s**2 (h - count)**2 / ..., 0
    # when h is the count; layernorm's product is centred in x; the entropy's sum(x exp(x - m)) - m sum(exp(x - m))
    # and LATE's combination subtract large partial sums
    assert derive(parse(text)).combined_late == late


def test_the_level_order_sums_a_multi_term_reduction_as_written_and_auto_takes_it_where_it_would_cancel():
    pytest.importorskip("numba")
    from redalgebra.runtime import compile as compile_kernel

    f = derive(parse(LATE))
    x = (1e4 + np.random.default_rng(0).standard_normal((3, 500))).astype(np.float32)
    xd = x.astype(np.float64)
    want = ((xd - xd.mean(1, keepdims=True)) ** 2 / (3 * xd + 1) ** 2).sum(1)
    auto = compile_kernel(f, "cpu")
    for kernel in (auto, compile_kernel(f, "cpu", "levels")):
        got = kernel({"x": x}, {})["y"]
        # (the mean's float32 rounding, 1e4 · 2^-24 against deviations of 1, moves each square by about 1e-4)
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-3)
    assert auto.strategy == "levels"
    # the level order reads the cascade as written: one pass for the mean's sum and count, one for s, no partial sums
    source = auto.source(auto.spec_for(3, 500, {"x": "float32"})[1]).source
    assert "s_s_1" not in source and "s_s_2" not in source and "s_s = " in source


def test_a_product_of_powers_keeps_its_route_in_the_level_order():
    pytest.importorskip("numba")
    from redalgebra.runtime import compile as compile_kernel

    # prod(x ** m) as written is about 2.5^(2.9 · 40): past float32's range, where exp(m · sum(log x)) is not; the
    # output takes its 1000th root. Beside LATE's sum, which sends the CPU's auto to the level order
    f = derive(parse("input x > 0\nreduce m = max(x)\nreduce p = prod(x ** m)\nreduce r0 = mean(x)\n"
                     "reduce s = sum((x - r0)**2 / (3*x + 1)**2)\nout y = p ** (1/1000)\nout z = s\n"))
    x = (2 + np.random.default_rng(0).random((2, 40))).astype(np.float32)
    want = evaluate(f.source, {"x": x.astype(np.float64)}, {})["y"]
    kernel = compile_kernel(f, "cpu")
    assert kernel.strategy == "levels"
    np.testing.assert_allclose(kernel({"x": x}, {})["y"], want, rtol=1e-4)


def test_a_vector_sum_centred_alone_has_no_vector_temporary():
    pytest.importorskip("numba")
    from redalgebra.runtime import compile as compile_kernel

    # sum((x - mean) · k / (3x + 1)) with k a vector: k / (3x + 1) is both the centred sum's rest and a term; SymPy's
    # common subexpressions named it, a vector, as one scalar temporary (the row kernel refused: "the vector k is
    # used where a scalar is needed")
    f = derive(parse("input x\ninput k[d]\nreduce r0 = mean(x)\nreduce s = sum((x - r0) * k / (3*x + 1))\n"
                     "out y = s\n"))
    assert not any(str(sym).startswith("c") and "k" in {str(a) for a in e.free_symbols} for sym, e in f.update.steps)
    rng = np.random.default_rng(0)
    x, k = rng.normal(size=(2, 10)), rng.normal(size=(2, 10, 4))
    want = (((x - x.mean(1, keepdims=True)) / (3 * x + 1))[..., None] * k).sum(1)
    got = compile_kernel(f, "cpu", "row")({"x": x.astype(np.float32), "k": k.astype(np.float32)}, {})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_the_unfused_baseline_on_cuda_sums_a_multi_term_reduction_as_written():
    pytest.importorskip("numba")
    from redalgebra.runtime import compile as compile_kernel

    x = (1e4 + np.random.default_rng(1).standard_normal((2, 100))).astype(np.float32)
    xd = x.astype(np.float64)
    want = ((xd - xd.mean(1, keepdims=True)) ** 2 / (3 * xd + 1) ** 2).sum(1)
    kernel = compile_kernel(derive(parse(LATE)), "cudasim", "unfused")
    np.testing.assert_allclose(np.asarray(kernel({"x": x}, {})["y"], np.float64), want, rtol=1e-3)


@pytest.mark.parametrize("text,rtol", [(LATE, 1e-3), (SOFTMAX_ENTROPY, 1e-6)])
def test_cudas_rows_over_a_resident_row_sum_a_multi_term_reduction_as_written(text, rtol):
    # a row held in registers has its reductions staged one at a time, each with its dependencies final: the level
    # order, built from the cascade as written. The entropy's one-pass form at logits around 1e4 was 4e-4 off (on
    # 2e-7 now); LATE's some 90 times its result
    pytest.importorskip("numba")
    from redalgebra.runtime import compile as compile_kernel

    f = derive(parse(text))
    x = (1e4 + np.random.default_rng(1).standard_normal((2, 100))).astype(np.float32)
    kernel = compile_kernel(f, "cudasim", "rows")
    assert kernel.spec_for(2, 100, {"x": "float32"})[1].staged
    got = np.ravel(kernel({"x": x}, {})[f.cascade.outputs[0].name])
    want = np.ravel(evaluate(f.source, {"x": x.astype(np.float64)}, {})[f.cascade.outputs[0].name])
    np.testing.assert_allclose(got, want, rtol=rtol)
