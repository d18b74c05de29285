"""gpu/rowtile_cost.py's counts and fit, without a GPU."""

import pytest

from tests.gpu_scripts import loaded


@pytest.fixture(scope="module")
def rowtile():
    yield from loaded("rowtile_cost")


def test_a_causal_row_tile_counts_the_keys_up_to_its_last_row(rowtile):
    # brute force: row tile r (rows r·bm … of the last Q positions of L keys) sees keys up to its last row's position
    for queries, length, bm, bn in ((2048, 2048, 128, 128), (300, 1000, 128, 64), (5, 5, 128, 128), (130, 130, 64, 64)):
        rows = -(-queries // bm)
        last = [min(queries, (r + 1) * bm) - 1 + length - queries for r in range(rows)]
        assert rowtile.tile_counts(queries, length, True, bm, bn) == (rows, sum(p // bn + 1 for p in last))
        assert rowtile.tile_counts(queries, length, False, bm, bn) == (rows, rows * -(-length // bn))
    assert rowtile.tile_counts(2048, 2048, True) == (16, 136)  # (LLaMA's 16 row tiles: 1 + 2 + … + 16)


def test_the_fit_recovers_a_row_tiles_cost_and_a_tiles(rowtile):
    xs = [(7.76, n) for n in (31.0, 62.1, 124.1, 186.2)]
    ys = [7.76 * 8.0 + 1.85 * n for _, n in xs]
    f, t, worst = rowtile.fit(xs, ys)
    assert f == pytest.approx(8.0) and t == pytest.approx(1.85) and worst < 1e-9
