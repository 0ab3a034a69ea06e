from __future__ import annotations

import anyio
import pytest

from zvf.config import tuned
from zvf.errors import (
    InvalidArgumentError,
    ReadOnlyError,
    RemoteError,
    StoreExistsError,
)
from zvf.io.cache import ByteLRU
from zvf.io.executor import Executor
from zvf.io.plan import ByteRange
from zvf.io.retry import RetryPolicy
from zvf.io.stats import Stats
from zvf.io.store import StoreHandle
from zvf.testing import Fault, FaultPlan, MemoryTransport

FAST_RETRY = RetryPolicy(max_retries=5, retry_timeout=2.0, init_backoff=0.001, max_backoff=0.005)


def make(data=None, *, latency=0.0, faults=None, concurrency=8, retry=FAST_RETRY, read_only=False,
         cache_bytes=None, **settings):
    t = MemoryTransport(data, latency=latency, faults=faults)
    h = StoreHandle.for_transport(t, concurrency=concurrency, read_only=read_only, retry=retry,
                                  **settings)
    return t, Executor(h, seed=1, cache_bytes=cache_bytes)


# ---------------------------------------------------------------------------- basics


async def test_get_put_head_missing():
    t, ex = make({"a": b"hello"})
    assert await ex.get("a") == b"hello"
    assert await ex.get("nope") is None
    assert await ex.head("a") == 5 and await ex.head("nope") is None
    await ex.put("b/c", b"xyz")
    assert t.data["b/c"] == b"xyz"
    assert await ex.get_range("a", 1, 3) == b"el"
    assert await ex.get_range("a", 3, 3) == b""
    assert await ex.get_range("a", 2, None) == b"llo"
    assert await ex.get_suffix("a", 2) == b"lo"
    assert await ex.get_suffix("a", 99) == b"hello"
    assert await ex.get_suffix("nope", 2) is None
    s = ex.stats.snapshot()
    assert s["puts"] == 1 and s["bytes_put"] == 3 and s["requests"] == 10
    with pytest.raises(InvalidArgumentError):
        await ex.get_suffix("a", 0)
    with pytest.raises(InvalidArgumentError, match="'a'"):
        await ex.put("a", b"x", mode="weird")


async def test_list_dirs_delete():
    t, ex = make({"r/a": b"1", "r/b/c": b"22", "r/b/d": b"333", "s": b""})
    assert await ex.list("r") == [("r/a", 1), ("r/b/c", 2), ("r/b/d", 3)]
    assert await ex.list("") == [("r/a", 1), ("r/b/c", 2), ("r/b/d", 3), ("s", 0)]
    assert await ex.list_dirs("r") == (["r/b"], [("r/a", 1)])
    await ex.delete(["r/a", "r/zzz"])
    await ex.delete("s")
    assert sorted(t.data) == ["r/b/c", "r/b/d"]


async def test_read_only_handle_refuses_writes_naming_key():
    t, ex = make({"a": b"1"}, read_only=True)
    with pytest.raises(ReadOnlyError, match="'x/y'"):
        await ex.put("x/y", b"1")
    with pytest.raises(ReadOnlyError, match="'a'"):
        await ex.delete(["a"])
    with pytest.raises(ReadOnlyError, match="'big'"):
        await ex.put_multipart("big", b"123", part_size=1)
    # the transport itself refuses too (for code that bypasses the executor)
    with pytest.raises(ReadOnlyError, match="'q'"):
        await ex.transport.put("q", b"1")
    assert t.requests("put") == 0 and await ex.get("a") == b"1"


# ---------------------------------------------------------------------------- limiter


async def test_limiter_bounds_concurrency():
    data = {f"k{i}": bytes([i]) * 10 for i in range(40)}
    t, ex = make(data, latency=0.01, concurrency=4)
    out = await ex.map(ex.get, list(data))
    assert out == list(data.values())
    assert t.max_inflight == 4 and ex.stats.max_inflight == 4
    assert ex.stats.round_trips == 10 == t.round_trips()


