"""The dependency graph of a cascade, built once by one function and frozen.

Nodes are statement names with attributes ``kind`` (``input``, ``param``,
``let``, ``reduction``, ``output``), ``size`` and ``expr``; an edge ``u → v``
means ``v`` uses ``u``.  ``pos`` (the element's index) is not a statement and
has no node: like the axis itself it is implicit.  Passes are functions of the
graph that use NetworkX algorithms rather than walking it by hand.
"""

from __future__ import annotations

import networkx as nx

from .nodes import POSITION, Cascade, Input, Let, Output, Param, Reduction, expr_of, require_cascade

_KIND = {Input: "input", Param: "param", Let: "let", Reduction: "reduction", Output: "output"}


def build_graph(cascade: Cascade) -> nx.DiGraph:
    """A frozen ``networkx.DiGraph`` of the cascade's data dependencies."""
    require_cascade(cascade, "build_graph")
    g = nx.DiGraph(name=cascade.name)
    sizes = cascade.sizes
    for s in cascade.statements:
        attrs = {"kind": _KIND[type(s)], "size": sizes[s.name], "expr": expr_of(s)}
        if isinstance(s, Reduction):
            attrs["monoid"] = s.monoid.name
        g.add_node(s.name, **attrs)
        if attrs["expr"] is not None:
            g.add_edges_from((sym.name, s.name) for sym in attrs["expr"].free_symbols if sym.name != POSITION)
    return nx.freeze(g)


def nodes_of_kind(g: nx.DiGraph, kind: str) -> list[str]:
    """Names of the nodes of one kind, in topological order."""
    return [n for n in nx.lexicographical_topological_sort(g, key=_order_key(g)) if g.nodes[n]["kind"] == kind]


def _order_key(g: nx.DiGraph):
    position = {n: i for i, n in enumerate(g.nodes)}
    return lambda n: position[n]


def reduction_dependencies(g) -> dict[str, set[str]]:
    r"""The dependency set :math:`D_i` of every reduction.

    :math:`D_i` holds the reductions that reduction :math:`i`'s body uses
    directly or through lets — not those reached only through another
    reduction, whose result already summarises them.
    """
    if not isinstance(g, nx.DiGraph):  # a Cascade: its graph
        g = build_graph(g)
    reductions = set(nodes_of_kind(g, "reduction"))
    deps = {}
    for r in reductions:
        # cut the edges into every other reduction, so ancestry stops at them
        view = nx.restricted_view(g, [], [(u, v) for v in reductions - {r} for u in g.predecessors(v)])
        deps[r] = nx.ancestors(view, r) & reductions
    return deps


def reduction_graph(g: nx.DiGraph) -> nx.DiGraph:
    """The DAG among reductions alone: an edge ``r_j → r_i`` when ``r_j ∈ D_i``."""
    deps = reduction_dependencies(g)
    rg = nx.DiGraph()
    rg.add_nodes_from(nodes_of_kind(g, "reduction"))
    rg.add_edges_from((d, r) for r, ds in deps.items() for d in ds)
    return nx.freeze(rg)


def reduction_levels(g: nx.DiGraph) -> list[list[str]]:
    """Reductions grouped into generations: each needs only results of earlier generations."""
    return [sorted(gen) for gen in nx.topological_generations(reduction_graph(g))]
