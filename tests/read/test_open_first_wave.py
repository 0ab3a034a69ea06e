"""A remote store's open sends its first wave (root, level 0, its fixed-name array documents) before the
dataset's executor is set up (issue 26: in a fresh process that set-up imports anyio's asyncio backend,
~25 ms, and the first request used to leave only after it); the wave counts in the executor's stats as the
round trip it is, a request of it that failed is made again through the executor, and a store limited to
fewer requests than the wave keeps its limit."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

import zvf
import zvf.aio as za
import zvf.read.dataset as reader
from zvf.io.store import StoreHandle
from zvf.read import load
from zvf.testing import MemoryTransport

BOX = ([100.0, 100.0, 0.0], [300.0, 250.0, 1000.0])
WAVE = ["zarr.json", "0/zarr.json", *(f"0/{p}/zarr.json" for fam in load.OPEN_FIXED for p in load.FIXED_DOCS[fam])]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A sharded point store's objects (what zvf writes by default) and its points."""
    pos = np.random.default_rng(26).uniform(0, 1000, (20_000, 3)).astype(np.float32)
    path = tmp_path_factory.mktemp("wave") / "pts.zarrvectors"
    zvf.write_points(str(path), pos, attributes={"intensity": pos[:, 0].copy()}, chunk_shape=(250.0,) * 3,
                     bin_shape=(62.5,) * 3, shard_shape="auto", compression="zstd")
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}, pos


def _remote(monkeypatch, transport: MemoryTransport, concurrency: int = 32) -> list[tuple[int, int]]:
    """Open ``s3://bucket/pts`` on ``transport``; returns where the executor's set-up found the transport:
    (requests finished, requests in flight)."""
    handle = StoreHandle(transport=transport, url="s3://bucket/pts", read_only=True, scheme="s3",
                         concurrency=concurrency)
    monkeypatch.setattr(reader, "open_store", lambda *a, **k: handle)
    seen: list[tuple[int, int]] = []

    class Watched(reader.Executor):
        def __init__(self, *a, **k):
            seen.append((len(transport.log), transport.inflight))
            super().__init__(*a, **k)

    monkeypatch.setattr(reader, "Executor", Watched)
    return seen


def _inside(pos) -> int:
    return int(np.all((pos >= BOX[0]) & (pos <= BOX[1]), axis=1).sum())


async def test_the_first_wave_is_on_the_wire_while_the_executor_is_set_up(store, monkeypatch, caplog):
    data, pos = store
    t = MemoryTransport(data, latency=0.01)
    seen = _remote(monkeypatch, t)
    with caplog.at_level(logging.DEBUG, logger="zvf"):
        ds = await za.open("s3://bucket/pts")
    async with ds:
        opened = ds.stats.snapshot()
        assert opened["round_trips"] == t.round_trips() == 2  # the wave, then level 0's shard indexes
        assert opened["requests"] == len(t.log)
        traces = [r.getMessage() for r in caplog.records if re.search(r" status=\w+ bytes=\d+ ms=[\d.]+$",
                                                                      r.getMessage())]
        assert len(traces) == len(t.log)  # one DEBUG line per request, as the executor logs its own
        assert len(await ds.query(BOX)) == _inside(pos)
    assert seen == [(0, len(WAVE))]
    assert sorted(e.key for e in t.log[:len(WAVE)]) == sorted(WAVE)


async def test_a_request_of_the_wave_that_failed_is_made_again_by_the_executor(store, monkeypatch):
    data, pos = store
    t = MemoryTransport(data)
    t.faults.nth(1, op="get", key="[z]arr.json")  # the root's first GET: a 503
    _remote(monkeypatch, t)
    async with await za.open("s3://bucket/pts") as ds:
        assert len(await ds.query(BOX)) == _inside(pos)
        assert [e.outcome for e in t.log if e.key == "zarr.json"] == ["transient", "ok"]
        assert ds.stats.retries == 0  # the executor's own request came at once


async def test_a_store_limited_below_the_wave_keeps_its_limit(store, monkeypatch):
    data, pos = store
    t = MemoryTransport(data, latency=0.005)
    seen = _remote(monkeypatch, t, concurrency=4)
    async with await za.open("s3://bucket/pts") as ds:
        assert len(await ds.query(BOX)) == _inside(pos)
    assert seen == [(0, 0)]  # nothing sent before the executor (and its limiter) existed
    assert t.max_inflight <= 4
