"""zvf.format.metadata against the zarr-vectors 0.9.2 reference stores (``ref_dir``).

Every zarr.json of every fixture store is parsed, rebuilt with the builders from
the parsed values, and compared with the original as a dict and byte for byte.
Set ZVF_EXTRA_REF_STORES=dir1:dir2 to run the same round trip over more stores
written by the reference (e.g. the matrix behind docs/REFERENCE_LAYOUT.md).
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import numpy as np
import pytest

from tests.refstores import ALL_STORES, FIXTURES, uses_shared
from zvf.errors import (
    FormatError,
    IncompleteStoreError,
    InvalidArgumentError,
    NotZvfStoreError,
    StoreNotFoundError,
)
from zvf.format import builders, parse
from zvf.format import metadata as md
from zvf.format.keys import format_offsets_name, parse_offsets_name

SPATIAL = {"vertices", "vertex_fragments", "link_fragments", "attribute", "fragment_attribute", "links",
           "link_attribute"}


def _stores_in(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if (p / "zarr.json").is_file() and p.is_dir()) if d.is_dir() else []


# store directory names inside ref_dir (known at collection: the shared listing, else the generated set)
REF_NAMES = [p.name for p in _stores_in(FIXTURES)] if uses_shared() else sorted(f"{n}.zarrvectors" for n in ALL_STORES)
EXTRA = [s for d in os.environ.get("ZVF_EXTRA_REF_STORES", "").split(":") if d for s in _stores_in(Path(d))]
STORES: list[str | Path] = [*REF_NAMES, *EXTRA]  # a name in ref_dir, or an extra store's path


@pytest.fixture
def store(request, ref_dir) -> Path:
    return request.param if isinstance(request.param, Path) else ref_dir / request.param


@pytest.fixture
def all_stores(ref_dir) -> list[Path]:
    return [ref_dir / n for n in REF_NAMES] + EXTRA


def _docs(store: Path):
    for p in sorted(store.rglob("zarr.json")):
        key = p.relative_to(store).as_posix()
        yield key, p.read_bytes()


def _rebuild(doc: dict, key: str) -> dict:
    """Rebuild one document with the builders, from parsed values only."""
    if doc.get("node_type") == "group":
        attrs = doc.get("attributes", {})
        if "zarr_vectors" in attrs:
            r = parse.parse_root(doc, key=key)
            return builders.root_document(
                chunk_shape=r.chunk_shape, bounds=r.bounds, geometry_types=r.geometry_types, name=r.name,
                base_bin_shape=r.base_bin_shape, links_convention=r.links_convention,
                object_index_convention=r.object_index_convention, cross_chunk_strategy=r.cross_chunk_strategy,
                format_capabilities=r.format_capabilities, cross_level_depth=r.cross_level_depth,
                cross_level_storage=r.cross_level_storage, crs=r.crs, attribute_specs=r.attribute_specs,
                axes=r.axes, transforms=r.transforms, zv_version=r.zv_version,
            )
        if "zarr_vectors_level" in attrs:
            lv = parse.parse_level(doc, key=key)
            return builders.level_document(
                level=lv.level, vertex_count=lv.vertex_count, arrays_present=lv.arrays_present,
                object_sparsity=lv.object_sparsity, coarsening_method=lv.coarsening_method,
                parent_level=lv.parent_level, chunk_shape=lv.chunk_shape, chunk_dims=lv.chunk_dims,
                chunk_attribute_name=lv.chunk_attribute_name, chunk_attribute_values=lv.chunk_attribute_values,
                preserves_object_ids=lv.preserves_object_ids, inherited_num_objects=lv.inherited_num_objects,
                shared_fragments=lv.shared_fragments, fragments_tile=lv.fragments_tile,
            )
        g = parse.parse_group(doc, key=key)
        a = g.attributes
        kind = a.get("zv_array")
        if kind == "object_index":
            return builders.object_index_group_document(a["num_objects"], a["num_present"], a["sid_ndim"],
                                                  compact=g.compact, object_ids_sorted=a["object_ids_sorted"])
        if kind == "links_family":
            assert g.compact
            return builders.links_family_document(level_delta=a["level_delta"], link_width=a["link_width"],
                                            directed=a["directed"], sid_ndim=a["sid_ndim"], num_links=a["num_links"],
                                            num_physical_records=a["num_physical_records"])
        if kind == "link_attribute_family":
            assert g.compact
            return builders.link_attribute_family_document(a["name"], level_delta=a["level_delta"],
                                                           num_links=a["num_links"])
        assert kind is None and a == {}, (key, a)
        return builders.group_document({}, compact=g.compact)

    arr = parse.parse_array(doc, key=key)
    a = arr.attributes
    kind = arr.zv_array
    if kind in SPATIAL:
        if kind == "vertices":
            attrs = builders.vertices_attributes(a["dtype"], a["encoding"])
        elif kind == "vertex_fragments":
            attrs = builders.vertex_fragments_attributes()
        elif kind == "link_fragments":
            attrs = builders.link_fragments_attributes()
        elif kind == "attribute":
            attrs = builders.vertex_attribute_attributes(a["name"], arr.dtype, a["row_shape"], a.get("channel_names"))
        elif kind == "fragment_attribute":
            attrs = builders.fragment_attribute_attributes(a["name"], arr.dtype, a["row_shape"])
        elif kind == "links":
            attrs = builders.links_array_attributes(a["offsets"], has_perm=a["has_perm"], link_width=a["link_width"],
                                              level_delta=a["level_delta"])
            name = key.split("/")[-2]
            assert format_offsets_name(a["offsets"]) == name
            assert parse_offsets_name(name, arr.ndim, key=key).tolist() == a["offsets"]
        else:
            attrs = builders.link_attribute_attributes(a["name"], arr.dtype, a["offsets"], level_delta=a["level_delta"],
                                                 row_shape=a["row_shape"])
        return builders.spatial_array_document(
            arr.shape, arr.codecs, attrs, nonempty_chunks=arr.nonempty_chunk_array, grid_origin=arr.grid_origin,
            shard_shape=arr.chunk_shape if arr.sharded else None,
        )
    if kind == "object_attribute":
        assert arr.fill_value == builders.object_attribute_fill(arr.dtype)
        assert arr.codecs[0] == builders.bytes_codec(arr.dtype)
        return builders.object_attribute_document(a["name"], arr.dtype, a["shape"], arr.codecs)
    if kind == "groupings_attribute":
        return builders.group_attribute_document(a["name"], arr.dtype, a["shape"], arr.codecs)
    if kind == "groups":
        return builders.groups_document(a["num_groups"], arr.codecs)
    assert kind is None and a == {}, (key, a)
    if key.endswith("object_index/manifests/zarr.json"):
        return builders.manifests_document(arr.shape[0], arr.codecs)
    if key.endswith("object_index/object_ids/zarr.json"):
        assert arr.data_type == "int64"
        return builders.object_ids_document(arr.shape[0], arr.codecs)
    raise AssertionError(f"unexpected array {key}")


# --------------------------------------------------------------------------
# round trip over every fixture document
# --------------------------------------------------------------------------


@pytest.mark.parametrize("store", STORES, ids=[Path(p).name for p in STORES], indirect=True)
def test_round_trip_every_document(store: Path):
    if not json.loads((store / "zarr.json").read_bytes())["attributes"]["zarr_vectors"].get("geometry_types"):
        pytest.skip("store was created but never written (a refused write leaves this)")
    n = 0
    for key, data in _docs(store):
        doc = parse.loads(data, key=key)
        rebuilt = _rebuild(doc, key)
        assert rebuilt == doc, key
        assert list(rebuilt) == list(doc), key
        assert builders.dumps(rebuilt) == data, key
        n += 1
    assert n >= 4


@pytest.mark.parametrize("store", STORES, ids=[Path(p).name for p in STORES], indirect=True)
def test_root_and_levels_parse(store: Path):
    root = parse.classify_root((store / "zarr.json").read_bytes(), key=f"{store.name}/zarr.json")
    if not root.geometry_types:
        pytest.skip("store was created but never written (a refused write leaves this)")
    assert root.zv_version == "0.9.2"
    assert root.name == builders.store_name(str(store))
    assert root.ndim == len(root.bounds[0]) == len(root.axes)
    assert root.geometry_type in md.GEOMETRY_TYPES
    assert root.links_convention == md.LINKS_CONVENTION_BY_GEOMETRY[root.geometry_type]
    for lvl in root.levels:
        lv = parse.parse_level(parse.loads((store / str(lvl) / "zarr.json").read_bytes(), key=f"{lvl}/zarr.json"),
                            key=f"{lvl}/zarr.json")
        assert lv.level == lvl
        assert (lv.parent_level is None) == (lvl == 0)
        assert lv.arrays_present[0] == "vertices"
        verts = parse.parse_array(parse.loads((store / str(lvl) / "vertices" / "zarr.json").read_bytes(), key="v"),
                               key="v")
        assert verts.zv_array == "vertices" and verts.is_vlen and verts.dtype.kind == "f"
        ne = verts.nonempty_chunk_array
        # chunk_by_attribute adds a leading attribute axis named in chunk_dims
        assert ne.shape[1] == verts.ndim == (len(lv.chunk_dims) if lv.chunk_dims else root.ndim)
        cell = ne - np.asarray(verts.grid_origin)
        assert (cell >= 0).all() and (cell < np.asarray(verts.shape)).all()
        assert all(c >= r for c, r in zip(root.level_chunk_shape(lv), root.chunk_shape))
        assert root.level_bin_shape(lvl) == tuple(b * s for b, s in zip(root.bin_shape, root.transforms[lvl].scale))
        # the level-0 transform is half a bin, scale 1
        if lvl == 0:
            t = root.transforms[0]
            assert t.scale == (1.0,) * root.ndim
            assert t.translation == tuple(b / 2 for b in root.bin_shape)


def test_grid_shape_is_floor_plus_one_for_building_writers(ref_dir):
    """building.write_* allocate floor(hi/c) - floor(lo/c) + 1 cells; zv.create's API allocates ceil."""
    hl_api = {"points2d", "polylines2"}  # written through zv.create(...).add_*
    for store in (ref_dir / n for n in REF_NAMES):
        root = parse.parse_root(parse.loads((store / "zarr.json").read_bytes(), key="zarr.json"))
        cs = np.asarray(root.chunk_shape, float)
        lo, hi = (np.asarray(b, float) for b in root.bounds)
        verts = parse.parse_array(parse.loads((store / "0/vertices/zarr.json").read_bytes(), key="v"), key="v")
        origin = np.floor(lo / cs).astype(int)
        if store.name.split(".")[0] in hl_api:
            expect = np.ceil((hi - lo) / cs).astype(int)
        else:
            expect = np.floor(hi / cs).astype(int) - origin + 1
        assert verts.shape == tuple(expect), store.name
        assert verts.grid_origin == tuple(origin)


