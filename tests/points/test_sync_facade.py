"""The blocking facade (``zvf.open``, ``zvf.write_points``, ``Dataset.query``) works from
plain code, from inside a running event loop and from threads with their own
loops, and mirrors the async API's signatures."""

from __future__ import annotations

import asyncio
import inspect
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import zvf
from tests.support.rows import assert_rows_equal, rows

BOUNDS = ([0.0, 0.0, 0.0], [50.0, 50.0, 50.0])
BOX = ([5.0, 5.0, 5.0], [30.0, 40.0, 25.0])


@pytest.fixture(scope="module")
def cloud():
    rng = np.random.default_rng(9)
    pos = rng.uniform(0.0, 50.0, (120, 3)).astype(np.float32)
    return pos, {"v": rng.random(120, dtype=np.float32)}


def _expected(pos):
    p = pos.astype(np.float64)
    return pos[np.all((p >= BOX[0]) & (p <= BOX[1]), axis=1)]


def _round_trip(target, pos, attrs) -> None:
    """Write, open, query and read through the sync facade only."""
    summary = zvf.write_points(target, pos, chunk_shape=(20.0, 20.0, 20.0), bin_shape=(10.0, 10.0, 10.0),
                               bounds=BOUNDS, attributes=attrs, compression="zstd")
    assert summary.vertex_count == len(pos)
    with zvf.open(target) as ds:
        assert isinstance(ds, zvf.Dataset)
        assert ds.ndim == 3 and ds.geometry_type == "point_cloud" and ds.levels == [0]
        sel = ds.query(BOX)
        assert_rows_equal(rows(sel.positions), rows(_expected(pos)), "query")
        full = ds.read_all()
        assert_rows_equal(rows(full.positions, full.attributes["v"]), rows(pos, attrs["v"]), "read_all (point, v)")
        assert ds.info()["vertex_count"] == len(pos)
        assert ds.stats.requests > 0


# ---------------------------------------------------------------- (a) plain sync code


def test_plain_sync_local(tmp_path, cloud):
    _round_trip(tmp_path / "s.zarrvectors", *cloud)


def test_plain_sync_memory(memory_url, cloud):
    _round_trip(memory_url, *cloud)


def test_sync_errors_are_the_zvf_types(tmp_path):
    from zvf.errors import InvalidArgumentError, StoreNotFoundError

    with pytest.raises(StoreNotFoundError):
        zvf.open(tmp_path / "none")
    with pytest.raises(InvalidArgumentError, match="chunk_shape"):
        zvf.write_points(tmp_path / "x", np.zeros((2, 3)), chunk_shape=(0, 1, 1), bounds=BOUNDS)


# ---------------------------------------------------------------- (b) inside running loops


async def test_sync_api_inside_running_event_loop(tmp_path, cloud):
    asyncio.get_running_loop()  # really inside a loop: asyncio.run() would refuse here
    _round_trip(tmp_path / "s.zarrvectors", *cloud)


async def test_sync_and_async_api_side_by_side(tmp_path, cloud):
    pos, attrs = cloud
    target = tmp_path / "s.zarrvectors"
    await zvf.aio.write_points(target, pos, chunk_shape=(20.0, 20.0, 20.0), bounds=BOUNDS, attributes=attrs)
    ads = await zvf.aio.open(target)
    with zvf.open(target) as ds:
        a = await ads.query(BOX)
        b = ds.query(BOX)
        assert_rows_equal(rows(a.positions), rows(b.positions), "async vs sync query")
    await ads.close()


def test_thread_running_asyncio_run_calls_the_facade(tmp_path, cloud):
    pos, attrs = cloud
    results: dict = {}

    async def main(target):
        await asyncio.sleep(0)
        _round_trip(target, pos, attrs)
        return "ok"

    def worker(i: int) -> None:
        try:
            results[i] = asyncio.run(main(tmp_path / f"s{i}.zarrvectors"))
        except BaseException as exc:  # reported below with its thread
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {0: "ok", 1: "ok", 2: "ok"}, results


def test_one_dataset_shared_by_threads(tmp_path, cloud):
    pos, attrs = cloud
    target = tmp_path / "s.zarrvectors"
    zvf.write_points(target, pos, chunk_shape=(20.0, 20.0, 20.0), bounds=BOUNDS, attributes=attrs)
    want = rows(_expected(pos))
    with zvf.open(target) as ds, ThreadPoolExecutor(6) as pool:
        for sel in pool.map(lambda _: ds.query(BOX), range(12)):
            assert_rows_equal(rows(sel.positions), want, "threaded query")


# ---------------------------------------------------------------- (c) signatures


def test_write_points_signature_matches_async():
    assert inspect.signature(zvf.write_points) == inspect.signature(zvf.aio.write_points)
    assert not inspect.iscoroutinefunction(zvf.write_points)
    assert zvf.write_points.__doc__ == zvf.aio.write_points.__doc__


def test_open_signature_matches_async():
    sync_sig, async_sig = inspect.signature(zvf.open), inspect.signature(zvf.aio.open)
    assert list(sync_sig.parameters.values()) == list(async_sig.parameters.values())


@pytest.mark.parametrize("name", ["query", "read_all", "object_ids", "object_attribute", "groups", "group",
                                  "group_attribute", "info", "close"])
def test_dataset_method_signatures_match_async(name):
    sync_m, async_m = getattr(zvf.Dataset, name), getattr(zvf.aio.AsyncDataset, name)
    assert inspect.signature(sync_m) == inspect.signature(async_m)
    assert not inspect.iscoroutinefunction(sync_m) and inspect.iscoroutinefunction(async_m)