async def test_read_ranges_coalesce_and_run_concurrently():
    blob = bytes(range(256)) * 64
    t, ex = make({"s0": blob, "s1": blob}, latency=0.01)
    ranges = [ByteRange("s0", i * 100, i * 100 + 50) for i in range(20)]  # gaps of 50
    ranges += [ByteRange("s1", 0, 10), ByteRange.suffix_of("s1", 16), ByteRange("missing", 0, 4)]
    out = await ex.read_ranges(ranges, max_gap=64, max_size=1 << 20)
    assert out[:20] == [blob[r.start:r.end] for r in ranges[:20]]
    assert out[20:] == [blob[:10], blob[-16:], None]
    assert t.requests() == 4  # s0 merged into one, s1 range, s1 suffix, missing
    assert ex.stats.round_trips == 1
    t.reset_log()
    ex.stats.reset()
    out2 = await ex.read_ranges(ranges, max_gap=0, max_size=1 << 20)
    assert out2 == out and t.requests() == 23
    assert await ex.read_ranges([]) == []


async def test_handle_coalesce_defaults_used():
    t, ex = make({"a": bytes(1000)}, coalesce_gap=0, coalesce_max=100)
    await ex.read_ranges([ByteRange("a", 0, 10), ByteRange("a", 20, 30), ByteRange("a", 30, 40)])
    assert t.requests() == 2


# ---------------------------------------------------------------------------- sharing


async def test_identical_inflight_reads_are_shared():
    t, ex = make({"a": b"payload"}, latency=0.02)
    outs = await ex.gather([ex.get("a") for _ in range(10)])
    assert outs == [b"payload"] * 10
    assert t.requests("get") == 1 and ex.stats.inflight_shared == 9
    # identical ranges from concurrent read_ranges calls are shared too
    t.reset_log()
    rr = [ByteRange("a", 1, 3)]
    outs = await ex.gather([ex.read_ranges(rr) for _ in range(5)])
    assert outs == [[b"ay"]] * 5 and t.requests() == 1


async def test_shared_read_survives_owner_cancellation():
    # the owner's request hangs until cancelled: the order of events does not depend on timing
    t, ex = make({"a": b"data"}, faults=FaultPlan(Fault("slow", key="a", delay=60, times=1)))
    results = []

    async def waiter():
        results.append(await ex.get("a"))

    owner_scope = anyio.CancelScope()

    async def owner():
        with owner_scope:
            await ex.get("a")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(owner)
            while t.inflight == 0:
                await anyio.sleep(0)
            tg.start_soon(waiter)
            while ex.stats.inflight_shared == 0:  # the waiter joined the owner's request
                await anyio.sleep(0)
            owner_scope.cancel()
    assert results == [b"data"]
    assert t.requests("get") == 2  # the waiter took over after the owner was cancelled
    assert ex.flights.flights == {}


async def test_shared_error_reaches_waiters():
    faults = FaultPlan(Fault("permanent", op="get", key="bad"))
    t, ex = make({"bad": b"x"}, latency=0.02, faults=faults)
    res: list[str] = []

    async def one():
        try:
            await ex.get("bad")
        except RemoteError as e:
            res.append(str(e))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(one)
    assert len(res) == 3 and all("'bad'" in m for m in res)
    assert t.requests("get") == 1


# ---------------------------------------------------------------------------- retries


async def test_transient_faults_are_retried():
    faults = FaultPlan(Fault("transient", op="get", key="a", times=3))
    t, ex = make({"a": b"ok"}, faults=faults)
    assert await ex.get("a") == b"ok"
    assert ex.stats.retries == 3 and ex.stats.requests == 4 and t.requests("get") == 4


async def test_nth_request_fault_and_glob():
    faults = FaultPlan()
    faults.nth(3, "transient", key="c/*")
    t, ex = make({f"c/{i}": b"x" for i in range(5)}, faults=faults)
    for i in range(5):
        assert await ex.get(f"c/{i}") == b"x"
    assert ex.stats.retries == 1
    assert [e.outcome for e in t.log].count("transient") == 1


