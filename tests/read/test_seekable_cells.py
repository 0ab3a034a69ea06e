"""Seekable zstd cells (zstd frames per run of bins, then a seek table in a skippable frame): box queries read
only the frames of the bins they touch -- and still answer every point of the closed box, plain and sharded;
zarr-python and zarr-vectors 0.9.2 read the cells as ordinary zstd; a damaged table or frame is an error
naming the cell, never wrong rows."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zvf
from tests.support.reference_bytes import unwrap_cell
from zvf.config import tuned
from zvf.errors import FormatError, SizeLimitError
from zvf.format.codecs import SEEKABLE_MAGIC, CellCodec
from zvf.format.seekable import SeekTable

GRID = 0.5  # coordinates on a grid, so box faces land on points
# Frames of 4 KiB (the default is 16 KiB, which whole reads favour): the cells below are small, and the tests
# are about reading some of their frames.
SMALL_FRAMES = {"seek_frame_bytes": 4096}
# The cost model's hints for S3 (remote_latency_hint, remote_bandwidth_hint, remote_coalesce_gap) on local files.
REMOTE = {"local_latency_hint": 0.03, "local_bandwidth_hint": 100e6, "local_coalesce_gap": 256 << 10, **SMALL_FRAMES}
# A cost model under which a round trip costs less than the bytes of untouched frames (a slow link): the
# queries below take the frames path even on cells this small.
FRAMES = {"local_bandwidth_hint": 1e6, **SMALL_FRAMES}


def _points(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    clustered = rng.normal(40.0, 8.0, (n * 3 // 5, 3))
    spread = rng.uniform(0.0, 100.0, (n - n * 3 // 5, 3))
    return (np.round(np.clip(np.concatenate([clustered, spread]), 0, 100) / GRID) * GRID).astype(np.float32)


@pytest.fixture(scope="module", params=[None, "auto"], ids=["plain", "sharded"])
def store(request, tmp_path_factory):
    pos = _points(40_000, 5)
    row = np.arange(len(pos), dtype=np.int64)
    cls = (row % 7).astype(np.uint8)
    path = tmp_path_factory.mktemp("seekable") / "s.zarrvectors"
    with tuned(**SMALL_FRAMES):
        zvf.write_points(str(path), pos, attributes={"row": row, "cls": cls}, chunk_shape=[50.0] * 3,
                         bin_shape=[6.25] * 3, compression="zstd", shard_shape=request.param)
    return str(path), pos, row, cls


def _truth(pos, lo, hi):
    return np.flatnonzero(np.all((pos >= lo) & (pos <= hi), axis=1))


def _cell_files(path: str, array: str) -> list[Path]:
    return sorted(p for p in (Path(path) / "0" / array / "c").rglob("*") if p.is_file())


def test_cells_are_frame_sequences_with_a_seek_table(store):
    path, *_ = store
    meta = json.loads((Path(path) / "0/vertices/zarr.json").read_text())
    if meta["codecs"][0]["name"] == "sharding_indexed":
        return  # the inner chunks end in tables (the queries below read them); the shard ends in its index
    for f in _cell_files(path, "vertices"):
        raw = f.read_bytes()
        assert raw[-4:] == SEEKABLE_MAGIC.to_bytes(4, "little")
        table = SeekTable.parse(raw, key=str(f), max_frames=512)
        assert isinstance(table, SeekTable) and table.frames_nbytes + table.nbytes == len(raw)
    assert max(SeekTable.parse(f.read_bytes(), key="", max_frames=512).num_frames  # type: ignore[union-attr]
               for f in _cell_files(path, "vertices")) > 4


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corner=st.tuples(*[st.integers(0, 200)] * 3), size=st.tuples(*[st.integers(0, 60)] * 3))
def test_every_point_of_the_box(store, corner, size):
    url, pos, _, cls = store
    lo = np.asarray(corner, np.float64) * GRID
    hi = lo + np.asarray(size, np.float64) * GRID
    with tuned(**FRAMES), zvf.open(url) as ds:
        got = ds.query((lo.tolist(), hi.tolist()))
    want = _truth(pos, lo, hi)
    assert sorted(got.attributes["row"].tolist()) == want.tolist()
    np.testing.assert_array_equal(got.positions, pos[got.attributes["row"]])
    np.testing.assert_array_equal(got.attributes["cls"], cls[got.attributes["row"]])


def test_a_small_box_reads_frames_not_cells(store):
    url, pos, *_ = store
    lo, hi = [38.0, 38.0, 38.0], [41.5, 41.5, 41.5]
    with tuned(**FRAMES), zvf.open(url) as ds:
        plan = ds.select(bbox=(lo, hi)).explain()
        start = ds.stats.bytes
        got = ds.query((lo, hi))
        framed = ds.stats.bytes - start
    with tuned(max_overread=math.inf), zvf.open(url) as ds:  # a fast local link, time alone: whole cells
        start = ds.stats.bytes
        want = _truth(pos, np.asarray(lo), np.asarray(hi)).tolist()
        assert sorted(ds.query((lo, hi)).attributes["row"].tolist()) == want
        whole = ds.stats.bytes - start
    assert sorted(got.attributes["row"].tolist()) == want
    assert framed * 4 < whole, (framed, whole)
    assert "seek tables" in plan and "frames" in plan, plan


@pytest.mark.asyncio
async def test_repeated_queries_reuse_tables_and_frames(store):
    import zvf.aio as za

    url, pos, *_ = store
    lo, hi = [30.0, 30.0, 30.0], [44.0, 44.0, 44.0]
    with tuned(**FRAMES):
        async with await za.open(url) as ds:
            first = ds.stats.requests
            await ds.query((lo, hi))
            first = ds.stats.requests - first
            again = ds.stats.requests
            sel = await ds.query((lo, hi))
            again = ds.stats.requests - again
    assert len(sel) == len(_truth(pos, np.asarray(lo), np.asarray(hi)))
    assert first > 0 and again == 0  # seek tables, fragment indexes and decoded frames all cached


def test_reference_and_zarr_read_seekable_cells(store):
    import zarr
    from zarr_vectors.types.points import read_points

    url, pos, *_ = store
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = read_points(url, attribute_names=["row"])
    order = np.argsort(np.asarray(ref["vertex_attributes"]["row"]).reshape(-1))
    np.testing.assert_array_equal(np.asarray(ref["positions"])[order], pos)
    arr = zarr.open_group(url, mode="r")["0/vertices"]
    got = 0
    for s in arr.attrs["nonempty_chunks"]:
        cell = unwrap_cell(arr[tuple(int(x) for x in s.split("."))])
        got += len(cell) // 12
    assert got == len(pos)


def test_zvf_decoder_reads_every_frame_and_skips_the_table():
    codec = CellCodec.for_writing("zstd")
    from zvf.format.seekable import encode_seekable

    rows = np.arange(3000 * 3, dtype=np.float32).reshape(-1, 3)
    cell = encode_seekable(codec, rows.tobytes(), np.array([0, 1000, 2000, 3000]), 12)
    assert codec.decode(cell) == rows.tobytes()
    with pytest.raises(FormatError, match="cellkey"):
        codec.decode(cell + b"\x00garbage", key="cellkey")
    table = SeekTable.parse(cell, key="k", max_frames=8)
    assert isinstance(table, SeekTable) and table.num_frames == 3
    cut = int(table.starts[1]) + 5  # the second frame cut short
    with pytest.raises(FormatError, match="cellkey"):
        codec.decode(cell[:cut] + cell[int(table.starts[2]):], key="cellkey")
    with pytest.raises(SizeLimitError, match="cellkey"):  # the frames' declared sizes summed past the limit
        codec.decode(cell, key="cellkey", max_size=len(rows.tobytes()))


def _damaged_copy(src: str, dst: Path, damage) -> str:
    import shutil

    shutil.copytree(src, dst)
    damage(dst)
    return str(dst)


@pytest.mark.parametrize("what", ["table", "frame", "sizes"])
def test_damaged_table_or_frame_is_an_error_naming_the_cell(store, tmp_path, what):
    url, *_ = store
    meta = json.loads((Path(url) / "0/vertices/zarr.json").read_text())
    if meta["codecs"][0]["name"] == "sharding_indexed":
        pytest.skip("damage is placed in plain cells")
    lo, hi = [38.0, 38.0, 38.0], [41.5, 41.5, 41.5]

    def damage(root: Path) -> None:
        for f in _cell_files(str(root), "vertices"):
            raw = bytearray(f.read_bytes())
            table = SeekTable.parse(bytes(raw), key="", max_frames=512)
            assert isinstance(table, SeekTable)
            at = len(raw) - table.nbytes + 8  # the first entry
            if what == "table":  # a frame's compressed size off by one: frames no longer line up
                raw[at] ^= 1
            elif what == "sizes":  # a decompressed size that is not whole rows
                raw[at + 4] ^= 1
            else:  # a byte inside every frame's header region: no longer the frame the table describes
                for s in table.starts.tolist():
                    raw[s + 4] ^= 0x40
            f.write_bytes(bytes(raw))

    bad = _damaged_copy(url, tmp_path / "bad.zarrvectors", damage)
    with tuned(**FRAMES), zvf.open(bad) as ds, pytest.raises(FormatError, match="0/vertices/c/"):
        ds.query((lo, hi))


def test_small_box_bytes_within_three_times_its_answer(tmp_path):
    """1 M uniform points, 50-unit chunks (125 k points each) of 5-unit bins (1000 bins, ~125 points each), zstd:
    a box of 0.8 % of the points on bin boundaries reads at most 3x its answer's bytes (rows x (12 + 1 + 4)) --
    fragment index, seek tables and frames together -- where the whole cell is 8x that.  (The same box
    cutting every bin it touches reads ~3.3x: the bins it touches hold ~2x its points.)  So it does with S3's
    cost hints, which price one more round trip above those bytes: max_overread (3) caps what a box fetches
    per byte of its bins; with max_overread=inf the model reads whole cells there."""
    rng = np.random.default_rng(0)
    n = 1_000_000
    pos = rng.uniform(0, 100, (n, 3)).astype(np.float32)
    cls = rng.integers(0, 5, n).astype(np.uint8)
    inten = rng.random(n).astype(np.float32)
    url = str(tmp_path / "m.zarrvectors")
    with tuned(**SMALL_FRAMES):
        zvf.write_points(url, pos, attributes={"class": cls, "intensity": inten}, chunk_shape=[50.0] * 3,
                         bin_shape=[5.0] * 3, compression="zstd", shard_shape=None)
    lo, hi = [10.0, 10.0, 10.0], [29.9, 29.9, 29.9]
    want = _truth(pos, np.asarray(lo), np.asarray(hi))
    answer = len(want) * (12 + 1 + 4)
    for hints in ({}, REMOTE):  # local files; S3's hints, where one more round trip costs more than those bytes
        with tuned(**hints), zvf.open(url) as ds:
            start = ds.stats.bytes
            got = ds.query((lo, hi))
            read = ds.stats.bytes - start
        assert len(got) == len(want) > 7_000
        assert read <= 3 * answer, (hints, read, answer)
    with tuned(**REMOTE, max_overread=math.inf), zvf.open(url) as ds:  # time alone: whole cells at S3's hints
        start = ds.stats.bytes
        assert len(ds.query((lo, hi))) == len(want)
        assert ds.stats.bytes - start > 6 * answer


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corner=st.tuples(*[st.integers(0, 160)] * 3), size=st.tuples(*[st.integers(0, 60)] * 3),
       value=st.integers(0, 6))
def test_box_and_where_through_frames(store, corner, size, value):
    """A vertex ``where`` reads its attribute's frames first, then the passing rows' other columns."""
    url, pos, _, cls = store
    lo = np.asarray(corner, np.float64) * GRID
    hi = lo + np.asarray(size, np.float64) * GRID
    with tuned(**FRAMES), zvf.open(url) as ds:
        got = ds.select(bbox=(lo.tolist(), hi.tolist()), where={"cls": value}).read()
    want = _truth(pos, lo, hi)
    want = want[cls[want] == value]
    assert sorted(got.attributes["row"].tolist()) == want.tolist()
    np.testing.assert_array_equal(got.positions, pos[got.attributes["row"]])


@pytest.mark.asyncio
async def test_queries_at_once_share_whole_cells_a_lone_one_narrows(tmp_path):
    """max_overread is for a lone query: boxes asked at once on one dataset (a service) read whole cells, each
    fetched and decoded once for all of them; one box alone reads its bins."""
    import zvf.aio as za

    rng = np.random.default_rng(3)
    pos = rng.uniform(0, 100, (300_000, 3)).astype(np.float32)
    url = str(tmp_path / "s.zarrvectors")
    with tuned(**SMALL_FRAMES):
        zvf.write_points(url, pos, chunk_shape=[50.0] * 3, bin_shape=[5.0] * 3, compression="zstd", shard_shape=None)
    boxes = [([10.0 + i, 10.0, 10.0], [18.0 + i, 18.0, 18.0]) for i in range(4)]
    with tuned(**REMOTE):
        async with await za.open(url) as ds:
            sel = await ds.query(boxes[0])
            lone = ds.stats.bytes
        async with await za.open(url) as ds:
            sels = await asyncio.gather(*(ds.query(b) for b in boxes))
            together = ds.stats.bytes
    for (lo, hi), got in zip(boxes, [sel, *sels[1:]]):
        assert len(got) == len(_truth(pos, np.asarray(lo), np.asarray(hi)))
    cell = sum(p.stat().st_size for p in _cell_files(url, "vertices")) / 8
    assert lone < cell / 4 < cell < together < 4 * 1.5 * cell  # the cells once, not once per box


# ---------------------------------------------------------------- compact pieces and frame bounds


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(0, 400), min_size=1, max_size=12), min_rows=st.integers(1, 60),
       seed=st.integers(0, 2**16), axes=st.integers(1, 3))
def test_pieces_keep_bins_and_end_where_frames_may(counts, min_rows, seed, axes):
    from zvf.format.seekable import bin_pieces, frame_cuts

    rng = np.random.default_rng(seed)
    n = sum(counts)
    pos = rng.normal(0, 10, (n, axes)).astype(np.float32)
    bin_of = np.repeat(np.arange(len(counts)), counts)
    order, places = bin_pieces(pos, counts, min_rows)
    assert sorted(order.tolist()) == list(range(n))  # a permutation ...
    np.testing.assert_array_equal(bin_of[order], bin_of)  # ... that keeps every row in its bin
    ends = np.cumsum(counts)
    assert set(ends[np.asarray(counts) > 0].tolist()) <= set(places.tolist())
    sizes = np.diff(places, prepend=0)
    assert (sizes > 0).all() and (np.diff(places) > 0).all()
    bin_sizes = np.asarray(counts)[bin_of[places - 1]]
    assert ((sizes >= min_rows) | (sizes == bin_sizes)).all()  # a piece of a split bin holds min_rows at least
    assert (sizes[bin_sizes >= 2 * min_rows] < 2 * min_rows).all()  # a bin is cut while a part holds twice that
    cuts = frame_cuts(places, 4, 4 * min_rows)
    assert cuts[0] == 0 and cuts[-1] == n and set(cuts[1:].tolist()) <= set(places.tolist()) | {0}


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), axes=st.integers(1, 4), seed=st.integers(0, 2**16), flat=st.booleans())
def test_frame_bounds_hold_every_row_of_their_frame(n, axes, seed, flat):
    from zvf.format.seekable import encode_seekable, frame_bounds_bytes, frame_cuts

    rng = np.random.default_rng(seed)
    pos = (rng.normal(0, 1, (n, axes)) * 10.0 ** rng.integers(-3, 4, axes)).astype(np.float32)
    if flat:
        pos[:, 0] = 7.25  # an axis without extent
    cuts = frame_cuts(np.arange(1, n + 1), pos.itemsize * axes, 200)
    codec = CellCodec.for_writing("zstd")
    cell = encode_seekable(codec, pos.tobytes(), cuts, pos.itemsize * axes, frame_bounds_bytes(pos, cuts))
    assert codec.decode(cell) == pos.tobytes()  # the bounds frame is skipped like the table
    table = SeekTable.parse(cell, key="k", max_frames=n + 1)
    assert isinstance(table, SeekTable) and table.lo is not None and table.hi is not None
    assert table.num_frames == len(cuts)  # the data frames, then the bounds frame
    table.check_bounds(codec.decode(cell), np.dtype(np.float32), key="k")
    for f, (a, b) in enumerate(itertools.pairwise(cuts)):
        rows = pos[a:b].astype(np.float64)
        assert (rows >= table.lo[f]).all() and (rows <= table.hi[f]).all()
        meets = table.frames_meeting(rows.min(0), rows.min(0))  # a point box at one of its rows
        assert meets is not None and meets[f] and not meets[-1]


def test_a_tail_too_short_for_the_bounds_asks_for_more_and_bad_bounds_name_the_cell():
    from zvf.format.seekable import encode_seekable, frame_bounds_bytes

    pos = np.random.default_rng(0).uniform(0, 9, (900, 3)).astype(np.float32)
    cuts = np.array([0, 300, 600, 900])
    codec = CellCodec.for_writing("zstd")
    cell = encode_seekable(codec, pos.tobytes(), cuts, 12, frame_bounds_bytes(pos, cuts))
    table = SeekTable.parse(cell, key="k", max_frames=8)
    assert isinstance(table, SeekTable)
    need = SeekTable.parse(cell[-table.nbytes:], key="k", max_frames=8)
    assert need == table.nbytes + int(table.compressed[-1])  # the bounds frame, then the table
    at = len(cell) - table.nbytes - int(table.compressed[-1])
    for offset, match in ((8, "not a zvf bounds frame"), (12, "declares")):  # the tag; the frame count
        bad = bytearray(cell)
        bad[at + offset] ^= 0x01
        with pytest.raises(FormatError, match=f"cellkey: .*{match}"):
            SeekTable.parse(bytes(bad), key="cellkey", max_frames=8)
    lying = bytearray(cell)  # frame 1's upper x bound pulled below its rows: the check names the cell
    hi_at = at + 24 + 16 * 3 + 2 * 3 * 3 + 2 * 3 * 1
    lying[hi_at:hi_at + 2] = (100).to_bytes(2, "little")
    table = SeekTable.parse(bytes(lying), key="cellkey", max_frames=8)
    assert isinstance(table, SeekTable)
    with pytest.raises(FormatError, match=r"cellkey: .*outside the bounds"):
        table.check_bounds(codec.decode(bytes(lying)), np.dtype(np.float32), key="cellkey")


def test_the_validator_reports_a_frame_bound_that_leaves_rows_out(store, tmp_path):
    url, *_ = store
    meta = json.loads((Path(url) / "0/vertices/zarr.json").read_text())
    if meta["codecs"][0]["name"] == "sharding_indexed":
        pytest.skip("damage is placed in plain cells")

    def damage(root: Path) -> None:
        f = max(_cell_files(str(root), "vertices"), key=lambda p: p.stat().st_size)
        raw = bytearray(f.read_bytes())
        table = SeekTable.parse(bytes(raw), key="", max_frames=1 << 20)
        assert isinstance(table, SeekTable) and table.lo is not None
        m = len(table.lo)
        at = len(raw) - table.nbytes - int(table.compressed[-1]) + 24 + 16 * 3 + 2 * 3 * m  # the hi bounds
        raw[at:at + 2] = (0).to_bytes(2, "little")  # frame 0's upper x at the cell's lowest x
        f.write_bytes(bytes(raw))

    bad = _damaged_copy(url, tmp_path / "lying.zarrvectors", damage)
    report = zvf.validate(bad, level=3)
    assert not report.ok and any("outside the bounds" in str(i) for i in report.errors), report


def test_small_boxes_of_a_dense_cluster_read_frames_of_their_size(tmp_path):
    """A cluster a thousand times denser than its background, in one 100-unit chunk of 25-unit bins: a box of a
    few thousand points in its core (one at the corner where 8 bins of ~37 k points meet) reads frames of
    compact pieces of those bins -- pieces follow the density -- so it fetches about 5x its answer's bytes,
    seek tables and bounds included, where its bins hold over 30x.  A box in the sparse background is
    answered as exactly."""
    rng = np.random.default_rng(7)
    pos = np.concatenate([rng.normal(50, 2.0, (300_000, 3)), rng.uniform(0, 100, (100_000, 3))]).astype(np.float32)
    inten = rng.random(len(pos)).astype(np.float32)
    url = str(tmp_path / "dense.zarrvectors")
    with tuned(**SMALL_FRAMES):
        zvf.write_points(url, pos, attributes={"intensity": inten}, chunk_shape=[100.0] * 3, bin_shape=[25.0] * 3,
                         compression="zstd", shard_shape=None)
    for centre, half, most in (([50.0, 50.0, 50.0], 0.75, 6), ([50.0, 51.5, 48.0], 0.75, 6),
                               ([20.0, 80.0, 30.0], 10.0, None)):
        lo, hi = np.asarray(centre) - half, np.asarray(centre) + half
        want = _truth(pos, lo, hi)
        with tuned(**REMOTE), zvf.open(url) as ds:
            start = ds.stats.bytes
            got = ds.query((lo.tolist(), hi.tolist()))
            read = ds.stats.bytes - start
        assert sorted(map(tuple, got.positions.tolist())) == sorted(map(tuple, pos[want].tolist()))
        np.testing.assert_array_equal(np.sort(got.attributes["intensity"]), np.sort(inten[want]))
        if most is not None:
            assert read <= most * len(want) * (12 + 4), (centre, read, len(want))
