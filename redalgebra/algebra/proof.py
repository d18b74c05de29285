"""Proofs as values.

A :class:`Proof` records a claim ``lhs = rhs``, its status (``"proved"``,
``"refuted"`` or ``"unknown"``), the assumptions it used, the steps of the
argument, the residual when undecided and a :class:`Counterexample` when
refuted.  A composite proof (a monoid's three laws) keeps its parts.

"proved" only ever comes from a symbolic argument; sampling can refute but
never prove.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from ..errors import RedalgebraError

STATUSES = ("proved", "refuted", "unknown")


@dataclass(frozen=True)
class Counterexample:
    """Values at which a claimed identity fails, with both sides evaluated there.

    ``exact`` is True when the two sides were compared in exact (rational)
    arithmetic; otherwise they differ at 50 significant digits.
    """

    values: dict
    lhs: sp.Expr
    rhs: sp.Expr
    exact: bool
    domain: str = ""  # where the point lies outside the states a cascade reaches: which relation it breaks

    def as_dict(self) -> dict:
        out = {"values": {str(k): str(v) for k, v in self.values.items()},
               "lhs": str(self.lhs), "rhs": str(self.rhs), "exact": self.exact}
        return {**out, "domain": self.domain} if self.domain else out

    def __str__(self) -> str:
        at = ", ".join(f"{k} = {v}" for k, v in self.values.items())
        how = "in exact arithmetic" if self.exact else "when evaluated to 50 significant digits"
        note = "" if self.lhs.is_real and self.rhs.is_real else "; a side is not real there"
        note += f"; {self.domain}" if self.domain else ""
        return f"at {at}: lhs = {self.lhs}, rhs = {self.rhs} (the sides differ {how}{note})"


@dataclass(frozen=True)
class Proof:
    """The outcome of proving one identity (or a conjunction of them)."""

    claim: str
    status: str
    lhs: sp.Expr | None = None
    rhs: sp.Expr | None = None
    assumptions: tuple = ()
    steps: tuple = ()
    method: str = ""
    residual: sp.Expr | None = None
    counterexample: Counterexample | None = None
    parts: tuple = field(default=())

    def __post_init__(self):
        if self.status not in STATUSES:
            raise RedalgebraError(f"status must be one of {STATUSES}, got {self.status!r}")
        if self.status == "refuted" and self.counterexample is None and not self.parts:
            raise RedalgebraError("a refuted proof carries its counterexample")

    @classmethod
    def all_of(cls, claim: str, parts) -> "Proof":
        """Conjunction: proved if every part is, refuted if any part is, else unknown."""
        parts = tuple(parts)
        statuses = {p.status for p in parts}
        status = "refuted" if "refuted" in statuses else "unknown" if "unknown" in statuses else "proved"
        return cls(claim, status, parts=parts, method="conjunction")

    @property
    def proved(self) -> bool:
        return self.status == "proved"

    @property
    def exhausted(self) -> bool:
        """True when undecided because a time budget ran out: more time might decide it (never cache it)."""
        return self.method == "budget" or any(p.exhausted for p in self.parts)

    def failed_parts(self) -> list["Proof"]:
        return [p for p in self.parts if p.status != "proved"]

    def as_dict(self) -> dict:
        d = {"claim": self.claim, "status": self.status, "method": self.method}
        if self.lhs is not None:
            d.update(lhs=str(self.lhs), rhs=str(self.rhs))
        d.update(assumptions=list(self.assumptions), steps=list(self.steps),
                 residual=None if self.residual is None else str(self.residual),
                 counterexample=None if self.counterexample is None else self.counterexample.as_dict())
        if self.parts:
            d["parts"] = [p.as_dict() for p in self.parts]
        return d

    def __str__(self) -> str:
        return "\n".join(self._lines(0))

    def _lines(self, depth: int) -> list[str]:
        pad = "  " * depth
        head = f"{pad}[{self.status}] {self.claim}"
        same = self.lhs is not None and self.lhs == self.rhs  # SymPy's evaluation already made them one
        if self.lhs is not None:
            head += f":  both sides evaluate to {self.lhs}" if same else f":  {self.lhs} = {self.rhs}"
        lines = [head]
        if self.assumptions:
            lines.append(f"{pad}  assuming {', '.join(self.assumptions)}")
        lines += [f"{pad}  - {s}" for s in self.steps if not (same and s.startswith("simplify(lhs - rhs) = 0"))]
        if self.residual is not None and self.status == "unknown":
            lines.append(f"{pad}  residual: {self.residual}")
        if self.counterexample is not None:
            lines.append(f"{pad}  counterexample {self.counterexample}")
        for p in self.parts:
            lines += p._lines(depth + 1)
        return lines

    def _repr_markdown_(self) -> str:
        return "```\n" + str(self) + "\n```"
