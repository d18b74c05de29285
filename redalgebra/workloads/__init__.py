"""The workload catalogue: the paper's cascades and more, in the text format.

Each :class:`Workload` is cascade text plus realistic shapes.  Look one up by
name (``workloads.get("attention")`` or ``workloads.attention``), or load a
name-or-file with :func:`load`.

Axis conventions: a row is one independent cascade (a softmax row, one query
of one head, one token's hidden vector); ``L`` is the reduction axis.

May import: :mod:`redalgebra.ir`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import RedalgebraError
from ..ir import Cascade, parse
from . import masks
from .catalogue import ENTRIES, MULTI_TERM, NOT_FUSABLE


@dataclass(frozen=True)
class Workload:
    """A named cascade with the shapes it is run at."""

    name: str
    text: str
    description: str
    paper: bool = True
    shapes: tuple = field(default=())
    expect: dict | None = None  # for cascades that must not fuse: the reduction and each ⊗'s failed condition

    @property
    def fusable(self) -> bool:
        """Whether the catalogue expects the analysis to fuse it."""
        return self.expect is None

    @property
    def cascade(self) -> Cascade:
        return parse(self.text, self.name)


CATALOGUE = {e["name"]: Workload(**e) for e in ENTRIES + MULTI_TERM + NOT_FUSABLE}


def names(fusable: bool | None = None) -> list[str]:
    """Catalogue names in catalogue order; ``fusable=True/False`` keeps only those expected to fuse / not."""
    return [n for n, w in CATALOGUE.items() if fusable is None or w.fusable == fusable]


def get(name: str) -> Workload:
    """The workload called ``name``; a clear error lists the known names."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise RedalgebraError(f"unknown workload {name!r}; known: {', '.join(CATALOGUE)}") from None


def load(name_or_path: str) -> Cascade:
    """A catalogue name, or the path of a cascade text file, parsed into a Cascade."""
    if name_or_path in CATALOGUE:
        return CATALOGUE[name_or_path].cascade
    path = Path(name_or_path)
    if path.is_file():
        return parse(path.read_text(), path.stem)
    raise RedalgebraError(f"{name_or_path!r} is neither a workload ({', '.join(CATALOGUE)}) nor a readable file")


def __getattr__(name: str) -> Workload:
    if name in CATALOGUE:
        return CATALOGUE[name]
    raise AttributeError(f"module 'redalgebra.workloads' has no attribute {name!r}")


__all__ = ["CATALOGUE", "Workload", "get", "load", "masks", "names"]
