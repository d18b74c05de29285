"""The cascade text format's words, tokens and lines: the reserved vocabulary, a line split into tokens, the text
split into lines as an editor numbers them, and bytes decoded with a decoding error placed at its line and column.
The grammar over the tokens is :mod:`.parser`'s."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import CascadeSyntaxError
from .functions import ELEMENTWISE
from .monoid import REDUCERS
from .nodes import POSITION

KEYWORDS = ("input", "param", "let", "reduce", "out")
FUNCTIONS = (*ELEMENTWISE, "dot", "max", "min", "where")
REDUCER_NAMES = (*REDUCERS, "topk", "mean", "argmax")
#: The largest magnitude of an ``int`` param (a label, a query's position) a call takes, and a bound may admit: the
#: kernels compute in float32, where every integer up to 2**24 is exact.
INT_LIMIT = 2 ** 24
#: Names of constants: the element's index along the axis and infinity (``parser.CONSTANTS`` holds their values).
CONSTANT_NAMES = (POSITION, "inf")
LOGIC = ("and", "or", "not")
# "mean" and "argmax" only mean reducers after 'reduce NAME =': still names elsewhere (cascades written before them)
RESERVED = (*KEYWORDS, *FUNCTIONS, *(r for r in REDUCER_NAMES if r not in ("mean", "argmax")), *CONSTANT_NAMES, *LOGIC,
            "int")
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\f\v]+) | (?P<comment>\#.*) |
    (?P<number>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?) |
    (?P<name>[A-Za-z_][A-Za-z0-9_]*) |
    (?P<op>\*\*|>=|<=|==|!=|[-+*/()\[\],=<>^])
""", re.VERBOSE)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str   # "number" | "name" | "op" | "end"
    text: str
    column: int  # 1-based


def tokenize(line: str, line_no: int) -> list[Token]:
    """Split one line into tokens; raises CascadeSyntaxError on a stray character."""
    tokens, pos = [], 0
    while pos < len(line):
        m = _TOKEN.match(line, pos)
        if m is None:
            why = f"unexpected character {line[pos]!r}"
            if line.startswith(".index", pos):  # (NAME.index: a top-k's indices, a result of the call only)
                why += ("; NAME.index, a top-k's or an argmax's indices, is a result of the call, which expressions "
                        "cannot read")
            raise CascadeSyntaxError(why, line_no, pos + 1, line)
        if m.lastgroup not in ("ws", "comment"):
            tokens.append(Token(m.lastgroup, m.group(), pos + 1))
        pos = m.end()
    tokens.append(Token("end", "", len(line.rstrip()) + 1))
    return tokens


def split_lines(text: str) -> list[str]:
    """Lines broken at ``\\n``, ``\\r\\n`` and ``\\r`` only (not at ``\\v``, ``\\f`` or U+2028, as
    ``str.splitlines`` does), so that line numbers are those of an editor."""
    lines = re.split(r"\r\n|\r|\n", text)
    return lines[:-1] if lines and lines[-1] == "" else lines


def decode_error(err: UnicodeDecodeError) -> CascadeSyntaxError:
    """A decoding error of cascade text as a syntax error at its line and column (not a byte offset)."""
    data = err.object if isinstance(err.object, (bytes, bytearray)) else b""
    before = split_lines(bytes(data[:err.start]).decode("utf-8", errors="replace") + "\n")
    last = before[-1] if before else ""
    line = bytes(data[err.start:]).split(b"\n")[0].decode("utf-8", errors="replace")
    return CascadeSyntaxError(f"the text is not valid {err.encoding or 'UTF-8'}: byte "
                              f"0x{data[err.start]:02x} ({err.reason})" if err.start < len(data) else
                              f"the text is not valid UTF-8 ({err.reason})",
                              len(before), len(last) + 1, (last + line).rstrip("\r"), 1)


def decode(data: bytes) -> str:
    """Cascade text from bytes: UTF-8, a leading byte-order mark dropped; else a CascadeSyntaxError."""
    try:
        return bytes(data).decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        raise decode_error(err) from None
