"""A real parser for the cascade text format (DESIGN.md §4).

The text is tokenized with one regular expression and parsed by precedence
climbing straight into SymPy objects built from declared symbols: nothing is
ever evaluated as Python and no raw string reaches ``sympify``.  Every error is
a :class:`CascadeSyntaxError` carrying the line, the column and a caret.

Grammar (one statement per line, ``#`` starts a comment)::

    input NAME ['[' DIM ']']
    param NAME ['[' DIM ']'] [int] [('>' | '>=' | '<' | '<=') NUMBER]    (a bound other than 0: scalars)
    let NAME = EXPR
    reduce NAME = REDUCER '(' EXPR ')' | topk '(' INT ',' EXPR ')' | mean '(' EXPR ')' | argmax '(' EXPR ')'
    out NAME = EXPR

    EXPR := OR;  OR := AND ('or' AND)*;  AND := NOT ('and' NOT)*;  NOT := 'not' NOT | CMP
    CMP  := SUM [('==' | '!=' | '<' | '<=' | '>' | '>=') SUM]      (no chains: a < b < c is an error)
    SUM  := the arithmetic of + - * / ** and unary minus, calls, names, numbers, ( EXPR )

Positions, integers and conditions
----------------------------------
``pos``
    A reserved name: the element's index along the reduction axis, 0 for the
    first element, ``L - 1`` for the last — the index in the whole row, not in
    a segment or tile.  It is an integer per element, like an input; no
    statement may be named ``pos``.
``param NAME int``
    An integer param: one integer per row (a class label, a query's
    position), optionally signed (``param n int > 0``).  Integer params are
    scalars.  Arithmetic on integers is real arithmetic (``qpos - pos`` is a
    number); evaluators hold them as floats, exact up to 2**24 in float32.
``a == b``, ``a != b``, ``a < b``, ``a <= b``, ``a > b``, ``a >= b``
    A comparison binds more loosely than every arithmetic operator
    (``x + 1 < y * 2`` compares the two sums).  Used as a number it is 1
    where it holds and 0 where not (Iverson's bracket): ``sum(x * (pos ==
    label))`` picks the label's logit.  IEEE rules apply: a comparison with
    NaN is false, and ``0 * inf`` is NaN, so mask with ``where``, not by
    multiplying an infinite value by 0.
``and``, ``or``, ``not``
    Combine conditions (``pos <= qpos and pos > qpos - w``: a sliding
    window), binding more loosely than comparisons, ``not`` tightest and
    ``or`` loosest.  Like a comparison, a combination used as a number is
    its 1/0 indicator; a number used as a condition means ``!= 0``.
    The two sides of a comparison, and a number used as a condition, are
    free of conditionals: ``(a < b) == (c < d)`` is an error — say it with
    ``and``, ``or``, ``not``.
``where(cond, a, b)``
    ``a`` where ``cond`` holds, else ``b``; only the chosen value is used, so
    ``where(pos <= qpos, s, -inf)`` masks a score.  ``cond`` is a comparison;
    any other expression ``u`` means ``u != 0``.  ``a`` and ``b`` have one
    size (scalars, or vectors of one size); a condition is a scalar.
``inf``
    The literal +∞ (``-inf`` for −∞), for masks and identities; an
    expression that comes out undefined (``inf - inf``) is an error.

Reserved names: the keywords, the functions and reducers, ``pos``, ``inf``,
``int``, ``and``, ``or`` and ``not``.

Bounded work
------------
Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (nothing else), and a leading
byte-order mark is ignored.  The size of the text, of a line, of a literal
(digits, exponent) and of every constant built from literals, the nesting
depth (also with lets written out), numeric powers, the number of statements
and reductions, vector lengths and top-k's ``k`` are bounded by
:mod:`.limits`, each checked before the work it bounds: past one, a
:class:`~redalgebra.errors.LimitError` names the limit and the place.
"""

from __future__ import annotations

import re
from fractions import Fraction

import sympy as sp

