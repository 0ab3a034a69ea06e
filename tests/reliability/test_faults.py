"""Faults between zvf and S3: FaultProxy (aiohttp) in front of in-process moto.

The matrix runs every operation under every fault and asks for the same
answer as without faults, within the retry limits.  Faults on writes hit
the data uploads (whole-object overwrites, which are idempotent); the
conditional creates (the claim object and the root document) get their own
row because a create is retried only when the failure proves it was not
applied (429/503), never after an ambiguous one (500, dropped connection).
"""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest

import zvf
from tests.support.results import record_table
from zvf.errors import IncompleteStoreError, RemoteError, StoreNotFoundError

pytestmark = pytest.mark.s3

FAST_RETRY = {"max_retries": 8, "init_backoff": 0.01, "max_backoff": 0.2, "retry_timeout": 15.0,
              "timeout": "10s", "connect_timeout": "2s"}

RNG = np.random.default_rng(11)
POINTS = RNG.uniform(0, 100, (1500, 3)).astype(np.float32)
INTENSITY = RNG.random(1500).astype(np.float32)
BOX = ([10.0, 20.0, 5.0], [60.0, 70.0, 55.0])
GRAPH_POS = RNG.uniform(0, 100, (60, 3)).astype(np.float32)
GRAPH_OIDS = np.repeat([1, 5, 9], 20)
GRAPH_EDGES = np.array([[i, i + 1] for i in range(59) if GRAPH_OIDS[i] == GRAPH_OIDS[i + 1]])

FAULTS = {
    "500 burst": lambda p, m, k: p.fail(500, times=3, method=m, key=k),
    "503 burst": lambda p, m, k: p.fail(503, times=3, method=m, key=k),
    "429 SlowDown": lambda p, m, k: p.slowdown(times=3, method=m, key=k),
    "dropped connection": lambda p, m, k: p.drop(times=2, method=m, key=k),
    "latency spike 0.3 s": lambda p, m, k: p.spike(0.3, times=3, method=m, key=k),
}


