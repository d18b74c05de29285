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


def program_text(program: Program, indent: str = "    ", cascade=None, sides: bool = True) -> str:
    """The program's assignments, one a line; given the cascade, temporaries are renamed so that none reads
    as one of its names (``c1`` beside an input ``c`` becomes ``t1``), and so is a state's side that reads as
    a declared name (``m_a`` beside a reduction ``m_a`` becomes ``m[a]``; ``sides``: the program has sides)."""
    p = FormulaPrinter()
    rename = _temporaries(program, cascade, sides)
    return "\n".join(f"{indent}{rename.get(sym, sym)} = {p.doprint(expr.xreplace(rename))}"
                     for sym, expr in program.steps)


def _temporaries(program: Program, cascade, sides: bool = True) -> dict:
    if cascade is None:
        return {}
    taken = {s.name for s in cascade.statements}
    temps = [sym for sym, _ in program.steps if sym not in program.results]
    prefix = next((pre for pre in ("c", "t", "u", "tmp") if not any(n.startswith(pre) for n in taken)), "tmp_")
    rename = {sym: sym.func(f"{prefix}{sym.name[1:]}", **sym.assumptions0) for sym in temps
              if sym.name.startswith("c") and sym.name[1:].isdigit()}
    # a side of a state (m_a, m_b, m_n) that reads like a name the cascade declares: written m[a]
    if sides:
        symbols = {sym for sym, _ in program.steps} | {s for _, e in program.steps for s in e.free_symbols}
        reductions = {s.name for s in cascade.statements if type(s).__name__ == "Reduction"}
        for sym in symbols:
            stem, _, side = sym.name.rpartition("_")
            if side in ("a", "b", "n") and stem in reductions and sym.name in taken:
                rename[sym] = sym.func(f"{stem}[{side}]", **sym.assumptions0)
    return rename


def fused_text(f) -> str:
    p = FormulaPrinter()
    if f.source is None:
        lines = [f.analysis.text()]
    elif f.rewrite is None:  # only an element count added to the state
        lines = [f.source_analysis.text(), "", "an element count joins the state (the cascade as fused):"]
        lines += ["    " + ln for ln in to_text(f.cascade).rstrip().splitlines()] + ["", f.analysis.text()]
    else:
        lines = multi_term_text(f)
    lines += ["", "state: " + ", ".join(
        f"{r.name} ({r.monoid.name}, identity {f.identity[r.name]})" for r in f.reductions)]
    if f.prologue.steps:
        lines += ["", "prologue (per element):", program_text(f.prologue)]
    c = f.cascade
    lines += ["", "lift (the state of a segment of one element):", program_text(f.lift, cascade=c),
              "", "incremental update (state _a and one more element -> state _n):", program_text(f.update, cascade=c),
              "", "merge (states _a and _b of two segments -> state _n), the paper's Eq. 11:",
              program_text(f.merge, cascade=c), "", "finalize:", program_text(f.finalize, cascade=c, sides=False)]
    if f.corrections:
        lines += ["", "corrections, stable form = H(D_new) ⊗ H(D_old)⁻¹:"]
        for name, corr in f.corrections.items():
            how = ("stable as derived, no rewrite needed" if corr.stable == corr.raw else
                   f"{corr.proof.status}: equals {p.doprint(corr.raw)}")
            lines.append(f"    c_{name} = {p.doprint(corr.stable)}   [{how}]")
    lines += ["", "non-incremental form (segment staged on chip, reductions in sequence, no corrections):"]
    lines += [f"    {r.name} = {r.text}" for r in f.reductions]
    lines += ["", "edge guards:"] + [f"    - {g}" for g in f.guards]
    return "\n".join(lines)


def multi_term_text(f) -> list[str]:
    """The analysis as written, then the rewrite of its multi-term sums into partial sums, with the proofs."""
    rw = f.rewrite
    what = "partial sums, one per term" if rw.partials or rw.centered else "the reductions of G alone"
    lines = [f.source_analysis.text(), "", f"rewritten into {what} (the state cascade):"]
    lines += ["    " + ln for ln in to_text(f.cascade).rstrip().splitlines()]
    lines += ["", "proofs of the rewrite:"]
    for name, ra in ((r.name, r) for r in f.source_analysis.reductions if r.terms is not None):
        lines.append(f"    [{ra.terms.proof.status}] {ra.terms.proof.claim}")
        lines += [f"    [{q.status}] {q.claim}" for q in rw.proofs.get(name, ())]
    for name in (*rw.centered, *rw.deferred):
        lines += [f"    [{q.status}] {q.claim}" for q in rw.proofs.get(name, ())]
    lines += ["", f.analysis.text()]
    return lines


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