async def test_persistent_failure_gives_remote_error_naming_key_in_bounded_time():
    faults = FaultPlan(Fault("transient", key="k/1", times=None))
    retry = RetryPolicy(max_retries=100, retry_timeout=0.3, init_backoff=0.02, max_backoff=0.05)
    t, ex = make({"k/1": b"x"}, faults=faults, retry=retry)
    with pytest.raises(RemoteError, match="'k/1'") as ei:
        await ex.get("k/1")
    # retry_timeout, not max_retries, ended it: no attempt started 0.3 s after the first
    assert 2 < ei.value.attempts == ex.stats.requests == t.requests() < 1 + retry.max_retries
    # the deadline is checked before each backoff sleep; a loaded machine may start that attempt a
    # scheduling delay later, so allow one backoff of slack rather than assert on raw wall time
    assert t.log[-1].t0 - t.log[0].t0 <= retry.retry_timeout + retry.max_backoff
    assert ex.stats.failures == 1


async def test_max_retries_bound():
    faults = FaultPlan(Fault("transient", times=None))
    t, ex = make({"a": b"x"}, faults=faults, retry=RetryPolicy(max_retries=2, init_backoff=0.001))
    with pytest.raises(RemoteError):
        await ex.get("a")
    assert t.requests() == 3 and ex.stats.retries == 2


async def test_permanent_fault_not_retried():
    faults = FaultPlan(Fault("permanent", op="get"))
    t, ex = make({"a": b"x"}, faults=faults)
    with pytest.raises(RemoteError, match="'a'"):
        await ex.get("a")
    assert t.requests() == 1 and ex.stats.retries == 0


async def test_slow_fault_adds_latency():
    faults = FaultPlan(Fault("slow", key="a", delay=0.1))
    t, ex = make({"a": b"x", "b": b"y"}, faults=faults)
    await ex.get("b")
    assert faults.faults[0].fired == 0  # other keys are not slowed
    await ex.get("a")
    assert faults.faults[0].fired == 1
    slow = next(e for e in t.log if e.key == "a")
    assert slow.t1 - slow.t0 >= 0.1 and slow.outcome == "ok" and ex.stats.retries == 0


async def test_create_put_semantics():
    # conflict
    t, ex = make({"a": b"old"})
    with pytest.raises(StoreExistsError, match="'a'"):
        await ex.put("a", b"new", mode="create")
    assert t.data["a"] == b"old"
    # surely-not-applied transient error: retried
    faults = FaultPlan(Fault("transient", op="put", times=2))
    t, ex = make(faults=faults)
    await ex.put("b", b"1", mode="create")
    assert t.data["b"] == b"1" and ex.stats.retries == 2 and ex.stats.puts == 3
    # ambiguous error: create is NOT retried (a retry would see its own write as a conflict)
    faults = FaultPlan(Fault("ambiguous", op="put"))
    t, ex = make(faults=faults)
    with pytest.raises(RemoteError, match="'c'") as ei:
        await ex.put("c", b"1", mode="create")
    assert not isinstance(ei.value, StoreExistsError)
    assert t.requests("put") == 1 and t.data["c"] == b"1"
    # ambiguous error on overwrite: retried, idempotent
    faults = FaultPlan(Fault("ambiguous", op="put"))
    t, ex = make(faults=faults)
    await ex.put("d", b"2")
    assert t.requests("put") == 2 and t.data["d"] == b"2"