def test_query_signature_is_explicit():
    params = inspect.signature(zvf.Dataset.query).parameters
    assert list(params)[:2] == ["self", "bbox"]
    assert params["level"].kind is inspect.Parameter.KEYWORD_ONLY and params["level"].default == 0
    assert params["attributes"].default is None


def test_write_points_signature_names_its_keywords():
    from zvf.write.points.memory import write_points as impl

    assert inspect.signature(zvf.aio.write_points) == inspect.signature(impl)


# ---------------------------------------------------------------- (d) lifecycle, typed results, prebuilt stores


async def test_async_dataset_context_and_closed_state(tmp_path, cloud):
    from zvf.errors import DatasetClosedError

    pos, attrs = cloud
    target = tmp_path / "s.zarrvectors"
    await zvf.aio.write_points(target, pos, chunk_shape=(20.0, 20.0, 20.0), bounds=BOUNDS, attributes=attrs)
    async with await zvf.aio.open(target) as ads:
        assert len(await ads.query(BOX)) == len(_expected(pos))
    for call in (lambda: ads.query(BOX), ads.read_all, ads.info, ads.object_ids, lambda: ads.level(0)):
        with pytest.raises(DatasetClosedError, match="closed"):
            await call()
    with pytest.raises(DatasetClosedError):
        ads.iter_chunks()
    await ads.close()  # twice is fine
    assert ads.ndim == 3  # what was read at open stays readable


def test_dataset_refuses_calls_after_close(tmp_path, cloud):
    from zvf.errors import DatasetClosedError, ZvfError

    pos, attrs = cloud
    target = tmp_path / "s.zarrvectors"
    zvf.write_points(target, pos, chunk_shape=(20.0, 20.0, 20.0), bounds=BOUNDS, attributes=attrs)
    with zvf.open(target) as ds:
        ds.query(BOX)
    with pytest.raises(DatasetClosedError, match="closed") as err:
        ds.query(BOX)
    assert isinstance(err.value, (ZvfError, ValueError))
    with pytest.raises(DatasetClosedError):
        list(ds.iter_chunks())
    ds.close()


def test_writers_return_a_typed_frozen_summary(tmp_path, cloud):
    import dataclasses

    pos, attrs = cloud
    target = tmp_path / "s.zarrvectors"
    s = zvf.write_points(target, pos, chunk_shape=(20.0, 20.0, 20.0), bounds=BOUNDS, attributes=attrs)
    assert isinstance(s, zvf.WriteSummary)
    assert (s.geometry, s.vertex_count, s.object_count, s.link_count) == ("point_cloud", len(pos), 0, None)
    assert s.url == (tmp_path / "s.zarrvectors").resolve().as_uri()
    assert s.cells_written >= 3 * s.chunk_count and s.bytes_written > pos.nbytes  # vertices, fragments, "v"
    assert s.requests["puts"] > s.cells_written  # documents and the claim too
    with pytest.raises(TypeError):
        s["vertex_count"]  # a summary, not a dict: its fields are attributes
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.vertex_count = 0  # type: ignore[misc]
    g = zvf.write_graph(tmp_path / "g.zarrvectors", pos[:4], [[0, 1], [1, 2]], chunk_shape=(20.0, 20.0, 20.0),
                        bounds=BOUNDS)
    assert (g.geometry, g.vertex_count, g.link_count, g.object_count) == ("graph", 4, 2, 1)


def test_obstore_store_built_by_the_caller(cloud):
    from obstore.store import MemoryStore

    from zvf.errors import InvalidArgumentError

    pos, attrs = cloud
    store = MemoryStore()
    s = zvf.write_points(store, pos, chunk_shape=(20.0, 20.0, 20.0), bounds=BOUNDS, attributes=attrs,
                         storage_options={"concurrency": 2})
    assert s.url == "memory://"
    with zvf.open(store) as ds:
        assert_rows_equal(rows(ds.query(BOX).positions), rows(_expected(pos)), "prebuilt store")
    with pytest.raises(InvalidArgumentError, match=r"'endpoint'.*store you built"):
        zvf.open(store, storage_options={"endpoint": "http://127.0.0.1:1"})
    with pytest.raises(InvalidArgumentError, match="obstore store"):
        zvf.open(object())  # type: ignore[arg-type]


def test_storage_options_typeddict_names_every_accepted_key():
    from zvf.io import options

    assert set(zvf.StorageOptions.__annotations__) == options.ALL_KEYS | set(options.ALIASES)
    assert set(options.ALIASES.values()) <= options.ALL_KEYS


def test_interrupt_cancels_the_coroutine_and_waits_for_it():
    """KeyboardInterrupt while blocked: the coroutine is cancelled and has unwound before the call raises."""
    import signal
    import time

    import anyio

    from zvf.api.sync import _call

    unwound: list[float] = []

    async def slow() -> None:
        try:
            await anyio.sleep(30)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.2)  # cleanup that itself awaits
            unwound.append(time.monotonic())

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            _call(slow)
        returned = time.monotonic()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert unwound and unwound[0] <= returned < start + 5


def test_coroutine_errors_propagate_unchanged():
    from zvf.api.sync import _call

    async def fails() -> None:
        raise TimeoutError("from the coroutine")

    with pytest.raises(TimeoutError, match="from the coroutine"):
        _call(fails)


def test_every_public_name_resolves_and_is_declared_for_type_checkers():
    import ast

    for name in zvf.__all__:
        assert getattr(zvf, name) is not None
    tree = ast.parse(Path(zvf.__file__).read_text())
    declared = {alias.asname for node in ast.walk(tree) if isinstance(node, ast.If)
                for imp in node.body if isinstance(imp, ast.ImportFrom) for alias in imp.names}
    assert set(zvf._LAZY) <= declared, set(zvf._LAZY) - declared  # else mypy sees zvf.<name> as missing
