"""Coarse pyramid levels read by their own layout (issue 23, "one layout model per level").

Regression tests for what was seen: boxes on levels whose bin is larger than their chunk (or whose
chunk scale differs) missed vertices, ``read_all`` of a coarse streamline level lost the vertices its
objects share, ``count()`` read vertex cells although the fragment indexes said the bins it cut were
empty, and ``validate(level=5)`` called a store whose vertices sit in the wrong chunk OK.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import numpy as np
import pytest

import zvf
from tests.support.vlen_cells import unframe, vlen_frame
from zvf.aio import AsyncDataset
from zvf.cli.main import main
from zvf.format.grid import inside
from zvf.io.executor import Executor
from zvf.io.store import StoreHandle
from zvf.read import load
from zvf.testing import MemoryTransport

BOX = (np.array([1.66, 26.97, 4.1]), np.array([63.7, 81.31, 91.26]))


def _points(n=10_000, seed=0):
    return np.random.default_rng(seed).uniform(0, 100, (n, 3)).astype(np.float32)


def _truth(ds, level, lo, hi) -> int:
    return int(inside(ds.read_all(level=level).positions, lo, hi).sum())


@pytest.fixture(scope="module")
def binned(tmp_path_factory) -> str:
    """The README's pyramid: bins of 12.5 in chunks of 25, then bins 2x and 4x (level 2: bin 50 > chunk 25)."""
    path = str(tmp_path_factory.mktemp("layout") / "binned")
    zvf.write_points(path, _points(), chunk_shape=(25, 25, 25), bin_shape=(12.5,) * 3)
    zvf.build_pyramid(path, factors=[(2, 1), (2, 2)])
    return path


@pytest.fixture(scope="module")
def scaled(tmp_path_factory) -> str:
    """No bins, chunk scales 1 and 2: level 1 has bins of 50 in chunks of 25."""
    path = str(tmp_path_factory.mktemp("layout") / "scaled")
    zvf.write_points(path, _points(), chunk_shape=(25, 25, 25))
    zvf.build_pyramid(path, factors=[(2, 1), (2, 2)], chunk_scale_factors=[1, 2])
    return path


@pytest.mark.parametrize("name", ["binned", "scaled"])
def test_box_on_every_level_finds_every_vertex(name, request, capsys):
    path = request.getfixturevalue(name)
    ds = zvf.open(path)
    for level in ds.levels:
        truth = _truth(ds, level, *BOX)
        q = ds.select(bbox=BOX, level=level)
        assert q.count() == truth, (name, level)
        assert len(q.read()) == truth, (name, level)
        assert len(ds.query(BOX, level=level)) == truth, (name, level)
        argv = ["query", path, "--level", str(level), "--bbox", "1.66,26.97,4.1", "63.7,81.31,91.26", "--count"]
        assert main(argv) == 0
        assert capsys.readouterr().out.startswith(f"{truth} vertices"), (name, level)
    ds.close()


@pytest.mark.parametrize("name", ["binned", "scaled"])
def test_pyramid_levels_file_each_vertex_in_its_own_chunk(name, request):
    """Every vertex is in the chunk whose extent holds it (0.9.2's placement of coarse vertices)."""
    path = request.getfixturevalue(name)
    ds = zvf.open(path)
    for level in ds.levels[1:]:
        doc = json.loads((Path(path) / str(level) / "zarr.json").read_text())["attributes"]["zarr_vectors_level"]
        edge = np.asarray(doc.get("chunk_shape", ds.chunk_shape), np.float64)
        for sel, chunk in zip(ds.iter_chunks(level=level, batch_chunks=1), _listed(path, level)):
            assert np.all(np.floor(sel.positions / edge) == chunk), (name, level, chunk)
    ds.close()
    assert zvf.validate(path, level=5).ok


@pytest.fixture(scope="module")
def streamline_pyramid(tmp_path_factory) -> str:
    rng = np.random.default_rng(1)
    lines = [(rng.uniform(0, 100, 3) + np.cumsum(rng.normal(0, 2, (int(rng.integers(2, 40)), 3)), axis=0))
             .astype(np.float32) for _ in range(600)]
    path = str(tmp_path_factory.mktemp("layout") / "streamlines")
    zvf.write_polylines(path, lines, chunk_shape=(25, 25, 25), geometry_type="streamline")
    zvf.build_pyramid(path, factors=[(2, 1), (2, 2)])
    return path


