"""Seed-layout variants of reference stores read the same as the originals.

``to_seed`` rewrites a 0.9.2 store (our own test helper, plain file surgery):

* ``index``: ``object_index/manifests`` + ``object_ids`` become the seed
  ``object_index/data`` (back-to-back manifests) with an ``offsets`` entry of
  B+1 byte offsets ("csr"), B start offsets ("starts"), or none ("none");
* ``cross``: cross-chunk ``links/0/<offsets>`` arrays become the seed
  ``cross_chunk_links/0/data`` records (link_width x (i64 coords[ndim],
  i64 local)), in input endpoint order; the intra array moves to ``links/0``;
* ``keys``: every array switches to dot chunk keys (``v2`` "." -> ``1.0.1``,
  or ``default`` "." -> ``c.1.0.1``) and its chunk files are renamed;
* ``bin_frags``: each (object, chunk) fragment is split into one fragment per
  non-empty bin run (ranges and explicit row lists), and manifests name them
  with mode-1 and mode-2 blocks.

Blobs are written either as Zarr arrays (``blobs="array"``, any store) or as
raw objects (``blobs="raw"``, uploaded to a memory:// store: on a local
filesystem a raw ``data`` file makes ``data/zarr.json`` probes fail).
"""

from __future__ import annotations

import shutil
import struct
import uuid
from pathlib import Path

import numpy as np
import pytest

import zvf.aio as zaio
from tests.support.store_tree import copy_store
from tests.support.vlen_cells import (
    cell_path,
    decode_cell,
    plain_vlen_codecs,
    read_json,
    vlen_frame,
    vlen_items,
    write_json,
)
from zvf.errors import FormatError
from zvf.format.fragments import FragmentIndex, decode_fragment_index, encode_fragment_index
from zvf.format.links import decode_ragged_links, unpermute

NDIM = 3


# --------------------------------------------------------------------------
# rewriting helpers
# --------------------------------------------------------------------------


def parse_manifest(buf: bytes) -> list[tuple[tuple, list[int]]]:
    """(coords, fragments) blocks of one manifest (any mode)."""
    b = struct.unpack_from("<I", buf, 0)[0]
    p, out = 4, []
    for _ in range(b):
        coords = struct.unpack_from(f"<{NDIM}q", buf, p)
        p += 8 * NDIM
        mode = buf[p]
        p += 1
        if mode == 0:
            out.append((coords, [struct.unpack_from("<q", buf, p)[0]]))
            p += 8
        elif mode == 1:
            s, n = struct.unpack_from("<qq", buf, p)
            out.append((coords, list(range(s, s + n))))
            p += 16
        else:
            n = struct.unpack_from("<I", buf, p)[0]
            out.append((coords, list(struct.unpack_from(f"<{n}q", buf, p + 4))))
            p += 4 + 8 * n
    return out


def encode_block(coords, frags, mode: int) -> bytes:
    head = struct.pack(f"<{NDIM}q", *coords)
    if mode == 0:
        return head + struct.pack("<Bq", 0, frags[0])
    if mode == 1:
        return head + struct.pack("<Bqq", 1, frags[0], len(frags))
    return head + struct.pack("<BI", 2, len(frags)) + struct.pack(f"<{len(frags)}q", *frags)


def array_dirs(root: Path) -> list[Path]:
    return [p.parent for p in root.rglob("zarr.json") if read_json(p).get("node_type") == "array"]


def chunk_files(array_dir: Path) -> list[tuple[Path, tuple]]:
    c = array_dir / "c"
    if not c.is_dir():
        return []
    return [(f, tuple(int(x) for x in f.relative_to(c).parts)) for f in c.rglob("*") if f.is_file()]


def origin(array_dir: Path) -> np.ndarray:
    o = read_json(array_dir / "zarr.json").get("attributes", {}).get("chunk_grid_origin")
    return np.zeros(NDIM, np.int64) if o is None else np.asarray(o, np.int64)


def write_blob(level_dir: Path, rel: str, data: bytes, dtype: str, blobs: str) -> None:
    target = level_dir / rel
    if blobs == "raw":
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return
    n = len(data) // np.dtype(dtype).itemsize
    write_json(target / "zarr.json", {
        "shape": [n], "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [max(n, 1)]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {}, "zarr_format": 3, "node_type": "array",
    })
    if n:
        (target / "c").mkdir(parents=True, exist_ok=True)
        (target / "c" / "0").write_bytes(data)


