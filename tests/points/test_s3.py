"""Point clouds written to and read from a real S3 server (obstore S3Store).

The server is the in-process moto of ``tests/conftest.py`` or, with
ZVF_TEST_S3_ENDPOINT set, any S3 endpoint (LocalStack, SeaweedFS); every test
gets a fresh bucket through the ``s3_target`` fixture.
"""

from __future__ import annotations

import numpy as np
import pytest

import zvf
from tests.support.overwrite import assert_overwrite_needed
from tests.support.rows import assert_rows_equal, rows
from tests.support.store_tree import store_files
from zvf.errors import StoreNotFoundError

pytestmark = pytest.mark.s3

BOUNDS = ([0.0, 0.0, 0.0], [120.0, 120.0, 120.0])
BOXES = [([10.0, 20.0, 5.0], [60.0, 70.0, 55.0]), ([0.0, 0.0, 0.0], [30.0, 30.0, 30.0]), ([45.0, 0.0, 40.0], BOUNDS[1])]


@pytest.fixture(scope="module")
def cloud():
    rng = np.random.default_rng(33)
    n = 300
    pos = rng.uniform(0.0, 120.0, (n, 3)).astype(np.float32)
    return {
        "positions": pos,
        "kwargs": dict(
            chunk_shape=(30.0, 30.0, 30.0), bin_shape=(15.0, 15.0, 15.0), bounds=BOUNDS,
            compression="zstd", shard_shape=2,
            attributes={"label": rng.integers(0, 1000, n).astype(np.int32),
                        "rgb": rng.random((n, 3), dtype=np.float32)},
            object_ids=rng.integers(0, 12, n), object_attributes={"size": rng.random(12, dtype=np.float32)},
            groups={0: [0, 1, 2], 1: [5, 7]},
        ),
    }


@pytest.fixture(scope="module")
def local_store(cloud, tmp_path_factory):
    path = tmp_path_factory.mktemp("s3local") / "data"
    zvf.write_points(path, cloud["positions"], **cloud["kwargs"])
    return path


def _bucket_objects(s3_endpoint, url: str) -> dict[str, bytes]:
    import boto3

    bucket, prefix = url[len("s3://"):].split("/", 1)
    client = boto3.client("s3", endpoint_url=s3_endpoint.endpoint, aws_access_key_id=s3_endpoint.access_key,
                          aws_secret_access_key=s3_endpoint.secret_key, region_name=s3_endpoint.region)
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            out[obj["Key"][len(prefix) + 1:]] = body
    return out


def _upload_dir(s3_endpoint, url: str, directory) -> None:
    import boto3

    bucket, prefix = url[len("s3://"):].split("/", 1)
    client = boto3.client("s3", endpoint_url=s3_endpoint.endpoint, aws_access_key_id=s3_endpoint.access_key,
                          aws_secret_access_key=s3_endpoint.secret_key, region_name=s3_endpoint.region)
    for key, data in store_files(directory).items():
        client.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=data)


def _same_selection(a, b, what: str) -> None:
    assert_rows_equal(rows(a.positions), rows(b.positions), f"{what} positions")
    assert sorted(a.attributes) == sorted(b.attributes)
    for n in a.attributes:
        assert_rows_equal(rows(a.positions, a.attributes[n]), rows(b.positions, b.attributes[n]), f"{what} {n}")
    if b.object_ids is None:
        assert a.object_ids is None
    else:
        assert_rows_equal(rows(a.positions, a.object_ids), rows(b.positions, b.object_ids), f"{what} object ids")


