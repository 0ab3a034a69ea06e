"""``zvf.validate``: levels, report, CLI, and agreement with zarr-vectors 0.9.2's validator.

The agreement test copies every reference store, breaks the copy in one
specific way, and runs both validators (level 5).  zvf must flag every
corruption the reference flags (and name the damaged key); it may flag
more.  Stores the reference accepts must pass zvf too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import zvf
from tests.support.results import record_table
from zvf.format.codecs import CellCodec
from zvf.format.fragments import (
    FragmentIndex,
    decode_fragment_index,
    encode_fragment_index,
)
from zvf.format.manifest import decode_manifests, encode_manifests
from zvf.validation import Report

# --------------------------------------------------------------------------------------
# editing stores on disk
# --------------------------------------------------------------------------------------


class Edit:
    """Byte-level edits of a local store (default chunk keys, unsharded cells)."""

    def __init__(self, root: Path):
        self.root = root

    def doc(self, node: str) -> dict:
        return json.loads((self.root / node / "zarr.json").read_text())

    def set_doc(self, node: str, doc: dict) -> None:
        (self.root / node / "zarr.json").write_text(json.dumps(doc, indent=2))

    def attrs(self, node: str, fn: Callable[[dict], None]) -> None:
        d = self.doc(node)
        fn(d["attributes"])
        self.set_doc(node, d)

    def codec(self, array: str) -> CellCodec:
        return CellCodec.from_array_metadata(self.doc(array), key=array)

    def cell(self, array: str, coords) -> Path:
        return self.root / array / "c" / "/".join(str(int(c)) for c in coords)

    def payload(self, array: str, coords) -> bytes:
        return bytes(self.codec(array).decode(self.cell(array, coords).read_bytes()))

    def set_payload(self, array: str, coords, data: bytes) -> None:
        self.cell(array, coords).write_bytes(self.codec(array).encode(data))

    def items(self, array: str, c: int = 0) -> list[bytes]:
        return [bytes(x) for x in self.codec(array).decode_items(self.cell(array, (c,)).read_bytes())]

    def set_items(self, array: str, items: list[bytes], c: int = 0) -> None:
        self.cell(array, (c,)).write_bytes(self.codec(array).encode_items(items))

    def first_cell(self, array: str) -> tuple[int, ...]:
        listed = self.doc(array)["attributes"]["nonempty_chunks"]
        return tuple(int(x) for x in min(listed).split("."))


@dataclass
class Corruption:
    name: str
    store: str
    what: str
    apply: Callable[[Edit], str]  # returns the key zvf must name in an error


def _frag_index(e: Edit, chunk):
    return decode_fragment_index(e.payload("0/vertex_fragments", chunk))


def c_truncate_fragment(e: Edit) -> str:
    p = e.cell("0/vertex_fragments", (0, 0, 0))
    p.write_bytes(p.read_bytes()[:-9])
    return "0/vertex_fragments/c/0/0/0"


def c_bad_magic(e: Edit) -> str:
    b = bytearray(e.payload("0/vertex_fragments", (0, 0, 1)))
    b[0:4] = b"XXXX"
    e.set_payload("0/vertex_fragments", (0, 0, 1), bytes(b))
    return "0/vertex_fragments/c/0/0/1"


def c_fragment_past_rows(e: Edit) -> str:
    fi = _frag_index(e, (0, 1, 0))
    counts = fi.counts.copy()
    counts[-1] += 5
    e.set_payload("0/vertex_fragments", (0, 1, 0), encode_fragment_index(FragmentIndex.from_ranges(fi.starts, counts)))
    return "0/vertex_fragments/c/0/1/0"


def c_fragments_not_tiling(e: Edit) -> str:
    fi = _frag_index(e, (1, 0, 0))
    counts = fi.counts.copy()
    k = int(np.flatnonzero(counts)[-1])
    counts[k] -= 1  # a row no fragment covers
    e.set_payload("0/vertex_fragments", (1, 0, 0), encode_fragment_index(FragmentIndex.from_ranges(fi.starts, counts)))
    return "0/vertex_fragments/c/1/0/0"


def c_attribute_rows(e: Edit) -> str:
    name = min(p.name for p in (e.root / "0/vertex_attributes").iterdir() if p.is_dir())
    arr = f"0/vertex_attributes/{name}"
    doc = e.doc(arr)["attributes"]
    width = int(np.prod(doc.get("row_shape") or [1])) * np.dtype(doc["dtype"]).itemsize
    c = e.first_cell(arr)
    e.set_payload(arr, c, e.payload(arr, c)[:-width])
    return e.cell(arr, c).relative_to(e.root).as_posix()


def c_vertices_ragged(e: Edit) -> str:
    c = e.first_cell("0/vertices")
    e.set_payload("0/vertices", c, e.payload("0/vertices", c) + b"\x00\x00")
    return e.cell("0/vertices", c).relative_to(e.root).as_posix()


def _manifests(e: Edit):
    items = e.items("0/object_index/manifests")
    return items, decode_manifests(items, 3)


def _set_manifests(e: Edit, table, coords=None, frag=None) -> None:
    coords = table.coords if coords is None else coords
    frag = table.fragment if frag is None else frag
    e.set_items("0/object_index/manifests", encode_manifests(table.object_row, coords, frag, table.num_objects))


def c_manifest_missing_chunk(e: Edit) -> str:
    _, t = _manifests(e)
    coords = t.coords.copy()
    coords[0] = (2, 2, 2)
    _set_manifests(e, t, coords=coords)
    return "0/object_index/manifests/c/0"


def c_manifest_fragment_past(e: Edit) -> str:
    _, t = _manifests(e)
    frag = t.fragment.copy()
    frag[0] = 99
    _set_manifests(e, t, frag=frag)
    return "0/object_index/manifests/c/0"


def c_intra_link_past(e: Edit) -> str:
    arr = "0/links/0/0.0.0"
    rows = np.frombuffer(e.payload(arr, (0, 0, 0)), "<i8").copy()
    rows[0] = 999
    e.set_payload(arr, (0, 0, 0), rows.tobytes())
    return "0/links/0/0.0.0/c/0/0/0"


def c_cross_link_past(e: Edit) -> str:
    arr = next(f"0/links/0/{p.name}" for p in sorted((e.root / "0/links/0").iterdir())
               if p.is_dir() and p.name != "0.0.0")
    c = e.first_cell(arr)
    blob = np.frombuffer(e.payload(arr, c), "<i8").copy()
    k = int(blob[0])
    blob[1 + k + 2] = 999  # row 0, endpoint 1 (after the perm column)
    e.set_payload(arr, c, blob.tobytes())
    return e.cell(arr, c).relative_to(e.root).as_posix()


def c_listed_missing(e: Edit) -> str:
    c = e.first_cell("0/vertices")
    e.cell("0/vertices", c).unlink()
    return e.cell("0/vertices", c).relative_to(e.root).as_posix()


def c_unlisted_cell(e: Edit) -> str:
    listed = sorted(e.doc("0/vertices")["attributes"]["nonempty_chunks"])
    drop = listed[-1]
    e.attrs("0/vertices", lambda a: a.__setitem__("nonempty_chunks", [x for x in listed if x != drop]))
    return e.cell("0/vertices", drop.split(".")).relative_to(e.root).as_posix()


def c_vertex_count(e: Edit) -> str:
    e.attrs("0", lambda a: a["zarr_vectors_level"].__setitem__(
        "vertex_count", a["zarr_vectors_level"]["vertex_count"] + 1))
    return "0/zarr.json"


def c_root_missing(e: Edit) -> str:
    (e.root / "zarr.json").unlink()
    return "zarr.json"


def c_level_missing(e: Edit) -> str:
    (e.root / "0/zarr.json").unlink()
    return "0/zarr.json"


def c_object_ids_unsorted(e: Edit) -> str:
    arr = "0/object_index/object_ids"
    ids = np.frombuffer(e.codec(arr).decode(e.cell(arr, (0,)).read_bytes()), "<i8").copy()
    ids[[0, 1]] = ids[[1, 0]]
    e.cell(arr, (0,)).write_bytes(e.codec(arr).encode(ids.tobytes()))
    return "0/object_index/object_ids/c/0"


def c_num_links(e: Edit) -> str:
    e.attrs("0/links/0", lambda a: a.__setitem__("num_physical_records", a["num_physical_records"] + 1))
    return "0/links/0/zarr.json"


def c_links_convention(e: Edit) -> str:
    e.attrs("", lambda a: a["zarr_vectors"].__setitem__("links_convention", "implicit_sequential"))
    return "zarr.json"


def c_mesh_width(e: Edit) -> str:
    e.attrs("0/links/0", lambda a: a.__setitem__("link_width", 2))
    return "0/links/0/zarr.json"


def c_pyramid_grows(e: Edit) -> str:
    e.attrs("1", lambda a: a["zarr_vectors_level"].__setitem__("vertex_count", 10_000))
    return "1/zarr.json"


def c_cross_level_past(e: Edit) -> str:
    arr = "1/links/-1/0.0.0"
    c = e.first_cell(arr)
    blob = np.frombuffer(e.payload(arr, c), "<i8").copy()
    k = int(blob[0])
    blob[1 + k + 1] = 5000  # row 0, endpoint 1: a level-0 vertex
    e.set_payload(arr, c, blob.tobytes())
    return e.cell(arr, c).relative_to(e.root).as_posix()


def c_shard_crc(e: Edit) -> str:
    p = e.root / "0/vertices/c/0/0/0"
    b = bytearray(p.read_bytes())
    b[-8] ^= 0xFF
    p.write_bytes(bytes(b))
    return "0/vertices/c/0/0/0"


def c_bad_json(e: Edit) -> str:
    (e.root / "0/vertex_fragments/zarr.json").write_text('{"shape": [3, 3')
    return "0/vertex_fragments/zarr.json"


def c_zarr_v2_array(e: Edit) -> str:
    e.set_doc("0/vertices", {**e.doc("0/vertices"), "zarr_format": 2})
    return "0/vertices/zarr.json"


def c_claim_left(e: Edit) -> str:
    (e.root / ".zvf-writing").write_bytes(b"zvf write in progress\n")
    return ".zvf-writing"


def c_orphan_array(e: Edit) -> str:
    dst = e.root / "0/vertex_attributes/ghost/c/0/0"
    dst.mkdir(parents=True)
    shutil.copy(e.cell("0/vertices", (0, 0, 0)), dst / "0")
    return "0/vertex_attributes/ghost/c/0/0/0"


def c_group_member_unknown(e: Edit) -> str:
    items = e.items("0/groups")
    items[0] = np.array([12345], "<i8").tobytes()
    e.set_items("0/groups", items)
    return "0/groups/c/0"


CORRUPTIONS = [
    Corruption("fragment blob truncated", "points3d", "last 9 bytes of a stored fragment cell cut",
               c_truncate_fragment),
    Corruption("fragment bad magic", "points3d", "magic GFVZ -> XXXX", c_bad_magic),
    Corruption("fragment range past rows", "points3d", "last range count + 5", c_fragment_past_rows),
    Corruption("fragments do not tile", "points3d", "a row no fragment covers (fragments_tile set)",
               c_fragments_not_tiling),
    Corruption("attribute cell row count", "points3d", "one attribute row dropped", c_attribute_rows),
    Corruption("vertices not whole rows", "points3d", "2 bytes appended to a vertices payload", c_vertices_ragged),
    Corruption("manifest names missing chunk", "graph", "block coords -> chunk 2.2.2 (no vertices)",
               c_manifest_missing_chunk),
    Corruption("manifest fragment past F", "graph", "block fragment -> 99", c_manifest_fragment_past),
    Corruption("intra link row past chunk", "graph", "links/0/0.0.0 row 0 -> vertex 999", c_intra_link_past),
    Corruption("cross-chunk link past neighbour", "polylines2", "endpoint 1 -> vertex 999", c_cross_link_past),
    Corruption("nonempty_chunks lists missing cell", "points3d", "a vertices cell deleted", c_listed_missing),
    Corruption("cell present but not listed", "points3d", "a chunk dropped from nonempty_chunks", c_unlisted_cell),
    Corruption("vertex_count wrong", "points3d", "level vertex_count + 1", c_vertex_count),
    Corruption("root zarr.json missing", "points3d", "root document deleted", c_root_missing),
    Corruption("level doc missing", "graph", "0/zarr.json deleted", c_level_missing),
    Corruption("object_ids unsorted", "streamlines", "first two ids swapped", c_object_ids_unsorted),
    Corruption("num_physical_records wrong", "graph", "links family count + 1", c_num_links),
    Corruption("links_convention wrong", "graph", "explicit -> implicit_sequential", c_links_convention),
    Corruption("mesh link_width 2", "mesh", "links/0 family link_width 3 -> 2", c_mesh_width),
    Corruption("pyramid level grows", "streamlines_pyramid", "level 1 vertex_count 10000", c_pyramid_grows),
    Corruption("cross-level link past level", "streamlines_pyramid", "links/-1 endpoint -> vertex 5000",
               c_cross_level_past),
    Corruption("shard index checksum", "points3d_sharded_zstd", "one index byte flipped", c_shard_crc),
    Corruption("array doc not JSON", "points3d", "vertex_fragments zarr.json truncated", c_bad_json),
    Corruption("array doc zarr_format 2", "points3d", "vertices zarr.json says zarr_format 2", c_zarr_v2_array),
    Corruption("group member not an object", "points_groups", "group 0 -> object 12345", c_group_member_unknown),
]

AGREEMENT: dict[str, tuple] = {}


def _ref_validate(path: Path, level: int = 5):
    """(ok, n_errors, first error) from zarr-vectors 0.9.2, or (False, 1, 'raised: ...')."""
    from zarr_vectors.validate import validate as ref

    try:
        r = ref(str(path), level=level)
    except Exception as e:
        return False, 1, f"raised {type(e).__name__}: {e}"[:120]
    return r.ok, len(r.errors), (r.errors[0][:120] if r.errors else "")


def _has_ref() -> bool:
    try:
        import zarr_vectors.validate  # noqa: F401
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------------------
# agreement with the reference
# --------------------------------------------------------------------------------------


def test_reference_stores_pass(ref_stores, tmp_path):
    """Every store the reference accepts passes zvf at every level, and vice versa here."""
    rows = []
    for src in sorted(ref_stores.glob("*.zarrvectors")):
        dst = tmp_path / src.name
        shutil.copytree(src, dst)
        ref_ok, _, ref_msg = _ref_validate(dst) if _has_ref() else (True, 0, "")
        for level in (1, 3, 5):
            rep = zvf.validate(str(dst), level=level)
            assert isinstance(rep, Report)
            if ref_ok:
                assert rep.ok, f"{src.name} level {level}:\n{rep.summary()}"
        rows.append((src.stem, ref_ok, rep.ok, len(rep.warnings), rep.checked.get("cells", 0)))
        AGREEMENT[f"(valid) {src.stem}"] = ("unmodified", src.stem, "pass" if ref_ok else f"FAIL {ref_msg}",
                                            "pass" if rep.ok else "FAIL", "-")
    assert rows


@pytest.mark.parametrize("corr", CORRUPTIONS, ids=[c.name.replace(" ", "_") for c in CORRUPTIONS])
def test_corruption_flagged(corr: Corruption, ref_stores, tmp_path):
    src = ref_stores / f"{corr.store}.zarrvectors"
    if not src.is_dir():
        pytest.skip(f"reference store {corr.store} not available")
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    key = corr.apply(Edit(dst))
    ref = _ref_validate(dst) if _has_ref() else (True, 0, "reference not installed")
    rep = zvf.validate(str(dst), level=5)
    named = [i for i in rep.errors if i.key == key or i.key.startswith(key)]
    AGREEMENT[corr.name] = (
        corr.what, corr.store,
        "pass" if ref[0] else f"{ref[1]} error(s): {ref[2]}",
        f"{len(rep.errors)} error(s)" if not rep.ok else "pass",
        named[0].message[:110] if named else "-",
    )
    assert not rep.ok, f"zvf did not flag {corr.name}:\n{rep.summary()}"
    assert named, f"no zvf error names {key!r}:\n{rep.summary()}"
    assert all(i.message.startswith(i.key) for i in rep.issues)


@pytest.fixture(scope="module", autouse=True)
def agreement_table():
    """After the agreement runs of this module that ran: their table, for the terminal summary (see
    conftest).  A fixture, not a test: a test would skip when run alone or on another worker; each
    corruption's test asserts zvf flags it, so every copy the reference flags is flagged by zvf too."""
    yield
    if AGREEMENT:
        _record_agreement()