def split_bin_fragments(level_dir: Path, bin_shape, items: list[bytes]) -> list[bytes]:
    """One fragment per (object, bin run); manifests re-pointed with mode 1/2 blocks."""
    vdir, fdir = level_dir / "vertices", level_dir / "vertex_fragments"
    org = origin(vdir)
    new_ids: dict[tuple, list[list[int]]] = {}
    encoded: dict[tuple, bytes] = {}
    for _f, grid in chunk_files(fdir):
        absolute = tuple((np.asarray(grid) + org).tolist())
        pos = np.frombuffer(decode_cell(vdir, grid), dtype="<f4").reshape(-1, NDIM)
        fi = decode_fragment_index(decode_cell(fdir, grid))
        bins = np.floor(pos / np.asarray(bin_shape)).astype(np.int64)
        frags, ids = [], []
        for k in range(fi.num_fragments):
            rows, _ = fi.gather([k])
            b = bins[rows]
            cut = np.flatnonzero(np.any(b[1:] != b[:-1], axis=1)) + 1
            mine = []
            for run in np.split(rows, cut):
                mine.append(len(frags))
                # every third fragment an explicit row list, the others ranges
                frags.append(run.copy() if len(frags) % 3 == 2 else (int(run[0]), len(run)))
            ids.append(mine)
        new_ids[absolute] = ids
        encoded[grid] = encode_fragment_index(FragmentIndex.from_lists(frags, detect_ranges=False))
    plain_vlen_codecs(fdir)
    for grid, payload in encoded.items():
        cell_path(fdir, grid).write_bytes(vlen_frame(payload))
    out = []
    for oid, buf in enumerate(items):
        blocks = []
        for coords, frags in parse_manifest(buf):
            ids = [i for f in frags for i in new_ids[tuple(coords)][f]]
            mode = 0 if len(ids) == 1 else (1 if oid % 2 == 0 else 2)
            blocks.append(encode_block(coords, ids, mode))
        out.append(struct.pack("<I", len(blocks)) + b"".join(blocks))
    return out


def seed_index(level_dir: Path, items: list[bytes], offsets: str, blobs: str) -> None:
    oi = level_dir / "object_index"
    ids_dir = oi / "object_ids"
    keep_ids = False
    if ids_dir.is_dir():
        ids = np.frombuffer(decode_raw_dense(ids_dir), dtype="<i8")
        keep_ids = not np.array_equal(ids, np.arange(len(ids)))
        if not keep_ids:
            shutil.rmtree(ids_dir)
    shutil.rmtree(oi / "manifests")
    attrs = {"zv_array": "object_index", "sid_ndim": NDIM}
    if offsets != "none":
        attrs["num_objects"] = len(items)
    write_json(oi / "zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": attrs})
    data = b"".join(items)
    write_blob(level_dir, "object_index/data", data, "uint8", blobs)
    lens = np.array([len(x) for x in items], dtype=np.int64)
    csr = np.concatenate(([0], np.cumsum(lens))).astype("<i8")
    if offsets == "csr":
        write_blob(level_dir, "object_index/offsets", csr.tobytes(), "int64", blobs)
    elif offsets == "starts":
        write_blob(level_dir, "object_index/offsets", csr[:-1].tobytes(), "int64", blobs)


def decode_raw_dense(array_dir: Path) -> bytes:
    meta = read_json(array_dir / "zarr.json")
    if not (array_dir / "c" / "0").exists():  # all fill value: zarr wrote no chunk
        return np.zeros(meta["shape"][0], dtype="<i8").tobytes()
    raw = (array_dir / "c" / "0").read_bytes()
    if any(c["name"] == "zstd" for c in read_json(array_dir / "zarr.json")["codecs"]):
        import numcodecs

        raw = numcodecs.Zstd().decode(raw)
    return bytes(raw)


def seed_cross_links(level_dir: Path, blobs: str) -> int:
    """Cross-chunk arrays -> cross_chunk_links/0/data records; intra array -> links/0."""
    fam = level_dir / "links" / "0"
    if not fam.is_dir():
        return 0
    records, width, intra = [], None, None
    for arr in sorted(p for p in fam.iterdir() if p.is_dir()):
        attrs = read_json(arr / "zarr.json")["attributes"]
        offs = np.asarray(attrs["offsets"], np.int64).reshape(-1, NDIM)
        width = attrs["link_width"]
        if not offs.any():
            intra = arr
            continue
        org = origin(arr)
        for _f, grid in chunk_files(arr):
            src = np.asarray(grid) + org
            rows, perm = decode_ragged_links(decode_cell(arr, grid), width, attrs["has_perm"])
            chunks = np.stack([np.broadcast_to(src, (len(rows), NDIM))]
                              + [np.broadcast_to(src + o, (len(rows), NDIM)) for o in offs], axis=1)
            order = unpermute(np.broadcast_to(np.arange(width), rows.shape), perm)  # input slot -> stored column
            take = np.take_along_axis
            rows_in = take(rows, order, axis=1)
            chunks_in = take(chunks, order[:, :, None], axis=1)
            records.append(np.concatenate((chunks_in, rows_in[:, :, None]), axis=2))
        shutil.rmtree(arr)
    if intra is not None:
        tmp = level_dir / "links" / "_intra"
        intra.rename(tmp)
        shutil.rmtree(fam)
        tmp.rename(fam)
    else:
        shutil.rmtree(level_dir / "links")
    rec = np.concatenate(records).astype("<i8") if records else np.zeros((0, width or 2, NDIM + 1), "<i8")
    write_json(level_dir / "cross_chunk_links" / "zarr.json",
               {"zarr_format": 3, "node_type": "group", "attributes": {}})
    write_json(level_dir / "cross_chunk_links" / "0" / "zarr.json", {
        "zarr_format": 3, "node_type": "group",
        "attributes": {"zv_array": "cross_chunk_links", "level_delta": 0, "link_width": int(width or 2),
                       "num_links": len(rec), "sid_ndim": NDIM}})
    write_blob(level_dir, "cross_chunk_links/0/data", rec.tobytes(), "int64", blobs)
    return len(rec)


