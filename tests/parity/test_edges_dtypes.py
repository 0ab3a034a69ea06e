"""Exact query edges, dtype fidelity and the small parity bugs of issue 8.

* One coordinate -> chunk/bin rule (``zvf.format.grid.Grid``): points on chunk
  and bin seams, on the bounds, below zero, in non-cubic chunks, float32 and
  float64, with bins and without, land where zarr-vectors 0.9.2 puts them, and
  every closed-box query returns exactly the numpy truth.
* Positions keep their dtype (float64 stays float64) unless ``dtype=`` says
  otherwise; attribute dtypes are kept; ``dtype="float32"`` gives 0.9.2's bytes.
* Stores 0.9.2 writes with codec lists open; zvf writes gzip and codec lists.
* The validator accepts 0.9.2's ``row_shape: []`` multi-channel attributes;
  one-channel attributes are written as 0.9.2 writes them.
* Empty batch streams write an openable empty store.
* Unknown capabilities are refused by name.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import zvf
from tests.support.reference_bytes import unwrap_cell
from tests.support.rows import assert_rows_equal, rows
from tests.support.store_tree import store_files
from zvf.errors import FormatError, InvalidArgumentError
from zvf.format.grid import Grid


def _ref_write(path, positions, **kw):
    from zarr_vectors import building

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        building.write_points(str(path), positions, **kw)


def _seam_points(rng, chunk, bins, lo, hi, n_random=60) -> np.ndarray:
    """Points on every chunk and bin seam inside [lo, hi] (per axis), on both bounds, and random ones."""
    chunk = np.asarray(chunk, np.float64)
    step = np.asarray(bins if bins is not None else chunk, np.float64)
    axes = []
    for d in range(len(chunk)):
        k = np.arange(np.floor(lo[d] / step[d]), np.floor(hi[d] / step[d]) + 1)
        seams = np.concatenate([k * step[d], k * chunk[d], [lo[d], hi[d]]])
        axes.append(seams[(seams >= lo[d]) & (seams <= hi[d])])
    seam = np.stack([rng.choice(a, 80) for a in axes], axis=1)
    rand = rng.uniform(lo, hi, (n_random, len(chunk)))
    mixed = np.where(rng.random(rand.shape) < 0.5, rand, np.stack([rng.choice(a, n_random) for a in axes], 1))
    corners = np.array([lo, hi], np.float64)
    return np.concatenate([seam, mixed, corners])


def _boxes(rng, pts: np.ndarray, lo, hi, n=25) -> list:
    """Random closed boxes, degenerate boxes on stored points, boxes whose faces sit on points, an outside box."""
    out = []
    for _ in range(n):
        a, b = rng.uniform(lo, hi), rng.uniform(lo, hi)
        out.append((np.minimum(a, b), np.maximum(a, b)))
    for i in rng.choice(len(pts), min(15, len(pts)), replace=False):
        p = pts[i].astype(np.float64)
        out.append((p, p))  # degenerate: exactly the point
        q = pts[rng.integers(len(pts))].astype(np.float64)
        out.append((np.minimum(p, q), np.maximum(p, q)))  # faces through stored values (seams)
    out.append((np.asarray(hi, np.float64) + 1, np.asarray(hi, np.float64) + 2))
    return out


def _check_queries(path, stored: np.ndarray, boxes) -> int:
    with zvf.open(path) as ds:
        full = ds.read_all()
        assert full.positions.dtype == stored.dtype
        assert_rows_equal(rows(full.positions), rows(stored), f"{path} full read")
        for lo, hi in boxes:
            got = ds.query((lo, hi)).positions
            p = stored.astype(np.float64)
            want = stored[np.all((p >= lo) & (p <= hi), axis=1)]
            assert len(got) == len(want), f"{path} box {lo.tolist()}..{hi.tolist()}: {len(got)} != {len(want)}"
            if len(want):
                assert_rows_equal(rows(got), rows(want), f"{path} box {lo.tolist()}..{hi.tolist()}")
    return len(boxes)


def _cells(path, ndim: int, dtype) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """(absolute chunk, positions) of every vertices cell, read with plain zarr-python."""
    import zarr

    arr = zarr.open_group(str(path), mode="r")["0/vertices"]
    origin = np.asarray(arr.attrs.get("chunk_grid_origin", [0] * ndim))
    out = []
    for s in arr.attrs["nonempty_chunks"]:
        chunk = tuple(int(x) for x in s.split("."))
        cell = unwrap_cell(arr[tuple(np.subtract(chunk, origin))])
        out.append((chunk, np.frombuffer(cell, dtype=dtype).reshape(-1, ndim)))
    return out


# (chunk_shape, bin_shape, lo, hi): seams that round differently per division, non-cubic chunks,
# negative minima, 2-D and 3-D.
GRIDS = {
    "issue-3.3-1.1": ((3.3, 3.3, 3.3), (1.1, 1.1, 1.1), (-6.6, -3.3, 0.0), (6.6, 9.9, 13.2)),
    "noncubic-bins": ((2.0, 5.0, 0.7), (0.5, 2.5, 0.35), (-4.0, -10.0, -2.1), (4.0, 10.0, 2.1)),
    "noncubic-nobins": ((2.0, 5.0, 0.7), None, (-4.0, -10.0, -2.1), (4.0, 10.0, 2.1)),
    "2d-tenths": ((0.3, 0.9), (0.1, 0.3), (-0.9, -1.8), (0.9, 0.9)),
}


@pytest.mark.parametrize("ids", [False, True], ids=["bins", "ids"])
@pytest.mark.parametrize("name", sorted(GRIDS))
def test_placement_and_queries_match_reference(tmp_path, name, ids):
    """0.9.2 and zvf put every float32 point in the same chunk; both stores answer every box exactly."""
    chunk, bins, lo, hi = GRIDS[name]
    rng = np.random.default_rng(sum(name.encode()))
    pts = _seam_points(rng, chunk, bins, lo, hi).astype(np.float32)
    pts = np.clip(pts, np.asarray(lo, np.float32), np.asarray(hi, np.float32))
    ndim = len(chunk)
    step = np.asarray(bins or chunk)
    # Bounds half a bin wider: 0.9.2 allocates its grid by chunk even when it places points by bin.
    bounds = ((np.asarray(lo) - step / 2).tolist(), (np.asarray(hi) + step / 2).tolist())
    kw = dict(chunk_shape=chunk, bin_shape=bins, bounds=bounds)
    if ids:
        kw["object_ids"] = rng.integers(0, 7, len(pts))
    ref, mine = tmp_path / "ref" / "s.zarrvectors", tmp_path / "zvf" / "s.zarrvectors"
    ref.parent.mkdir()
    mine.parent.mkdir()
    _ref_write(ref, pts, **kw)
    zvf.write_points(str(mine), pts, object_index_layout="reference", **kw)

    grid = Grid.create(chunk, bins)
    placed = 0
    for chunk_coords, cell in _cells(ref, ndim, np.float32):
        want = np.broadcast_to(np.asarray(chunk_coords), cell.shape)
        np.testing.assert_array_equal(grid.chunk_of(cell, by_bin=not ids), want,
                                      err_msg=f"{name}: chunk {chunk_coords}")
        placed += len(cell)
    assert placed == len(pts)
    a, b = store_files(mine), store_files(ref)
    assert sorted(a) == sorted(b) and [k for k in a if a[k] != b[k]] == []
    boxes = _boxes(rng, pts, lo, hi)
    _check_queries(ref, pts, boxes)
    _check_queries(mine, pts, boxes)


def test_issue_case_seam_point_found(tmp_path):
    """chunk 3.3, bin 1.1: z = 3.3 sits in bin 2 -> chunk 0, and a box starting at 3.3 still finds it."""
    p64 = np.array([[0.5, 0.5, 3.3], [1.0, 1.0, 3.3], [1.0, 1.0, 6.6]])
    for dtype in ("float64", "float32"):
        path = tmp_path / f"{dtype}.zarrvectors"
        zvf.write_points(str(path), p64, chunk_shape=(3.3,) * 3, bin_shape=(1.1,) * 3, dtype=dtype)
        stored = p64.astype(dtype)
        with zvf.open(path) as ds:
            for q in stored:
                got = ds.query((q, q)).positions
                assert len(got) == int(np.sum(np.all(stored == q, axis=1))), (dtype, q)
            assert len(ds.query(([0, 0, 3.3], [2, 2, 3.3])).positions) == (2 if dtype == "float64" else 0)
        assert zvf.validate(str(path), level=5).ok
    # the store 0.9.2 writes for the same points (float32; bounds from the data)
    ref = tmp_path / "ref.zarrvectors"
    _ref_write(ref, p64[:2], chunk_shape=(3.3,) * 3, bin_shape=(1.1,) * 3)
    s32 = p64[:2].astype(np.float32)
    with zvf.open(ref) as ds:
        assert len(ds.query((s32[0], s32[0])).positions) == 1
        assert len(ds.query((s32.min(0), s32.max(0))).positions) == 2


@pytest.mark.parametrize("bins", [None, (0.25, 0.5)], ids=["nobins", "bins"])
@pytest.mark.parametrize("ids", [False, True], ids=["noids", "ids"])
def test_float64_seams_bounds_from_data(tmp_path, bins, ids):
    """float64 positions on seams and on both (inferred) bounds: stored exactly, every box exact, store valid."""
    rng = np.random.default_rng(7)
    chunk, lo, hi = (0.75, 1.5), (-2.25, -3.0), (1.5, 4.5)
    pts = _seam_points(rng, chunk, bins, lo, hi)
    pts[:5] += 1e6  # far from the origin float32 loses 0.03; float64 must not
    hi6 = np.maximum(hi, pts.max(0))
    kw = {"object_ids": rng.integers(0, 5, len(pts))} if ids else {}
    path = tmp_path / "f64.zarrvectors"
    zvf.write_points(str(path), pts, chunk_shape=chunk, bin_shape=bins, **kw)
    assert zvf.validate(str(path), level=5).ok
    _check_queries(path, pts, _boxes(rng, pts, lo, hi6))


# ------------------------------------------------------------------------- dtypes


def test_dtype_fidelity(tmp_path):
    rng = np.random.default_rng(3)
    pts = rng.uniform(1e6, 1e6 + 10, (300, 3))
    attrs = {"i8": rng.integers(-100, 100, 300).astype(np.int8), "u16": rng.integers(0, 60000, 300).astype(np.uint16),
             "f64": rng.random((300, 2)), "i64": rng.integers(-2**40, 2**40, 300),
             "f16": rng.random(300).astype(np.float16),
             "one": rng.random((300, 1)).astype(np.float32)}
    path = tmp_path / "a.zarrvectors"
    zvf.write_points(str(path), pts, chunk_shape=(4.0,) * 3, attributes=attrs)
    with zvf.open(path) as ds:
        got = ds.read_all()
    assert got.positions.dtype == np.float64
    assert_rows_equal(rows(got.positions, *[got.attributes[k] for k in attrs]), rows(pts, *attrs.values()), "f64 store")
    for k, v in attrs.items():
        assert got.attributes[k].dtype == v.dtype and got.attributes[k].shape[1:] == v.shape[1:], k
    # the same through batches (float64 kept there too), and dtype= narrows on request
    zvf.write_points(str(tmp_path / "b.zarrvectors"), iter([pts[:100], pts[100:]]), chunk_shape=(4.0,) * 3)
    zvf.write_points(str(tmp_path / "c.zarrvectors"), pts, chunk_shape=(4.0,) * 3, dtype="float32")
    with zvf.open(tmp_path / "b.zarrvectors") as b, zvf.open(tmp_path / "c.zarrvectors") as c:
        assert_rows_equal(rows(b.read_all().positions), rows(pts), "batched f64")
        c32 = c.read_all().positions
        assert c32.dtype == np.float32 and np.abs(c32 - pts).max() > 1e-3
    with pytest.raises(InvalidArgumentError, match="dtype"):
        zvf.write_points(str(tmp_path / "d.zarrvectors"), pts, chunk_shape=(4.0,) * 3, dtype="int32")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_dtype_bytes_match_reference(tmp_path, dtype):
    """0.9.2 with ``dtype=`` and zvf with the same input and layout write identical bytes; zvf reads 0.9.2's."""
    rng = np.random.default_rng(5)
    pts = rng.uniform(-50, 50, (200, 3))
    kw = dict(chunk_shape=(20.0, 30.0, 40.0), bin_shape=(10.0, 15.0, 20.0),
              vertex_attributes={"one": rng.random((200, 1)).astype(np.float32),
                                 "rgb": rng.random((200, 3)), "lab": rng.integers(0, 9, 200).astype(np.int16)})
    ref, mine = tmp_path / "ref" / "s.zarrvectors", tmp_path / "zvf" / "s.zarrvectors"
    ref.parent.mkdir()
    mine.parent.mkdir()
    _ref_write(ref, pts, dtype=dtype, **kw)
    zkw = dict(kw)
    zkw["attributes"] = zkw.pop("vertex_attributes")
    zvf.write_points(str(mine), pts, dtype=dtype, object_index_layout="reference", **zkw)
    a, b = store_files(mine), store_files(ref)
    assert sorted(a) == sorted(b) and [k for k in a if a[k] != b[k]] == []
    attrs = json.loads(a["0/vertex_attributes/one/zarr.json"])["attributes"]
    assert attrs["row_shape"] == [] and attrs["channel_names"] == ["ch0"]
    with zvf.open(ref) as ds:
        got = ds.read_all()
    assert got.positions.dtype == np.dtype(dtype) and got.attributes["one"].shape == (200, 1)
    assert got.attributes["lab"].dtype == np.int16 and got.attributes["rgb"].dtype == np.float64
    assert_rows_equal(rows(got.positions, got.attributes["one"]),
                      rows(pts.astype(dtype), kw["vertex_attributes"]["one"]), "reference store")


