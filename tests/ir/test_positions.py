"""``pos``, integer params, comparisons and ``where``: parsing, errors, printing and the reference."""

import numpy as np
import pytest
import sympy as sp

from redalgebra import CascadeError, CascadeSyntaxError, EvaluationError, evaluate, parse, workloads
from redalgebra.ir import POS, CascadeBuilder, Param, build_graph, indicator, to_text, where
from redalgebra.workloads import masks

CE = workloads.get("cross_entropy").text
ALIBI = workloads.get("alibi_attention").text


# -- parsing ---------------------------------------------------------------------------------------

def test_pos_is_the_reserved_integer_symbol_and_int_params_are_integer():
    c = parse(CE)
    assert c["label"] == Param("label", None, None, True) and c["label"].symbol.is_integer
    assert POS.is_integer and POS.is_nonnegative
    t = c["t"].body
    x, label = c.symbols["x"], c.symbols["label"]
    assert t == x * sp.Piecewise((1, sp.Eq(POS, label)), (0, True))
    assert "pos" not in build_graph(c).nodes  # implicit, like the axis itself
    n = parse("input x\nparam n int > 0\nreduce c = sum(x * (pos < n))")["n"]
    assert n.integer and n.sign == ">0" and n.symbol.is_positive and n.symbol.is_integer


def test_an_int_param_bound_that_admits_no_value_a_call_takes_is_refused_where_it_is_written():
    # a call refuses an int param past 2**24 in magnitude (float32 holds integers exactly up to it): 'int > 1e30' admits
    # none, and `redalgebra check` failed with NumPy's OverflowError building a value inside it
    import numpy as np
    import pytest

    from redalgebra import CascadeSyntaxError, compile, derive

    for bound in ("> 1e30", ">= 16777216", "< -16777216"):
        with pytest.raises(CascadeSyntaxError, match="admits none of them"):
            parse(f"input x\nparam n int {bound}\nreduce c = sum(x * (pos < n))")
    parse("input x\nparam n int > 16777215\nreduce c = sum(x * (pos < n))")  # (2**24 itself is a value)
    kernel = compile(derive(parse("input x\nparam n int\nreduce c = sum(x * (pos < n))\nout y = c")), "cpu")
    with pytest.raises(Exception, match="got -16777217"):  # the value refused, with its sign
        kernel({"x": np.ones((2, 4), np.float32)}, {"n": np.array([3, -16777217])})


def test_comparisons_bind_looser_than_arithmetic_and_where_picks_a_value():
    c = parse("input x\nparam q int\nlet a = x + 1 < 2 * x\nlet b = where(pos <= q, x, -inf)\n"
              "let d = where(x, 1, 2)\nreduce r = sum(a + b + d)")
    x, q = c.symbols["x"], c.symbols["q"]
    assert c["a"].expr == indicator(x + 1 < 2 * x)
    assert c["b"].expr == sp.Piecewise((x, POS <= q), (-sp.oo, True))
    assert c["d"].expr == sp.Piecewise((1, sp.Ne(x, 0)), (2, True))  # a number as a condition: != 0


def test_and_or_not_combine_conditions():
    c = parse("input x\nparam q int\nparam w int\nlet s = where(pos <= q and pos > q - w, x, -inf)\n"
              "let u = (x > 1 or not x > -1)\nreduce r = sum(s + u)")
    x, q, w = c.symbols["x"], c.symbols["q"], c.symbols["w"]
    assert c["s"].expr == where(sp.And(POS <= q, POS > q - w), x, -sp.oo)
    assert c["u"].expr == indicator(sp.Or(x > 1, x <= -1))


def test_builder_has_pos_and_integer_params():
    b = CascadeBuilder("ce")
    x = b.input("x")
    label = b.param("label", integer=True)
    m = b.reduce("m", "max", x)
    s = b.reduce("s", "sum", sp.exp(x - m))
    t = b.reduce("t", "sum", x * indicator(sp.Eq(b.pos, label)))
    b.out("loss", sp.log(s) + m - t)
    assert b.build() == parse(CE, "ce")


