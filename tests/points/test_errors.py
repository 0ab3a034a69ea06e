"""Clear errors: a zvf exception type whose message names the key, path or argument."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import zvf
from tests.support.store_tree import copy_store, store_files
from zvf.errors import (
    FormatError,
    IncompleteStoreError,
    InvalidArgumentError,
    NotZvfStoreError,
    StoreExistsError,
    StoreNotFoundError,
    ZvfError,
)

BOUNDS3 = ([0.0] * 3, [10.0] * 3)


@pytest.fixture(scope="module")
def cloud():
    return np.random.default_rng(5).uniform(0.0, 10.0, (40, 3)).astype(np.float32)


# ---------------------------------------------------------------- opening things that are not ZVF stores


def test_missing_store(tmp_path):
    target = tmp_path / "nothing-here"
    with pytest.raises(StoreNotFoundError, match="nothing-here"):
        zvf.open(target)
    assert not target.exists()


def test_missing_memory_store():
    with pytest.raises(StoreNotFoundError, match="never-written"):
        zvf.open("memory://never-written")


def test_empty_directory_is_not_a_store(tmp_path):
    with pytest.raises(StoreNotFoundError, match=r"zarr\.json"):
        zvf.open(tmp_path)


def test_zarr_v2_group_written_by_zarr(tmp_path):
    import zarr

    g = zarr.open_group(str(tmp_path / "v2"), mode="w", zarr_format=2)
    g.create_array("a", shape=(4,), dtype="i4")
    with pytest.raises(NotZvfStoreError, match=r"v2.*\.zgroup"):
        zvf.open(tmp_path / "v2")


@pytest.mark.parametrize("doc", [".zgroup", ".zarray"])
def test_zarr_v2_by_hand(tmp_path, doc):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / doc).write_text(json.dumps({"zarr_format": 2}))
    with pytest.raises(NotZvfStoreError, match="Zarr v2"):
        zvf.open(tmp_path / "s")


def test_plain_zarr_v3_group(tmp_path):
    import zarr

    g = zarr.open_group(str(tmp_path / "plain"), mode="w")
    g.attrs["purpose"] = "not vectors"
    g.create_array("x", shape=(3,), dtype="f4")
    with pytest.raises(NotZvfStoreError, match=r"zarr\.json"):
        zvf.open(tmp_path / "plain")


def test_plain_zarr_v3_array(tmp_path):
    import zarr

    zarr.create_array(str(tmp_path / "arr"), shape=(3,), dtype="i2")
    with pytest.raises(NotZvfStoreError, match=r"zarr\.json"):
        zvf.open(tmp_path / "arr")


def test_data_without_root_is_an_incomplete_store(tmp_path, ref_dir):
    store = copy_store(ref_dir / "points3d.zarrvectors", tmp_path / "half")
    (store / "zarr.json").unlink()
    with pytest.raises(IncompleteStoreError, match=r"zarr\.json"):
        zvf.open(store)


def test_root_that_is_not_json(tmp_path):
    (tmp_path / "zarr.json").write_text("{not json")
    with pytest.raises(FormatError, match=r"zarr\.json"):
        zvf.open(tmp_path)


# ---------------------------------------------------------------- query arguments


@pytest.fixture(scope="module")
def points3d(ref_dir):
    with zvf.open(ref_dir / "points3d.zarrvectors") as ds:
        yield ds


@pytest.mark.parametrize(
    "bbox, match",
    [
        (([0, 0], [1, 1]), "bbox.*3-D"),
        (([0, 0, 0, 0], [1, 1, 1, 1]), "bbox.*3-D"),
        (([0, 0, 0], [1, 1]), "bbox.*3-D"),
        (([0, 0, 5], [1, 1, 1]), r"bbox lo > hi on axis \[2\]"),
        (([2, 2, 2], [1, 1, 1]), r"bbox lo > hi on axis \[0, 1, 2\]"),
        (([0, 0, 0], [1, 1, float("nan")]), "bbox hi"),
        (([0, 0, 0],), "bbox"),
        ("abc", "bbox"),
    ],
)
def test_bad_bbox(points3d, bbox, match):
    with pytest.raises(InvalidArgumentError, match=match):
        points3d.query(bbox)


def test_bad_query_attribute_and_level(points3d):
    with pytest.raises(InvalidArgumentError, match="nope"):
        points3d.query(([0, 0, 0], [1, 1, 1]), attributes=["nope"])
    with pytest.raises(InvalidArgumentError, match="level=3"):
        points3d.query(([0, 0, 0], [1, 1, 1]), level=3)


def test_objects_of_a_cloud_without_ids(points3d):
    assert points3d.object_ids().size == 0
    with pytest.raises(InvalidArgumentError, match="size"):
        points3d.object_attribute("size")
    with pytest.raises(InvalidArgumentError, match="group id 0"):
        points3d.group(0)


# ---------------------------------------------------------------- corrupt fragment index cells


def _frame(payload: bytes) -> bytes:
    """A one-item vlen-bytes cell."""
    return struct.pack("<II", 1, len(payload)) + payload


def _first_range_offset(payload: bytes) -> int:
    f, r = struct.unpack_from("<II", payload, 8)
    assert r >= 1, "the cell should hold range fragments"
    return 16 + ((((f + 7) // 8) + 7) & ~7)


def _corrupt(kind: str, raw: bytes) -> bytes:
    n, length = struct.unpack_from("<II", raw, 0)
    assert n == 1 and length == len(raw) - 8
    payload = raw[8:]
    table = _first_range_offset(payload)
    if kind == "bad_magic":
        return _frame(b"ZVF?" + payload[4:])
    if kind == "truncated_index":
        return _frame(payload[: table + 4])
    if kind == "truncated_cell":
        return raw[: len(raw) // 2]
    if kind == "shorter_than_header":
        return _frame(payload[:10])
    if kind == "range_past_end":
        return _frame(payload[: table + 8] + struct.pack("<q", 1 << 20) + payload[table + 16:])
    if kind == "negative_start":
        return _frame(payload[:table] + struct.pack("<q", -3) + payload[table + 8:])
    raise AssertionError(kind)


CORRUPTIONS = ["bad_magic", "truncated_index", "truncated_cell", "shorter_than_header", "range_past_end",
               "negative_start"]


@pytest.fixture(scope="module")
def groups_store(ref_dir, tmp_path_factory):
    """Pristine copy source: a cloud with object ids (its reads use the fragment index)."""
    store = ref_dir / "points_groups.zarrvectors"
    cell = sorted((store / "0" / "vertex_fragments" / "c").rglob("*"))
    cell = next(p for p in cell if p.is_file())
    key = cell.relative_to(store).as_posix()
    return store, key


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_corrupt_fragment_index(tmp_path, groups_store, kind):
    src, key = groups_store
    store = copy_store(src, tmp_path / "s")
    cell = store / key
    cell.write_bytes(_corrupt(kind, cell.read_bytes()))
    chunk = [int(c) for c in key.split("/")[-3:]]
    with zvf.open(store) as ds:
        with pytest.raises(FormatError, match=key.replace(".", r"\.")):
            ds.read_all()
        cs = np.asarray(ds.chunk_shape)
        lo = np.asarray(chunk) * cs  # the store's grid starts at 0
        with pytest.raises(FormatError, match=key.replace(".", r"\.")):
            ds.query((lo, lo + cs / 2))


def test_corrupt_fragment_index_elsewhere_does_not_break_other_chunks(tmp_path, groups_store):
    """A query away from the damaged cell still answers (the damage is found where it is read)."""
    src, key = groups_store
    store = copy_store(src, tmp_path / "s")
    (store / key).write_bytes(_corrupt("bad_magic", (store / key).read_bytes()))
    chunk = np.array([int(c) for c in key.split("/")[-3:]])
    with zvf.open(store) as ds:
        cs = np.asarray(ds.chunk_shape)
        listed = json.loads((store / "0" / "vertices" / "zarr.json").read_text())["attributes"]["nonempty_chunks"]
        others = [[int(x) for x in c.split(".")] for c in listed if c != ".".join(map(str, chunk))]
        lo = np.asarray(others[0]) * cs + cs * 0.25
        sel = ds.query((lo, lo + cs * 0.5))
        assert sel.object_ids is not None and np.all(sel.object_ids >= 0)


# ---------------------------------------------------------------- writer errors


def _assert_nothing_written(target):
    assert not target.exists() or not any(target.iterdir()), f"a refused write left {sorted(store_files(target))}"


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(bounds=([0.0] * 3, [5.0] * 3)), InvalidArgumentError, "positions: .* outside bounds"),
        (dict(attributes={"a": np.zeros(39)}), InvalidArgumentError, r"attributes\['a'\] has shape \(39,\)"),
        (dict(attributes={"a": np.zeros((40, 2, 2))}), InvalidArgumentError, r"attributes\['a'\]"),
        (dict(attributes={"s": np.array(["x"] * 40)}), InvalidArgumentError, r"attributes\['s'\] must be numeric"),
        (dict(object_ids=np.zeros(39, int)), InvalidArgumentError, r"object_ids has shape \(39,\)"),
        (dict(object_ids=np.zeros(40, int), object_attributes={"s": np.zeros(3)}), InvalidArgumentError,
         r"object_attributes\['s'\]"),
        (dict(object_attributes={"s": np.zeros(3)}), InvalidArgumentError, "object_attributes need object_ids"),
        (dict(groups={0: [1]}, group_attributes={"g": np.zeros(3)}), InvalidArgumentError, r"group_attributes\['g'\]"),
        (dict(group_attributes={"g": np.zeros(1)}), InvalidArgumentError, "group_attributes need groups"),
        (dict(object_ids=np.arange(40), groups={0: [999]}), InvalidArgumentError, r"groups\[0\]"),
        (dict(chunk_shape=(5.0, 5.0)), InvalidArgumentError, "chunk_shape has 2 values"),
        (dict(chunk_shape=(5.0, 0.0, 5.0)), InvalidArgumentError, "chunk_shape must be positive"),
        (dict(chunk_shape=(5.0, -1.0, 5.0)), InvalidArgumentError, "chunk_shape must be positive"),
        (dict(chunk_shape="abc"), InvalidArgumentError, "chunk_shape"),
        (dict(bin_shape=(3.0, 3.0, 3.0)), InvalidArgumentError, "bin_shape .* must divide chunk_shape"),
        (dict(bin_shape=(10.0, 10.0, 10.0)), InvalidArgumentError, "bin_shape .* must divide chunk_shape"),
        (dict(bin_shape=(2.5, 2.5)), InvalidArgumentError, "bin_shape has 2 values"),
        (dict(bin_shape=(0.0, 2.5, 2.5)), InvalidArgumentError, "bin_shape must be positive"),
        (dict(compression="lz4"), InvalidArgumentError, "compression"),
        (dict(shard_shape=0), InvalidArgumentError, "shard_shape"),
        (dict(shard_shape=(2, 2)), InvalidArgumentError, "shard_shape"),
        (dict(bounds=([0.0] * 3, [-1.0] * 3)), InvalidArgumentError, "bounds"),
    ],
    ids=lambda v: None if isinstance(v, dict) else "",
)
def test_writer_argument_errors(tmp_path, cloud, kwargs, error, match):
    target = tmp_path / "w.zarrvectors"
    kw = {"chunk_shape": (5.0, 5.0, 5.0), "bounds": BOUNDS3, **kwargs}
    with pytest.raises(error, match=match):
        zvf.write_points(target, cloud, **kw)
    _assert_nothing_written(target)


@pytest.mark.parametrize("positions, match", [
    (np.zeros(6), r"positions must be an \(N, ndim\) array"),
    (np.full((3, 3), np.nan), "positions has NaN"),
    (np.array([["a", "b", "c"]]), "positions must be numeric"),
])
def test_writer_bad_positions(tmp_path, positions, match):
    target = tmp_path / "w.zarrvectors"
    with pytest.raises(InvalidArgumentError, match=match):
        zvf.write_points(target, positions, chunk_shape=(5.0, 5.0, 5.0), bounds=BOUNDS3)
    _assert_nothing_written(target)


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "", ".hidden", "a\\b", "/abs", "zarr.json", "x" * 200])
@pytest.mark.parametrize("family", ["attributes", "object_attributes", "group_attributes"])
def test_writer_unsafe_names(tmp_path, cloud, name, family):
    target = tmp_path / "w.zarrvectors"
    kw = {"chunk_shape": (5.0, 5.0, 5.0), "bounds": BOUNDS3}
    if family == "attributes":
        kw["attributes"] = {name: np.zeros(len(cloud))}
    elif family == "object_attributes":
        kw.update(object_ids=np.zeros(len(cloud), int), object_attributes={name: np.zeros(1)})
    else:
        kw.update(groups={0: [0]}, group_attributes={name: np.zeros(1)})
    with pytest.raises(InvalidArgumentError, match=f"{family[:-1]} name"):
        zvf.write_points(target, cloud, **kw)
    _assert_nothing_written(target)
    assert not (tmp_path / "x").exists()


def test_awkward_but_legal_attribute_names_round_trip(tmp_path, cloud):
    """'c' is also the chunk-key prefix and 'a.b' holds a dot: both are ordinary attribute names."""
    target = tmp_path / "w.zarrvectors"
    attrs = {"c": np.arange(len(cloud), dtype=np.int32), "a.b": np.ones(len(cloud), np.float32), "_x-1": np.zeros(40)}
    zvf.write_points(target, cloud, chunk_shape=(5.0, 5.0, 5.0), bounds=BOUNDS3, attributes=attrs)
    with zvf.open(target) as ds:
        sel = ds.read_all()
        assert sorted(sel.attributes) == sorted(attrs)
        order = np.lexsort(sel.positions.T[::-1])
        want = np.lexsort(cloud.T[::-1])
        np.testing.assert_array_equal(sel.attributes["c"][order], attrs["c"][want])


def test_existing_store_needs_overwrite(tmp_path, cloud):
    target = tmp_path / "w.zarrvectors"
    zvf.write_points(target, cloud, chunk_shape=(5.0, 5.0, 5.0), bounds=BOUNDS3,
                     attributes={"old": np.zeros(len(cloud))})
    before = store_files(target)
    with pytest.raises(StoreExistsError, match="overwrite=True"):
        zvf.write_points(target, cloud[:10], chunk_shape=(5.0, 5.0, 5.0), bounds=BOUNDS3)
    assert store_files(target) == before  # the refused write touched nothing
    with pytest.raises(FileExistsError):  # StoreExistsError is also the builtin kind
        zvf.write_points(target, cloud[:10], chunk_shape=(5.0, 5.0, 5.0), bounds=BOUNDS3)


def test_overwrite_replaces_the_store(tmp_path, cloud):
    target = tmp_path / "w.zarrvectors"
    zvf.write_points(target, cloud, chunk_shape=(2.0, 2.0, 2.0), bounds=BOUNDS3, compression="zstd",
                     attributes={"old": np.zeros(len(cloud))}, object_ids=np.arange(len(cloud)) % 4)
    zvf.write_points(target, cloud[:10], chunk_shape=(5.0, 5.0, 5.0), bounds=BOUNDS3, overwrite=True,
                     attributes={"new": np.ones(10, np.float32)})
    files = store_files(target)
    assert ".zvf-writing" not in files
    # the new version names none of the old store's nodes (their cells stay for the old store's readers
    # until `zvf gc` collects them: docs/RELIABILITY.md, "Publication")
    section = json.loads(files["zarr.json"])["consolidated_metadata"]["metadata"]
    assert not any("old" in k or "object_index" in k for k in section), sorted(section)
    with zvf.open(target) as ds:
        sel = ds.read_all()
        assert len(sel) == 10 and list(sel.attributes) == ["new"] and sel.object_ids is None
        assert ds.chunk_shape == (5.0, 5.0, 5.0)


def test_failed_upload_raises_the_zvf_error(tmp_path, cloud):
    """An upload that fails mid-write surfaces as one zvf error naming the key, not an ExceptionGroup."""
    target = tmp_path / "w.zarrvectors"
    (target / "0").mkdir(parents=True)
    (target / "0" / "vertices").write_bytes(b"a file where the array's folder should be")
    with pytest.raises(ZvfError, match="0/vertices/c/"):
        zvf.write_points(target, cloud, chunk_shape=(5.0, 5.0, 5.0), bounds=BOUNDS3)
    assert not (target / "zarr.json").exists()  # never published
