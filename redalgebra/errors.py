"""The exception hierarchy of redalgebra.

Every error a user can cause derives from :class:`RedalgebraError`, so a caller
(the CLI, a notebook) can catch one class and show its message.  Messages state
the rule that was broken, echo what was received and suggest a fix.
"""

from __future__ import annotations


class RedalgebraError(Exception):
    """Base class of every error redalgebra raises on bad input."""


class CascadeSyntaxError(RedalgebraError):
    """The cascade text does not follow the format; carries line and column.

    Parameters
    ----------
    message : str
        What is wrong, in words.
    line, column : int
        1-based position of the offending text.
    source_line : str
        The text of that line, echoed with a caret under the offending span.
    width : int
        How many characters to underline.
    """

    def __init__(self, message: str, line: int, column: int, source_line: str = "", width: int = 1):
        self.message = message
        self.line = line
        self.column = column
        self.source_line = source_line
        self.width = max(1, width)
        super().__init__(str(self))

    #: Characters of the source line echoed around the offending column (a long line is clipped).
    ECHO = 100

    def __str__(self) -> str:
        head = f"line {self.line}, column {self.column}: {self.message}"
        if not self.source_line:
            return head
        start = max(0, self.column - 1 - self.ECHO // 2) if len(self.source_line) > self.ECHO else 0
        text = "".join(ch if ch.isprintable() else "\N{REPLACEMENT CHARACTER}"
                       for ch in self.source_line[start:start + self.ECHO])
        width = max(1, min(self.width, len(text) - (self.column - 1 - start)))
        before, after = ("…" if start else ""), ("…" if start + self.ECHO < len(self.source_line) else "")
        caret = " " * (len(before) + self.column - 1 - start) + "^" * width
        return f"{head}\n    {before}{text}{after}\n    {caret}"


class CascadeError(RedalgebraError):
    """A cascade is well formed text but not a valid cascade (names, cycles, shapes)."""


class MonoidError(RedalgebraError):
    """A monoid definition is malformed (wrong arity, missing identity, unknown name)."""


class EvaluationError(RedalgebraError):
    """Inputs given to an evaluator do not match the cascade (missing, wrong shape)."""


class NotFusableError(RedalgebraError):
    """A cascade cannot be fused; ``.analysis`` says which condition failed and why."""

    def __init__(self, message: str, analysis=None):
        self.analysis = analysis
        super().__init__(message)


class LimitError(CascadeSyntaxError):
    """Input exceeds one of the parser's limits (nesting depth, literal size, statements, sizes).

    The message names the limit, its value and what was received; the position is where the parser
    stopped.  The limits are in :mod:`redalgebra.ir.limits`.
    """


class BudgetExhausted(RedalgebraError):
    """A computation ran past its time budget (see :mod:`redalgebra.algebra.budget`).

    The prover and the analysis turn it into an ``"unknown"`` verdict; it reaches a caller only from
    work that has no such verdict to give (the derivation of formulas).
    """


class PerformanceHint(UserWarning):
    """A warning, not an error: the call runs and is right, but a documented choice (an exactness ``auto`` keeps) makes
    it much slower than an option the message names, with what that option changes."""


class ExactnessHint(UserWarning):
    """A warning, not an error: a strategy named by the caller runs a one-pass form that, on rows the derivation's guards
    describe, gives another value than the unfused reference (a correction that does not exist on a prefix of the row,
    ties ranked by the corrections' rounding); ``auto`` would take the level order there."""