@pytest.mark.parametrize("text", [CE, ALIBI,
                                  "input x\nparam q int >= 0\nlet s = where(pos <= q and pos > q - 3 or x > 1, x, -inf)\n"
                                  "reduce m = max(s)\nreduce l = sum(exp(s - m) * (pos != q) + (x == 2))\n"
                                  "out y = where(x > m, l, inf)\n"])
def test_the_printer_writes_what_the_parser_reads(text):
    c = parse(text)
    assert parse(to_text(c)) == c


def test_printed_text_keeps_the_spelling():
    text = to_text(parse(ALIBI))
    assert "param qpos int\n" in text and "where(pos <= qpos, s, -inf)" in text
    assert "param n int > 0\n" in to_text(parse("input x\nparam n int > 0\nreduce c = sum(x * (pos < n))"))


@pytest.mark.parametrize("text, line, column, fragment", [
    ("input pos", 1, 7, "'pos' is reserved"),
    ("input x\nlet pos = x\nreduce m = max(x)", 2, 5, "'pos' is reserved"),
    ("input x\nparam pos int\nreduce m = max(x)", 2, 7, "'pos' is reserved"),
    ("input x\nreduce pos = max(x)", 2, 8, "'pos' is reserved"),
    ("input inf", 1, 7, "reserved word"),
    ("input x\nparam int\nreduce m = max(x)", 2, 7, "reserved word"),
    ("input where", 1, 7, "reserved word"),
    ("input and", 1, 7, "reserved word"),
    ("input x\nparam q[d] int\nreduce m = max(x)", 2, 12, "an integer param is one integer per row"),
    ("input x\nparam n int > m\nreduce m = max(x)", 2, 15, "bound is a number"),
    ("input x\nreduce m = max(x < 1 < 2)", 2, 22, "chained comparisons"),
    ("input x\nreduce m = max(where(x > 0, x))", 2, 16, "where(cond, a, b) takes"),
    ("input x\nreduce m = max(x ! 2)", 2, 18, "unexpected character '!'"),
    ("input x\nreduce m = max(x = 2)", 2, 18, "expected ',' or ')'"),
    ("input x\nreduce m = max(x + inf - inf)", 2, 8, "undefined"),
    ("input x[d]\nreduce m = sum(where(x > 0, 1, 0))", 2, 8, "between two scalars"),
    ("input x[d]\ninput y[e]\nreduce m = sum(where(pos < 3, x, y))", 3, 8, "vectors of different sizes"),
    ("param n int\nreduce c = sum(pos < n)", 2, 8, "declare an input"),
])
def test_errors_name_line_and_column(text, line, column, fragment):
    with pytest.raises(CascadeSyntaxError) as info:
        parse(text)
    assert fragment in info.value.message
    assert (info.value.line, info.value.column) == (line, column)


def test_pos_alone_varies_along_the_axis():
    c = parse("input x\nparam n int\nreduce c = sum(pos < n)")  # no input in the body: pos varies
    r = evaluate(c, {"x": np.zeros((2, 6))}, {"n": [2, 9]})
    np.testing.assert_array_equal(r["c"], [2.0, 6.0])


def test_ir_level_misuse_is_refused():
    x = sp.Symbol("x", real=True)
    with pytest.raises(CascadeError, match="reserved position symbol"):
        b = CascadeBuilder()
        b.input("x")
        b.reduce("r", "sum", x * sp.Symbol("pos", real=True))
    with pytest.raises(CascadeError, match="a condition, not a number"):
        b = CascadeBuilder()
        b.input("x")
        b.reduce("r", "sum", x > 1)
    with pytest.raises(CascadeError, match="integer param is one integer per row"):
        Param("q", "d", None, True)


# -- the reference ---------------------------------------------------------------------------------