def test_sharded_zstd_round_trip_equals_local(s3_target, s3_endpoint, cloud, local_store):
    url, opts = s3_target
    summary = zvf.write_points(url, cloud["positions"], storage_options=opts, **cloud["kwargs"])
    assert summary.vertex_count == len(cloud["positions"])
    assert summary.requests["puts"] > 0

    # the bytes on S3 are the bytes of the same store written locally
    remote = _bucket_objects(s3_endpoint, url)
    local = store_files(local_store)
    assert sorted(remote) == sorted(local)
    assert [k for k in local if remote[k] != local[k]] == []

    with zvf.open(url, storage_options=opts) as ds, zvf.open(local_store) as loc:
        opened = ds.stats.snapshot()
        assert opened["requests"] > 0 and opened["bytes"] > 0
        _same_selection(ds.read_all(), loc.read_all(), "read_all")
        for lo, hi in BOXES:
            before = ds.stats.requests
            _same_selection(ds.query((lo, hi)), loc.query((lo, hi)), f"bbox {lo}..{hi}")
            assert ds.stats.requests >= before
        np.testing.assert_array_equal(ds.object_ids(), loc.object_ids())
        np.testing.assert_array_equal(ds.object_attribute("size"), loc.object_attribute("size"))
        assert [g.tolist() for g in ds.groups()] == [g.tolist() for g in loc.groups()]
        stats = ds.stats.snapshot()
        assert stats["requests"] > opened["requests"]
        assert stats["bytes"] > opened["bytes"]
        assert stats["failures"] == 0


def test_query_matches_numpy_on_s3(s3_target, cloud):
    url, opts = s3_target
    kw = dict(cloud["kwargs"], object_ids=None, object_attributes=None, groups=None)
    zvf.write_points(url, cloud["positions"], storage_options=opts, **kw)
    pos = cloud["positions"].astype(np.float64)
    with zvf.open(url, storage_options=opts) as ds:
        fresh = ds.stats.requests
        for lo, hi in BOXES:
            m = np.all((pos >= lo) & (pos <= hi), axis=1)
            sel = ds.query((lo, hi))
            assert_rows_equal(rows(sel.positions), rows(pos[m]), f"bbox {lo}..{hi}")
            assert_rows_equal(rows(sel.positions, sel.attributes["label"]),
                              rows(pos[m], kw["attributes"]["label"][m]), "label")
        assert ds.stats.requests > fresh


def test_reference_fixture_served_from_s3(s3_target, s3_endpoint, ref_dir):
    """A store written by zarr-vectors 0.9.2 (sharded + zstd), uploaded as is, reads to its ground truth."""
    from tests.refstores import load_expected

    url, opts = s3_target
    name = "points3d_sharded_zstd"
    _upload_dir(s3_endpoint, url, ref_dir / f"{name}.zarrvectors")
    exp = load_expected(ref_dir, name)
    pts = np.asarray(exp["points"])
    with zvf.open(url, storage_options=opts) as ds:
        sel = ds.read_all()
        assert_rows_equal(rows(sel.positions, sel.attributes["label"]), rows(pts, exp["attributes"]["label"]),
                          "(point, label)")
        for q in exp["bbox_queries"]:
            got = ds.query((q["lo"], q["hi"]))
            assert len(got) == q["count"]
            assert_rows_equal(rows(got.positions), rows(pts[q["vertex_indices"]]), "bbox")
        assert ds.stats.requests > 0


async def test_async_api_on_s3(s3_target, cloud):
    url, opts = s3_target
    kw = dict(cloud["kwargs"], shard_shape=(2, 1, 2))
    await zvf.aio.write_points(url, cloud["positions"], storage_options=opts, **kw)
    ds = await zvf.aio.open(url, storage_options=opts)
    try:
        sel = await ds.query(BOXES[0])
        pos = cloud["positions"].astype(np.float64)
        m = np.all((pos >= BOXES[0][0]) & (pos <= BOXES[0][1]), axis=1)
        assert_rows_equal(rows(sel.positions, sel.object_ids), rows(pos[m], kw["object_ids"][m]), "(point, id)")
        assert ds.stats.requests > 0
    finally:
        await ds.close()


def test_existing_s3_store_needs_overwrite(s3_target, cloud):
    url, opts = s3_target
    assert_overwrite_needed(url, opts, cloud["positions"][:50], BOUNDS)


def test_missing_s3_store(s3_target):
    url, opts = s3_target
    with pytest.raises(StoreNotFoundError, match=r"zarr\.json"):
        zvf.open(url + "/nothing", storage_options=opts)
