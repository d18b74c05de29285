"""Generated source as real files: numba's cache works and errors point at lines.

Files live in a per-user directory (``$REDALGEBRA_CACHE`` or
``~/.cache/redalgebra/kernels``), named by the SHA-256 of their content.  A
file is imported only when its content hashes to its name, so nothing planted
in the directory is ever imported.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import types
from pathlib import Path

from ..errors import RedalgebraError


def cache_dir() -> Path:
    root = os.environ.get("REDALGEBRA_CACHE") or Path.home() / ".cache" / "redalgebra" / "kernels"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def write(source: str) -> Path:
    """The path of a file holding ``source`` (written atomically when missing)."""
    name = f"ra_{digest(source)[:32]}.py"
    path = cache_dir() / name
    if not path.exists() or _hash_of(path) != digest(source):
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(source)
        os.replace(tmp, path)
    return path


def _hash_of(path: Path) -> str:
    return digest(path.read_text())


def load(source: str):
    """Import the module holding ``source``; the text executed is the one checked against its hash."""
    path = write(source)
    text = path.read_text()
    if digest(text) != digest(source) or not path.stem.endswith(digest(text)[:32]):
        raise RedalgebraError(f"cached kernel {path} does not hash to its name; refusing to import it")
    name = path.stem
    if name in sys.modules:
        return sys.modules[name]
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(text, str(path), "exec"), module.__dict__)  # noqa: S102 - our own generated, verified source
    return module