def dot_keys(root: Path, name: str) -> None:
    for arr in array_dirs(root):
        meta = read_json(arr / "zarr.json")
        meta["chunk_key_encoding"] = {"name": name, "configuration": {"separator": "."}}
        write_json(arr / "zarr.json", meta)
        files = chunk_files(arr)
        for f, grid in files:
            parts = [str(g) for g in grid]
            new = arr / (".".join(parts) if name == "v2" else ".".join(["c", *parts]))
            f.rename(new)
        if (arr / "c").is_dir():
            shutil.rmtree(arr / "c")


def to_seed(src: Path, dst: Path, *, index=None, cross=False, keys=None, bin_frags=False, blobs="array") -> Path:
    copy_store(src, dst)
    root = read_json(dst / "zarr.json")["attributes"]["zarr_vectors"]
    for level_dir in sorted(p for p in dst.iterdir() if p.is_dir() and p.name.isdigit()):
        items = None
        if bin_frags and level_dir.name == "0":
            items = split_bin_fragments(level_dir, root.get("base_bin_shape") or root["chunk_shape"],
                                        vlen_items(level_dir / "object_index" / "manifests"))
        if index:
            if items is None:
                items = vlen_items(level_dir / "object_index" / "manifests")
            seed_index(level_dir, items, index, blobs)
        elif items is not None:
            from tests.support.vlen_cells import write_vlen_items

            write_vlen_items(level_dir / "object_index" / "manifests", items)
        if cross:
            seed_cross_links(level_dir, blobs)
    if keys:
        dot_keys(dst, keys)
    return dst


def to_memory(directory: Path) -> tuple[str, str]:
    import obstore

    from zvf.io.backends import memory_store

    name = f"seed{uuid.uuid4().hex[:10]}"
    store = memory_store(name)
    for f in directory.rglob("*"):
        if f.is_file():
            obstore.put(store, f.relative_to(directory).as_posix(), f.read_bytes())
    return f"memory://{name}", name


@pytest.fixture
def open_variant(tmp_path):
    names = []

    async def opener(src: Path, **kw):
        dst = to_seed(src, tmp_path / f"v{len(names)}_{src.name}", **kw)
        if kw.get("blobs") == "raw":
            url, name = to_memory(dst)
            names.append(name)
            return await zaio.open(url)
        names.append(None)
        return await zaio.open(str(dst))

    yield opener
    from zvf.io.backends import forget_memory_store

    for n in names:
        if n:
            forget_memory_store(n)


# --------------------------------------------------------------------------
# comparison
# --------------------------------------------------------------------------


def conn_of(sel):
    c = sel.faces if sel.faces is not None else sel.edges
    return None if c is None else sorted(tuple(sel.positions[i].tolist() for i in row) for row in c)


def assert_same(a, b):
    np.testing.assert_array_equal(a.positions, b.positions)
    assert sorted(a.attributes) == sorted(b.attributes)
    for n in a.attributes:
        np.testing.assert_array_equal(a.attributes[n], b.attributes[n])
    np.testing.assert_array_equal(a.object_ids, b.object_ids)
    assert conn_of(a) == conn_of(b)


async def assert_reads_alike(orig, variant, boxes, levels=(0,)):
    for level in levels:
        ids = (await orig.object_ids(level=level)).tolist()
        assert (await variant.object_ids(level=level)).tolist() == ids
        for a, b in zip(await orig.read_objects(ids, level=level), await variant.read_objects(ids, level=level)):
            assert_same(a, b)
        for lo, hi in boxes:
            qa = await orig.query((lo, hi), level=level)
            qb = await variant.query((lo, hi), level=level)
            assert sorted(map(tuple, qa.positions.tolist())) == sorted(map(tuple, qb.positions.tolist()))
            assert conn_of(qa) == conn_of(qb)
            if qa.objects is not None:
                assert qa.objects.tolist() == qb.objects.tolist()