def _sorted(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a[np.lexsort(a.T[::-1])] if len(a) else a


@pytest.fixture(scope="module")
def stores(s3_endpoint):
    """A bucket with a point cloud and a graph, written straight to moto (no proxy)."""
    from tests.servers import create_bucket

    bucket = create_bucket(s3_endpoint)
    direct = s3_endpoint.storage_options()
    zvf.write_points(f"s3://{bucket}/points", POINTS, chunk_shape=(50,) * 3, bin_shape=(25,) * 3,
                     attributes={"intensity": INTENSITY}, storage_options=direct)
    zvf.write_graph(f"s3://{bucket}/graph", GRAPH_POS, GRAPH_EDGES, object_ids=GRAPH_OIDS, chunk_shape=(50,) * 3,
                    bounds=([0] * 3, [100] * 3), storage_options=direct)
    return bucket, direct


# operations: (name, method the fault hits, key filter, fn(bucket, opts, direct) -> comparable result)


def op_open(bucket, opts, direct):
    with zvf.open(f"s3://{bucket}/points", storage_options=opts) as ds:
        return (ds.geometry_type, ds.ndim, tuple(ds.levels)), ds.stats.retries


def op_bbox(bucket, opts, direct):
    with zvf.open(f"s3://{bucket}/points", storage_options=opts) as ds:
        sel = ds.query(BOX)
        return _sorted(np.c_[sel.positions, sel.attributes["intensity"]]), ds.stats.retries


def op_full(bucket, opts, direct):
    with zvf.open(f"s3://{bucket}/points", storage_options=opts) as ds:
        sel = ds.read_all()
        return _sorted(np.c_[sel.positions, sel.attributes["intensity"]]), ds.stats.retries


def op_object(bucket, opts, direct):
    with zvf.open(f"s3://{bucket}/graph", storage_options=opts) as ds:
        sel = ds.read_object(5)
        return (_sorted(sel.positions), len(sel.edges)), ds.stats.retries


def _readback(url, direct):
    with zvf.open(url, storage_options=direct) as ds:
        sel = ds.read_all()
        return _sorted(np.c_[sel.positions, sel.attributes["intensity"]])


def op_write(bucket, opts, direct):
    url = f"s3://{bucket}/w-{uuid.uuid4().hex[:8]}"
    out = zvf.write_points(url, POINTS[:300], chunk_shape=(50,) * 3, attributes={"intensity": INTENSITY[:300]},
                           storage_options=opts)
    return _readback(url, direct), out.requests["retries"]


def op_write_sharded(bucket, opts, direct):
    url = f"s3://{bucket}/s-{uuid.uuid4().hex[:8]}"
    out = zvf.write_points(url, POINTS[:600], chunk_shape=(25,) * 3, bin_shape=(12.5,) * 3, compression="zstd",
                           shard_shape=2, attributes={"intensity": INTENSITY[:600]}, storage_options=opts)
    return _readback(url, direct), out.requests["retries"]


def op_create(bucket, opts, direct):
    url = f"s3://{bucket}/c-{uuid.uuid4().hex[:8]}"
    out = zvf.write_points(url, POINTS[:100], chunk_shape=(50,) * 3, attributes={"intensity": INTENSITY[:100]},
                           storage_options=opts)
    return _readback(url, direct), out.requests["retries"]


OPERATIONS = [
    ("open", "GET", None, op_open),
    ("bbox query", "GET", "/c/", op_bbox),
    ("full read", "GET", "/c/", op_full),
    ("object read", "GET", None, op_object),
    ("write_points (small)", "PUT", "/c/", op_write),
    ("write sharded + zstd", "PUT", "/c/", op_write_sharded),
    ("conditional creates (claim, root)", "PUT", None, op_create),
]


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and np.array_equal(a, b)
    return a == b


def test_fault_matrix(stores, fault_proxy, s3_endpoint):
    bucket, direct = stores
    opts = s3_endpoint.storage_options(endpoint=fault_proxy.url, **FAST_RETRY)
    baseline = {name: fn(bucket, direct, direct)[0] for name, _, _, fn in OPERATIONS}
    rows = {}
    failures = []
    for name, method, key, fn in OPERATIONS:
        row = {}
        for fault, add in FAULTS.items():
            fault_proxy.clear_rules()
            fault_proxy.reset_counters()
            add(fault_proxy, method, key)
            t0 = time.perf_counter()
            try:
                got, retries = fn(bucket, opts, direct)
            except RemoteError as e:
                dt = time.perf_counter() - t0
                ambiguous = fault in ("500 burst", "dropped connection")
                if name.startswith("conditional") and ambiguous:
                    # by design: a create is not replayed after an ambiguous failure
                    row[fault] = f"RemoteError, not retried ({fault_proxy.requests('PUT')} PUT) {dt:.1f}s"
                    assert "not retried" in str(e)
                else:
                    row[fault] = f"FAILED: {e}"[:60]
                    failures.append(f"{name} x {fault}: {e}")
                continue
            dt = time.perf_counter() - t0
            fired = fault_proxy.counts()["faults"]
            spikes = sum(r.fired for r in fault_proxy._rules if r.action == "delay")
            ok = _same(got, baseline[name])
            row[fault] = f"{'ok' if ok else 'WRONG'} ({fired or spikes} hit, {retries} retries, {dt:.1f}s)"
            if not ok:
                failures.append(f"{name} x {fault}: result differs from the fault-free run")
            if fault != "latency spike 0.3 s" and not fired:
                failures.append(f"{name} x {fault}: the fault never fired")
        rows[name] = row
    fault_proxy.clear_rules()
    header = "| operation | " + " | ".join(FAULTS) + " |"
    lines = [header, "|---" * (len(FAULTS) + 1) + "|"]
    for name, row in rows.items():
        lines.append(f"| {name} | " + " | ".join(row[f] for f in FAULTS) + " |")
    lines.append("")
    lines.append("Faults hit GETs (reads) or data-cell PUTs (writes); 'conditional creates' hits every PUT, "
                 "starting with the claim object.")
    record_table("faults", "\n".join(lines))
    assert not failures, "\n".join(failures)


def test_persistent_fault_is_a_clear_error_in_bounded_time(stores, fault_proxy, s3_endpoint):
    bucket, _ = stores
    opts = s3_endpoint.storage_options(endpoint=fault_proxy.url, max_retries=50, init_backoff=0.05,
                                       max_backoff=0.3, retry_timeout=1.5, timeout="5s")
    fault_proxy.fail(503, times=None, method="GET")
    t0 = time.perf_counter()
    with pytest.raises(RemoteError) as ei:
        zvf.open(f"s3://{bucket}/points", storage_options=opts)
    dt = time.perf_counter() - t0
    assert dt < 4.0, dt
    msg = str(ei.value)
    import re

    named = re.search(r"of '([^']*)' on s3://", msg)  # open fetches several keys at once: any may fail first
    assert named and (named.group(1).endswith("zarr.json") or named.group(1).startswith("0/")), msg
    assert "503" in msg and "attempts" in msg
    # the same on one cell of a query: the error names that cell
    fault_proxy.clear_rules()
    ds = zvf.open(f"s3://{bucket}/points", storage_options=opts)
    fault_proxy.fail(500, times=None, method="GET", key="0/vertices/c/0/0/0")
    t0 = time.perf_counter()
    with pytest.raises(RemoteError) as ei:
        ds.query(([0, 0, 0], [10, 10, 10]))
    assert time.perf_counter() - t0 < 4.0
    assert "0/vertices/c/0/0/0" in str(ei.value)
    ds.close()


def test_failed_write_leaves_no_visible_store(stores, fault_proxy, s3_endpoint):
    bucket, direct = stores
    opts = s3_endpoint.storage_options(endpoint=fault_proxy.url, max_retries=3, init_backoff=0.01,
                                       retry_timeout=1.0)
    url = f"s3://{bucket}/failed-{uuid.uuid4().hex[:6]}"
    fault_proxy.fail(503, times=None, method="PUT", key="/c/", skip=3)  # a few cells land, then nothing
    with pytest.raises(RemoteError):
        zvf.write_points(url, POINTS, chunk_shape=(25,) * 3, attributes={"intensity": INTENSITY},
                         storage_options=opts)
    fault_proxy.clear_rules()
    with pytest.raises((IncompleteStoreError, StoreNotFoundError)):
        zvf.open(url, storage_options=direct)
    rep = zvf.validate(url, storage_options=direct)
    assert not rep.ok and ".zvf-writing" in rep.keys("error")
    # the leftovers do not block a rewrite
    zvf.write_points(url, POINTS[:50], chunk_shape=(50,) * 3, attributes={"intensity": INTENSITY[:50]},
                     overwrite=True, storage_options=direct)
    assert len(zvf.open(url, storage_options=direct).read_all()) == 50
    assert zvf.validate(url, storage_options=direct).ok


def test_conditional_create_not_blindly_retried(stores, fault_proxy, s3_endpoint):
    """An ambiguous failure of the claim's conditional PUT is not replayed; a 503 is."""
    bucket, direct = stores
    opts = s3_endpoint.storage_options(endpoint=fault_proxy.url, **FAST_RETRY)
    url = f"s3://{bucket}/claim-{uuid.uuid4().hex[:6]}"
    fault_proxy.fail(500, times=1, method="PUT", key=".zvf-writing")
    with pytest.raises(RemoteError) as ei:
        zvf.write_points(url, POINTS[:10], chunk_shape=(50,) * 3, storage_options=opts)
    assert ".zvf-writing" in str(ei.value) and "not retried" in str(ei.value)
    claim_puts = [r for r in fault_proxy.log if r[1] == "PUT" and r[2].endswith(".zvf-writing")]
    assert len(claim_puts) == 1, fault_proxy.log
    assert not [r for r in fault_proxy.log if r[1] == "PUT" and "/c/" in r[2]]  # nothing else was written
    with pytest.raises(StoreNotFoundError):
        zvf.open(url, storage_options=direct)

    fault_proxy.clear_rules()
    fault_proxy.reset_counters()
    fault_proxy.fail(503, times=2, method="PUT", key=".zvf-writing")
    zvf.write_points(url, POINTS[:10], chunk_shape=(50,) * 3, storage_options=opts)
    claim_puts = [r for r in fault_proxy.log if r[1] == "PUT" and r[2].endswith(".zvf-writing")]
    assert len(claim_puts) == 3  # two refusals (surely not applied), then the create
    assert len(zvf.open(url, storage_options=direct).read_all()) == 10