from ..errors import CascadeError, CascadeSyntaxError, LimitError
from . import limits
from .functions import COMPARISONS, ELEMENTWISE, Dot, VSum, condition, is_condition, number, where
from .monoid import REDUCERS, topk
from .lexer import CONSTANT_NAMES, FUNCTIONS, INT_LIMIT, KEYWORDS, REDUCER_NAMES, RESERVED, Token, split_lines, tokenize
from .nodes import POS, POSITION, Cascade, Input, Let, Output, Param, Reduction, implied_sign, symbol

CONSTANTS = dict(zip(CONSTANT_NAMES, (POS, sp.oo)))

_BINARY = {"+": 10, "-": 10, "*": 20, "/": 20, "**": 40}
_UNARY_MINUS = 30


class _LineParser:
    """Parses the tokens of one statement line against the names declared so far."""

    def __init__(self, tokens, line_no, line, declared, later, argmaxes=None):
        self.tokens, self.i = tokens, 0
        self.line_no, self.line = line_no, line
        self.declared = declared  # name -> Symbol, statements above this line
        self.later = later        # name -> line number, for statements below
        self.argmaxes = set() if argmaxes is None else argmaxes  # names of argmax reductions (their index is the result)
        self.checked: set = set()  # constants already checked against float32's range (folded_in_float32)
        self.in_output = False
        self.depth = 0

    # -- token helpers ---------------------------------------------------
    def error(self, message: str, tok: Token | None = None) -> CascadeSyntaxError:
        tok = tok or self.peek()
        return CascadeSyntaxError(message, self.line_no, tok.column, self.line, max(1, len(tok.text)))

    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, text: str | None = None, kind: str | None = None, what: str = "") -> Token:
        tok = self.peek()
        if (text is not None and tok.text != text) or (kind is not None and tok.kind != kind):
            wanted = what or (repr(text) if text else kind)
            got = "the end of the line" if tok.kind == "end" else repr(tok.text)
            raise self.error(f"expected {wanted}, got {got}")
        return self.take()

    def new_name(self) -> Token:
        tok = self.expect(kind="name", what="a name")
        if tok.text == POSITION:
            raise self.error(f"'{POSITION}' is reserved: it is the element's index along the axis (0, 1, …, L - 1) "
                             f"and needs no declaration; pick another name", tok)
        if tok.text in RESERVED:
            raise self.error(f"{tok.text!r} is a reserved word and cannot name a value; pick another name", tok)
        if len(tok.text) > limits.MAX_NAME_CHARS:
            raise self.limit(f"a name of {len(tok.text)} characters, more than {limits.MAX_NAME_CHARS} (the limit "
                             f"MAX_NAME_CHARS)", tok)
        if tok.text in self.declared:
            raise self.error(f"{tok.text!r} is already defined above; each statement needs its own name", tok)
        return tok

    def limit(self, message: str, tok: Token | None = None) -> LimitError:
        tok = tok or self.peek()
        return LimitError(message, self.line_no, tok.column, self.line, max(1, min(len(tok.text), 40)))

    def deeper(self, tok: Token) -> None:
        """One more level of nesting; past ``MAX_DEPTH`` a LimitError (the caller undoes it with ``self.depth -= 1``)."""
        self.depth += 1
        if self.depth > limits.MAX_DEPTH:
            raise self.limit(f"the expression is nested more than {limits.MAX_DEPTH} deep (parentheses, calls, "
                             f"signs and powers; the limit MAX_DEPTH); write it in pieces with let statements", tok)

    def build(self, tok: Token, make):
        """``make()``, with SymPy's refusal to build an undefined value (``max(x, inf - inf)``) as a syntax error."""
        try:
            return self.bounded(tok, make())
        except (TypeError, ValueError, ArithmeticError) as err:
            raise self.error(f"this is undefined or not real (SymPy: {err}); check for inf - inf, 0 * inf "
                             f"or a comparison with an undefined value", tok) from None
        except RecursionError:
            raise self.error("SymPy could not build this expression (its simplification recursed without end); "
                             "write it in smaller pieces with let statements", tok) from None

    def bounded(self, tok: Token, value):
        """``value``, after checking that the constant it carries has at most ``MAX_NUMBER_BITS`` bits."""
        coeff = value if value.is_Rational else next((a for a in value.args[:1] if a.is_Rational), None) \
            if isinstance(value, (sp.Add, sp.Mul)) else None
        if coeff is not None and max(coeff.p.bit_length(), coeff.q.bit_length()) > limits.MAX_NUMBER_BITS:
            raise self.limit(f"a constant here has more than {limits.MAX_NUMBER_BITS} bits (about "
                             f"{int(limits.MAX_NUMBER_BITS * 0.30103)} digits; the limit MAX_NUMBER_BITS)", tok)
        self.folded_in_float32(tok, value)
        return value

    def folded_in_float32(self, tok: Token, value) -> None:
        """Refuse a constant SymPy made from in-range ones (``1e30 * 1e30``, ``exp(50) * exp(50)``) that float32
        rounds to inf or to 0, as a literal past the range is refused. Every operand was checked when it was built, so
        only what this step folded is new: the value itself and its operands, and their operands, where a number
        multiplied into a sum is distributed over its terms. Only numbers and ``exp`` of a number are read (each
        once): evaluating any constant expression could take without end (``exp(exp(exp(exp(3))))``); what else the
        derived form holds past the range is refused where the kernel's constants are printed."""
        for node in (value, *value.args, *(b for a in value.args for b in a.args)):
            if node in self.checked or not (node.is_Rational or isinstance(node, sp.exp) and node.args[0].is_Rational):
                continue
            self.checked.add(node)
            if node.is_Rational:
                f = Fraction(int(node.p), int(node.q))
                if f and not FLOAT32_ZERO < abs(f) < FLOAT32_INF:
                    self.in_float32(tok, f, f"the constant {float(f):.3g} made here from the ones written")
            elif not EXP_LOW < node.args[0] < EXP_HIGH:  # (exp(r) in float32's range: log(2**-150) < r < log(max))
                self.in_float32(tok, Fraction(2 ** 200) if node.args[0] > 0 else Fraction(1, 2 ** 200),
                                f"the constant {_short(node)} made here from the ones written")

    def power(self, tok: Token, base, exponent) -> None:
        """Refuse a numeric power past ``MAX_POWER``, and a constant power too large to compute, before SymPy tries."""
        if not exponent.is_Number or exponent in (sp.oo, -sp.oo):
            return
        if abs(exponent) > limits.MAX_POWER:
            raise self.limit(f"the power {_short(exponent)} is larger than {limits.MAX_POWER} in size (the limit "
                             f"MAX_POWER)", tok)
        if base.is_Rational and base.p != 0:
            bits = max(base.p.bit_length(), base.q.bit_length()) - 1
            if bits * abs(exponent) > limits.MAX_NUMBER_BITS:
                raise self.limit(f"this power of a constant has more than {limits.MAX_NUMBER_BITS} bits (the limit "
                                 f"MAX_NUMBER_BITS)", tok)
            if exponent.is_Integer:
                value = sp.Rational(base) ** exponent
                self.in_float32(tok, Fraction(int(value.p), int(value.q)), f"{_short(base)}**{_short(exponent)}")

    def end(self) -> None:
        if self.peek().kind != "end":
            raise self.error(f"unexpected {self.peek().text!r} after the end of the statement")

    # -- expressions -----------------------------------------------------
    def value(self) -> sp.Basic:
        """A full expression: a sum, or a condition (not yet a number) built with ``or``, ``and``, ``not``."""
        self.deeper(self.peek())
        try:
            return self.disjunction()
        finally:
            self.depth -= 1

    def disjunction(self) -> sp.Basic:
        left = self.conjunction()
        while self.peek().text == "or":
            op = self.take()
            right = self.conjunction()
            left = self.build(op, lambda: sp.Or(self.logical(left, op), self.logical(right, op)))
        return left

    def conjunction(self) -> sp.Basic:
        left = self.negation()
        while self.peek().text == "and":
            op = self.take()
            right = self.negation()
            left = self.build(op, lambda: sp.And(self.logical(left, op), self.logical(right, op)))
        return left

    def negation(self) -> sp.Basic:
        if self.peek().text == "not":
            op = self.take()
            self.deeper(op)
            try:
                inner = self.negation()
            finally:
                self.depth -= 1
            return self.build(op, lambda: sp.Not(self.logical(inner, op)))
        return self.comparison()

    def logical(self, value, op: Token):
        """An operand of and/or/not: a condition, or a number meaning ``!= 0``."""
        if not is_condition(value):
            self.numeric(value, op, f"a number as an operand of '{op.text}' means 'number != 0' and must be free "
                                    f"of conditionals")
        return condition(value)

    def comparison(self) -> sp.Basic:
        """A sum, or a comparison of two sums."""
        left = self.expr()
        if self.peek().text not in COMPARISONS:
            return left
        op = self.take()
        right = self.expr()
        if self.peek().text in COMPARISONS:
            raise self.error("chained comparisons are not supported; combine two with 'and', like a < b and b < c")
        for side in (left, right):
            self.numeric(side, op, f"'{op.text}' compares two numbers")
        return self.build(op, lambda: COMPARISONS[op.text](left, right))

    def numeric(self, value, tok: Token, what: str) -> None:
        """Refuse a condition where a number without conditions is needed (SymPy would fold it into ITE)."""
        if is_condition(value) or value.has(sp.Piecewise):
            raise self.error(f"{what}, not a comparison or a where: combine conditions with and, or, not "
                             f"(like a < b and b < c)", tok)

    def number_value(self) -> sp.Expr:
        """A full expression used as a number: a comparison becomes its 1/0 indicator."""
        return number(self.value())

    def expr(self, min_prec: int = 0) -> sp.Basic:
        left = self.unary()
        while True:
            tok = self.peek()
            if tok.text == "^":
                raise self.error("'^' is not an operator here; write powers as a ** b", tok)
            prec = _BINARY.get(tok.text) if tok.kind == "op" else None
            if prec is None or prec < min_prec:
                return left
            self.take()
            if tok.text == "**":
                self.deeper(tok)
                try:
                    right = self.expr(prec)
                finally:
                    self.depth -= 1
                self.power(tok, number(left), number(right))
            else:
                right = self.expr(prec + 1)
            left = self.build(tok, lambda: _apply(tok.text, number(left), number(right)))

    def unary(self) -> sp.Basic:
        if self.peek().text not in ("-", "+"):
            return self.primary()
        tok = self.take()
        self.deeper(tok)
        try:
            inner = self.expr(_UNARY_MINUS)
        finally:
            self.depth -= 1
        if tok.text == "+":
            return number(inner)
        return self.build(tok, lambda: -number(inner))

    def primary(self) -> sp.Basic:
        tok = self.take()
        if tok.kind == "number":
            return self.literal(tok)
        if tok.text == "(":
            inner = self.value()
            self.expect(")", what="')' to close the parenthesis")
            return inner
        if tok.kind == "name":
            if self.peek().text == "(":
                return self.build(tok, lambda: self.call(tok))
            return self.lookup(tok)
        got = "the end of the line" if tok.kind == "end" else repr(tok.text)
        raise self.error(f"expected a number, a name or '(', got {got}", tok)

    def literal(self, tok: Token) -> sp.Rational:
        """A numeric literal, exactly; its digits and exponent checked before Python converts it."""
        mantissa, _, exponent = tok.text.lower().partition("e")
        digits = len(mantissa.replace(".", ""))  # leading zeros too: Python converts the digits as written
        if digits > limits.MAX_DIGITS:
            raise self.limit(f"this number has {digits} digits, more than {limits.MAX_DIGITS} (the limit MAX_DIGITS)",
                             tok)
        size = exponent.lstrip("+-").lstrip("0") or "0"
        if len(size) > 6 or int(size) > limits.MAX_EXPONENT:
            raise self.limit(f"the exponent of {_short(tok.text)} is larger than {limits.MAX_EXPONENT} in size (the "
                             f"limit MAX_EXPONENT; float64 ends near 1e308, float32 near 3e38)", tok)
        f = Fraction(mantissa) * Fraction(10) ** (-int(size) if exponent.startswith("-") else int(size))
        self.in_float32(tok, f, _short(tok.text))
        return self.bounded(tok, sp.Rational(f.numerator, f.denominator))

    def in_float32(self, tok: Token, f: Fraction, shown: str) -> None:
        """Refuse a constant that float32, in which the kernels compute, rounds to inf or to 0."""
        if f and not FLOAT32_ZERO < abs(f) < FLOAT32_INF:
            raise self.error(f"{shown} is {'past' if abs(f) > 1 else 'below'} float32's range (about 1.4e-45 to "
                             f"3.4e38 in size), where the kernels compute: it would be {'inf' if abs(f) > 1 else '0'} "
                             f"there and the float64 reference would not agree; scale the cascade (or write the "
                             f"constant's log and exponentiate a sum)", tok)

    def lookup(self, tok: Token) -> sp.Expr:
        name = tok.text
        if name in CONSTANTS:
            return CONSTANTS[name]
        if name in self.argmaxes:  # its symbol is the largest value: reading it as the index would be silently wrong
            raise self.error(f"{name} is an argmax: its result is the index {name}.index, which an expression cannot "
                             f"read; for the largest value write max(...)", tok)
        if name in self.declared:
            return self.declared[name]
        if name in FUNCTIONS or name in REDUCER_NAMES:
            raise self.error(f"{name} is a function; call it as {name}(...)", tok)
        if self.later.get(name) == self.line_no:
            raise self.error(f"{name!r} refers to itself; a statement can only use names defined above it", tok)
        if name in self.later:
            raise self.error(f"{name!r} is used before it is defined (on line {self.later[name]}); "
                             f"move its definition above this line", tok)
        raise self.error(f"undefined name {name!r}; defined so far: {sorted(self.declared) or 'nothing'}", tok)

    def args(self) -> list[sp.Basic]:
        """The arguments of a call as written: comparisons stay conditions (``where`` needs them)."""
        self.expect("(")
        out = [self.value()]
        while self.peek().text == ",":
            self.take()
            out.append(self.value())
        self.expect(")", what="',' or ')' in the argument list")
        return out

    def call(self, tok: Token) -> sp.Expr:
        name = tok.text
        if name == "sum" and self.in_output:
            args = [number(a) for a in self.args()]
            if len(args) != 1:
                raise self.error(f"sum(v) in an out line takes one vector, got {len(args)} arguments", tok)
            return VSum(args[0])
        if name in REDUCER_NAMES and name not in FUNCTIONS:
            raise self.error(f"{name}(...) is a reducer: use it as 'reduce NAME = {name}(EXPR)'", tok)
        if name not in FUNCTIONS:
            raise self.error(f"unknown function {name!r}; known functions: {', '.join(FUNCTIONS)}", tok)
        args = self.args()
        if name == "where":
            if len(args) != 3:
                raise self.error(f"where(cond, a, b) takes a condition, the value where it holds and the value "
                                 f"where it does not; got {len(args)} arguments", tok)
            if not is_condition(args[0]):
                self.numeric(args[0], tok, "a number as where's condition means 'number != 0' and must be free of "
                                           "conditionals")
            return where(condition(args[0]), args[1], args[2])
        args = [number(a) for a in args]
        if name in ELEMENTWISE:
            if len(args) != 1:
                raise self.error(f"{name} takes one argument, got {len(args)}", tok)
            return ELEMENTWISE[name](args[0])
        if name == "dot":
            if len(args) != 2:
                raise self.error(f"dot takes two vectors, got {len(args)} arguments", tok)
            return Dot(*args)
        if len(args) < 2:
            raise self.error(f"{name}(a, b) is elementwise and needs two or more arguments; to reduce over "
                             f"the axis write 'reduce NAME = {name}(EXPR)'", tok)
        return (sp.Max if name == "max" else sp.Min)(*args)

    # -- statements ------------------------------------------------------
    def size(self):
        if self.peek().text != "[":
            return None
        self.take()
        tok = self.take()
        if tok.kind == "number" and tok.text.isdigit() and tok.text.strip("0"):
            size = self.count(tok, limits.MAX_VECTOR, "a vector's length", "MAX_VECTOR")
        elif tok.kind == "name":
            size = tok.text
        else:
            raise self.error("a vector size is a positive integer or a dimension name, like [d] or [64]", tok)
        self.expect("]", what="']' to close the size")
        return size

    def count(self, tok: Token, most: int, what: str, name: str) -> int:
        """A positive integer token, at most ``most``."""
        digits = tok.text.lstrip("0")
        if len(digits) > len(str(most)) or int(digits) > most:
            raise self.limit(f"{what} is {_short(digits)}, more than {most} (the limit {name})", tok)
        return int(digits)

    def statement(self):
        head = self.expect(kind="name", what="a statement")
        if head.text not in KEYWORDS:
            hint = " (write 'let NAME = EXPR' for a per-element value)" if self.peek().text == "=" else ""
            raise self.error(f"unknown statement {head.text!r}; a line starts with one of "
                             f"{', '.join(KEYWORDS)}{hint}", head)
        return head, getattr(self, "stmt_" + head.text)()

    def stmt_input(self):
        name = self.new_name()
        size = self.size()
        return name, Input(name.text, size, self.sign("input", name.text))

    def sign(self, kind: str, name: str) -> str | None:
        """An optional sign declaration, ``> 0``, ``>= 0``, ``< 0`` or ``<= 0``."""
        if self.peek().text not in (">", ">=", "<", "<="):
            return None
        op = self.take().text
        zero = self.take()
        if zero.kind != "number" or self.literal(zero) != 0:
            raise self.error(f"{'an' if kind == 'input' else 'a'} {kind}'s sign compares with 0, like "
                             f"'{kind} {name} {op} 0'", zero)
        return op + "0"

    def stmt_param(self):
        name = self.new_name()
        size, integer = self.size(), False
        if self.peek().text == "int":
            tok = self.take()
            if size is not None:
                raise self.error(f"an integer param is one integer per row, a scalar; write 'param {name.text} int' "
                                 f"without a size", tok)
            integer = True
        if self.peek().text not in (">", ">=", "<", "<="):
            return name, Param(name.text, size, None, integer)
        op = self.take().text
        negative = self.peek().text == "-"
        if negative:
            self.take()
        tok = self.take()
        if tok.kind != "number":
            raise self.error(f"a param's bound is a number, like 'param {name.text} {op} 0' or "
                             f"'param {name.text} {op} 1'", tok)
        c = -self.literal(tok) if negative else self.literal(tok)
        if c == 0:
            return name, Param(name.text, size, op + "0", integer)
        if size is not None:
            raise self.error(f"a bound other than 0 is for a scalar param, not the vector {name.text}", tok)
        if integer and ((op[0] == ">" and c >= INT_LIMIT) or (op[0] == "<" and c <= -INT_LIMIT)):
            raise self.error(f"an int param is computed in float32, where integers are exact up to {INT_LIMIT} in "
                             f"magnitude (a call refuses larger ones): 'param {name.text} int {op} "
                             f"{'-' if negative else ''}{tok.text}' admits none of them", tok)
        return name, Param(name.text, size, implied_sign(op, c), integer, (op, c))

    def stmt_let(self):
        name = self.new_name()
        self.expect("=")
        return name, Let(name.text, self.number_value())

    def stmt_out(self):
        name = self.new_name()
        self.expect("=")
        self.in_output = True
        return name, Output(name.text, self.number_value())

    def stmt_reduce(self):
        name = self.new_name()
        self.expect("=")
        red = self.expect(kind="name", what=f"a reducer ({', '.join(REDUCER_NAMES)})")
        if red.text not in REDUCER_NAMES:
            raise self.error(f"unknown reducer {red.text!r}; known reducers: {', '.join(REDUCER_NAMES)}", red)
        if red.text == "topk":
            self.expect("(")
            k = self.expect(kind="number", what="the integer k of topk(k, EXPR)")
            if not k.text.isdigit() or not k.text.strip("0"):
                raise self.error("k in topk(k, EXPR) must be a positive integer", k)
            self.expect(",", what="',' after k in topk(k, EXPR)")
            body = self.number_value()
            self.expect(")", what="')' to close topk(k, EXPR)")
            monoid = topk(self.count(k, limits.MAX_TOPK, "k of topk(k, EXPR)", "MAX_TOPK"))
        else:
            args = self.args()
            if len(args) != 1:
                raise self.error(f"{red.text}(EXPR) reduces one expression over the axis, got {len(args)}", red)
            if red.text == "mean":
                return name, self.mean(name, number(args[0]))
            if red.text == "argmax":  # the top-1: its index is the result NAME.index (ties to the lower index)
                self.argmaxes.add(name.text)
                return name, Reduction(name.text, topk(1), number(args[0]))
            body, monoid = number(args[0]), REDUCERS[red.text]
        return name, Reduction(name.text, monoid, body)

    def mean(self, name: Token, body: sp.Expr) -> list:
        """``reduce m = mean(e)`` as the statements it means: ``reduce m_sum = sum(e)``, ``reduce m_count = sum(1)``
        (the elements the mask keeps) and ``let m = m_sum / m_count``; the cascade prints back in that form."""
        taken = set(self.declared) | set(self.later)

        def fresh(base: str) -> str:
            out, k = base, 1
            while out in taken:
                out, k = f"{base}{k}", k + 1
            taken.add(out)
            return out
        total, count = fresh(f"{name.text}_sum"), fresh(f"{name.text}_count")
        ADD = REDUCERS["sum"]
        return [Reduction(total, ADD, body), Reduction(count, ADD, sp.Integer(1)),
                Let(name.text, symbol(total) / symbol(count))]