async def test_put_multipart_retry_rules():
    faults = FaultPlan(Fault("transient", op="put_multipart"))
    t, ex = make(faults=faults)
    await ex.put_multipart("big", b"x" * 1000, part_size=100)
    assert t.data["big"] == b"x" * 1000 and ex.stats.retries == 1
    faults.add(Fault("transient", op="put_multipart"))
    await ex.put_multipart("big2", [b"ab", b"cd"], part_size=100)
    assert t.data["big2"] == b"abcd"
    assert ex.stats.bytes_put == 1004
    # a one-shot iterator cannot be replayed: not retried
    faults.add(Fault("transient", op="put_multipart"))
    with pytest.raises(RemoteError, match="'big3'"):
        await ex.put_multipart("big3", iter([b"ab", b"cd"]), part_size=100)

    async def agen():
        yield b"12"
        yield b"34"
    await ex.put_multipart("big4", agen(), part_size=100)
    assert t.data["big4"] == b"1234"
    with pytest.raises(InvalidArgumentError):
        await ex.put_multipart("x", b"1", part_size=-1)


async def test_large_put_switches_to_multipart():
    t, ex = make(multipart_threshold=100, part_size=64)
    await ex.put("big", b"z" * 101)
    await ex.put("small", b"z" * 100)
    assert t.requests("put_multipart") == 1 and t.requests("put") == 1


async def test_multipart_takes_several_tokens_without_deadlock():
    t, ex = make({f"k{i}": b"v" for i in range(30)}, latency=0.01, concurrency=4,
                 multipart_concurrency=3)
    seen = []

    async def up(i):
        await ex.put_multipart(f"mp{i}", b"x" * 10, part_size=5)
        seen.append(ex.limiter.borrowed_tokens)

    aws = [up(i) for i in range(4)] + [ex.get(f"k{i}") for i in range(30)]
    with anyio.fail_after(5):
        await ex.gather(aws)
    assert all(f"mp{i}" in t.data for i in range(4))
    assert t.max_inflight <= 4
    assert ex.limiter.borrowed_tokens == 0


# ---------------------------------------------------------------------------- caches


async def test_fetch_through_cache_and_invalidation():
    t, ex = make({"zarr.json": b"{}", "s/c": b"0123456789"})
    assert await ex.get("zarr.json", cache="meta") == b"{}"
    assert await ex.get("zarr.json", cache="meta") == b"{}"
    assert t.requests() == 1 and ex.stats.cache_hits == 1 and ex.stats.cache_misses == 1
    assert await ex.get_suffix("s/c", 4, cache="shard_index") == b"6789"
    assert await ex.get_suffix("s/c", 4, cache="shard_index") == b"6789"
    assert await ex.get_range("s/c", 0, 2, cache="fragment_index") == b"01"
    assert await ex.get_range("s/c", 0, 2, cache="fragment_index") == b"01"
    assert t.requests() == 3
    await ex.put("zarr.json", b'{"a":1}')
    await ex.put("s/c", b"abcdefghij")
    assert await ex.get("zarr.json", cache="meta") == b'{"a":1}'
    assert await ex.get_suffix("s/c", 4, cache="shard_index") == b"ghij"
    assert await ex.get_range("s/c", 0, 2, cache="fragment_index") == b"ab"
    # a suffix longer than the object (zvf asks a round trip's worth of a manifest shard): cached by what was
    # asked, not only by the length that came (S3's hints missed it: every object read fetched the shard again)
    assert await ex.get_suffix("s/c", 1 << 20, cache="shard_index") == b"abcdefghij"
    before = t.requests()
    assert await ex.get_suffix("s/c", 1 << 20, cache="shard_index") == b"abcdefghij"
    assert t.requests() == before
    await ex.put("s/c", b"klmnopqrst")
    assert await ex.get_suffix("s/c", 1 << 20, cache="shard_index") == b"klmnopqrst"
    # missing objects are not cached
    assert await ex.get("nope", cache="meta") is None
    t.data["nope"] = b"now"
    assert await ex.get("nope", cache="meta") == b"now"