def _rows(sel) -> np.ndarray:
    """Rows as a sorted table of (object id, x, y, z): a multiset."""
    table = np.concatenate([sel.object_ids[:, None].astype(np.float64), sel.positions.astype(np.float64)], axis=1)
    return table[np.lexsort(table.T[::-1])]


def test_read_all_of_a_coarse_streamline_level_keeps_shared_vertices(streamline_pyramid):
    ds = zvf.open(streamline_pyramid)
    for level in ds.levels:
        everything = ds.select(level=level).read()
        whole = ds.read_all(level=level)
        assert len(whole) == len(everything) == ds.select(level=level).count(), level
        np.testing.assert_array_equal(_rows(whole), _rows(everything))
    ds.close()


def test_iter_chunks_of_a_coarse_streamline_level_labels_rows_as_read_all(streamline_pyramid):
    """A metavertex shared by several streamlines comes once per streamline, with that streamline's id (it
    came once, labelled with whichever object the owner table kept last)."""
    ds = zvf.open(streamline_pyramid)
    for level in ds.levels:
        whole = ds.read_all(level=level)
        for batch_chunks in (1, 7):
            batches = list(ds.iter_chunks(level=level, batch_chunks=batch_chunks))
            rows = np.concatenate([_rows(b) for b in batches])
            np.testing.assert_array_equal(rows[np.lexsort(rows.T[::-1])], _rows(whole), err_msg=f"level {level}")
    ds.close()


# ---------------------------------------------------------------- count from fragment indexes


async def _count_and_log(data: dict[str, bytes], box) -> tuple[int, list[str]]:
    transport = MemoryTransport(data)
    handle = StoreHandle.for_transport(transport, read_only=True)
    ex = Executor(handle)
    root, level0 = await load.load_root(ex, handle.url)
    ds = AsyncDataset(handle, ex, root, level0)
    transport.reset_log()
    n = await ds.select(bbox=box).count()
    return n, [e.key for e in transport.log]


def test_count_of_a_box_cutting_only_empty_bins_reads_no_vertex(tmp_path):
    # points only in the low half of every chunk's bins along x: bins [12.5, 25) along x are empty
    rng = np.random.default_rng(4)
    pos = rng.uniform(0, 100, (4000, 3)).astype(np.float32)
    pos[:, 0] = (np.floor(pos[:, 0] / 25) * 25 + rng.uniform(0, 12, len(pos))).astype(np.float32)
    path = tmp_path / "half"
    zvf.write_points(str(path), pos, chunk_shape=(25, 25, 25), bin_shape=(12.5,) * 3)
    data = {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    box = (np.array([0.0, 0.0, 0.0]), np.array([20.0, 100.0, 100.0]))  # cuts only the empty bins [12.5, 25)
    n, keys = anyio.run(_count_and_log, data, box)
    assert n == int(inside(pos, *box).sum())
    assert not [k for k in keys if "/vertices/c/" in k], keys
    assert [k for k in keys if "/vertex_fragments/c/" in k]


# ---------------------------------------------------------------- the validator checks placement


def _listed(path, level: int) -> list[tuple[int, ...]]:
    """The chunks a level's ``vertices`` lists, in C order."""
    doc = json.loads((Path(path) / str(level) / "vertices" / "zarr.json").read_text())
    return sorted(tuple(int(x) for x in c.split(".")) for c in doc["attributes"]["nonempty_chunks"])


@pytest.mark.parametrize("level", [0, 2])
def test_validate_flags_a_vertex_filed_in_another_chunk(binned, tmp_path, level):
    import shutil

    copy = tmp_path / "bad"
    shutil.copytree(binned, copy)
    chunk = _listed(copy, level)[0]
    cell = copy / str(level) / "vertices" / "c" / Path(*map(str, chunk))
    (payload,) = unframe(cell.read_bytes())  # an uncompressed vlen cell of float32 rows
    rows = np.frombuffer(payload, np.float32).reshape(-1, 3).copy()
    rows[0] = rows[0] + 60  # same bin count, same fragment: only its place is wrong
    cell.write_bytes(vlen_frame(rows.tobytes()))
    report = zvf.validate(str(copy), level=5)
    assert not report.ok
    assert report.find("chunk", "error"), report.summary()
