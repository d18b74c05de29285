import networkx as nx
import pytest

from redalgebra import build_graph, draw, parse, workloads
from redalgebra.ir import reduction_dependencies, reduction_graph, reduction_levels
from tests.catalogue import WORKLOADS


def test_attention_graph_nodes_and_edges():
    g = build_graph(workloads.get("attention").cascade)
    assert nx.is_frozen(g)
    assert {n: d["kind"] for n, d in g.nodes(data=True)} == {
        "k": "input", "v": "input", "q": "param", "scale": "param", "s": "let",
        "m": "reduction", "l": "reduction", "o": "reduction", "y": "output"}
    assert set(g.edges) == {("q", "s"), ("k", "s"), ("scale", "s"), ("s", "m"), ("s", "l"), ("m", "l"),
                            ("s", "o"), ("m", "o"), ("v", "o"), ("o", "y"), ("l", "y")}
    assert g.nodes["o"]["size"] == "d" and g.nodes["m"]["monoid"] == "max"


def test_dependencies_stop_at_the_nearest_reductions():
    c = parse("input x\nreduce a = max(x)\nlet u = x - a\nreduce b = sum(exp(u))\nreduce c = sum(x / b)")
    g = build_graph(c)
    assert reduction_dependencies(g) == {"a": set(), "b": {"a"}, "c": {"b"}}
    assert reduction_levels(g) == [["a"], ["b"], ["c"]]
    assert set(reduction_graph(g).edges) == {("a", "b"), ("b", "c")}


def test_moe_routing_top_k_needs_max_and_sum():
    g = build_graph(workloads.get("moe_routing").cascade)
    assert reduction_dependencies(g)["t"] == {"m", "s"}
    assert g.nodes["t"]["size"] == 8


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_workload_graph_is_a_dag_with_one_node_per_statement(name):
    c = workloads.get(name).cascade
    g = build_graph(c)
    assert nx.is_directed_acyclic_graph(g)
    assert list(g.nodes) == [s.name for s in c.statements]


def test_draw_returns_axes_with_every_node_labelled():
    ax = draw(build_graph(workloads.get("attention").cascade))
    labels = {t.get_text() for t in ax.texts}
    assert {"k", "v", "q", "scale", "s", "m", "l", "o", "y"} <= labels