async def test_put_cached_objects_and_unknown_namespace():
    _, ex = make(cache_bytes=None)
    import numpy as np

    arr = np.arange(10, dtype=np.uint64)
    ex.put_cached("shard_index", "s/0", arr)
    assert ex.get_cached("shard_index", "s/0") is arr
    assert ex.caches["shard_index"].nbytes == 80
    ex.put_cached("custom", ("x", 1), b"abc")  # created lazily
    assert ex.get_cached("custom", ("x", 1)) == b"abc"
    with pytest.raises(InvalidArgumentError):
        ex.put_cached("custom", "y", object())
    ex.put_cached("custom", "y", object(), nbytes=8)
    ex.clear_caches()
    assert ex.get_cached("custom", "y") is None


def test_byte_lru_budget():
    c = ByteLRU(10)
    c.put("a", b"12345", 5)
    c.put("b", b"12345", 5)
    assert c.get("a") == b"12345"  # a is now most recent
    c.put("c", b"123", 3)
    assert "b" not in c and "a" in c and c.nbytes == 8
    c.put("huge", b"x" * 11, 11)  # larger than the budget: not cached
    assert "huge" not in c and c.nbytes == 8
    c.put("a", b"1", 1)
    assert c.nbytes == 4
    c.clear()
    assert len(c) == 0 and c.nbytes == 0


def test_cache_budget_from_constructor():
    _, ex = make(cache_bytes={"meta": 4})
    ex.put_cached("meta", "a", b"1234")
    ex.put_cached("meta", "b", b"12")
    assert ex.get_cached("meta", "a") is None and ex.get_cached("meta", "b") == b"12"


def test_io_settings_are_read_when_used():
    """zvf.config's io settings apply to the executors, retry policies and plans made or run in the block."""
    with tuned(max_retries=2, init_backoff=0.001, meta_cache_bytes=4, other_cache_bytes=3, max_width=40):
        assert RetryPolicy().max_retries == 2 and RetryPolicy().init_backoff == 0.001
        _, ex = make(concurrency=8, retry=RetryPolicy(), concurrency_auto=True)
        assert ex.cache("meta").budget == 4 and ex.cache("elsewhere").budget == 3
        assert ex.plan_width(1000) == 40
    assert RetryPolicy().max_retries == 6 and ex.plan_width(1000) == 256  # the defaults again


# ---------------------------------------------------------------------------- helpers


async def test_map_gather_order_errors_and_nesting():
    _t, ex = make({f"k{i}": bytes([i]) for i in range(20)}, latency=0.001, concurrency=1)

    async def nested(i):  # each item makes two requests through the same limiter
        a = await ex.get(f"k{i}")
        b = await ex.get_range(f"k{i}", 0, 1)
        return a + b

    with anyio.fail_after(5):
        out = await ex.map(nested, range(20), limit=8)
    assert out == [bytes([i, i]) for i in range(20)]

    async def boom(i):
        if i == 3:
            raise InvalidArgumentError("item 3 is bad")
        await anyio.sleep(0.01)
        return i

    with pytest.raises(InvalidArgumentError, match="item 3"):
        await ex.map(boom, range(10))
    coros = [boom(i) for i in range(10)]
    with pytest.raises(InvalidArgumentError):
        await ex.gather(coros, limit=2)
    assert await ex.gather([]) == []


async def test_stats_snapshot_reset_round_trips():
    t, ex = make({"a": b"1", "b": b"2", "c": b"3"}, latency=0.005)
    for k in "abc":
        await ex.get(k)
    assert ex.stats.round_trips == 3 == t.round_trips()
    snap = ex.stats.snapshot()
    assert set(snap) == set(Stats.FIELDS) and snap["bytes"] == 3
    ex.stats.reset()
    assert all(v == 0 for v in ex.stats.snapshot().values())
    await ex.gather([ex.get(k) for k in "abc"])
    assert ex.stats.round_trips == 1
    assert "requests=3" in repr(ex.stats)


def test_sync_use_with_anyio_run():
    _t, ex = make({"a": b"1"})

    async def main():
        return await ex.get("a")

    assert anyio.run(main) == b"1"
    assert anyio.run(main) == b"1"  # a fresh event loop: the executor still works
