"""The .npz writer: columns in place when their row count is announced, copied otherwise; every
file reads back with np.load and passes zipfile's CRC check, whatever the announced count was."""

from __future__ import annotations

import itertools
import os
import zipfile

import numpy as np
import pytest

from zvf.config import tuned
from zvf.read import npz
from zvf.read.selection import Selection
from zvf.read.writers import open_writer


def _batches(n_rows: int, sizes: list[int], seed: int = 0) -> list[Selection]:
    rng = np.random.default_rng(seed)
    pos = rng.random((n_rows, 3)).astype(np.float32)
    ids = rng.integers(0, 1 << 40, n_rows)
    cuts = np.cumsum([0, *sizes])
    assert cuts[-1] == n_rows
    return [Selection(pos[a:b], {"w": ids[a:b].astype(np.float64)}, ids[a:b]) for a, b in itertools.pairwise(cuts)]


def _write(path, batches: list[Selection], rows: int | None) -> None:
    w = open_writer(str(path), "npz", batches[0], rows=rows)
    for b in batches:
        w.write(b)
    w.close()


def _check(path, batches: list[Selection]) -> None:
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None  # every member's CRC-32
        assert zf.namelist() == ["positions.npy", "object_ids.npy", "attr_w.npy"]
    with np.load(path) as data:
        assert np.array_equal(data["positions"], np.concatenate([b.positions for b in batches]))
        assert np.array_equal(data["object_ids"], np.concatenate([b.object_ids for b in batches]))
        assert np.array_equal(data["attr_w"], np.concatenate([b.attributes["w"] for b in batches]))
    assert sorted(os.listdir(os.path.dirname(path))) == [os.path.basename(path)]  # no temporary files left


@pytest.mark.parametrize("announced", [None, 1000, 0, 999, 1001, 10**9])
def test_npz_reads_back_whatever_row_count_was_announced(tmp_path, announced):
    batches = _batches(1000, [1, 400, 0, 599])
    _write(tmp_path / "out.npz", batches, announced)
    _check(str(tmp_path / "out.npz"), batches)


def test_npz_with_the_right_count_is_written_once_in_place(tmp_path, monkeypatch):
    copied = []
    real = npz.copy_range
    monkeypatch.setattr(npz, "copy_range", lambda *a: copied.append(a[4]) or real(*a))
    batches = _batches(5000, [2500, 2500])
    _write(tmp_path / "out.npz", batches, 5000)
    assert copied == []  # no column went through a temporary file
    _check(str(tmp_path / "out.npz"), batches)
    _write(tmp_path / "out.npz", batches, None)  # no count: every column copied in
    assert len(copied) == 3


def test_npz_without_positional_io(tmp_path, monkeypatch):
    """Platforms without os.pwrite / os.pread (Windows) seek and write instead."""
    monkeypatch.delattr(os, "pwrite", raising=False)
    monkeypatch.delattr(os, "pread", raising=False)
    batches = _batches(300, [100, 200])
    for announced in (300, 200):  # in place, then reassembled from the region and a spill file
        _write(tmp_path / "out.npz", batches, announced)
        _check(str(tmp_path / "out.npz"), batches)


def test_npz_reserves_no_absurd_region(tmp_path):
    """A huge announced count (untrusted metadata) makes no file of that apparent size."""
    batches = _batches(1000, [1000])
    with tuned(npz_max_reserved_bytes=40_000):
        _write(tmp_path / "out.npz", batches, 1000)  # positions (12 kB) and ids (8 kB) fit, the attribute not
        _check(str(tmp_path / "out.npz"), batches)
        _write(tmp_path / "out.npz", batches, 10**15)
        _check(str(tmp_path / "out.npz"), batches)


def test_npz_link_table_and_casts(tmp_path):
    """Link columns (count unknown) follow the vertex columns; later batches are cast to the first's dtypes."""
    pos = np.arange(30, dtype=np.float32).reshape(10, 3)
    first = Selection(pos[:6], {}, np.zeros(6, np.int64), edges=np.array([[0, 1], [1, 2]]),
                      offsets=np.array([0, 6]), objects=np.array([0]))
    second = Selection(pos[6:].astype(np.float64), {}, np.ones(4, np.int64), edges=np.array([[0, 1]]),
                       offsets=np.array([0, 4]), objects=np.array([1]))
    w = open_writer(str(tmp_path / "g.npz"), "npz", first, "edges", rows=10)
    w.write(first)
    w.write(second)
    w.close()
    with zipfile.ZipFile(tmp_path / "g.npz") as zf:
        assert zf.testzip() is None
    with np.load(tmp_path / "g.npz") as data:
        assert data["positions"].dtype == np.float32 and np.array_equal(data["positions"], pos)
        assert data["vertex_index"].tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3]
        assert data["edges"].tolist() == [[0, 1], [1, 2], [0, 1]]
        assert data["edges_object_ids"].tolist() == [0, 0, 1]


def test_npz_spills_columns_of_any_name(tmp_path):
    sel = Selection(np.zeros((4, 3), np.float32), {"a/b": np.arange(4.0), "a b": np.ones(4)}, None)
    _write(tmp_path / "out.npz", [sel, sel], None)
    with np.load(tmp_path / "out.npz") as data:
        assert data["attr_a/b"].tolist() == [0, 1, 2, 3] * 2 and data["attr_a b"].tolist() == [1] * 8


def test_npz_refuses_rows_of_another_shape(tmp_path):
    from zvf.errors import InvalidArgumentError

    first = Selection(np.zeros((2, 3), np.float32), {"rgb": np.zeros((2, 3))}, None)
    later = Selection(np.zeros((2, 3), np.float32), {"rgb": np.zeros((2, 4))}, None)
    w = open_writer(str(tmp_path / "out.npz"), "npz", first, rows=4)
    w.write(first)
    with pytest.raises(InvalidArgumentError, match="attr_rgb"):
        w.write(later)
    w.abort()
    assert os.listdir(tmp_path) == []


def test_npz_abort_leaves_nothing(tmp_path):
    batches = _batches(100, [50, 50])
    w = open_writer(str(tmp_path / "out.npz"), "npz", batches[0], rows=10)  # overflows: a spill file exists
    for b in batches:
        w.write(b)
    w.abort()
    assert os.listdir(tmp_path) == []


def test_npy_header_is_what_numpy_reads():
    import io

    for dtype, shape in ((np.float32, (0, 3)), (np.int64, (12345678901,)), (np.dtype("<u2"), (7, 2, 2))):
        head = npz.npy_header(np.dtype(dtype), shape)
        assert len(head) % 64 == 0
        f = io.BytesIO(head)
        assert np.lib.format.read_magic(f) == (2, 0)
        assert np.lib.format.read_array_header_2_0(f) == (shape, False, np.dtype(dtype))