def test_zarr_python_serializes_our_documents_identically(all_stores):
    """zarr-python re-emits every rebuilt (non-compact) document byte for byte."""
    zarr = pytest.importorskip("zarr")
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.group import GroupMetadata
    from zarr.core.metadata.v3 import ArrayV3Metadata

    del zarr
    proto = default_buffer_prototype()
    import warnings

    checked = 0
    for store in all_stores[:12]:
        for key, data in _docs(store):
            doc = _rebuild(parse.loads(data, key=key), key)
            if doc["node_type"] == "array":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    meta = ArrayV3Metadata.from_dict(json.loads(builders.dumps(doc)))
                out = meta.to_buffer_dict(proto)["zarr.json"].to_bytes()
            elif next(iter(doc)) == "attributes":
                meta = GroupMetadata.from_dict(json.loads(builders.dumps(doc)))
                out = meta.to_buffer_dict(proto)["zarr.json"].to_bytes()
            else:
                continue
            assert out == builders.dumps(doc), key
            checked += 1
    assert checked > 20


# --------------------------------------------------------------------------
# building from scratch
# --------------------------------------------------------------------------


def test_points3d_from_scratch(ref_dir):
    store = ref_dir / "points3d.zarrvectors"
    exp = json.loads((ref_dir / "points3d.expected.json").read_text())
    root = builders.root_document(chunk_shape=exp["chunk_shape"], bounds=([0.0] * 3, [100.0] * 3),
                            geometry_types=["point_cloud"], base_bin_shape=exp["base_bin_shape"],
                            name=builders.store_name(str(store)))
    assert builders.dumps(root) == (store / "zarr.json").read_bytes()
    level = builders.level_document(level=0, vertex_count=len(exp["points"]),
                                    arrays_present=["vertices", "vertex_attributes"], fragments_tile=True)
    assert builders.dumps(level) == (store / "0/zarr.json").read_bytes()
    codecs = [{"name": "vlen-bytes", "configuration": {}}]
    chunks = [tuple(c) for c in np.unique(np.floor(np.asarray(exp["points"]) / exp["chunk_shape"]).astype(int), axis=0)]
    verts = builders.spatial_array_document((3, 3, 3), codecs, builders.vertices_attributes(np.float32),
                                      nonempty_chunks=np.array(chunks[::-1]), grid_origin=(0, 0, 0))
    assert builders.dumps(verts) == (store / "0/vertices/zarr.json").read_bytes()
    rgb_attrs = builders.vertex_attribute_attributes("rgb", "float32", [3])
    rgb = builders.spatial_array_document((3, 3, 3), codecs, rgb_attrs,
                                    nonempty_chunks=chunks)
    assert builders.dumps(rgb) == (store / "0/vertex_attributes/rgb/zarr.json").read_bytes()
    assert builders.dumps(builders.group_document({})) == (store / "0/vertex_attributes/zarr.json").read_bytes()


def test_pyramid_root_from_scratch(ref_dir):
    store = ref_dir / "streamlines_pyramid.zarrvectors"
    n_obj = len(json.loads((ref_dir / "streamlines_pyramid.expected.json").read_text())["objects"])
    # counts the inputs do not fix (coarsening, link derivation) are taken from the store
    n_lv1 = json.loads((store / "1/zarr.json").read_text())["attributes"]["zarr_vectors_level"]["vertex_count"]
    n_up = json.loads((store / "0/links/+1/zarr.json").read_text())["attributes"]["num_links"]
    base = (25.0, 25.0, 25.0)
    root = builders.root_document(
        chunk_shape=[50.0] * 3, bounds=([0.0] * 3, [100.0] * 3), geometry_types=["streamline"],
        base_bin_shape=base, name="streamlines_pyramid",
        format_capabilities=["preserved_object_ids", "shared_fragments", "multiscale_links"],
        cross_level_depth=1, cross_level_storage="explicit",
        transforms=[builders.level_transform(0, base, base), builders.level_transform(1, [50.0] * 3, base)],
    )
    assert builders.dumps(root) == (store / "zarr.json").read_bytes()
    lv1 = builders.level_document(level=1, vertex_count=n_lv1, parent_level=0,
                                  arrays_present=["vertices", "object_index"], preserves_object_ids=True,
                                  inherited_num_objects=n_obj, shared_fragments=True)
    assert builders.dumps(lv1) == (store / "1/zarr.json").read_bytes()
    fam = builders.links_family_document(level_delta=1, link_width=2, directed=True, sid_ndim=3, num_links=n_up)
    assert builders.dumps(fam) == (store / "0/links/+1/zarr.json").read_bytes()
    oi0 = builders.object_index_group_document(n_obj, n_obj, 3)
    assert builders.dumps(oi0) == (store / "0/object_index/zarr.json").read_bytes()
    oi1 = builders.object_index_group_document(n_obj, n_obj, 3, compact=False)
    assert builders.dumps(oi1) == (store / "1/object_index/zarr.json").read_bytes()
    zstd = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}
    tract = builders.object_attribute_document("tract", np.int32, [n_obj], [builders.bytes_codec(np.int32)])
    assert builders.dumps(tract) == (store / "0/object_attributes/tract/zarr.json").read_bytes()
    ids = builders.object_ids_document(n_obj, [builders.bytes_codec("int64"), zstd])
    assert builders.dumps(ids) == (store / "1/object_index/object_ids/zarr.json").read_bytes()
    man = builders.manifests_document(n_obj, [{"name": "vlen-bytes", "configuration": {}}, zstd])
    assert builders.dumps(man) == (store / "1/object_index/manifests/zarr.json").read_bytes()


def test_builder_details():
    keys = builders.nonempty_chunk_keys([[0, 0, 10], [0, 0, 4], [-1, 0, 0], [0, 0, 4]], 3)
    assert keys == ["-1.0.0", "0.0.10", "0.0.4"]
    assert builders.nonempty_chunk_keys(np.zeros((0, 2)), 2) == []
    assert format_offsets_name([[1, -1, 0], [1, 0, 0]]) == "+1.-1.0_+1.0.0"
    assert parse_offsets_name("0.0.0_0.+1.0", 3).tolist() == [[0, 0, 0], [0, 1, 0]]
    for bad in ("1.0.0", "+0.0.0", "0.0", "0.0.0_", "a.b.c", "+01.0.0"):
        with pytest.raises(FormatError):
            parse_offsets_name(bad, 3)
    assert builders.store_name("/data/x/points3d.zarrvectors/") == "points3d"
    assert builders.store_name("s3://bucket/a/b%20c.zarr") == "b c"
    assert builders.store_name("memory://") == "zarr_vectors"
    assert builders.store_name("foo.ZV") == "foo"
    assert builders.store_name("") == "zarr_vectors"
    assert builders.object_attribute_fill("uint8") == 255
    assert builders.object_attribute_fill("int64") == -(2**63)
    assert builders.object_attribute_fill("float16") == "NaN"
    with pytest.raises(InvalidArgumentError):
        builders.object_attribute_fill("bool")
    assert builders.bytes_codec("uint8") == {"name": "bytes"}
    assert builders.group_attribute_document("g", "bool", [2], [])["fill_value"] is False
    big = builders.object_attribute_document("x", "float64", [70000, 3], [])
    assert big["chunk_grid"]["configuration"]["chunk_shape"] == [65536, 3]
    assert builders.manifests_document(70000, [])["chunk_grid"]["configuration"]["chunk_shape"] == [16384]
    assert builders.object_ids_document(70000, [])["chunk_grid"]["configuration"]["chunk_shape"] == [70000]
    doc = builders.spatial_array_document((3, 3), [], builders.vertex_fragments_attributes(), nonempty_chunks=[(-1, 0)],
                                    grid_origin=(-1, 0))
    assert list(doc["attributes"])[:3] == ["nonempty_chunks", "chunk_grid_origin", "zv_array"]
    assert "chunk_grid_origin" not in builders.spatial_array_document((1,), [], {}, grid_origin=(0,))["attributes"]
    with pytest.raises(InvalidArgumentError):
        builders.spatial_array_document((2, 2), [{"name": "sharding_indexed", "configuration": {}}], {})
    with pytest.raises(InvalidArgumentError):
        builders.default_axes(5)
    with pytest.raises(InvalidArgumentError):
        builders.vertices_attributes("object")
    # compact vs indented serialization is chosen by key order
    compact = builders.dumps(builders.group_document({"a": 1}, compact=True))
    assert compact == b'{"zarr_format":3,"node_type":"group","attributes":{"a": 1}}'
    indented = builders.dumps(builders.group_document({}))
    assert indented == b'{\n  "attributes": {},\n  "zarr_format": 3,\n  "node_type": "group"\n}'
    assert b"\\u00e9" in builders.dumps(builders.group_document({"n": "\u00e9"}))  # ensure_ascii like zarr-python
    lv = builders.level_document(level=2, vertex_count=1, parent_level=1, arrays_present=["vertices"],
                           chunk_shape=[200, 200, 200], inherited_num_objects=0, shared_fragments=True)
    assert list(lv["attributes"]["zarr_vectors_level"]) == [
        "level", "object_sparsity", "vertex_count", "coarsening_method", "parent_level", "arrays_present",
        "chunk_shape", "inherited_num_objects", "shared_fragments"]
    assert lv["attributes"]["zarr_vectors_level"]["coarsening_method"] == "per_object"
    assert builders.level_transform(1, [15.0] * 2, [10.0] * 2) == md.LevelTransform(1, (1.5, 1.5), (7.5, 7.5))


# --------------------------------------------------------------------------
# error cases
# --------------------------------------------------------------------------


def _root_doc(**zv_over):
    doc = builders.root_document(chunk_shape=[50.0, 50.0, 50.0], bounds=([0.0] * 3, [100.0] * 3),
                           geometry_types=["point_cloud"], base_bin_shape=[25.0] * 3, name="t")
    doc = json.loads(builders.dumps(doc))
    for k, v in zv_over.items():
        if v is _DEL:
            del doc["attributes"]["zarr_vectors"][k]
        else:
            doc["attributes"]["zarr_vectors"][k] = v
    return doc


_DEL = object()


def test_classify_root():
    good = builders.dumps(_root_doc())
    assert parse.classify_root(good).chunk_shape == (50.0, 50.0, 50.0)
    with pytest.raises(NotZvfStoreError, match=r"Zarr v2 store .*not supported"):
        parse.classify_root(None, has_zgroup=True, key="bucket/x/zarr.json")
    with pytest.raises(NotZvfStoreError, match=r"Zarr v2 store .*not supported"):
        parse.classify_root(None, has_zarray=True)
    with pytest.raises(NotZvfStoreError, match="Zarr v2"):
        parse.classify_root(b'{"zarr_format": 2}')
    with pytest.raises(NotZvfStoreError, match="a Zarr group but not a Zarr Vectors store"):
        parse.classify_root(builders.dumps(builders.group_document({"foo": 1})), key="p/zarr.json")
    with pytest.raises(NotZvfStoreError, match=r"p/zarr\.json"):
        parse.classify_root(builders.dumps(builders.group_document({})), key="p/zarr.json")
    arr = builders.dumps(builders.object_ids_document(3, []))
    with pytest.raises(NotZvfStoreError, match="array"):
        parse.classify_root(arr)
    with pytest.raises(StoreNotFoundError):
        parse.classify_root(None)
    with pytest.raises(IncompleteStoreError):
        parse.classify_root(None, has_other_keys=True)


@pytest.mark.parametrize("data", [b"", b"{", b"\xff\xfe", b"[1, 2]", b"null", b"[" * 100000, b'"x"',
                                  b'{"zarr_format": 3, "node_type": "group", "attributes": []}',
                                  b'{"zarr_format": "3", "node_type": "group"}',
                                  b'{"zarr_format": true, "node_type": "group"}'])
def test_bad_json_names_key(data):
    with pytest.raises(FormatError, match=r"some/key/zarr\.json"):
        parse.classify_root(data, key="some/key/zarr.json")


@pytest.mark.parametrize(
    "field,value",
    [
        ("chunk_shape", "50"), ("chunk_shape", [50, 0, 50]), ("chunk_shape", [50, -1, 50]), ("chunk_shape", []),
        ("chunk_shape", [True, 50, 50]), ("chunk_shape", [50, "NaN", 50]), ("chunk_shape", [50, 50]),
        ("chunk_shape", [10**400, 1, 1]), ("chunk_shape", _DEL),
        ("bounds", [[0, 0, 0]]), ("bounds", [[0, 0], [1, 1]]), ("bounds", [[0, 0, 0], [1, 1]]),
        ("bounds", [[5, 0, 0], [1, 1, 1]]), ("bounds", {"min": 0}), ("bounds", _DEL),
        ("base_bin_shape", [30.0, 25.0, 25.0]), ("base_bin_shape", [100.0, 25.0, 25.0]),
        ("base_bin_shape", [25.0, 25.0]), ("base_bin_shape", [0, 25, 25]), ("base_bin_shape", [1e-300, 25, 25]),
        ("geometry_types", ["blob"]), ("geometry_types", "point_cloud"), ("geometry_types", [3]),
        ("links_convention", 3), ("links_convention", "maybe"), ("cross_chunk_strategy", None),
        ("object_index_convention", "x"), ("cross_level_depth", -2), ("cross_level_depth", 1.5),
        ("cross_level_storage", "sometimes"), ("zv_version", 9), ("zv_version", "latest"), ("zv_version", _DEL),
        ("format_capabilities", "x"), ("format_capabilities", [1]), ("attribute_specs", []),
    ],
)
def test_malformed_root_fields(field, value):
    doc = _root_doc(**{field: value})
    with pytest.raises(FormatError, match=f"k/zarr.json: .*{field}"):
        parse.parse_root(doc, key="k/zarr.json")


def test_malformed_root_structure():
    doc = _root_doc()
    doc["attributes"]["zarr_vectors"] = [1]
    with pytest.raises(FormatError, match="zarr_vectors"):
        parse.parse_root(doc, key="k")
    doc = _root_doc()
    doc["attributes"]["multiscales"][0]["axes"] = doc["attributes"]["multiscales"][0]["axes"][:2]
    with pytest.raises(FormatError, match="axes"):
        parse.parse_root(doc, key="k")
    doc = _root_doc()
    doc["attributes"]["multiscales"][0]["datasets"][0]["path"] = "../x"
    with pytest.raises(FormatError, match="path"):
        parse.parse_root(doc, key="k")
    doc = _root_doc()
    doc["attributes"]["multiscales"][0]["datasets"][0]["coordinateTransformations"][0]["scale"] = [1.0]
    with pytest.raises(FormatError, match="scale"):
        parse.parse_root(doc, key="k")
    doc = _root_doc()
    doc["attributes"]["multiscales"] = {"axes": []}
    with pytest.raises(FormatError, match="multiscales"):
        parse.parse_root(doc, key="k")
    # absent optional blocks are fine (seed-style roots)
    doc = _root_doc(links_convention=_DEL, base_bin_shape=_DEL)
    del doc["attributes"]["multiscales"], doc["attributes"]["ome"]
    r = parse.parse_root(doc, key="k")
    assert r.axes is None and r.transforms == () and r.name is None and r.bin_shape == r.chunk_shape
    assert r.links_convention == "implicit_sequential"


def _level_doc(**over):
    doc = json.loads(builders.dumps(builders.level_document(level=1, vertex_count=5, parent_level=0,
                                                            arrays_present=["vertices"])))
    for k, v in over.items():
        if v is _DEL:
            del doc["attributes"]["zarr_vectors_level"][k]
        else:
            doc["attributes"]["zarr_vectors_level"][k] = v
    return doc


@pytest.mark.parametrize(
    "field,value",
    [("level", -1), ("level", "1"), ("level", _DEL), ("vertex_count", 1.0), ("vertex_count", -5),
     ("arrays_present", "vertices"), ("arrays_present", [1]), ("arrays_present", _DEL),
     ("object_sparsity", 0), ("object_sparsity", 1.5), ("object_sparsity", "1"), ("parent_level", 1),
     ("parent_level", "0"), ("fragments_tile", 1), ("shared_fragments", "yes"), ("chunk_shape", [0, 1, 1]),
     ("inherited_num_objects", -1), ("chunk_dims", "x"), ("coarsening_method", None)],
)
def test_malformed_level(field, value):
    with pytest.raises(FormatError, match=f"1/zarr.json: .*{field}"):
        parse.parse_level(_level_doc(**{field: value}), key="1/zarr.json")


def test_level_chunk_shape_must_nest():
    root = parse.parse_root(_root_doc(), key="k")
    ok = parse.parse_level(_level_doc(chunk_shape=[100.0, 50.0, 150.0]), key="1/zarr.json")
    assert root.level_chunk_shape(ok) == (100.0, 50.0, 150.0)
    for bad in ([75.0, 50.0, 50.0], [50.0, 50.0], [1e300, 50.0, 50.0]):
        lv = parse.parse_level(_level_doc(chunk_shape=bad), key="1/zarr.json")
        with pytest.raises(FormatError, match=r"1/zarr\.json: .*chunk_shape"):
            root.level_chunk_shape(lv, key="1/zarr.json")
    assert root.level_bin_shape(0) == (25.0, 25.0, 25.0)
    assert root.level_bin_shape(7) == (25.0, 25.0, 25.0)


def test_level_needs_block():
    with pytest.raises(FormatError, match="zarr_vectors_level"):
        parse.parse_level(builders.group_document({}), key="0/zarr.json")
    with pytest.raises(FormatError, match="node_type"):
        parse.parse_level(builders.object_ids_document(1, []), key="0/zarr.json")


def _vert_doc():
    return json.loads(builders.dumps(builders.spatial_array_document(
        (3, 3, 3), [{"name": "vlen-bytes", "configuration": {}}], builders.vertices_attributes("float32"),
        nonempty_chunks=[(-1, 0, 0), (0, 1, 1)], grid_origin=(-1, 0, 0))))