#: The sizes from which a literal rounds to float32's inf (half an ulp past the largest float32) and at or below which
#: it rounds to 0 (half the smallest subnormal), exactly: a literal beyond them is refused.
FLOAT32_INF, FLOAT32_ZERO = Fraction(2 ** 128 - 2 ** 103), Fraction(1, 2 ** 150)
#: The exponents whose exp float32 holds: log(2**-150) and log of FLOAT32_INF, rounded inward.
EXP_LOW, EXP_HIGH = sp.Rational(-10397, 100), sp.Rational(8872, 100)


def _short(value) -> str:
    text = str(value) if not isinstance(value, sp.Rational) or value.q == 1 and value.p.bit_length() < 200 \
        else f"a number of about {max(value.p.bit_length(), value.q.bit_length()) * 0.30103:.0f} digits"
    return text if len(text) <= 40 else text[:20] + "…" + text[-8:] + f" ({len(text)} characters)"


def _apply(op: str, a: sp.Expr, b: sp.Expr) -> sp.Expr:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b
    return a ** b


def _declared_later(lines: list[str]) -> dict[str, int]:
    """Names that statements declare, with their line: for 'used before defined' messages."""
    found = {}
    for no, line in enumerate(lines, 1):
        m = re.match(r"\s*(input|param|let|reduce|out)\s+([A-Za-z_]\w*)", line)
        if m:
            found.setdefault(m.group(2), no)
    return found


