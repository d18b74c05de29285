"""Generated source as real files: numba's cache works and errors point at lines.

Files live in a per-user directory (``$REDALGEBRA_CACHE`` or
``~/.cache/redalgebra/kernels``), named by the SHA-256 of their content.  A
file is imported only when its content hashes to its name, so nothing planted
in the directory is ever imported.

Whatever sits under a file's name is only ever read when it is a regular file
(checked without following links, opened without blocking), so a directory, a
FIFO, a device or a link there is replaced by the genuine file — or, when it
cannot be replaced, bypassed by writing to a private temporary folder.  A cache
folder that cannot be created or written is replaced by that temporary folder,
with a warning, once per process.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import sys
import tempfile
import types
import warnings
from pathlib import Path

from ..errors import RedalgebraError

_FALLBACK: list[Path] = []  # the private temporary folder, made on first need


def cache_dir() -> Path:
    """The configured cache folder, created when missing (it may still be unwritable: see :func:`write`)."""
    root = os.environ.get("REDALGEBRA_CACHE") or Path.home() / ".cache" / "redalgebra" / "kernels"
    path = Path(root)
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as err:
        return _fallback(f"the cache folder {path} cannot be created ({err})")
    return path


def _fallback(why: str) -> Path:
    if not _FALLBACK:
        _FALLBACK.append(Path(tempfile.mkdtemp(prefix="redalgebra-kernels-")))
        warnings.warn(f"{why}; generated kernels go to {_FALLBACK[0]} for this process", RuntimeWarning,
                      stacklevel=3)
    return _FALLBACK[0]


def numba_cache(path: str | None) -> bool:
    """Whether numba may keep the compiled kernels of the generated module at ``path`` on disk (``cache=True``: in a
    ``__pycache__`` folder beside it, or under ``NUMBA_CACHE_DIR`` when that is set), so that a new process loads them
    instead of compiling them again (10-25 s for a tensor-core module). Only where that folder is the user's own and
    no one else may write it: numba's cache files are pickles, which a folder others can write could plant. The
    ``__pycache__`` folder is made here, private (numba would make it with the process's umask).
    ``REDALGEBRA_NUMBA_CACHE=0`` turns it off."""
    if path is None or os.environ.get("REDALGEBRA_NUMBA_CACHE", "1") == "0":
        return False
    config = sys.modules.get("numba.core.config")  # (numba reads NUMBA_CACHE_DIR when it is imported)
    folder = getattr(config, "CACHE_DIR", "") or os.environ.get("NUMBA_CACHE_DIR")
    if not folder:
        folder = Path(path).parent / "__pycache__"
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
        except OSError:
            return False
    return _private(folder) and _private(Path(path).parent)


def _private(folder) -> bool:
    """A real folder (not a link) of this user that neither the group nor others may write."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _read_regular(path: Path) -> bytes | None:
    """The bytes of ``path`` when it is a regular file that can be read now; None for anything else
    (missing, a directory, a FIFO, a device, a link, unreadable), never blocking."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped between lstat and open
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _put(folder: Path, name: str, data: bytes) -> Path:
    """Write ``data`` to ``folder/name`` atomically (raises OSError when the folder or the name refuses it)."""
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, folder / name)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return folder / name


def write(source: str) -> Path:
    """The path of a regular file holding ``source`` (written atomically when missing or wrong)."""
    name, data = f"ra_{digest(source)[:32]}.py", source.encode()
    folder = cache_dir()
    if _read_regular(folder / name) == data:
        return folder / name
    try:
        return _put(folder, name, data)
    except OSError as err:
        if folder == (_FALLBACK[0] if _FALLBACK else None):
            raise RedalgebraError(f"cannot write the generated kernel {folder / name}: {err}") from None
        backup = _fallback(f"cannot write the cache file {folder / name} ({err})")
        if _read_regular(backup / name) == data:
            return backup / name
        return _put(backup, name, data)


def _hash_of(path: Path) -> str | None:
    data = _read_regular(path)
    return None if data is None else hashlib.sha256(data).hexdigest()


@functools.lru_cache(maxsize=1)
def runtime_stamp() -> str:
    """A line naming this package's version and the code that generated modules call into (the intrinsics): numba's
    disk cache keys a kernel by its module file's own text, not by what it imports, so the line goes into every file
    (and so its name) — an upgrade or an edit of an intrinsic's PTX never loads a kernel compiled before it."""
    from .. import __version__

    here, parts = Path(__file__).parent, [__version__.encode()]
    for name in ("intrinsics.py", "tensor_cores.py"):
        try:
            parts.append((here / name).read_bytes())
        except OSError:  # a package without its sources (a zip): the version alone
            pass
    return f"# runtime {hashlib.sha256(b''.join(parts)).hexdigest()[:16]}\n"


def load(source: str):
    """Import the module holding ``source`` (with :func:`runtime_stamp`); the text executed is the one checked
    against its hash."""
    source += runtime_stamp()
    path = write(source)
    data = _read_regular(path)
    if data is None or data != source.encode() or not path.stem.endswith(digest(source)[:32]):
        raise RedalgebraError(f"cached kernel {path} does not hash to its name; refusing to import it")
    text = data.decode()
    name = path.stem
    if name in sys.modules:
        return sys.modules[name]
    from .front_end import install

    install("cpu")  # (numba's SSA pass in linear time: the same code)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        exec(compile(text, str(path), "exec"), module.__dict__)  # noqa: S102 - our own generated, verified source
    except (SyntaxError, NameError) as err:  # a generator's fault, said as one (not left half-imported for the next call)
        del sys.modules[name]
        where = f" at line {err.lineno}" if isinstance(err, SyntaxError) else ""
        raise RedalgebraError(f"the generated module {path} does not import ({type(err).__name__}{where}: {err}): a "
                              f"fault of the code generator for this cascade and strategy; another strategy may "
                              f"build it, and the module is kept there for a report") from err
    return module
