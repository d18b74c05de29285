"""⊗ = power: a product whose body is ``G(e) ** H(D)`` fuses as ``exp(H(D) · sum(log G))`` when ``G >= 0`` is proved.

The weighted geometric mean ``prod(x ** (w / W))`` with ``W = sum(w)`` is the example: no ⊗ of the catalogue (×, +)
distributes over a product with a correction, but powers do (``(a·b)^h = a^h · b^h`` for ``a, b >= 0``); the state
keeps the sum of logs, which does not overflow where the product of the ``G`` would.
"""

import numpy as np
import pytest

from redalgebra import analyze, derive, evaluate, parse
from redalgebra.runtime import compile

GEOMEAN = """
input x >= 0
input w >= 0
reduce W = sum(w)
reduce g = prod(x ** (w / W))
out y = g
"""



def test_a_power_body_is_found_with_its_proofs():
    r = analyze(parse(GEOMEAN))["g"]
    assert r.fusable and r.kind == "power" and r.deps == ("W",)
    assert str(r.G) == "x**w" and str(r.H) == "1/W"
    assert [p.status for p in r.proofs] == ["proved", "proved"]
    assert r.proofs[0].steps == ("w: >= 0 (declared)", "x: >= 0 (declared)")


def test_the_state_keeps_the_sum_of_logs_and_guards_the_empty_segment():
    f = derive(parse(GEOMEAN))
    text = str(f.cascade)
    # the log of x**w as w*log(x): x**w itself overflows float32 where its log does not (10**50)
    assert "reduce g_log = sum(where(w == 0, 0, w*log(x)))" in text and "exp(g_log/W)" in text
    assert any("sum of logs" in g for g in f.guards)


def test_an_unsigned_base_is_refused_with_the_declaration_to_add():
    r = analyze(parse(GEOMEAN.replace("input x >= 0", "input x")))["g"]
    assert not r.fusable and "input x >= 0" in r.reason


@pytest.mark.parametrize("backend", ["cpu", "cudasim"])
def test_kernels_match_the_reference_on_zeros_masks_and_where_the_product_overflows(backend):
    c = parse(GEOMEAN)
    rng = np.random.default_rng(4)
    rows, L = 5, 300
    x = rng.uniform(2.0, 4.0, (rows, L)).astype(np.float32)  # a product of 300 of these is 1e120: not a float32
    w = rng.uniform(0.0, 1.0, (rows, L)).astype(np.float32)
    x[1, 7] = 0.0  # a zero with weight > 0: the mean is 0
    x[2, 5], w[2, 5] = 0.0, 0.0  # 0^0 = 1: no effect
    w[3] = 0.0  # all weights 0: W = 0, the exponents 0/0: NaN, as the reference
    keep = np.ones((rows, L), bool)
    keep[4] = False  # a fully masked row: the empty product, 1
    ref = evaluate(c, {"x": x.astype(np.float64), "w": w.astype(np.float64)}, keep=keep)["y"]
    out = compile(derive(c), backend)({"x": x, "w": w}, {}, keep)["y"]
    assert np.array_equal(np.isnan(out), np.isnan(ref)) and np.isnan(ref[3])
    assert ref[1] == 0 and out[1] == 0 and ref[4] == 1 and out[4] == 1
    fin = np.isfinite(ref)
    assert np.all(np.abs(out[fin] - ref[fin]) <= 1e-5 * np.abs(ref[fin]))
    with np.errstate(over="ignore"):
        assert np.isinf(np.prod(x[0], dtype=np.float32))  # the product of the G would have overflowed


def test_an_exponent_of_params_and_a_count():
    c = parse("param p > 0\ninput x >= 0\nreduce n = sum(1)\nreduce g = prod(x ** (p / n))\nout y = g\n")
    rng = np.random.default_rng(1)
    x = rng.uniform(0.5, 2.0, (3, 40)).astype(np.float32)
    ref = evaluate(c, {"x": x.astype(np.float64)}, {"p": 2.0})["y"]
    out = compile(derive(c), "cpu")({"x": x}, {"p": np.float32(2.0)})["y"]
    np.testing.assert_allclose(out, ref, rtol=1e-5)


@pytest.mark.parametrize("backend", ["cpu", "cudasim"])
def test_large_weights_do_not_overflow_the_power_of_an_element(backend):
    # x**w is 1e50 or 1e-60 (not a float32) while every x**(w/W) is x: the state adds w*log(x), never forms x**w
    c = parse(GEOMEAN)
    x = np.array([[10.0, 10.0], [0.1, 0.1]], np.float32)
    w = np.array([[50.0, 30.0], [60.0, 10.0]], np.float32)
    ref = evaluate(c, {"x": x.astype(np.float64), "w": w.astype(np.float64)})["y"]
    out = compile(derive(c), backend)({"x": x, "w": w})["y"]
    np.testing.assert_allclose(ref, x[:, 0].astype(np.float64), rtol=1e-12)
    np.testing.assert_allclose(out, ref, rtol=1e-5)