def _record_agreement() -> None:
    lines = [
        "| case | store | edit | zarr-vectors 0.9.2 | zvf | zvf error naming the key |",
        "|---|---|---|---|---|---|",
    ]
    flagged_ref = flagged_both = 0
    for name, (what, store, ref, mine, msg) in AGREEMENT.items():
        lines.append(f"| {name} | {store} | {what} | {ref.replace('|', '/')} | {mine} | "
                     f"{msg.replace('|', '/')} |")
        if not name.startswith("(valid)") and ref != "pass":
            flagged_ref += 1
            flagged_both += mine != "pass"
    lines.append("")
    corrupt = sum(1 for n in AGREEMENT if not n.startswith("(valid)"))
    lines.append(f"{corrupt} corrupted copies: the reference flags {flagged_ref}, zvf flags "
                 f"{sum(1 for n, r in AGREEMENT.items() if not n.startswith('(valid)') and r[3] != 'pass')} "
                 f"(every one the reference flags: {flagged_both}/{flagged_ref}).")
    record_table("agreement", "\n".join(lines))


# --------------------------------------------------------------------------------------
# API, levels and output
# --------------------------------------------------------------------------------------


def test_missing_store_is_an_error_result(tmp_path):
    rep = zvf.validate(str(tmp_path / "nope.zarrvectors"))
    assert not rep.ok and rep.errors[0].key == "zarr.json"
    empty = tmp_path / "empty"
    empty.mkdir()
    rep = zvf.validate(str(empty))
    assert not rep.ok and "empty" in rep.errors[0].message


