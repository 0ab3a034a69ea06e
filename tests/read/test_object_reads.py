"""Object-read throughput pieces: batched vlen/zstd decoding, the packed object index,
fragment owners, concurrency from the plan, and the consolidated root (two-wave opens)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numcodecs.zstd
import numpy as np
import pytest

import zvf
import zvf.aio
from zvf.aio import AsyncDataset
from zvf.config import tuning
from zvf.errors import FormatError
from zvf.format.codecs import CellCodec, zstd_decompress, zstd_decompress_many
from zvf.format.vlen import decode_vlen_frames, decode_vlen_spans, encode_vlen
from zvf.io.executor import Executor
from zvf.io.store import StoreHandle, open_store
from zvf.read import load
from zvf.testing import MemoryTransport

RNG = np.random.default_rng(1311)


def _frames(n_frames: int, max_items: int, max_len: int = 60):
    items = [[RNG.bytes(int(RNG.integers(0, max_len))) for _ in range(int(RNG.integers(0, max_items + 1)))]
             for _ in range(n_frames)]
    blobs = [encode_vlen(it) for it in items]
    lens = np.array([len(b) for b in blobs], dtype=np.int64)
    ends = np.cumsum(lens)
    return items, b"".join(blobs), ends - lens, ends


@pytest.mark.parametrize("n_frames,max_items", [(3, 40), (500, 16), (200, 1)])
def test_vlen_frames_match_the_scalar_walk(n_frames, max_items):
    items, buf, starts, ends = _frames(n_frames, max_items)
    counts, st, ln = decode_vlen_frames(buf, starts, ends, key="k")
    assert counts.tolist() == [len(i) for i in items]
    flat = [x for it in items for x in it]
    assert [buf[a:a + b] for a, b in zip(st.tolist(), ln.tolist())] == flat
    s0, l0 = decode_vlen_spans(buf[starts[0]:ends[0]])
    assert (st[:counts[0]] == s0 + starts[0]).all() and (ln[:counts[0]] == l0).all()


def test_vlen_frames_name_the_bad_frame():
    _, buf, starts, ends = _frames(50, 8)
    bad = bytearray(buf)
    f = 37
    while ends[f] - starts[f] <= 8:  # a frame with an item to corrupt
        f -= 1
    bad[starts[f] + 4] = 0xFF  # first item's length now overruns the frame
    with pytest.raises(FormatError, match=rf"k\[{f}\]"):
        decode_vlen_frames(bytes(bad), starts, ends, key="k")
    padded = buf[:ends[0]] + b"\0" + buf[ends[0]:]  # one stray byte after frame 0
    with pytest.raises(FormatError, match=r"k\[0\]: .*trailing"):
        decode_vlen_frames(padded, np.r_[starts[0], starts[1:] + 1], np.r_[ends[0] + 1, ends[1:] + 1], key="k")
    with pytest.raises(FormatError, match="expected 99"):
        decode_vlen_frames(buf, starts, ends, key="k", expected=99)


def test_zstd_many_equals_one_by_one_and_falls_back():
    raws = [numcodecs.zstd.compress(RNG.bytes(int(n)) * 3, 0, False) for n in RNG.integers(0, 3000, 300)]
    two = numcodecs.zstd.compress(b"ab" * 50, 0, False) + numcodecs.zstd.compress(b"cd" * 9, 0, False)
    checksum = numcodecs.zstd.compress(b"xyz" * 99, 3, True)
    raws += [two, checksum]
    lens = np.array([len(r) for r in raws])
    ends = np.cumsum(lens)
    out, s, e = zstd_decompress_many(b"".join(raws), ends - lens, ends, key="k")
    assert [bytes(out[a:b]) for a, b in zip(s, e)] == [zstd_decompress(r) for r in raws]


def test_zstd_many_back_to_back_frames_in_one_pass():
    """Frames lying back to back (a shard's inner chunks) decode in one pass; a damaged one is named by key."""
    payloads = [RNG.bytes(int(n)) * 2 for n in RNG.integers(0, 2000, 200)]
    raws = [numcodecs.zstd.compress(p, 0, False) for p in payloads]
    lens = np.array([len(r) for r in raws])
    ends = np.cumsum(lens)
    blob = b"".join(raws)
    out, s, e = zstd_decompress_many(blob, ends - lens, ends, key="k")
    assert [bytes(out[a:b]) for a, b in zip(s, e)] == payloads
    bad = bytearray(blob)
    f = int(np.argmax(lens))  # the largest frame: its blocks hold compressed data to damage
    bad[int(ends[f]) - 5:int(ends[f]) - 1] = b"\xff\xff\xff\xff"
    with pytest.raises(FormatError, match=r"^k: "):
        zstd_decompress_many(bytes(bad), ends - lens, ends, key="k")


def test_zstd_many_refuses_a_lying_header_without_allocating():
    frame = bytearray(numcodecs.zstd.compress(b"a" * 1000, 0, False))
    # single-segment frame with a 2-byte content size: claim far more than its blocks can give
    fhd = frame[4]
    assert fhd >> 6 == 1
    frame[5:7] = (60000).to_bytes(2, "little")  # within one block's bound: zstd itself finds the lie
    with pytest.raises(FormatError, match=r"^k"):
        zstd_decompress_many(bytes(frame), [0], [len(frame)], key="k")
    big = bytearray(numcodecs.zstd.compress(RNG.bytes(300_000), 0, False))
    assert big[4] >> 6 == 2  # a 4-byte content size, after the window descriptor if any
    at = 5 + (0 if (big[4] >> 5) & 1 else 1)
    big[at:at + 4] = (1 << 31).to_bytes(4, "little")  # far beyond what its blocks can yield
    with pytest.raises(FormatError, match=r"k\[0\]: zstd frame declares"):
        zstd_decompress_many(bytes(big), [0], [len(big)], key="k")
    ok = numcodecs.zstd.compress(b"b" * 5000, 0, False)
    with pytest.raises(FormatError, match="limit"):
        zstd_decompress_many(ok, [0], [len(ok)], key="k", max_size=100)


def test_decode_items_many_any_pipeline():
    items, *_ = _frames(40, 10)
    for comp in (None, "zstd", "blosc", "gzip"):
        codec = CellCodec.for_writing(comp)
        blobs = [codec.encode_items(it) for it in items]
        lens = np.array([len(b) for b in blobs])
        ends = np.cumsum(lens)
        buf, _counts, st, ln = codec.decode_items_many(b"".join(blobs), ends - lens, ends, key="k")
        assert [bytes(buf[a:a + b]) for a, b in zip(st, ln)] == [x for it in items for x in it]


# ---------------------------------------------------------------- object index and owners


def _lines(n: int, seed: int = 5):
    rng = np.random.default_rng(seed)
    return [np.cumsum(rng.normal(0, 4, (int(rng.integers(1, 40)), 3)), axis=0).astype(np.float32) + 50
            for _ in range(n)]


@pytest.fixture(scope="module")
def line_stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("lines")
    lines = _lines(3000)
    out = {}
    for layout in ("sharded", "reference"):
        out[layout] = root / layout
        zvf.write_polylines(str(out[layout]), lines, chunk_shape=(20.0,) * 3, geometry_type="streamline",
                            object_index_layout=layout)
    return lines, out


def _naive_owners(oids, table):
    owners = {}
    for row, c, f in zip(table.object_row.tolist(), map(tuple, table.coords.tolist()), table.fragment.tolist()):
        owners.setdefault(c, {})[f] = int(oids[row])
    return {c: np.array([d.get(i, -1) for i in range(max(d) + 1)]) for c, d in owners.items()}


@pytest.mark.parametrize("layout", ["sharded", "reference"])
async def test_full_table_owners_and_partial_rows(line_stores, layout):
    lines, paths = line_stores
    ds = await zvf.aio.open(str(paths[layout]))
    oids, table = await ds.manifests(0)
    assert table.num_objects == len(lines)
    owners = await ds.fragment_owners(0)
    naive = _naive_owners(oids, table)
    assert owners.keys() == naive.keys() and all((owners[c] == naive[c]).all() for c in naive)
    sel = await ds.read_all()
    counts = np.bincount(sel.object_ids, minlength=len(lines))
    assert counts.tolist() == [len(v) for v in lines]
    # a fresh dataset reading a few objects decodes only their units, and agrees with the full table
    ds2 = await zvf.aio.open(str(paths[layout]))
    rows = np.array([5, 2999, 17, 5, 1600])
    part = await ds2.context.levels[0].object_index.table(rows)
    full = table.take_objects(rows)
    assert (part.coords == full.coords).all() and (part.fragment == full.fragment).all()
    assert (part.object_row == full.object_row).all()


@pytest.mark.parametrize("fragment", [1 << 40, (1 << 63) - 1, 5_000_000])
def test_owners_refuse_a_fragment_id_no_reference_accounts_for(fragment):
    """A damaged manifest naming a huge fragment id is an error naming the array, not a huge allocation."""
    from zvf.format.manifest import ManifestTable
    from zvf.read.context import _owners_of

    table = ManifestTable(np.array([0, 1]), np.array([0, 0]), np.array([[0, 0, 0], [0, 0, 1]]),
                          np.array([0, fragment]), 2)
    with pytest.raises(FormatError, match=r"0/object_index/manifests: manifests name fragment"):
        _owners_of(np.array([7, 8]), table, "0/object_index/manifests")
    ok = ManifestTable(np.array([0, 1]), np.array([0, 0]), np.array([[0, 0, 0], [0, 0, 1]]), np.array([0, 3]), 2)
    owners = _owners_of(np.array([7, 8]), ok, "0/object_index/manifests")
    assert owners[(0, 0, 0)].tolist() == [7] and owners[(0, 0, 1)].tolist() == [-1, -1, -1, 8]


async def test_sharded_index_by_ranges_when_shards_are_big(line_stores):
    """With a tiny latency x bandwidth the index reads inner chunks by range, decoded in one batch."""
    lines, paths = line_stores
    handle = open_store(str(paths["sharded"]), storage_options={"latency_hint": 1e-9, "bandwidth_hint": 1.0})
    ex = Executor(handle)
    root, level0 = await load.load_root(ex, handle.url)
    ds = AsyncDataset(handle, ex, root, level0)
    rows = np.array([1, 40, 2500])
    before = ex.stats.requests
    t = await level0.object_index.table(rows)
    assert 1 <= ex.stats.requests - before <= 3  # ranged reads of three inner chunks (coalesced when close)
    cached = ex.cache("manifest").keys()  # a ByteLRU: keys() is its listing
    kinds = {k[1] for k in cached}
    assert "inner" in kinds and "rows" not in kinds  # decoded per inner chunk, not the whole shard
    for r in rows.tolist():
        got = await ds.read_object(int(r))
        assert len(got.positions) == len(lines[r])
    assert (t.object_row == np.repeat(np.arange(3), np.bincount(t.object_row, minlength=3))).all()


async def test_an_object_read_after_open_decodes_only_its_inner_chunk(line_stores):
    """The open prefetched the whole manifest shard: one object's read cuts its inner chunk from those bytes
    (no request), not a decode of every manifest in the shard (12 ms of 260 kB for one object)."""
    lines, paths = line_stores
    async with await zvf.aio.open(str(paths["sharded"])) as ds:
        ex = ds.context.ex
        listing = ex.cache("manifest").keys  # a ByteLRU: keys() is its listing
        kinds = {k[1] for k in listing()}
        assert "shard" in kinds and "rows" not in kinds, kinds  # the open holds the raw shard, undecoded
        before = ex.stats.requests
        rows = np.array([7])
        t = await ds.context.levels[0].object_index.table(rows)
        assert ex.stats.requests == before  # cut from the prefetched shard
        kinds = {k[1] for k in listing()}
        assert "inner" in kinds and "rows" not in kinds, kinds
        got = await ds.read_object(7)
        assert len(got.positions) == len(lines[7]) and len(t.object_row) >= 1


# ---------------------------------------------------------------- concurrency from the plan


def test_row_helpers_match_their_plain_definitions():
    from zvf.read.rowops import expand_ranges, match_rows, segments, sequential_edges, unique_rows

    rng = np.random.default_rng(8)
    for _ in range(100):
        k = int(rng.integers(0, 7))
        starts, lens = rng.integers(-9, 30, k), rng.integers(0, 5, k)
        want = np.concatenate([np.arange(a, a + b) for a, b in zip(starts, lens)] + [np.zeros(0, np.int64)])
        assert np.array_equal(expand_ranges(starts, lens), want)
        col = np.zeros((len(want), 2), np.int64)
        expand_ranges(starts, lens, out=col[:, 1])  # a strided column is filled in place
        assert np.array_equal(col[:, 1], want)
        off = np.concatenate(([0], np.cumsum(rng.integers(0, 5, k))))
        seg = segments(off)
        i = np.flatnonzero(seg[1:] == seg[:-1])
        assert np.array_equal(sequential_edges(off), np.stack((i, i + 1), 1).reshape(-1, 2))
        rows = rng.integers(-4, 4, (int(rng.integers(0, 30)), 3))
        assert np.array_equal(unique_rows(rows), np.unique(rows.reshape(-1, 3), axis=0))
        known = unique_rows(rows)
        query = rng.integers(-5, 5, (20, 3))
        got = match_rows(known, query)
        naive = [next((j for j, r in enumerate(known.tolist()) if r == q), -1) for q in query.tolist()]
        assert got.tolist() == naive
    wide = np.array([[2**62, 0], [-(2**62), 1]])
    assert match_rows(wide[:1], wide).tolist() == [0, -1]  # a one-cell box; the far row cannot wrap into it
    assert match_rows(wide, wide[::-1]).tolist() == [1, 0]  # too wide for a table or one int64 per row
    far = np.array([[3, -(2**63)], [2**63 - 1, 4], [3, 4]])
    assert match_rows(np.array([[3, 4], [3, 5]]), far).tolist() == [-1, -1, 0]
    assert np.array_equal(unique_rows(wide[[0, 1, 0]]), np.unique(wide, axis=0))


async def test_every_object_in_one_pass(line_stores):
    """read_objects of all ids, iter_objects and their per-object split agree, each cell read once."""
    lines, paths = line_stores
    ds = await zvf.aio.open(str(paths["sharded"]))
    ids = await ds.object_ids()
    whole = await ds.read_objects(ids, combined=True)
    assert np.array_equal(whole.objects, ids) and np.array_equal(np.diff(whole.offsets), [len(v) for v in lines])
    assert np.array_equal(whole.positions, np.concatenate(lines))
    assert len(whole.edges) == sum(len(v) - 1 for v in lines)
    before = ds.stats.snapshot()["requests"]
    objs = [o async for o in ds.iter_objects(batch=64)]
    cells = len((await ds.level(0)).nonempty_chunks)
    assert ds.stats.snapshot()["requests"] - before <= 2 * cells  # vertices + fragments, once each
    listed = await ds.read_objects(ids[::-1])
    for k in (0, 1, len(ids) // 2, len(ids) - 1):
        one = objs[k]
        assert one.objects.tolist() == [ids[k]] and np.array_equal(one.positions, lines[k])
        assert one.offsets.tolist() == [0, len(lines[k])] and set(one.object_ids.tolist()) <= {int(ids[k])}
        assert np.array_equal(one.edges, np.stack([np.arange(len(one) - 1), np.arange(1, len(one))], 1))
        assert np.array_equal(listed[len(ids) - 1 - k].positions, one.positions)


async def test_fragment_shards_cost_one_request_each_in_a_whole_level_read(line_stores):
    """zvf's layout shards an object level's fragment indexes alone; read_all fetches each such shard in one GET
    (its index taken from its end, and cached: a later box query reads only ranges) and labels as 0.9.2's does."""
    _, paths = line_stores
    ds = await zvf.aio.open(str(paths["sharded"]))
    level = await ds.level(0)
    frag, vert = level.array("vertex_fragments"), level.array("vertices")
    assert vert.codec.shard is None and frag.codec.shard == (4, 4, 4)
    assert level.array("object_index/manifests") is not None and \
        (await zvf.aio.open(str(paths["reference"]))).context.levels[0].array("vertex_fragments").codec.shard is None
    shards = {tuple(c) for c in (level.nonempty_chunks - frag.origin) // 4}
    await ds.object_ids()  # the object index first, so what follows counts cells only
    await ds.fragment_owners(0)
    before = ds.stats.snapshot()["requests"]
    sel = await ds.read_all()
    assert ds.stats.snapshot()["requests"] - before == len(level.nonempty_chunks) + len(shards)
    ref = await (await zvf.aio.open(str(paths["reference"]))).read_all()
    assert np.array_equal(sel.positions, ref.positions) and np.array_equal(sel.object_ids, ref.object_ids)
    before = ds.stats.snapshot()["requests"]
    box = await ds.query(bbox=([40.0] * 3, [60.0] * 3))
    assert len(box.positions) and ds.stats.snapshot()["requests"] - before <= 2 * len(shards) + len(
        level.nonempty_chunks)  # no shard index read again
    # a fresh open reads the (few) fragment shard indexes beside the object index's: no index wave at the first box
    fresh = await zvf.aio.open(str(paths["sharded"]))
    cached = fresh.context.ex.cache("shard_index").keys()
    assert sum(1 for k in cached if "vertex_fragments" in k[1]) == len(shards)
    before = fresh.stats.snapshot()["requests"]
    await fresh.query(bbox=([40.0] * 3, [60.0] * 3))
    assert not any("vertex_fragments" in k[1] for k in set(fresh.context.ex.cache("shard_index").keys()) - set(cached))
    assert fresh.stats.snapshot()["requests"] > before


async def test_a_cut_fragment_shard_is_named(line_stores, tmp_path):
    import shutil

    _, paths = line_stores
    copy = tmp_path / "cut"
    shutil.copytree(paths["sharded"], copy)
    shard = next(p for p in sorted((copy / "0" / "vertex_fragments" / "c").rglob("*")) if p.is_file())
    shard.write_bytes(shard.read_bytes()[:-100])
    ds = await zvf.aio.open(str(copy))  # its index is read at open: a damaged one is left for the read to name
    with pytest.raises(FormatError, match="vertex_fragments/c/"):
        await ds.read_all()


def test_plan_width_rules():
    h = StoreHandle.for_transport(MemoryTransport(), concurrency=32, latency_hint=0.02, bandwidth_hint=100e6)
    fixed = Executor(h)
    assert fixed.plan_width(1024, 1024 * 200_000) == 32  # a handle built with a concurrency keeps it
    h.concurrency_auto = True
    ex = Executor(h)
    assert ex.plan_width(10, 10) == 32  # small plans: the default
    assert ex.plan_width(1024, 1024 * 1000) == tuning().max_width  # many small requests: latency-bound, run wide
    assert ex.plan_width(1024, 1024 * 10_000_000) == 32  # a few huge ones: bandwidth-bound, the default
    assert ex.plan_width(1024, 1024 * 100_000) == 80  # 4 x 1024 x 20 ms x 100 MB/s / 100 MB
    assert ex.widen(1024, 1024 * 100_000) == 80 and ex.limiter.total_tokens == 80
    assert ex.widen(10) == 80  # never shrinks
    assert ex.plan_width(1024) == tuning().max_width and ex.plan_width(100) == 100  # sizes unknown: latency-bound
    assert Executor(h, concurrency=8).plan_width(1024, 1) == 8  # an explicit concurrency wins


def test_storage_option_concurrency_turns_sizing_off(tmp_path):
    opts = {"endpoint": "http://127.0.0.1:9", "access_key_id": "a", "secret_access_key": "b", "allow_http": True}
    assert open_store("s3://b/p", storage_options=opts).concurrency_auto
    assert not open_store("s3://b/p", storage_options={**opts, "concurrency": 16}).concurrency_auto
    assert not open_store(str(tmp_path), mode="w").concurrency_auto  # local: no latency to hide


async def test_many_ranges_run_wide():
    data = {f"k{i}": bytes(100) for i in range(300)}
    h = StoreHandle.for_transport(MemoryTransport(data, latency=0.002), concurrency=8, latency_hint=0.02,
                                  bandwidth_hint=100e6)
    h.concurrency_auto = True
    ex = Executor(h)
    from zvf.io.plan import ByteRange

    got = await ex.read_ranges([ByteRange(k, 0, 50) for k in data])
    assert all(len(g) == 50 for g in got)
    assert ex.stats.max_inflight > 8 and ex.concurrency == tuning().max_width


# ---------------------------------------------------------------- consolidated root


def _store_dict(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


async def _open_and_box(data: dict[str, bytes], lo, hi):
    handle = StoreHandle.for_transport(MemoryTransport(data), concurrency=64, read_only=True)
    ex = Executor(handle)
    root, level0 = await load.load_root(ex, handle.url)
    ds = AsyncDataset(handle, ex, root, level0)
    opened = ex.stats.round_trips
    sel = await ds.query((lo, hi))
    return opened, ex.stats.round_trips, len(sel)


@pytest.fixture(scope="module")
def point_stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("points")
    rng = np.random.default_rng(3)
    pos = rng.uniform(0, 100, (4000, 3)).astype(np.float32)
    attrs = {"a": rng.random(4000).astype(np.float32), "b": rng.integers(0, 9, 4000).astype(np.int16)}
    out = {}
    for layout in ("sharded", "reference"):
        out[layout] = root / layout
        zvf.write_points(str(out[layout]), pos, chunk_shape=(25.0,) * 3, bin_shape=(12.5,) * 3, attributes=attrs,
                         object_index_layout=layout)
    return pos, out


async def test_open_and_first_box_in_two_waves(point_stores):
    pos, paths = point_stores
    lo, hi = [30.0] * 3, [60.0] * 3
    truth = int(np.all((pos >= lo) & (pos <= hi), axis=1).sum())
    opened, total, n = await _open_and_box(_store_dict(paths["sharded"]), lo, hi)
    assert (opened, total, n) == (1, 2, truth)
    # 0.9.2's bytes (no consolidated section): the attribute groups are listed once the root says so
    opened, total, n = await _open_and_box(_store_dict(paths["reference"]), lo, hi)
    assert (opened, total, n) == (3, 4, truth)


async def test_a_stale_section_is_not_trusted(point_stores):
    """A document wave 1 fetched disagrees with its copy in the section: open as without one."""
    pos, paths = point_stores
    data = _store_dict(paths["sharded"])
    doc = json.loads(data["0/vertices/zarr.json"])
    doc["attributes"]["note"] = "changed by another tool"
    data["0/vertices/zarr.json"] = json.dumps(doc).encode()
    lo, hi = [30.0] * 3, [60.0] * 3
    opened, total, n = await _open_and_box(data, lo, hi)
    assert (opened, total, n) == (3, 4, int(np.all((pos >= lo) & (pos <= hi), axis=1).sum()))


def test_zarr_python_and_reference_read_the_consolidated_root(point_stores, line_stores):
    import zarr
    from zarr_vectors import open as zv_open

    _, paths = point_stores
    for path in (paths["sharded"], line_stores[1]["sharded"]):
        root = json.loads((path / "zarr.json").read_text())
        listed = set(root["consolidated_metadata"]["metadata"])
        assert listed == {p.parent.relative_to(path).as_posix() for p in path.rglob("zarr.json")} - {"."}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            g = zarr.open_group(str(path), mode="r")
            assert {k for k, _ in g.members(max_depth=None)} == listed
            assert g["0/vertices"].shape == tuple(json.loads((path / "0/vertices/zarr.json").read_text())["shape"])
            ds = zv_open(str(path))
            assert ds is not None
    assert "consolidated_metadata" not in json.loads((paths["reference"] / "zarr.json").read_text())


def test_manifest_units_sharing_one_buffer_are_joined_once():
    """Inner chunks decoded in one batch share its buffer; gathering rows from thousands of them must
    not copy that buffer once per chunk (it did: 37 GiB for a Dask export partition of 200 k lines)."""
    from zvf.read.object_index import _gather

    buf = np.arange(1000, dtype=np.uint8)
    units = [(buf, np.array([10 * i, 10 * i + 3]), np.array([3, 7])) for i in range(50)]  # one shared buffer
    other = (np.full(5, 9, np.uint8), np.array([0]), np.array([5]))
    out, starts, lengths = _gather([*units, other], np.array([0, 49, 50, 7]), np.array([1, 0, 0, 0]))
    assert len(out) == len(buf) + 5
    got = [bytes(out[s:s + n]) for s, n in zip(starts, lengths)]
    assert got == [bytes(buf[3:10]), bytes(buf[490:493]), b"\x09" * 5, bytes(buf[70:73])]
