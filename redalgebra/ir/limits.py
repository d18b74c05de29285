"""The parser's limits: bounded work for any text.

Every limit is checked while parsing, before the work it bounds is done, and a text that exceeds one
gets a :class:`~redalgebra.errors.LimitError` (a ``CascadeSyntaxError``) naming the limit, its value,
what was received and the line and column.  The values are far above what a kernel's cascade needs
and far below what would exhaust time or memory; change them here (they are module constants) if a
real cascade needs more.
"""

from __future__ import annotations

#: Characters in the whole text (comments and blank lines included).
MAX_TEXT_CHARS = 10_000_000
#: Characters on one line.
MAX_LINE_CHARS = 10_000
#: Statements (input, param, let, reduce, out) in one cascade.
MAX_STATEMENTS = 1_000
#: Reductions in one cascade.
MAX_REDUCTIONS = 64
#: Nesting of one expression: parentheses, calls, unary signs, ``not`` and powers (``a ** b ** c``).
MAX_DEPTH = 48
#: Nesting of an expression with the lets it uses written out (``let b = exp(a)`` over ``let a = exp(x)``).
MAX_INLINED_DEPTH = 192
#: Digits written in one numeric literal.
MAX_DIGITS = 400
#: Size of the decimal exponent of one literal (``1e400`` and ``1e-400`` are allowed).
MAX_EXPONENT = 400
#: Bits of the numerator or denominator of any constant the parser builds (``2 ** 4000`` has 4001).
MAX_NUMBER_BITS = 4_096
#: Size of a numeric power ``u ** p``, also with lets written out (``(x**30)**40`` is a power of 1200).
MAX_POWER = 1_024
#: Length of a vector (``input k[d]`` with a number for ``d``).
MAX_VECTOR = 65_536
#: ``k`` of ``topk(k, EXPR)``.
MAX_TOPK = 1_024
#: Characters in one name (the kernels' own names add suffixes to it; numba's LLVM refuses arguments of about 1000).
MAX_NAME_CHARS = 200