def test_bad_level_raises(ref_stores):
    with pytest.raises(zvf.errors.InvalidArgumentError):
        zvf.validate(str(ref_stores / "points3d.zarrvectors"), level=6)


def test_levels_are_cumulative(copy_store):
    dst = copy_store("points3d")
    c_vertex_count(Edit(dst))  # a level-3 problem
    assert zvf.validate(str(dst), level=1).ok
    assert zvf.validate(str(dst), level=2).ok
    rep = zvf.validate(str(dst), level=3)
    assert not rep.ok and {i.level for i in rep.errors} == {3}


def test_report_json_and_text(copy_store):
    dst = copy_store("points3d")
    c_bad_magic(Edit(dst))
    rep = zvf.validate(str(dst), level=3)
    d = json.loads(rep.to_json())
    assert d["ok"] is False and d["errors"] == len(rep.errors)
    assert {"severity", "level", "key", "message"} <= set(d["issues"][0])
    assert "0/vertex_fragments/c/0/0/1" in str(rep)
    assert "FAILED" in rep.summary() and "Report(" in repr(rep)


async def test_async_entry_points(ref_stores):
    rep = await zvf.aio.validate(str(ref_stores / "graph.zarrvectors"), level=5)
    assert rep.ok and rep.checked["links"] > 0


