"""``zvf.timeout(seconds)``: blocking calls past their deadline are cancelled and raise CallTimeoutError.

The S3 server sits behind the test proxy, whose ``latency`` slows every request down at will.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import zvf
from zvf.errors import CallTimeoutError, InvalidArgumentError, StoreNotFoundError

BOX = ([0.0, 0.0, 0.0], [60.0, 60.0, 60.0])


@pytest.fixture
def slow_store(s3_proxied):
    url, opts, proxy = s3_proxied
    pos = np.random.default_rng(0).uniform(0, 100, (4000, 3))
    zvf.write_points(url, pos, chunk_shape=(25, 25, 25), storage_options=opts)
    return url, opts, proxy


def test_a_read_past_its_deadline_is_cancelled_and_the_dataset_reads_on(slow_store):
    url, opts, proxy = slow_store
    with zvf.open(url, storage_options=opts) as ds:
        want = len(ds.query(BOX).positions)
        ds.aio.context.executor.clear_caches()
        proxy.latency = 1.0
        t0 = time.monotonic()
        with pytest.raises(CallTimeoutError, match=r"query did not finish within its zvf\.timeout") as caught, \
                zvf.timeout(0.3):
            ds.query(BOX)
        assert isinstance(caught.value, TimeoutError)
        assert time.monotonic() - t0 < 3.0  # the deadline, then the requests already sent (1 s each) settle
        proxy.latency = 0.0
        with zvf.timeout(30):
            assert len(ds.query(BOX).positions) == want  # nothing left half-done on the dataset


def test_a_write_past_its_deadline_publishes_nothing(slow_store, s3_endpoint):
    url, opts, proxy = slow_store
    target = url.rsplit("/", 1)[0] + "/late"
    proxy.latency = 0.2
    with pytest.raises(CallTimeoutError), zvf.timeout(0.5):
        zvf.write_points(target, np.random.default_rng(1).uniform(0, 100, (4000, 3)), chunk_shape=(10, 10, 10),
                         storage_options=opts)
    proxy.latency = 0.0
    with pytest.raises(StoreNotFoundError):  # no root was published
        zvf.open(target, storage_options=opts)


def test_an_iteration_is_bounded_as_a_whole(slow_store):
    url, opts, proxy = slow_store
    with zvf.open(url, storage_options=opts) as ds:
        proxy.latency = 0.3
        seen = 0
        with pytest.raises(CallTimeoutError), zvf.timeout(0.5):
            for _ in ds.iter_chunks(batch_chunks=1, prefetch=1):
                seen += 1
        proxy.latency = 0.0
        assert sum(len(s.positions) for s in ds.iter_chunks()) == 4000  # the stream was closed, not left running


def test_deadlines_nest_and_check_their_argument(tmp_path):
    path = str(tmp_path / "p.zarrvectors")
    zvf.write_points(path, np.random.default_rng(2).uniform(0, 100, (100, 3)), chunk_shape=(50, 50, 50))
    with zvf.open(path) as ds:
        # the nearer deadline wins (here: it has passed), whichever block is inside
        with zvf.timeout(30), zvf.timeout(0), pytest.raises(CallTimeoutError, match="read_all was not started"):
            ds.read_all()
        with zvf.timeout(0), zvf.timeout(30), pytest.raises(CallTimeoutError):
            ds.read_all()
        with zvf.timeout(60):
            assert len(ds.read_all().positions) == 100
        assert len(ds.read_all().positions) == 100  # no deadline outside a block
    for bad in (-1, float("nan"), "5", True):
        with pytest.raises(InvalidArgumentError, match="timeout"), zvf.timeout(bad):  # type: ignore[arg-type]
            pass
