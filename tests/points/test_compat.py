"""zvf and zarr-vectors 0.9.2 write the same point stores and read each other's.

For each variant the same input is written by ``zarr_vectors.building.write_points``
and by ``zvf.write_points`` -- with its default object-index layout and with
``object_index_layout="reference"`` -- into stores with the same basename in
different directories (the basename ends up in the root metadata).  Then:

* the reference-layout zvf store is byte-identical to 0.9.2's, file by file;
  the default one differs only in ``0/object_index/manifests`` (sharded, so a
  reader can fetch one object's manifest alone) when there are objects;
* zarr-vectors reads the default zvf store (``zv.open().select().read()`` and
  the ``building.read_*`` functions) with the results zvf and numpy give;
* plain zarr-python opens it and a cell reads as the payload zvf decodes;
* zvf reads all three stores to numpy ground truth.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest

import zvf
from tests.support.reference_bytes import unwrap_cell, without_section
from tests.support.rows import assert_rows_equal, rows
from tests.support.store_tree import store_files


@dataclass
class Variant:
    """One input for both writers (zvf keyword spelling) plus the boxes to query."""

    positions: np.ndarray
    kwargs: dict
    boxes: list = field(default_factory=list)

    @property
    def ndim(self) -> int:
        return self.positions.shape[1]

    def reference_kwargs(self) -> dict:
        kw = dict(self.kwargs)
        if "attributes" in kw:
            kw["vertex_attributes"] = kw.pop("attributes")
        if "compression" in kw:
            kw["compressor"] = kw.pop("compression")
        return kw

    @property
    def attributes(self) -> dict:
        return self.kwargs.get("attributes", {})

    @property
    def object_ids(self):
        oids = self.kwargs.get("object_ids")
        if oids is None and self.kwargs.get("groups") is not None:
            return np.arange(len(self.positions))  # 0.9.2: groups without ids make each vertex an object
        return oids

    @property
    def reference_bbox_is_wrong(self) -> bool:
        """zarr-vectors 0.9.2's select() misreads stores with both bins and object ids."""
        return self.kwargs.get("bin_shape") is not None and self.object_ids is not None

    @property
    def stored_positions(self) -> np.ndarray:
        return self.positions.astype(self.kwargs.get("dtype", "float32"))


def _cloud(rng, n, lo, hi, chunk, dtype=np.float32):
    """Uniform points plus awkward ones: on chunk boundaries, at both bounds corners."""
    lo, hi, chunk = (np.asarray(v, np.float64) for v in (lo, hi, chunk))
    pts = rng.uniform(lo, hi, (n, lo.size))
    edges = np.floor(lo / chunk) * chunk + chunk  # first chunk boundary above lo on each axis
    special = np.stack([lo, hi, edges, np.minimum(edges + chunk, hi), (lo + hi) / 2])
    return np.vstack([pts, special]).astype(dtype)


def _boxes(v_lo, v_hi, chunk):
    """A box in the middle, one whose faces lie on chunk boundaries, and a degenerate (point) box."""
    lo, hi, chunk = (np.asarray(x, np.float64) for x in (v_lo, v_hi, chunk))
    ext = hi - lo
    edge = np.floor(lo / chunk) * chunk + chunk
    return [
        ((lo + 0.2 * ext).tolist(), (lo + 0.65 * ext).tolist()),
        (lo.tolist(), np.minimum(edge + chunk, hi).tolist()),
        (edge.tolist(), edge.tolist()),
    ]