def test_cross_entropy_matches_a_numpy_oracle_without_a_one_hot_row(rng):
    rows, length = 7, 23
    x = rng.normal(size=(rows, length)) * 5
    label = rng.integers(0, length, size=rows)
    r = evaluate(parse(CE), {"x": x}, {"label": label})
    lse = np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1)
    np.testing.assert_allclose(r["loss"], lse - x[np.arange(rows), label], rtol=0, atol=1e-12)
    np.testing.assert_allclose(r["t"], x[np.arange(rows), label], rtol=0, atol=0)
    # a label given as one int for every row, or out of range (no logit picked: t = 0)
    r = evaluate(parse(CE), {"x": x}, {"label": 3})
    np.testing.assert_array_equal(r["t"], x[:, 3])
    assert (evaluate(parse(CE), {"x": x}, {"label": length})["t"] == 0).all()


def test_alibi_attention_matches_a_numpy_oracle_and_the_keep_mask(rng):
    heads, queries, keys, d = 2, 4, 9, 5
    rows = heads * queries
    k, v, q = rng.normal(size=(rows, keys, d)), rng.normal(size=(rows, keys, d)), rng.normal(size=(rows, d))
    qpos, slope = masks.query_positions(queries, keys, heads), masks.alibi_slopes(heads, queries)
    r = evaluate(parse(ALIBI), {"k": k, "v": v}, {"q": q, "scale": 0.3, "slope": slope, "qpos": qpos})
    j = np.arange(keys)
    s = np.einsum("rld,rd->rl", k, q) * 0.3 - slope[:, None] * (qpos[:, None] - j[None, :])
    s = np.where(j[None, :] <= qpos[:, None], s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(r["y"], np.einsum("rl,rld->rd", p / p.sum(1, keepdims=True), v), rtol=1e-12)
    # the mask written with pos is the mask given as keep
    bias_only = evaluate(parse(ALIBI.replace("let sc = where(pos <= qpos, s, -inf)", "let sc = s")),
                         {"k": k, "v": v}, {"q": q, "scale": 0.3, "slope": slope, "qpos": qpos},
                         keep=masks.causal(queries, keys, heads))
    np.testing.assert_allclose(r["y"], bias_only["y"], rtol=1e-12)


def test_comparisons_are_one_and_zero_and_where_chooses(rng):
    c = parse("input x\nparam q int\nreduce a = sum(x >= 0)\nreduce b = sum((pos == q) * 10 + (pos != q))\n"
              "reduce w = max(where(pos <= q, x, -inf))\nout p = pos * 2 + (x > 0)")
    x = rng.normal(size=(3, 8))
    q = np.array([0, 4, -1])
    r = evaluate(c, {"x": x}, {"q": q})
    np.testing.assert_array_equal(r["a"], (x >= 0).sum(1))
    np.testing.assert_array_equal(r["b"], [17, 17, 8])
    np.testing.assert_array_equal(r["w"], [x[0, 0], x[1, :5].max(), -np.inf])
    np.testing.assert_array_equal(r["p"], np.arange(8)[None, :] * 2 + (x > 0))
    assert r["p"].dtype == np.float64


def test_pos_is_the_index_in_the_row_and_integers_must_be_whole(rng):
    c = parse("input x\nparam n int\nreduce r = sum(pos * x)\nreduce c = sum(pos < n)")
    x = rng.normal(size=(2, 5))
    r = evaluate(c, {"x": x}, {"n": np.array([2, 3])})
    np.testing.assert_allclose(r["r"], x @ np.arange(5), rtol=1e-12)
    np.testing.assert_array_equal(r["c"], [2, 3])
    np.testing.assert_array_equal(evaluate(c, {"x": x}, {"n": np.array([2.0, 3.0])})["c"], [2, 3])  # whole floats
    with pytest.raises(EvaluationError, match="param n \\(declared int\\) needs whole numbers, got 2.5"):
        evaluate(c, {"x": x}, {"n": np.array([2.5, 3])})
    with pytest.raises(EvaluationError, match="a number, \\(rows,\\) or \\(rows, 1\\)"):
        evaluate(c, {"x": x}, {"n": np.array([1, 2, 3])})
    with pytest.raises(EvaluationError, match="too large to be exact in float32"):
        evaluate(c, {"x": x}, {"n": np.array([2**24 + 1, 3])}, dtype=np.float32)
    r32 = evaluate(c, {"x": x}, {"n": np.array([2, 3])}, dtype=np.float32)
    assert r32["r"].dtype == np.float32