def parse(text: str, name: str = "cascade") -> Cascade:
    """Parse cascade text into a validated :class:`Cascade`.

    A leading byte-order mark is ignored.  The text's size and nesting are bounded by
    :mod:`redalgebra.ir.limits`.

    Raises
    ------
    CascadeSyntaxError
        With line, column and a caret, for any malformed or invalid statement
        (:class:`~redalgebra.errors.LimitError` for one past a limit).
    """
    if not isinstance(text, str):
        raise TypeError(f"parse() takes the cascade text as a str, got {type(text).__name__}")
    if len(text) > limits.MAX_TEXT_CHARS:
        raise LimitError(f"the text has {len(text)} characters, more than {limits.MAX_TEXT_CHARS} (the limit "
                         f"MAX_TEXT_CHARS)", 1, 1, "")
    lines = split_lines(text.removeprefix("\ufeff"))
    later = _declared_later(lines)
    statements, declared, heads, shape, argmaxes = [], {}, [], {}, set()
    for no, line in enumerate(lines, 1):
        if len(line) > limits.MAX_LINE_CHARS:
            raise LimitError(f"line {no} has {len(line)} characters, more than {limits.MAX_LINE_CHARS} (the limit "
                             f"MAX_LINE_CHARS); split the expression with let statements", no,
                             limits.MAX_LINE_CHARS + 1, line[:limits.MAX_LINE_CHARS + 20])
        tokens = tokenize(line, no)
        if tokens[0].kind == "end":
            continue
        p = _LineParser(tokens, no, line, declared, later, argmaxes)
        head, (name_tok, stmts) = p.statement()
        p.end()
        for stmt in stmts if isinstance(stmts, list) else [stmts]:  # mean(…) is three statements
            _count(statements, stmt, no, line, name_tok)
            _inlined(stmt, shape, no, line, name_tok)
            statements.append(stmt)
            heads.append((no, line, name_tok))
            declared[stmt.name] = stmt.symbol
    if not statements:
        raise CascadeSyntaxError("the cascade is empty; it needs at least an input and a reduction", 1, 1, "")
    try:
        cascade = Cascade(tuple(statements), name=name, source=text)
    except CascadeError:
        _locate(statements, heads, name)
        raise
    if not cascade.reductions:
        raise CascadeSyntaxError("the cascade has no reduce statement; add 'reduce NAME = REDUCER(EXPR)'",
                                 len(lines), 1, lines[-1] if lines else "")
    return cascade