@pytest.mark.parametrize("leave", [c_claim_left, c_orphan_array], ids=["claim object left", "orphan cells"])
def test_leftovers_on_a_published_store_are_warnings(leave, copy_store):
    """A failed change's leftovers beside an intact published store -- its lock, cells no document names --
    are warnings naming `zvf gc` as the remedy, not damage: the store reads whole."""
    dst = copy_store("points3d")
    key = leave(Edit(dst))
    rep = zvf.validate(str(dst), level=5)
    assert rep.ok, rep.summary()
    named = [i for i in rep.warnings if i.key.startswith(key)]
    assert named and "zvf gc" in named[0].message, rep.summary()


def test_claim_and_orphans_after_interrupted_write(copy_store):
    """What an interrupted write leaves: claim object, cells without root."""
    dst = copy_store("points3d")
    (dst / ".zvf-writing").write_bytes(b"x")
    (dst / "zarr.json").unlink()
    rep = zvf.validate(str(dst))
    keys = rep.keys("error")
    assert ".zvf-writing" in keys and "zarr.json" in keys
    assert any("interrupted" in i.message for i in rep.errors)
    assert any(i.key.startswith("0/vertices") for i in rep.errors)


def test_memory_store_through_executor(memory_url):
    """Validation reads through the executor (works on any transport, concurrently)."""
    import anyio

    from zvf.io.executor import Executor
    from zvf.io.store import StoreHandle
    from zvf.testing import MemoryTransport
    from zvf.validation.checks import Validator

    zvf.write_points(memory_url, np.random.default_rng(0).uniform(0, 100, (500, 3)), chunk_shape=(25,) * 3,
                     bin_shape=(12.5,) * 3, attributes={"a": np.arange(500, dtype=np.float32)})
    rep = zvf.validate(memory_url, level=5)
    assert rep.ok, rep.summary()
    # same bytes on a slow transport: requests overlap but stay under the limit
    import obstore

    from zvf.io.backends import memory_store

    store = memory_store(memory_url.split("://")[1])
    data = {}
    for batch in obstore.list(store):
        for m in batch:
            data[m["path"]] = bytes(obstore.get(store, m["path"]).bytes())
    t = MemoryTransport(data, latency=0.005)
    ex = Executor(StoreHandle.for_transport(t, concurrency=6))
    rep2 = anyio.run(lambda: Validator(ex, "mem", 5).run())
    assert rep2.ok, rep2.summary()
    assert 1 < t.max_inflight <= 6
    assert t.round_trips() < t.requests() / 2  # requests overlap instead of one after another