def _variants() -> dict[str, Variant]:
    rng = np.random.default_rng(20260)
    out: dict[str, Variant] = {}

    def add(tag, lo, hi, chunk, n=150, **kw):
        pos = _cloud(rng, n, lo, hi, chunk, np.dtype(kw.get("dtype", "float32")))
        kw = {"chunk_shape": tuple(chunk), "bounds": (list(lo), list(hi)), **kw}
        if callable(kw.get("attributes")):
            kw["attributes"] = kw["attributes"](len(pos))
        if callable(kw.get("object_ids")):
            kw["object_ids"] = kw["object_ids"](len(pos))
        out[tag] = Variant(pos, kw, _boxes(lo, hi, chunk))

    add("plain3d_nobins", [0.0] * 3, [100.0] * 3, (40.0,) * 3,
        attributes=lambda m: {"intensity": rng.random(m, dtype=np.float32)})
    add("plain3d_f64_positions", [0.0] * 3, [90.0] * 3, (30.0,) * 3, dtype="float64",
        attributes=lambda m: {"t": rng.random(m)})
    add("zstd_bins_multichannel", [0.0] * 3, [100.0] * 3, (50.0,) * 3, bin_shape=(25.0,) * 3, compression="zstd",
        attributes=lambda m: {
            "rgb": rng.random((m, 3), dtype=np.float32),
            "label": rng.integers(-1000, 1000, m).astype(np.int32),
            "pair": rng.integers(0, 60000, (m, 2)).astype(np.uint16),
        })
    add("blosc_2d_bins", [0.0, 0.0], [64.0, 64.0], (16.0, 16.0), bin_shape=(8.0, 8.0), compression="blosc",
        attributes=lambda m: {"w": rng.normal(size=m), "k": rng.integers(0, 5, m).astype(np.int64)})
    add("sharded2_zstd", [0.0] * 3, [120.0] * 3, (30.0,) * 3, bin_shape=(15.0,) * 3, compression="zstd",
        shard_shape=2, attributes=lambda m: {"cls": rng.integers(-100, 100, m).astype(np.int8)})
    add("sharded_tuple_2d", [0.0, 0.0], [100.0, 100.0], (20.0, 20.0), shard_shape=(2, 3),
        attributes=lambda m: {"v2": rng.random((m, 2), dtype=np.float32),
                              "c": rng.integers(0, 9, m).astype(np.uint8)})  # "c" doubles as the chunk prefix
    add("objects_groups", [0.0] * 3, [100.0] * 3, (50.0,) * 3, bin_shape=(25.0,) * 3,
        object_ids=lambda m: rng.integers(0, 9, m) * 3 - 6,  # sparse and negative ids
        attributes=lambda m: {"a": rng.random(m, dtype=np.float32)},
        object_attributes={"size": rng.random(9, dtype=np.float32),
                           "counts": rng.integers(0, 100, (9, 2)).astype(np.int32)},
        groups={0: [-6, 0, 3], 2: [9, 12, 15, 18]},
        group_attributes={"g": np.array([1.0, 2.0, 3.0], np.float32),
                          "gi": np.array([[1, 2], [3, 4], [5, 6]], np.int32)})
    add("negative_bounds_bins", [-60.0, -35.0, -10.0], [40.0, 65.0, 90.0], (25.0,) * 3, bin_shape=(12.5,) * 3,
        attributes=lambda m: {"a": rng.random(m)})
    add("negative_objects_sharded", [-50.0, -50.0], [50.0, 30.0], (20.0, 20.0), compression="zstd", shard_shape=2,
        object_ids=lambda m: np.arange(m) % 7, object_attributes={"o": np.arange(7, dtype=np.float64) / 7},
        groups={0: [0, 1], 1: [2, 3, 4, 5, 6]})
    add("groups_without_ids", [0.0] * 3, [100.0] * 3, (50.0,) * 3, n=40,
        groups={0: [0, 1, 2], 3: [10, 20, 30]})
    return out


VARIANTS = _variants()