def test_array_accessors():
    a = parse.parse_array(_vert_doc(), key="0/vertices/zarr.json")
    assert a.nonempty_chunks == ((-1, 0, 0), (0, 1, 1))
    assert a.grid_origin == (-1, 0, 0)
    assert a.separator == "/" and not a.sharded and a.dtype == np.dtype("<f4")
    frag_doc = builders.spatial_array_document((2,), [], builders.vertex_fragments_attributes())
    frag = parse.parse_array(json.loads(builders.dumps(frag_doc)),
                          key="f")
    assert frag.dtype is None and frag.grid_origin == (0,) and frag.nonempty_chunks == ()
    doc = _vert_doc()
    doc["chunk_key_encoding"] = {"name": "v2"}
    assert parse.parse_array(doc, key="k").separator == "."


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(shape="3"),
        lambda d: d.update(shape=[3, -1, 3]),
        lambda d: d.update(shape=[]),
        lambda d: d.update(data_type=5),
        lambda d: d["chunk_grid"]["configuration"].update(chunk_shape=[1, 1]),
        lambda d: d["chunk_grid"]["configuration"].update(chunk_shape=[1, 0, 1]),
        lambda d: d["chunk_grid"].update(name="rectilinear"),
        lambda d: d.update(chunk_key_encoding={"name": "weird"}),
        lambda d: d.update(chunk_key_encoding={"name": "default", "configuration": {"separator": "|"}}),
        lambda d: d.update(codecs={"name": "zstd"}),
        lambda d: d.update(codecs=[{"configuration": {}}]),
        lambda d: d.pop("fill_value"),
        lambda d: d["attributes"].update(chunk_grid_origin=[0, 0]),
        lambda d: d["attributes"].update(chunk_grid_origin=[0, 0, "1"]),
        lambda d: d["attributes"].update(nonempty_chunks="0.0.0"),
        lambda d: d.update(attributes=[]),
        lambda d: d.update(node_type="group"),
    ],
)
def test_malformed_array(mutate):
    doc = _vert_doc()
    mutate(doc)
    with pytest.raises(FormatError, match=r"0/vertices/zarr\.json"):
        parse.parse_array(doc, key="0/vertices/zarr.json")


@pytest.mark.parametrize("entries", [["0.0"], ["0.0.0.0"], ["a.b.c"], ["0.0.0,1.1.1"], [1], ["1_0.0.0"],
                                     [" 1.0.0"], ["1.0.0 "], ["\u0661.0.0"], ["9" * 19 + ".0.0"], ["0..0"],
                                     ["+1.0.0"]])
def test_malformed_nonempty(entries):
    doc = _vert_doc()
    doc["attributes"]["nonempty_chunks"] = entries
    a = parse.parse_array(doc, key="0/vertices/zarr.json")
    with pytest.raises(FormatError, match="nonempty_chunks"):
        _ = a.nonempty_chunks


@pytest.mark.parametrize("dtype", ["object", "V8", "float128", 5, "<f4", "complex64"])
def test_malformed_dtype(dtype):
    doc = _vert_doc()
    doc["attributes"]["dtype"] = dtype
    with pytest.raises(FormatError, match="dtype"):
        _ = parse.parse_array(doc, key="k").dtype


_JUNK = [None, True, -1, 0, 2**70, 1.5, float("nan"), "", "x", [], [1, "a"], {}, {"a": [None]}, [[1, 2], [3]],
         [-1e308, 1e308], ["0.0.0"], "NaN"]


def _mutations(doc, rng: random.Random, n: int):
    """Replace one random node of the document tree with junk, ``n`` times."""
    paths = []

    def walk(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, [*path, k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, [*path, i])

    walk(doc, [])
    for _ in range(n):
        d = json.loads(json.dumps(doc))
        path = rng.choice(paths)
        junk = rng.choice(_JUNK)
        if not path:
            yield junk
            continue
        node = d
        for p in path[:-1]:
            node = node[p]
        if isinstance(node, dict) and rng.random() < 0.2:
            del node[path[-1]]
        else:
            node[path[-1]] = junk
        yield d


def test_fuzz_parsers_only_raise_zvf_errors():
    rng = random.Random(1234)
    root = _root_doc()
    level = _level_doc()
    arr = _vert_doc()
    for make, parse_fn in ((root, lambda d: parse.parse_root(d, key="k")),
                           (level, lambda d: parse.parse_level(d, key="k")),
                        (arr, lambda d: parse.parse_array(d, key="k"))):
        for d in _mutations(make, rng, 400):
            try:
                m = parse_fn(d)
                if isinstance(m, md.ArrayMeta):
                    _ = m.nonempty_chunks, m.grid_origin, m.dtype
                if isinstance(m, md.RootMeta):
                    assert all(math.isfinite(float(c)) and c > 0 for c in m.chunk_shape)
            except (FormatError, NotZvfStoreError):
                pass
