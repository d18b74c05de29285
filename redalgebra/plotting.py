"""Plots for notebooks: the only module besides ``runtime``/``gpu`` allowed to import matplotlib.

matplotlib is imported inside the functions, so importing redalgebra does not
need it; install the ``plots`` extra to draw.
"""

from __future__ import annotations

import networkx as nx


def draw(g, ax=None):
    """Draw a cascade's graph (:func:`redalgebra.build_graph`'s, or the cascade's own) left to right by generation
    (matplotlib, imported lazily)."""
    from .errors import CascadeError
    from .ir import Cascade, build_graph

    if isinstance(g, Cascade):
        g = build_graph(g)
    if not isinstance(g, nx.DiGraph) or not g.nodes or any("kind" not in g.nodes[n] for n in g.nodes):
        raise CascadeError(f"draw() takes a Cascade or its graph (redalgebra.build_graph), got {type(g).__name__}"
                           + (" with no statements" if isinstance(g, nx.DiGraph) and not g.nodes else ""))
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ImportError("drawing needs matplotlib: pip install 'redalgebra[plots]'") from err

    colors = {"input": "#9ecae1", "param": "#d9d9d9", "let": "#c7e9c0", "reduction": "#fdae6b", "output": "#bcbddc"}
    layered = nx.DiGraph(g)
    for layer, nodes in enumerate(nx.topological_generations(layered)):
        for n in nodes:
            layered.nodes[n]["layer"] = layer
    pos = nx.multipartite_layout(layered, subset_key="layer")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 * (layer + 2), 3))
    nx.draw_networkx(layered, pos, ax=ax, node_size=1400, font_size=9, arrows=True,
                     node_color=[colors[g.nodes[n]["kind"]] for n in layered.nodes])
    ax.set_axis_off()
    ax.set_title(g.graph.get("name", ""))
    return ax