@dataclass
class Written:
    tag: str
    variant: Variant
    zvf_path: object  # zvf's defaults
    same_path: object  # zvf with object_index_layout="reference"
    ref_path: object  # zarr-vectors 0.9.2


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def written(request, tmp_path_factory):
    """Both writers' stores of one variant (same basename, different directories)."""
    from zarr_vectors import building

    tag = request.param
    v = VARIANTS[tag]
    base = tmp_path_factory.mktemp(f"compat-{tag}")
    paths = {d: base / d / f"{tag}.zarrvectors" for d in ("zvf", "same", "ref")}
    for p in paths.values():
        p.parent.mkdir()
    zvf.write_points(str(paths["zvf"]), v.positions, **v.kwargs)
    zvf.write_points(str(paths["same"]), v.positions, object_index_layout="reference", **v.kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        building.write_points(str(paths["ref"]), v.positions, **v.reference_kwargs())
    return Written(tag, v, paths["zvf"], paths["same"], paths["ref"])


def _inside(pos, lo, hi):
    p = np.asarray(pos, np.float64)
    return np.all((p >= np.asarray(lo)) & (p <= np.asarray(hi)), axis=1)


# ---------------------------------------------------------------- (a) bytes


def _differing(mine: dict, ref: dict) -> list[str]:
    assert sorted(mine) == sorted(ref), (
        f"only zvf: {sorted(set(mine) - set(ref))}, only reference: {sorted(set(ref) - set(mine))}")
    return [k for k in ref if mine[k] != ref[k]]


def test_byte_identical_to_reference(written):
    differ = _differing(store_files(written.same_path), store_files(written.ref_path))
    assert not differ, f"{len(differ)} files differ, e.g. {differ[:5]}"


def _not_same_payloads(mine_path, ref_path, keys: list[str]) -> list[str]:
    """Of cells (or shards) whose bytes differ, those plain zarr-python does not read as the same payloads."""
    import zarr

    arrays = sorted({k.split("/c/")[0] for k in keys if "/c/" in k})
    bad = [k for k in keys if "/c/" not in k]
    for name in arrays:
        a, b = (zarr.open_group(str(p), mode="r")[name][...] for p in (mine_path, ref_path))
        if [unwrap_cell(x) for x in a.reshape(-1)] != [unwrap_cell(x) for x in b.reshape(-1)]:
            bad.append(name)
    return bad


def test_default_layout_differs_only_in_manifests(written):
    """... and in zstd point cells of several bins, written seekable: the same payload in frames (plain zarr's
    zstd decodes them to the reference's bytes)."""
    mine, ref = without_section(store_files(written.zvf_path)), store_files(written.ref_path)
    if written.variant.object_ids is None:
        assert not _not_same_payloads(written.zvf_path, written.ref_path, _differing(mine, ref))
        return
    mine = {k: b for k, b in mine.items() if not k.startswith("0/object_index/manifests/")}
    ref = {k: b for k, b in ref.items() if not k.startswith("0/object_index/manifests/")}
    differ = _differing(mine, ref)
    assert not differ, f"{len(differ)} files besides the manifests differ, e.g. {differ[:5]}"


# ---------------------------------------------------------------- (b) zarr-vectors reads zvf stores


def test_reference_reader_matches_zvf(written):
    import zarr_vectors as zv

    v = written.variant
    ds = zvf.open(written.zvf_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = zv.open(str(written.zvf_path))
        full = ref.read()
        boxes = [ref.select(bbox=(lo, hi)).read() for lo, hi in v.boxes]
    truth = v.stored_positions
    assert_rows_equal(rows(full.positions), rows(truth), "zarr_vectors read() of the zvf store")
    assert_rows_equal(rows(ds.read_all().positions), rows(truth), "zvf read_all")
    for name, values in v.attributes.items():
        if name in full.attributes:
            assert_rows_equal(rows(full.positions, np.asarray(full.attributes[name])), rows(truth, values),
                              f"zarr_vectors read() (point, {name})")
    for (lo, hi), res in zip(v.boxes, boxes):
        mine = ds.query((lo, hi))
        want = truth[_inside(truth, lo, hi)]
        assert_rows_equal(rows(mine.positions), rows(want), f"zvf bbox {lo}..{hi} vs numpy")
        if v.reference_bbox_is_wrong:
            # 0.9.2 bug: with bins *and* object ids its select() takes the per-object
            # fragments for bins and drops rows; it reads its own stores the same way.
            assert {tuple(r) for r in res.positions.tolist()} <= {tuple(r) for r in mine.positions.tolist()}
            continue
        assert_rows_equal(rows(res.positions), rows(mine.positions), f"zarr_vectors vs zvf bbox {lo}..{hi}")


def test_reference_building_readers(written):
    from zarr_vectors import building

    v = written.variant
    truth = v.stored_positions
    ds = zvf.open(written.zvf_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = building.open_store(str(written.zvf_path))
        meta = building.read_root_metadata(root)
        level = building.get_resolution_level(root, 0)
        chunks = building.list_chunk_keys(level)
        bufs = [building.read_chunk_vertex_buffer(level, c, dtype=truth.dtype, ndim=v.ndim) for c in chunks]
        n_frags = [building.read_vertex_fragment_index(level, c).num_fragments for c in chunks]
        per_attr = {n: [np.concatenate(building.read_chunk_attributes(level, n, c)) for c in chunks]
                    for n in v.attributes}
        oids = v.object_ids
        objects = {}
        if oids is not None:
            for o in np.unique(oids).tolist():
                parts = building.read_object_vertices(level, o, dtype=truth.dtype, ndim=v.ndim)
                objects[o] = np.concatenate(parts) if parts else np.zeros((0, v.ndim))
            obj_attrs = {n: building.read_object_attributes(level, n) for n in v.kwargs.get("object_attributes", {})}
        groupings = building.read_all_groupings(level) if v.kwargs.get("groups") else None
        group_one = {g: building.read_group_object_ids(level, g) for g in v.kwargs.get("groups") or {}}
        gattrs = {n: building.read_groupings_attributes(level, n) for n in v.kwargs.get("group_attributes", {})}

    assert list(meta.chunk_shape) == list(ds.chunk_shape)
    assert [list(b) for b in meta.bounds] == [b.tolist() for b in ds.bounds]
    assert len(chunks) == ds.info()["nonempty_chunks"]
    # fragments per chunk: one per bin without object ids, one per object present otherwise
    cell_of = np.floor(truth.astype(np.float64) / np.asarray(v.kwargs["chunk_shape"])).astype(np.int64)
    for c, nf in zip(chunks, n_frags):
        here = np.all(cell_of == np.asarray(c), axis=1)
        if v.object_ids is None:
            chunk = np.asarray(v.kwargs["chunk_shape"])
            bins = chunk / np.asarray(v.kwargs.get("bin_shape") or v.kwargs["chunk_shape"])
            assert nf == int(np.prod(np.round(bins))), c
        else:
            assert nf == len(np.unique(np.asarray(v.object_ids)[here])), c
    assert_rows_equal(rows(np.concatenate(bufs)), rows(truth), "building.read_chunk_vertex_buffer over all chunks")
    for n, parts in per_attr.items():
        assert_rows_equal(rows(np.concatenate(bufs), np.concatenate(parts)), rows(truth, v.attributes[n]),
                          f"building.read_chunk_attributes (point, {n})")
    if oids is not None:
        sel = ds.read_all()
        for o, pts in objects.items():
            want = truth[np.asarray(oids) == o]
            assert_rows_equal(rows(pts), rows(want), f"building.read_object_vertices({o})")
            assert_rows_equal(rows(sel.positions[sel.object_ids == o]), rows(want), f"zvf object {o}")
        for n, values in obj_attrs.items():
            np.testing.assert_array_equal(np.asarray(values), v.kwargs["object_attributes"][n])
            np.testing.assert_array_equal(ds.object_attribute(n), v.kwargs["object_attributes"][n])
    if groupings is not None:
        groups = v.kwargs["groups"]
        want = [sorted(groups.get(g, [])) for g in range(max(groups) + 1)]
        assert [sorted(g) for g in groupings] == want
        assert {g: sorted(m) for g, m in group_one.items()} == {g: sorted(m) for g, m in groups.items()}
        assert [sorted(g.tolist()) for g in ds.groups()] == want
    for n, values in gattrs.items():
        np.testing.assert_array_equal(np.asarray(values), v.kwargs["group_attributes"][n])
        np.testing.assert_array_equal(ds.group_attribute(n), v.kwargs["group_attributes"][n])


# ---------------------------------------------------------------- (c) plain zarr-python


async def test_plain_zarr_reads_cells(written):
    import zarr

    v = written.variant
    group = zarr.open_group(str(written.zvf_path), mode="r")
    ds = await zvf.aio.open(written.zvf_path)
    level = await ds.level(0)
    names = ["vertices", "vertex_fragments", *(f"vertex_attributes/{n}" for n in v.attributes)]
    if min(v.kwargs["bounds"][0]) < 0:  # the variant does exercise a shifted grid
        assert min(group["0/vertices"].attrs["chunk_grid_origin"]) < 0
    for name in names:
        arr = group[f"0/{name}"]
        origin = np.asarray(arr.attrs.get("chunk_grid_origin", [0] * v.ndim))
        chunks = [tuple(int(x) for x in s.split(".")) for s in arr.attrs["nonempty_chunks"]]
        assert chunks, name
        payloads = await level.array(name).payloads(chunks)
        for chunk, payload in zip(chunks, payloads):
            cell = unwrap_cell(arr[tuple(np.subtract(chunk, origin))])
            assert cell == bytes(payload), f"0/{name} chunk {chunk}: zarr and zvf disagree"
    if v.object_ids is not None:
        np.testing.assert_array_equal(group["0/object_index/object_ids"][:], np.unique(v.object_ids))
        for n, values in v.kwargs.get("object_attributes", {}).items():
            np.testing.assert_array_equal(group[f"0/object_attributes/{n}"][:], values)


# ---------------------------------------------------------------- zvf reads both writers' stores


@pytest.mark.parametrize("which", ["ref_path", "zvf_path", "same_path"])
def test_zvf_reads_to_ground_truth(written, which):
    v = written.variant
    truth = v.stored_positions
    with zvf.open(getattr(written, which)) as ds:
        sel = ds.read_all()
        assert sel.positions.dtype == truth.dtype
        assert_rows_equal(rows(sel.positions), rows(truth), "read_all")
        for n, values in v.attributes.items():
            assert sel.attributes[n].dtype == values.dtype
            assert_rows_equal(rows(sel.positions, sel.attributes[n]), rows(truth, values), f"(point, {n})")
        oids = v.object_ids
        if oids is None:
            assert sel.object_ids is None
        else:
            assert_rows_equal(rows(sel.positions, sel.object_ids), rows(truth, oids), "(point, object id)")
        for lo, hi in v.boxes:
            m = _inside(truth, lo, hi)
            q = ds.query((lo, hi))
            assert_rows_equal(rows(q.positions), rows(truth[m]), f"bbox {lo}..{hi}")
            for n, values in v.attributes.items():
                assert_rows_equal(rows(q.positions, q.attributes[n]), rows(truth[m], values[m]), f"bbox (point, {n})")
            if oids is not None:
                assert_rows_equal(rows(q.positions, q.object_ids), rows(truth[m], np.asarray(oids)[m]),
                                  "bbox (point, object id)")