# ------------------------------------------------------------------------- codecs

CODEC_LISTS = {
    "gzip": [{"name": "gzip", "configuration": {"level": 5}}],
    "crc32c": [{"name": "crc32c"}],
    "zstd+crc32c": [{"name": "zstd", "configuration": {"level": 3, "checksum": True}}, {"name": "crc32c"}],
    "lz4": [{"name": "numcodecs.lz4", "configuration": {"acceleration": 1}}],
    "zlib": [{"name": "numcodecs.zlib", "configuration": {"level": 1}}],
    "bz2": [{"name": "numcodecs.bz2", "configuration": {"level": 1}}],
    "lzma": [{"name": "numcodecs.lzma", "configuration": {"preset": 1}}],
    "blosc-lz4": [{"name": "blosc", "configuration": {"typesize": 4, "cname": "lz4", "clevel": 3,
                                                       "shuffle": "shuffle", "blocksize": 0}}],
    "shuffle+zlib": [{"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
                     {"name": "numcodecs.zlib", "configuration": {"level": 1}}],
}


@pytest.mark.parametrize("shard", [None, 2], ids=["plain", "sharded"])
@pytest.mark.parametrize("codec", sorted(CODEC_LISTS))
def test_codec_lists_both_ways(tmp_path, codec, shard):
    import zarr

    rng = np.random.default_rng(11)
    pts = rng.uniform(0, 10, (150, 3)).astype(np.float32)
    lab = rng.integers(0, 50, 150).astype(np.int32)
    kw = dict(chunk_shape=(5.0,) * 3, shard_shape=shard)
    ref, mine = tmp_path / "ref" / "s.zarrvectors", tmp_path / "zvf" / "s.zarrvectors"
    ref.parent.mkdir()
    mine.parent.mkdir()
    _ref_write(ref, pts, compressor=CODEC_LISTS[codec], vertex_attributes={"lab": lab}, **kw)
    zvf.write_points(str(mine), pts, compression=CODEC_LISTS[codec], attributes={"lab": lab},
                     object_index_layout="reference", **kw)
    for path in (ref, mine):
        with zvf.open(path) as ds:
            got = ds.read_all()
            assert_rows_equal(rows(got.positions, got.attributes["lab"]), rows(pts, lab), f"{codec} {path}")
            assert len(ds.query(([0, 0, 0], [5, 5, 5])).positions) == int(np.all(pts <= 5, axis=1).sum())
        assert zvf.validate(str(path), level=5).ok
    # 0.9.2's codec JSON is reproduced; cells are identical except gzip's (its header holds a timestamp)
    a, b = store_files(mine), store_files(ref)
    assert sorted(a) == sorted(b)
    differ = [k for k in a if a[k] != b[k]]
    assert all("/c/" in k for k in differ) and (codec == "gzip" or not differ), differ[:4]
    # plain zarr decodes zvf's cells
    arr = zarr.open_group(str(mine), mode="r")["0/vertices"]
    first = arr.attrs["nonempty_chunks"][0]
    cell = unwrap_cell(arr[tuple(int(x) for x in first.split("."))])
    assert len(cell) % 12 == 0 and len(cell) > 0


def test_gzip_shorthand_reads_in_reference(tmp_path):
    from zarr_vectors.types.points import read_points

    pts = np.random.default_rng(2).uniform(0, 10, (80, 2)).astype(np.float32)
    path = tmp_path / "g.zarrvectors"
    zvf.write_points(str(path), pts, chunk_shape=(4.0, 4.0), compression="gzip")
    codecs = json.loads((path / "0/vertices/zarr.json").read_text())["codecs"]
    assert codecs[1] == {"name": "gzip", "configuration": {"level": 5}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = read_points(str(path))["positions"]
    assert_rows_equal(rows(got), rows(pts), "0.9.2 reads zvf gzip")


# ------------------------------------------------------------------------- validator, attributes


def test_validator_accepts_reference_row_shape_quirk(tmp_path):
    """0.9.2's object writers label multi-channel attributes ``row_shape: []``: valid, and read as (N, C)."""
    from zarr_vectors import building

    rng = np.random.default_rng(1)
    pls = [rng.uniform(0, 10, (5, 3)) for _ in range(4)]
    rgb = [rng.random((5, 3)).astype(np.float32) for _ in range(4)]
    path = tmp_path / "pl.zarrvectors"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        building.write_polylines(str(path), pls, chunk_shape=(5.0,) * 3, vertex_attributes={"rgb": rgb})
    assert json.loads((path / "0/vertex_attributes/rgb/zarr.json").read_text())["attributes"]["row_shape"] == []
    report = zvf.validate(str(path), level=5)
    assert report.ok and not report.errors, str(report)
    with zvf.open(path) as ds:
        got = ds.read_all()
    assert_rows_equal(rows(got.positions, got.attributes["rgb"]),
                      rows(np.concatenate(pls).astype(np.float32), np.concatenate(rgb)), "polyline rgb")


def test_validator_refuses_inconsistent_channels(tmp_path):
    """With ``row_shape: []`` the channel count read off the cells must be the same in every cell."""
    rng = np.random.default_rng(4)
    pts = rng.uniform(0, 10, (100, 3)).astype(np.float32)
    path = tmp_path / "p.zarrvectors"
    zvf.write_points(str(path), pts, chunk_shape=(5.0,) * 3,
                     attributes={"rgb": rng.random((100, 2)).astype(np.float32)})
    doc = path / "0/vertex_attributes/rgb/zarr.json"
    meta = json.loads(doc.read_text())
    meta["attributes"]["row_shape"] = []
    meta["attributes"].pop("channel_names")
    doc.write_text(json.dumps(meta))
    assert zvf.validate(str(path), level=3).ok  # 2 channels everywhere: the 0.9.2 quirk
    cells = sorted(p for p in (path / "0/vertex_attributes/rgb/c").rglob("*") if p.is_file())
    raw = cells[0].read_bytes()
    n = int.from_bytes(raw[4:8], "little")  # vlen frame: u32 items, u32 len, payload
    cells[0].write_bytes(raw[:4] + (n + 4 * int(n / 8)).to_bytes(4, "little") + raw[8:] + b"\0" * (4 * int(n / 8)))
    report = zvf.validate(str(path), level=3)
    assert not report.ok and "values per vertex" in str(report)


# ------------------------------------------------------------------------- empty input


EMPTY_WITH_IDS = "empty-with-ids"


@pytest.mark.parametrize("batches", ["none", "empty-array", "empty-dict", EMPTY_WITH_IDS])
def test_empty_batches_write_an_openable_store(tmp_path, batches):
    z = np.zeros((0, 3))
    source = {"none": [], "empty-array": [z], "empty-dict": [{"positions": z}, {"positions": z}],
              "empty-with-ids": [{"positions": z, "object_ids": np.zeros(0, np.int64)}]}[batches]
    path = tmp_path / "e.zarrvectors"
    zvf.write_points(str(path), iter(source), chunk_shape=(1.0,) * 3, bounds=([0, 0, 0], [2, 2, 2]))
    with zvf.open(path) as ds:
        assert len(ds.read_all().positions) == 0
        assert len(ds.query(([0, 0, 0], [2, 2, 2])).positions) == 0
    assert zvf.validate(str(path), level=5).ok
    with pytest.raises(InvalidArgumentError, match="bounds"):
        zvf.write_points(str(tmp_path / "nb.zarrvectors"), iter(source), chunk_shape=(1.0,) * 3)


def test_empty_store_matches_reference(tmp_path):
    kw = dict(chunk_shape=(1.0,) * 3, bounds=([0, 0, 0], [1, 1, 1]))
    ref, mine, streamed = (tmp_path / d / "s.zarrvectors" for d in ("ref", "zvf", "stream"))
    for p in (ref, mine, streamed):
        p.parent.mkdir()
    _ref_write(ref, np.zeros((0, 3)), **kw)
    # the compat switch: by default zvf also consolidates every document into the root
    kw["object_index_layout"] = "reference"
    zvf.write_points(str(mine), np.zeros((0, 3)), dtype="float32", **kw)
    zvf.write_points(str(streamed), iter([np.zeros((0, 3))]), dtype="float32", **kw)
    assert store_files(mine) == store_files(ref) == store_files(streamed)


# ------------------------------------------------------------------------- capabilities


@pytest.mark.parametrize("field", ["required_capabilities", "format_capabilities"])
def test_unknown_capability_is_refused(tmp_path, field):
    src = tmp_path / "s.zarrvectors"
    zvf.write_points(str(src), np.ones((3, 3)), chunk_shape=(2.0,) * 3)
    doc = json.loads((src / "zarr.json").read_text())
    doc["attributes"]["zarr_vectors"][field] = ["shared_fragments", "quantized_positions"]
    (src / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=f"{field}.*quantized_positions"):
        zvf.open(src)
    doc["attributes"]["zarr_vectors"][field] = ["shared_fragments"]
    (src / "zarr.json").write_text(json.dumps(doc))
    with zvf.open(src) as ds:
        assert len(ds.read_all().positions) == 3

