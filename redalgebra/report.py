"""Structural report of a cascade: its graph, its reductions, the laws of their monoids.

Shared by the CLI and notebooks; the fusion analysis proper lives in
:mod:`redalgebra.derive`.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from .algebra import Proof, monoid_laws
from .ir import Cascade, build_graph, reduction_dependencies, reduction_levels
from .ir.monoid import reducer_name
from .ir.printer import CascadePrinter, reducer_text


#: The words of the analysis and the derived forms, for a reader who has not read the paper (the README has the
#: same paragraph; ``redalgebra demo`` prints it first).
GLOSSARY = (
    "A cascade is a chain of reductions over one axis of a row, where a later reduction reads the final "
    "result of an earlier one (safe softmax: m = max(x), then l = sum(exp(x - m)), which needs m). A reduction "
    "r = ⊕ F(e, D) (⊕ is sum, max, …) over the elements e that reads earlier results D fuses into one pass when F splits as "
    "F(e, D) = G(e) ⊗ H(D): G reads only the element, H only the dependencies, and ⊗ is the operation that "
    "joins them (for softmax's sum, ⊗ = ×, G = exp(x), H = exp(-m)). ⊗ must distribute over the reduction and "
    "H must be invertible; each is proved, not looked up. Then a partial result computed with an old m is "
    "corrected to a new one by ⊗ H(new) ⊗ H(old)⁻¹ (here × exp(m_old - m_new)). The fused kernel keeps one "
    "small state per segment of the row (a value per reduction): lift is the state of a single element; merge "
    "combines the states of two segments, applying the corrections (the paper's Eq. 11); update is a merge "
    "with one more element (the \"online\" loop, O(1) memory); finalize computes the outputs from the state of "
    "the whole row. A sum whose F is a sum of such products, F = Σ_t c_t(D) · E_t(e) (a variance, an "
    "entropy), is multi-term: it fuses with one partial sum per term, combined at the end. A product of powers, "
    "F = G(e)^H(D) with G >= 0 (a weighted geometric mean), fuses with ⊗ = power as exp(H · sum(log G)).")


def glossary(width: int = 100, indent: str = "") -> str:
    """:data:`GLOSSARY` wrapped to ``width`` columns."""
    return textwrap.fill(GLOSSARY, width, initial_indent=indent, subsequent_indent=indent)


@dataclass(frozen=True)
class ReductionReport:
    name: str
    reducer: str
    body: str
    depends_on: tuple
    laws: Proof
    text: str  # the reduction as written in the text format

    def as_dict(self) -> dict:
        return {"name": self.name, "reducer": self.reducer, "text": self.text,
                "body": self.body, "depends_on": list(self.depends_on), "laws": self.laws.as_dict()}


@dataclass(frozen=True)
class CascadeReport:
    cascade: Cascade
    reductions: tuple
    levels: tuple

    def as_dict(self) -> dict:
        g = build_graph(self.cascade)
        return {"cascade": self.cascade.name,
                "graph": {"nodes": [{"name": n, "kind": d["kind"], "size": d["size"]} for n, d in g.nodes(data=True)],
                          "edges": [list(e) for e in g.edges]},
                "levels": [list(lv) for lv in self.levels],
                "reductions": [r.as_dict() for r in self.reductions]}

    def text(self, verbose: bool = False) -> str:
        c = self.cascade
        lines = [f"{c.name}: {len(self.reductions)} reductions in {len(self.levels)} dependent levels "
                 f"{' -> '.join('{' + ', '.join(lv) + '}' for lv in self.levels)}"]
        width = max(len(f"{r.name} = {r.text}") for r in self.reductions)
        for r in self.reductions:
            deps = ", ".join(r.depends_on) or "-"
            lines.append(f"  {r.name} = {r.text}".ljust(width + 4) +
                         f"  needs {deps:<8} {r.laws.claim}: {r.laws.status}")
            if verbose:
                lines += ["      " + ln for ln in str(r.laws).splitlines()]
        return "\n".join(lines)


def report(cascade: Cascade) -> CascadeReport:
    """The graph-level facts of a cascade and the proofs of its monoids' laws."""
    g = build_graph(cascade)
    deps = reduction_dependencies(g)
    p = CascadePrinter()
    reds = tuple(ReductionReport(r.name, reducer_name(r.monoid), p.doprint(r.body), tuple(sorted(deps[r.name])),
                                 monoid_laws(r.monoid), reducer_text(r, p))
                 for r in cascade.reductions)
    return CascadeReport(cascade, reds, tuple(tuple(lv) for lv in reduction_levels(g)))