def _locate(statements, heads, name) -> None:
    """The first statement that makes the cascade invalid, as a syntax error at its line (only on failure:
    validating each prefix is quadratic in the number of statements)."""
    for i, (no, line, name_tok) in enumerate(heads):
        try:
            Cascade(tuple(statements[:i + 1]), name=name)
        except CascadeError as err:
            msg = str(err).removeprefix(f"{name}: ")
            raise CascadeSyntaxError(msg, no, name_tok.column, line, len(name_tok.text)) from None


def _count(statements, stmt, no, line, tok) -> None:
    if len(statements) >= limits.MAX_STATEMENTS:
        raise LimitError(f"more than {limits.MAX_STATEMENTS} statements (the limit MAX_STATEMENTS)", no, tok.column,
                         line, len(tok.text))
    if isinstance(stmt, Reduction) and sum(isinstance(s, Reduction) for s in statements) >= limits.MAX_REDUCTIONS:
        raise LimitError(f"more than {limits.MAX_REDUCTIONS} reductions (the limit MAX_REDUCTIONS)", no, tok.column,
                         line, len(tok.text))


def _inlined(stmt, shape: dict, no, line, tok) -> None:
    """Depth and numeric power of the statement with the lets it uses written out, as the analysis sees it."""
    expr = stmt.expr if isinstance(stmt, (Let, Reduction, Output)) else None
    if expr is None:
        return
    depth, power = _measure(expr, shape, {})
    shape[stmt.name] = (depth, power)
    if depth > limits.MAX_INLINED_DEPTH:
        raise LimitError(f"with the lets it uses written out, {stmt.name} is nested {depth} deep, more than "
                         f"{limits.MAX_INLINED_DEPTH} (the limit MAX_INLINED_DEPTH)", no, tok.column, line,
                         len(tok.text))
    if power > limits.MAX_POWER:
        raise LimitError(f"with the lets it uses written out, {stmt.name} raises a value to a power of about "
                         f"{power:.3g}, more than {limits.MAX_POWER} (the limit MAX_POWER)", no, tok.column, line,
                         len(tok.text))


def _measure(expr, shape: dict, memo: dict) -> tuple[int, float]:
    if expr in memo:
        return memo[expr]
    if expr.is_Symbol:
        out = shape.get(expr.name, (0, 1.0))
    elif not expr.args:
        out = (0, 1.0)
    else:
        parts = [_measure(a, shape, memo) for a in expr.args]
        depth, power = 1 + max(d for d, _ in parts), max(p for _, p in parts)
        if isinstance(expr, sp.Pow) and expr.exp.is_Number and expr.exp.is_finite:
            power = parts[0][1] * max(1.0, float(abs(expr.exp)))
        out = (depth, power)
    memo[expr] = out
    return out