BOXES = [([10.0, 20.0, 5.0], [60.0, 70.0, 55.0]), ([45.0, 0.0, 40.0], [100.0, 52.5, 100.0]),
         ([0.0, 0.0, 0.0], [100.0, 100.0, 100.0])]
STORES = ("streamlines", "polylines2", "graph", "skeleton", "mesh", "streamlines_pyramid")


@pytest.mark.parametrize("name", STORES)
@pytest.mark.parametrize("variant", [
    dict(index="csr"),
    dict(index="starts", blobs="raw"),
    dict(index="none", blobs="raw"),
    dict(cross=True),
    dict(cross=True, blobs="raw"),
    dict(keys="v2"),
    dict(keys="default"),
    dict(index="csr", cross=True, keys="v2"),
], ids=lambda v: "-".join(f"{k}={v[k]}" for k in v))
async def test_seed_variant_reads_alike(ref_dir, open_variant, name, variant):
    src = ref_dir / f"{name}.zarrvectors"
    orig = await zaio.open(str(src))
    var = await open_variant(src, **variant)
    await assert_reads_alike(orig, var, BOXES, levels=orig.levels)


@pytest.mark.parametrize("name", ("streamlines", "polylines2", "graph", "mesh", "points_groups"))
@pytest.mark.parametrize("blobs", ["array", "raw"])
async def test_fragments_per_bin_run(ref_dir, open_variant, name, blobs):
    """Fragments only for non-empty (object, bin) runs, mixed range/explicit, mode-1/2 manifests."""
    src = ref_dir / f"{name}.zarrvectors"
    orig = await zaio.open(str(src))
    var = await open_variant(src, bin_frags=True, index="csr" if blobs == "raw" else None, blobs=blobs)
    await assert_reads_alike(orig, var, BOXES)


async def test_seed_layout_really_changed(ref_dir, tmp_path):
    dst = to_seed(ref_dir / "mesh.zarrvectors", tmp_path / "m", index="csr", cross=True, keys="v2", bin_frags=False)
    assert not (dst / "0" / "object_index" / "manifests").exists()
    assert (dst / "0" / "object_index" / "data" / "zarr.json").exists()
    assert (dst / "0" / "cross_chunk_links" / "0" / "data").exists()
    assert read_json(dst / "0" / "links" / "0" / "zarr.json")["node_type"] == "array"
    assert any(f.name.count(".") == 2 for f in (dst / "0" / "vertices").iterdir())
    ds = await zaio.open(str(dst))
    sel = await ds.read_object(0)
    assert len(sel.faces) > 0


async def test_seed_record_past_chunk_vertices(ref_dir, tmp_path):
    dst = to_seed(ref_dir / "graph.zarrvectors", tmp_path / "g", cross=True)
    data = dst / "0" / "cross_chunk_links" / "0" / "data" / "c" / "0"
    rec = np.frombuffer(data.read_bytes(), dtype="<i8").copy().reshape(-1, 2, NDIM + 1)
    rec[0, 1, NDIM] = 999
    data.write_bytes(rec.tobytes())
    ds = await zaio.open(str(dst))
    oids = await ds.object_ids()
    with pytest.raises(FormatError, match=r"0/cross_chunk_links/0/data.*999"):
        for oid in oids.tolist():
            await ds.read_object(oid)
    with pytest.raises(FormatError, match="cross_chunk_links"):
        await ds.query(([0, 0, 0], [100, 100, 100]))


async def test_seed_index_bad_offsets(ref_dir, tmp_path):
    dst = to_seed(ref_dir / "streamlines.zarrvectors", tmp_path / "s", index="csr")
    off = dst / "0" / "object_index" / "offsets" / "c" / "0"
    a = np.frombuffer(off.read_bytes(), dtype="<i8").copy()
    a[2], a[3] = a[3], a[2]
    off.write_bytes(a.tobytes())
    ds = await zaio.open(str(dst))
    with pytest.raises(FormatError, match="object_index/offsets"):
        await ds.read_object(0)


async def test_seed_index_truncated_stream(ref_dir, tmp_path):
    dst = to_seed(ref_dir / "streamlines.zarrvectors", tmp_path / "s", index="none")
    data = dst / "0" / "object_index" / "data" / "c" / "0"
    data.write_bytes(data.read_bytes()[:-5])
    meta = read_json(dst / "0" / "object_index" / "data" / "zarr.json")
    meta["shape"] = meta["chunk_grid"]["configuration"]["chunk_shape"] = [meta["shape"][0] - 5]
    write_json(dst / "0" / "object_index" / "data" / "zarr.json", meta)
    ds = await zaio.open(str(dst))
    with pytest.raises(FormatError, match="object_index/data"):
        await ds.read_object(0)
