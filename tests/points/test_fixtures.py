"""Every reference point-cloud store reads back to its expected.json (numpy ground truth).

Point order on disk is the writer's (bin-sorted or grouped by object), so
rows are compared as multisets, attributes and object ids as (point, value)
pairs.
"""

from __future__ import annotations

import numpy as np
import pytest

import zvf
from tests.refstores import POINT_STORES, load_expected
from tests.support.rows import assert_rows_equal, rows


@pytest.fixture(scope="module", params=POINT_STORES)
def case(request, ref_dir):
    name = request.param
    exp = load_expected(ref_dir, name)
    ds = zvf.open(ref_dir / f"{name}.zarrvectors")
    yield name, exp, ds
    ds.close()


def truth(exp):
    return np.asarray(exp["points"], dtype=np.float64)


def attr_truth(exp, name):
    return np.asarray(exp["attributes"][name])


def test_store_metadata(case):
    _name, exp, ds = case
    assert ds.geometry_type == "point_cloud"
    assert ds.ndim == exp["ndim"]
    assert ds.levels == [0]
    lo, hi = ds.bounds
    np.testing.assert_array_equal(lo, exp["bounds"][0])
    np.testing.assert_array_equal(hi, exp["bounds"][1])
    assert ds.chunk_shape == tuple(exp["chunk_shape"])
    info = ds.info()
    assert info["vertex_count"] == len(exp["points"])
    assert info["bin_shape"] == exp["base_bin_shape"]
    assert info["vertex_attributes"] == sorted(exp.get("attributes", {}))


def test_read_all_points(case):
    name, exp, ds = case
    sel = ds.read_all()
    assert sel.positions.shape == (len(exp["points"]), exp["ndim"])
    assert sel.positions.dtype == np.float32
    assert_rows_equal(rows(sel.positions), rows(truth(exp)), f"{name} read_all positions")


def test_read_all_attributes_row_aligned(case):
    name, exp, ds = case
    sel = ds.read_all()
    assert sorted(sel.attributes) == sorted(exp.get("attributes", {}))
    for attr in exp.get("attributes", {}):
        got = sel.attributes[attr]
        want = attr_truth(exp, attr)
        assert got.shape == want.shape, f"{name}/{attr}: shape {got.shape} vs {want.shape}"
        if want.dtype.kind == "i":
            assert got.dtype.kind == "i"
        assert_rows_equal(rows(sel.positions, got), rows(truth(exp), want), f"{name} (point, {attr}) pairs")


@pytest.mark.parametrize("q", [0, 1])
def test_bbox_query(case, q):
    name, exp, ds = case
    box = exp["bbox_queries"][q]
    sel = ds.query((box["lo"], box["hi"]))
    pts = truth(exp)
    idx = np.asarray(box["vertex_indices"], dtype=np.int64)
    assert len(sel) == box["count"] == len(idx)
    assert_rows_equal(rows(sel.positions), rows(pts[idx]), f"{name} bbox {q} vertices")
    assert_rows_equal(rows(sel.positions), rows(np.asarray(box["vertices_sorted"]).reshape(-1, exp["ndim"])),
                      f"{name} bbox {q} vertices_sorted")
    for attr in exp.get("attributes", {}):
        assert_rows_equal(rows(sel.positions, sel.attributes[attr]), rows(pts[idx], attr_truth(exp, attr)[idx]),
                          f"{name} bbox {q} (point, {attr}) pairs")
    if "vertex_object_ids" in exp:
        oids = np.asarray(exp["vertex_object_ids"])
        assert_rows_equal(rows(sel.positions, sel.object_ids), rows(pts[idx], oids[idx]),
                          f"{name} bbox {q} (point, object id) pairs")


def test_bbox_query_attribute_subset(case):
    _name, exp, ds = case
    box = exp["bbox_queries"][0]
    sel = ds.query((box["lo"], box["hi"]), attributes=[])
    assert sel.attributes == {}
    assert len(sel) == box["count"]
    for attr in exp.get("attributes", {}):
        sel = ds.query((box["lo"], box["hi"]), attributes=attr)
        assert list(sel.attributes) == [attr]


def test_whole_extent_query_equals_read_all(case):
    name, exp, ds = case
    lo, hi = ds.bounds
    sel = ds.query((lo, hi))
    assert_rows_equal(rows(sel.positions), rows(truth(exp)), f"{name} query over the bounds")


def test_object_ids_per_point(case):
    name, exp, ds = case
    sel = ds.read_all()
    if "vertex_object_ids" not in exp:
        assert sel.object_ids is None
        return
    oids = np.asarray(exp["vertex_object_ids"])
    assert sel.object_ids is not None and sel.object_ids.dtype == np.int64
    assert_rows_equal(rows(sel.positions, sel.object_ids), rows(truth(exp), oids), f"{name} (point, object id)")
    np.testing.assert_array_equal(ds.object_ids(), np.unique(oids))
    for oid, obj in exp["objects"].items():
        mine = sel.positions[sel.object_ids == int(oid)]
        assert_rows_equal(rows(mine), rows(np.asarray(obj["vertices_sorted"])), f"{name} object {oid} vertices")


def test_object_attributes(case):
    name, exp, ds = case
    objects = exp.get("objects")
    if not objects:  # a cloud without ids has no objects and no object attributes
        assert ds.object_ids().size == 0
        with pytest.raises(zvf.errors.InvalidArgumentError, match="size"):
            ds.object_attribute("size")
        return
    ids = ds.object_ids()
    for attr in next(iter(objects.values()))["object_attributes"]:
        values = ds.object_attribute(attr)
        assert values.shape[0] == len(ids)
        want = np.array([objects[str(int(o))]["object_attributes"][attr] for o in ids])
        np.testing.assert_array_equal(values.astype(np.float64), want, err_msg=f"{name} object attribute {attr}")


def test_groups_and_group_attributes(case):
    name, exp, ds = case
    groups = exp.get("groups")
    if not groups:
        assert ds.groups() == []
        return
    got = ds.groups()
    assert len(got) == max(int(g) for g in groups) + 1
    for gid, members in groups.items():
        np.testing.assert_array_equal(np.sort(got[int(gid)]), np.sort(members), err_msg=f"{name} groups()[{gid}]")
        np.testing.assert_array_equal(np.sort(ds.group(int(gid))), np.sort(members), err_msg=f"{name} group({gid})")
    for attr, values in exp.get("group_attributes", {}).items():
        np.testing.assert_array_equal(ds.group_attribute(attr).astype(np.float64), values)
