"""The tensor-core kernels' tile copies (``strategies/tile_copies.py``) for head widths and block sizes in no
catalogue: every 16-byte chunk of a tile's staged rows copied exactly once (a width of a multiple of 8 but not of 16
staged with a chunk of zeros a row: copied as no bytes, from inside the row), nothing of the copy count's padding
ever, and the unrolled forms (a whole tile's copies from one address, a producer's chained ones) placing each copy
where the per-copy form does. The copies' places are the generator's own expressions, evaluated here for every
thread."""

from __future__ import annotations

import functools
from collections import Counter
from types import SimpleNamespace

import pytest

from redalgebra.codegen.strategies import tile_copies
from redalgebra.codegen.strategies.products import staged
from redalgebra.codegen.strategies.tile_copies import TileCopies
from redalgebra.codegen.strategies.wgmma import WgmmaKernel
from redalgebra.codegen.tree import Assign, Call

WIDTHS = (16, 24, 48, 72, 80, 96, 112, 128, 144, 160, 192, 200, 256)


class Copies(TileCopies):
    """Only what the copies read: the input ``k``'s components, the tile, the copying threads, the stage's layout
    (``mma``'s padded rows, or with ``swizzled`` ``wgmma``'s 128-byte swizzle)."""

    def __init__(self, size: int, kt: int, threads: int, swizzled: bool):
        self.size, self.kt, self.vin, self.base = {"k": size}, kt, ["k"], {"k": 0}
        self.width = {"k": staged(size)}
        self.pitch = {"k": self.width["k"] + 8}
        self.producing = (threads, "tid")
        self.swizzled = swizzled

    def stage_base(self, x, stage):
        return WgmmaKernel.stage_base(self, x, stage).replace("sb + ", "") if self.swizzled else \
            super().stage_base(x, stage)

    def stage_offset(self, x, element, column):
        return (WgmmaKernel.stage_offset if self.swizzled else TileCopies.stage_offset)(self, x, element, column)

    def stage_step(self, x, rows):
        return (WgmmaKernel.stage_step if self.swizzled else TileCopies.stage_step)(self, x, rows)


_NAMES = {"fresh": lambda v: v, "uint32": int, "min": min, "max": max, "pick": lambda c, a, b: a if c else b}


@functools.lru_cache(maxsize=None)
def _fn(expr: str):
    """The generator's expression ``expr`` as a function of the names it reads (``tid``, earlier assignments);
    compiled once (compiled again for every thread, the compiling was most of this file's time)."""
    code = compile(expr, "<copies>", "eval")
    return lambda **env: eval(code, _NAMES, env)  # noqa: S307 - the generator's own text


def _run(statements, env: dict) -> list:
    """The 16-byte copies ``statements`` make (``cp_async16_at``: (place in the stage, element offset in ``k``, bytes
    read)), assignments evaluated in order."""
    out = []
    for s in statements:
        if isinstance(s, Assign):
            env[s.target] = _fn(s.value)(**env)
        elif isinstance(s, Call) and s.fn == "cp_async16_at":
            out.append(tuple(_fn(s.args[i])(**env) for i in (1, 3, 4)))
    return out


@pytest.mark.parametrize("swizzled", [False, True])
@pytest.mark.parametrize("threads", [32, 128, 256])
@pytest.mark.parametrize("kt", [32, 64, 128])
def test_every_chunk_of_a_tile_is_copied_once_and_the_unrolled_forms_place_it_as_the_per_copy_form(kt, threads,
                                                                                                   swizzled):
    for size in WIDTHS:
        c = Copies(size, kt, threads, swizzled)
        chunks = c.chunks("k")
        width = staged(size)
        assert chunks >= width // 8 and threads % chunks == 0 or chunks == width // 8
        own = {(e, 8 * j) for e in range(kt) for j in range(width // 8)}
        seen, place = Counter(), {}
        for _, u, guard in c.copies("k"):
            ce, cc = (_fn(e) for e in c.copy_place("k", u))
            at = _fn(c.stage_offset("k", f"({c.copy_place('k', u)[0]})", f"({c.copy_place('k', u)[1]})"))
            source = _fn(c.source_column("k", c.copy_place("k", u)[1]))
            read = _fn(c.source_bytes("k", c.copy_place("k", u)[1]))
            # the per-copy form's own copy (a partial tile's, the producer's loop): its column and bytes, every
            # element of the tile inside the row
            one = c.copy_one("k", "0", "0", *c.copy_place("k", u), "0")[1]
            one_column, one_bytes = _fn(one.args[4]), _fn(one.args[5])
            test = _fn(guard or "True")
            for tid in range(threads):
                if test(tid=tid):
                    seen[ce(tid=tid), cc(tid=tid)] += 1
                    # (a chunk of the row's padding to 16 components: no bytes read, from the row's last chunk)
                    assert read(tid=tid) == (16 if cc(tid=tid) < size else 0) and source(tid=tid) < size
                    cl = ce(tid=tid)
                    assert (one_column(tid=tid), one_bytes(tid=tid, cl=cl, length=kt)) == (source(tid=tid), read(tid=tid))
                    place[tid, u] = (at(tid=tid), ce(tid=tid) * size + source(tid=tid), read(tid=tid))
        assert seen == Counter(own), (size, kt, threads)  # each chunk once, nothing of the copy count's padding
        regular = c.regular("k")
        if regular is None:
            continue
        rows, step, period = regular
        live = _fn(c.chunk_test("k") or "True")
        for tid in range(threads):
            env = {"tid": tid, "rr_k": 0, "k": SimpleNamespace(shape=(1, kt))}
            for s in c.copy_setup():  # so_k_v (a copy's place, one per period) and gb_k (its offset in k)
                env[s.target] = _fn(s.value)(**env)
            env["ga_k"] = env["gb_k"]
            # (stage 0 begins at 0: the places are the per-copy form's stage offsets)
            unrolled = [(env[f"so_k_{u % period}"] + u // period * step, env["ga_k"] + u * rows * size,
                         env.get("zs_k", 16)) for u in range(kt // rows)]
            chained = _run(c.chained("k", "0", rows, step, period), dict(env))
            assert unrolled == chained, (size, kt, threads, tid)
            if live(tid=tid):  # the per-copy form's places, in the same order
                assert unrolled == [place[tid, u] for u in range(kt // rows)], (size, kt, threads, tid)


def test_rows_of_eighty_components_copy_as_sixteen_chunks_and_only_when_asked(monkeypatch):
    c = Copies(80, 64, 128, True)
    assert c.chunks("k") == 16 and c.chunk_test("k") == "8 * (tid % 16) < 80" and c.regular("k") == (8, 512, 1)
    monkeypatch.setattr(tile_copies, "PAD_CHUNKS", False)
    assert c.chunks("k") == 10 and c.chunk_test("k") is None and c.regular("k") is None
