"""Connections of datasets nobody closes: bounded, released when the dataset is collected, and warned about.

Seen before: 300 opens without ``close()`` held 3,579 sockets (about 85 such datasets exhaust a
1,024-descriptor limit).  Each open made its own obstore store (its own connection pool), and a
reference cycle inside the dataset kept that store alive until the cyclic garbage collector ran.
The S3 server here sits behind the test proxy, which keeps connections alive as S3 does (moto alone
closes each connection after its response, which would hide the problem).
"""

from __future__ import annotations

import gc
import os
import warnings

import numpy as np
import pytest

import zvf
from zvf.errors import DatasetClosedError

pytestmark = pytest.mark.s3

OPENS = 300
BOX = ([0.0, 0.0, 0.0], [30.0, 30.0, 30.0])


def _sockets() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return n


@pytest.fixture
def store(s3_proxied):
    url, opts, _ = s3_proxied
    rng = np.random.default_rng(0)
    zvf.write_points(url, rng.uniform(0, 100, (2000, 3)), chunk_shape=(50, 50, 50),
                     object_ids=rng.integers(0, 50, 2000), storage_options=opts)
    return url, opts


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts sockets in /proc/self/fd")
def test_unclosed_datasets_release_their_connections_and_warn(store):
    url, opts = store
    before = _sockets()
    gc.disable()  # what the cyclic collector would eventually free does not count
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in range(OPENS):
                ds = zvf.open(url, storage_options=opts)  # two round trips: connections made
                if i % 30 == 0:
                    assert len(ds.query(BOX).positions)
            del ds
        held = _sockets() - before
    finally:
        gc.enable()
    unclosed = [w for w in caught if issubclass(w.category, ResourceWarning) and "unclosed dataset" in str(w.message)]
    assert len(unclosed) == OPENS and url in str(unclosed[0].message)
    assert held <= 64, held  # client and proxy sides of one pool's connections; 5,000+ before


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts sockets in /proc/self/fd")
def test_open_datasets_on_one_target_share_one_connection_pool(store):
    url, opts = store
    before = _sockets()
    datasets = [zvf.open(url, storage_options=opts) for _ in range(OPENS)]
    for ds in datasets[::30]:
        assert len(ds.query(BOX).positions)
    assert _sockets() - before <= 64
    stores = {id(ds.aio.context.executor.transport.store) for ds in datasets}
    assert len(stores) == 1
    other = zvf.open(url, storage_options={**opts, "timeout": "19s"})  # other options: a store of its own
    assert id(other.aio.context.executor.transport.store) not in stores
    for ds in [*datasets, other]:
        ds.close()


def test_a_closed_dataset_lets_go_of_its_store(store):
    url, opts = store
    ds = zvf.open(url, storage_options=opts)
    ds.query(BOX)
    ex = ds.aio.context.executor
    ds.close()
    ds.close()  # twice is harmless
    with pytest.raises(DatasetClosedError):
        ds.query(BOX)
    with pytest.raises(DatasetClosedError):
        ex.transport.store  # noqa: B018 (the store is let go)
    with zvf.open(url, storage_options=opts) as again:  # the target itself is untouched
        assert len(again.query(BOX).positions)


def test_a_query_keeps_its_dataset_open(tmp_path):
    path = tmp_path / "p.zarrvectors"
    zvf.write_points(str(path), np.random.default_rng(1).uniform(0, 100, (500, 3)), chunk_shape=(50, 50, 50))
    query = zvf.open(str(path)).select(bbox=BOX)  # the dataset shell is gone at once; the query still reads
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        got = query.read()
    with zvf.open(str(path)) as ds:
        assert len(got.positions) == len(ds.query(BOX).positions)
