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

    def __str__(self) -> str:
        head = f"line {self.line}, column {self.column}: {self.message}"
        if not self.source_line:
            return head
        caret = " " * (self.column - 1) + "^" * self.width
        return f"{head}\n    {self.source_line}\n    {caret}"


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
