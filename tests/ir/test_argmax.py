"""``argmax(EXPR)``: the top-1 of EXPR, whose index is the result ``NAME.index`` (ties to the lower index)."""

import numpy as np
import pytest

from redalgebra import derive, evaluate, parse
from redalgebra.ir.printer import to_text
from redalgebra.ir.monoid import topk
from redalgebra.runtime import compile

GREEDY = """\
input x
reduce m = max(x)
reduce s = sum(exp(x - m))
reduce i = argmax(x)
out logp = -log(s)
"""


def test_argmax_is_the_top_one_and_prints_back_as_such():
    c = parse(GREEDY)
    r = next(r for r in c.reductions if r.name == "i")
    assert r.monoid == topk(1)
    assert "reduce i = topk(1, x)" in to_text(c)


def test_argmax_stays_a_name_outside_reduce():
    c = parse("input x\nparam argmax\nreduce s = sum(x * argmax)\nout y = s\n")
    assert [p.name for p in c.params] == ["argmax"]


def test_the_index_is_numpys_argmax_with_ties_to_the_lower_index():
    x = np.array([[1.0, 3.0, 3.0, 2.0], [-1.0, -5.0, -1.0, -9.0]])
    out = evaluate(parse(GREEDY), {"x": x})
    assert out["i.index"][:, 0].tolist() == [1, 0] == np.argmax(x, axis=1).tolist()


@pytest.mark.parametrize("backend", ["cpu", "cudasim"])
def test_kernels_return_the_index(backend):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 77)).astype(np.float32)
    keep = np.ones((4, 77), bool)
    keep[1, np.argmax(x[1])] = False  # the largest masked: the next one wins
    got = compile(derive(parse(GREEDY)), backend)({"x": x}, {}, keep)
    want = np.argmax(np.where(keep, x, -np.inf), axis=1)
    assert np.asarray(got["i.index"])[:, 0].tolist() == want.tolist()


def test_an_argmax_cannot_be_read_as_a_value_it_is_not():
    # NAME would be the largest value, not the index a reader of `argmax` expects: refused, with the way to each
    from redalgebra.errors import CascadeSyntaxError

    with pytest.raises(CascadeSyntaxError, match=r"i is an argmax: its result is the index i.index.*max\(\.\.\.\)"):
        parse("input x\nreduce i = argmax(x)\nout y = i + 1\n")


@pytest.mark.parametrize("text", [
    "input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\nreduce i = argmax(exp(x - m) / s)\n",
    "input x\nreduce m = max(x)\nreduce s = sum(exp(x - m))\nreduce t = topk(3, exp(x - m) / s)\n",
])
@pytest.mark.parametrize("backend", ["cpu", "cudasim"])
def test_a_selection_of_corrected_values_keeps_ties_to_the_lower_index_under_auto(text, backend):
    # the one-pass form multiplies the kept values by s_old / s_new at every element, which rounds them apart: on rows
    # of small integers (many equal elements) the CPU's one-pass kernel ranked all but one of six rows by that rounding
    # (the last equal element first); auto takes the level order on the CPU and 'rows' (a resident row) on the GPU
    f = derive(parse(text))
    name = f.corrected_selections[0]
    assert any(g.startswith(f"{name}: the one-pass forms correct the kept values") for g in f.guards)
    x = np.random.default_rng(0).integers(-3, 3, size=(6, 40)).astype(np.float32)
    want = evaluate(parse(text), {"x": x})
    kernel = compile(f, backend)
    got = kernel({"x": x})
    assert np.array_equal(np.asarray(got[f"{name}.index"]), want[f"{name}.index"])
    assert backend != "cpu" or kernel.strategy == "levels"