def test_zvf_written_stores_validate(tmp_path):
    rng = np.random.default_rng(1)
    pos = rng.uniform(-50, 150, (800, 3))
    zvf.write_points(str(tmp_path / "a"), pos, chunk_shape=(50,) * 3, bin_shape=(25,) * 3,
                     attributes={"i": rng.random(800).astype(np.float32)})
    zvf.write_points(str(tmp_path / "b"), pos, chunk_shape=(40,) * 3, object_ids=rng.integers(0, 30, 800),
                     object_attributes={"s": np.arange(30, dtype=np.float32)}, compression="zstd",
                     shard_shape=2)
    for name in ("a", "b"):
        rep = zvf.validate(str(tmp_path / name), level=5)
        assert rep.ok, rep.summary()


OBJECT_KINDS = ["polylines", "streamlines_zstd", "lines", "graph", "graph_sharded", "skeleton", "mesh"]


@pytest.mark.parametrize("kind", OBJECT_KINDS)
def test_zvf_written_object_stores_validate(kind, tmp_path):
    """Every geometry zvf writes passes all five levels (and the reference's validator)."""
    rng = np.random.default_rng(2)
    target = str(tmp_path / f"{kind}.zarrvectors")
    box = {"chunk_shape": (50,) * 3, "bounds": ([0] * 3, [100] * 3)}
    pls = [np.clip(rng.uniform(10, 90, 3) + np.cumsum(rng.normal(0, 8, (12, 3)), 0), 0, 100) for _ in range(5)]
    pos = rng.uniform(0, 100, (40, 3))
    oids = np.repeat([3, 7, 11, 20], 10)
    if kind == "polylines":
        zvf.write_polylines(target, pls, attributes={"t": [np.arange(len(p), dtype=np.float32) for p in pls]},
                            object_attributes={"w": np.arange(5, dtype=np.float32)}, **box)
    elif kind == "streamlines_zstd":
        zvf.write_polylines(target, pls, geometry_type="streamline", compression="zstd", bin_shape=(25,) * 3,
                            groups={0: [0, 1], 1: [4]}, **box)
    elif kind == "lines":
        zvf.write_lines(target, rng.uniform(0, 100, (20, 2, 3)), **box)
    elif kind in ("graph", "graph_sharded"):
        edges = np.stack([np.arange(39), np.arange(1, 40)], 1)
        edges = edges[oids[edges[:, 0]] == oids[edges[:, 1]]]
        extra = {"compression": "zstd", "shard_shape": 2} if kind == "graph_sharded" else {}
        zvf.write_graph(target, pos, edges, object_ids=oids,
                        link_attributes={"w": np.arange(len(edges), dtype=np.float32)},
                        attributes={"v": np.arange(40, dtype=np.float32)}, **extra, **box)
    elif kind == "skeleton":
        parent = np.r_[-1, np.arange(39) // 2]  # a binary tree rooted at 0
        edges = np.stack([np.arange(1, 40), parent[1:]], 1)
        zvf.write_graph(target, pos, edges, geometry_type="skeleton", **box)
    else:
        faces = np.stack([np.arange(28), np.arange(1, 29), np.arange(2, 30)], 1)
        zvf.write_mesh(target, pos[:30], faces, **box)
    rep = zvf.validate(target, level=5)
    assert rep.ok and not rep.warnings, rep.summary()
    if _has_ref():
        ok, _, msg = _ref_validate(Path(target))
        assert ok, msg


@pytest.mark.s3
def test_validate_on_s3(s3_target):
    url, opts = s3_target
    zvf.write_points(url, np.random.default_rng(3).uniform(0, 10, (200, 2)), chunk_shape=(5, 5),
                     storage_options=opts)
    rep = zvf.validate(url, level=5, storage_options=opts)
    assert rep.ok, rep.summary()
    assert "secret" not in rep.to_json()


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def test_cli_exit_codes(ref_stores, copy_store, capsys):
    from zvf.cli.main import main

    good = str(ref_stores / "points3d.zarrvectors")
    assert main(["validate", good]) == 0
    bad = copy_store("graph")
    c_intra_link_past(Edit(bad))
    assert main(["validate", str(bad), "--level", "3", "--json"]) == 1
    out = capsys.readouterr().out
    doc = json.loads(out[out.index("{"):])
    assert doc["ok"] is False and any(i["key"] == "0/links/0/0.0.0/c/0/0/0" for i in doc["issues"])


def test_cli_subprocess(ref_stores):
    """``zvf validate`` in a fresh process."""
    r = subprocess.run([sys.executable, "-m", "zvf.cli.main", "validate", str(ref_stores / "points3d.zarrvectors"),
                        "--level", "2"], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout
