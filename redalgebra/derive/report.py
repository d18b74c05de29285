"""Readable text, LaTeX and JSON of a :class:`~.fused.FusedCascade`."""

from __future__ import annotations


from ..ir.printer import CascadePrinter, to_text
from .program import Program


class FormulaPrinter(CascadePrinter):
    """The cascade printer, with guards written as Python conditional expressions."""

    def _print_Piecewise(self, expr):
        pairs = list(expr.args)
        last = pairs.pop() if pairs[-1].cond == True else None  # noqa: E712 (SymPy's true)
        out = "nan" if last is None else self._print(last.expr)
        for value, cond in reversed(pairs):
            out = f"({self._print(value)} if {self._print(cond)} else {out})"
        return out

    def _print_Equality(self, expr):
        return f"{self._print(expr.lhs)} == {self._print(expr.rhs)}"

    def _print_Or(self, expr):
        return " or ".join(self._print(a) for a in expr.args)


def program_text(program: Program, indent: str = "    ") -> str:
    p = FormulaPrinter()
    return "\n".join(f"{indent}{sym} = {p.doprint(expr)}" for sym, expr in program.steps)


def fused_text(f) -> str:
    p = FormulaPrinter()
    lines = [f.analysis.text(), "", "state: " + ", ".join(
        f"{r.name} ({r.monoid.name}, identity {f.identity[r.name]})" for r in f.reductions)]
    if f.prologue.steps:
        lines += ["", "prologue (per element):", program_text(f.prologue)]
    lines += ["", "lift (the state of one element e):", program_text(f.lift),
              "", "incremental update (state _a, element e -> _n):", program_text(f.update),
              "", "merge (states _a, _b -> _n), the paper's Eq. 11:", program_text(f.merge),
              "", "finalize:", program_text(f.finalize)]
    if f.corrections:
        lines += ["", "corrections, stable form = H(D_new) ⊗ H(D_old)⁻¹:"]
        for name, corr in f.corrections.items():
            lines.append(f"    c_{name} = {p.doprint(corr.stable)}   [{corr.proof.status}: equals {p.doprint(corr.raw)}]")
    lines += ["", "non-incremental form (segment staged on chip, reductions in sequence, no corrections):"]
    lines += [f"    {r.name} = {r.text}" for r in f.reductions]
    lines += ["", "edge guards:"] + [f"    - {g}" for g in f.guards]
    return "\n".join(lines)


def fused_latex(f) -> str:
    parts = [rf"\textbf{{{name}}}\quad " + prog.latex() for name, prog in
             (("lift", f.lift), ("update", f.update), ("merge", f.merge), ("finalize", f.finalize))]
    return "\n\n".join(f"$$ {part} $$" for part in parts)


def fused_json(f) -> dict:
    p = FormulaPrinter()

    def prog(program: Program):
        return [{"name": str(s), "expr": p.doprint(e)} for s, e in program.steps]

    return {**f.analysis.as_dict(), "cascade_text": to_text(f.cascade),
            "identity": {k: str(v) for k, v in f.identity.items()},
            "prologue": prog(f.prologue), "lift": prog(f.lift), "update": prog(f.update), "merge": prog(f.merge),
            "finalize": prog(f.finalize), "per_element_outputs": list(f.per_element_outputs),
            "corrections": {k: {"stable": p.doprint(c.stable), "raw": p.doprint(c.raw), "proof": c.proof.as_dict()}
                            for k, c in f.corrections.items()},
            "guards": list(f.guards)}


