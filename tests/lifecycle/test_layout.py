"""chunk_shape="auto": the chooser on 1 k, 1 M and 100 M-point extents, writers using it, the sparse-layout warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import zvf.aio as za
from zvf.errors import InvalidArgumentError
from zvf.lifecycle.layout import (
    TARGET_POINTS,
    LayoutWarning,
    check_cells,
    choose_bin_shape,
    choose_chunk_shape,
    resolve,
)


def _chunks(lo, hi, cs):
    return int(np.prod(np.floor(np.asarray(hi) / cs) - np.floor(np.asarray(lo) / cs) + 1))


@pytest.mark.parametrize("n, lo, hi", [
    (1_000, [0, 0, 0], [100, 100, 100]),
    (1_000_000, [0, 0, 0], [1000, 1000, 1000]),
    (100_000_000, [-5e4, -5e4, 0], [5e4, 5e4, 2e4]),
    (1_000_000, [0, 0, 0], [100, 100, 0]),  # a flat sheet: one chunk along z
])
def test_chooser_aims_at_the_target(n, lo, hi):
    cs = choose_chunk_shape(lo, hi, n)
    assert len(cs) == 3 and len(set(cs)) == 1
    made = _chunks(lo, hi, cs[0])
    per = n / made
    assert per >= TARGET_POINTS / 8 or made == 1, (cs, made)
    assert per <= TARGET_POINTS * 8, (cs, made)
    if n <= TARGET_POINTS:
        assert made == 1


def test_chooser_edge_cases():
    assert choose_chunk_shape([5, 5], [5, 5], 10) == [choose_chunk_shape([5, 5], [5, 5], 10)[0]] * 2
    assert choose_bin_shape([8.0, 8.0, 8.0], 100) is None
    bins = choose_bin_shape([8.0, 8.0, 8.0], 65536)
    assert bins is not None and all(8.0 / b == int(8.0 / b) for b in bins)
    with pytest.raises(InvalidArgumentError, match="chunk_shape"):
        resolve("big", None, [0], [1], 5)
    with pytest.raises(InvalidArgumentError, match="bin_shape"):
        resolve([1.0], "fine", [0], [1], 5)
    assert resolve([2, 2], None, [0, 0], [1, 1], 5) == ([2, 2], None)  # explicit shapes untouched


async def test_writers_take_auto(tmp_path):
    rng = np.random.default_rng(0)
    pos = rng.uniform(0, 50, (5000, 3)).astype(np.float32)
    await za.write_points(str(tmp_path / "p"), pos, chunk_shape="auto", bin_shape="auto")
    ds = await za.open(str(tmp_path / "p"))
    assert ds.chunk_shape == tuple(choose_chunk_shape(pos.min(0), pos.max(0), 5000))
    assert len(await ds.read_all()) == 5000
    lines = [rng.uniform(0, 50, (20, 3)) for _ in range(10)]
    await za.write_polylines(str(tmp_path / "l"), lines, chunk_shape="auto")
    assert len((await (await za.open(str(tmp_path / "l"))).read_object(3)).positions) == 20


def test_sparse_layout_warns():
    with pytest.warns(LayoutWarning, match="chunk_shape='auto' would choose"):
        check_cells(20_000, 20_000, [1e-3] * 3, [0, 0, 0], [1, 1, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_cells(20_000, 10, [0.5] * 3, [0, 0, 0], [1, 1, 1])
        check_cells(2_000, 2_000, [1e-3] * 3, [0, 0, 0], [1, 1, 1])  # few cells: no noise


async def test_writer_warns_on_absurd_chunk_shape(memory_url):
    pos = np.random.default_rng(1).random((5000, 3)).astype(np.float32)
    with pytest.warns(LayoutWarning, match="5000 vertices"):
        await za.write_points(memory_url, pos, chunk_shape=[1e-3] * 3)
