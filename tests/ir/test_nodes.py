import pytest
import sympy as sp

from redalgebra import Cascade, CascadeBuilder, CascadeError, parse
from redalgebra.ir import Input, Let, Param, Reduction, symbol
from redalgebra.ir.monoid import ADD, MAX


def test_builder_makes_the_same_cascade_as_the_text():
    b = CascadeBuilder("safe_softmax")
    x = b.input("x")
    m = b.reduce("m", "max", x)
    l = b.reduce("l", "sum", sp.exp(x - m))
    b.out("y", sp.exp(x - m) / l)
    text = "input x\nreduce m = max(x)\nreduce l = sum(exp(x - m))\nout y = exp(x - m) / l\n"
    assert b.build() == parse(text, "safe_softmax")


def test_builder_rejects_unknown_reducers_and_bad_statements_at_once():
    b = CascadeBuilder()
    x = b.input("x")
    with pytest.raises(CascadeError, match="unknown reducer 'average'"):
        b.reduce("m", "average", x)
    with pytest.raises(CascadeError, match="undefined name 'q'"):
        b.reduce("m", "max", x + sp.Symbol("q", real=True))


@pytest.mark.parametrize("name, why", [("x y", "is not a name"), ("", "is not a name"), ("1x", "is not a name"),
                                       ("x.index", "is not a name"), ("x\n", "is not a name"),
                                       ("max", "reserved word"), ("exp", "reserved word"), ("pos", "reserved"),
                                       ("x" * 201, "MAX_NAME_CHARS")])
def test_builder_refuses_what_the_parser_refuses_as_a_name(name, why):
    # (built without the parser, such names reached the kernels' generated source: a SyntaxError in a generated file,
    # or an error quoting a line the user never wrote)
    with pytest.raises(CascadeError, match=why):  # (at the first statement that reads it, as the builder checks)
        b = CascadeBuilder("c")
        x = b.input(name)
        b.out("y", b.reduce("m", "max", x))
        b.build()


def test_cascades_are_frozen_and_hashable():
    c = parse("input x\nreduce m = max(x)")
    with pytest.raises(AttributeError):
        c.name = "other"
    assert hash(c) == hash(parse("input x\nreduce m = max(x)"))


def test_cycle_is_reported_with_its_path():
    x, a, b = symbol("x"), symbol("a"), symbol("b")
    with pytest.raises(CascadeError, match=r"cyclic dependency (a -> b -> a|b -> a -> b)"):
        Cascade((Input("x"), Reduction("a", MAX, x + b), Reduction("b", ADD, x + a)))


def test_forward_reference_is_reported():
    x, a = symbol("x"), symbol("a")
    with pytest.raises(CascadeError, match="b uses a before it is defined"):
        Cascade((Input("x"), Reduction("b", ADD, x * a), Reduction("a", MAX, x)))


def test_duplicate_and_undefined_names():
    x = symbol("x")
    with pytest.raises(CascadeError, match=r"defined more than once: \['x'\]"):
        Cascade((Input("x"), Input("x"), Reduction("m", MAX, x)))
    with pytest.raises(CascadeError, match="undefined name 'z'"):
        Cascade((Input("x"), Reduction("m", MAX, x + symbol("z"))))


def test_symbol_with_other_assumptions_is_rejected():
    x = symbol("x")
    with pytest.raises(CascadeError, match="assumptions differ"):
        Cascade((Input("x"), Param("p", sign=">0"), Reduction("m", MAX, x * sp.Symbol("p", real=True))))


def test_param_sign_is_checked():
    with pytest.raises(CascadeError, match="sign must be one of"):
        Param("p", sign="positive")


def test_per_element_names():
    c = parse("input x\nparam p\nlet a = p * 2\nlet b = x + a\nreduce m = max(b)\nout y = b - m\nout z = m")
    assert c.per_element() == {"x", "b", "y"}


def test_lets_that_only_use_params_are_constant_not_rejected():
    c = parse("input x\nparam p\nlet a = p * 2\nreduce m = max(x * a)")
    assert isinstance(c["a"], Let) and "a" not in c.per_element()


def test_builder_takes_a_numpy_k_and_names_text_it_cannot_take():
    import numpy as np

    b = CascadeBuilder("c")
    x = b.input("x")
    assert b.reduce("t", "topk", x, k=np.int64(3)).name == "t"  # (refused as "needs an integer k" before)
    with pytest.raises(CascadeError, match="not a SymPy expression or a number"):  # (SymPy's SympifyError before)
        b.let("a", "x + 1")
