"""Single flight one level above the requests: concurrent first users of a decoded table (an object index,
a fragment index, a document) share one fetch and one decode (``Executor.once/cached/cached_many``).

The cold-herd test is the case seen in the field: 64 concurrent small box queries on a freshly opened
store each decoded its whole object index (12.2 s and 3.4 GB at 1 M points, against 0.8 s and 142 MiB
once warm).  It runs in subprocesses so that each measures its own peak RSS.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import numpy as np
import pytest

import zvf
from zvf.io.executor import Executor
from zvf.io.store import StoreHandle
from zvf.testing import MemoryTransport

ROOT = Path(__file__).resolve().parents[2]


def _executor() -> Executor:
    return Executor(StoreHandle.for_transport(MemoryTransport({"k": b"payload"})), seed=1)


async def test_concurrent_first_users_share_one_decode():
    ex = _executor()
    decodes = []

    async def decode() -> bytes:
        raw = await ex.get("k")
        await anyio.sleep(0.01)  # a decode long enough for every caller to arrive while it runs
        decodes.append(1)
        return raw.upper()

    got = []

    async def user() -> None:
        got.append(await ex.cached("decoded", "k", decode))

    async with anyio.create_task_group() as tg:
        for _ in range(64):
            tg.start_soon(user)
    assert len(decodes) == 1 and ex.stats.requests == 1
    assert len(got) == 64 and all(g is got[0] for g in got)  # one object, not 64 copies
    assert await ex.cached("decoded", "k", decode) is got[0] and len(decodes) == 1  # cached now


async def test_cached_many_batches_what_is_missing_and_waits_for_the_rest():
    ex = _executor()
    batches: list[list[str]] = []

    async def decode(keys: list[str]) -> list[str]:
        batches.append(list(keys))
        await anyio.sleep(0.01)
        return [k * 2 for k in keys]

    out: dict[int, list[str]] = {}

    async def user(i: int, keys: list[str]) -> None:
        out[i] = await ex.cached_many("t", keys, decode)

    async with anyio.create_task_group() as tg:
        tg.start_soon(user, 0, ["a", "b", "a"])
        tg.start_soon(user, 1, ["b", "c"])
    assert out == {0: ["aa", "bb", "aa"], 1: ["bb", "cc"]}
    assert sorted(k for b in batches for k in b) == ["a", "b", "c"]  # each key decoded once
    assert batches[0] == ["a", "b"]  # the first caller's missing keys in one call
    assert await ex.cached_many("t", ["c", "a"], decode) == ["cc", "aa"] and len(batches) == 2


async def test_cached_many_does_not_yield_once_per_key_it_computed_itself():
    """A whole-level read asks for hundreds of cells in one call: waiting on each of its own finished flights
    gave the event loop one turn per cell (about 11 ms of a 2 M-point read of 450 cells)."""
    ex = _executor()
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            await anyio.sleep(0)
            turns += 1

    async def decode(keys: list[int]) -> list[bytes]:
        return [b"%d" % k for k in keys]

    async with anyio.create_task_group() as tg:
        tg.start_soon(count_turns)
        await anyio.sleep(0)
        before = turns
        assert await ex.cached_many("t", list(range(1000)), decode) == [b"%d" % k for k in range(1000)]
        assert turns - before < 10
        tg.cancel_scope.cancel()


async def test_a_waiter_takes_over_when_the_first_user_is_cancelled():
    ex = _executor()
    started = anyio.Event()
    calls = []

    async def slow() -> str:
        calls.append(1)
        started.set()
        await anyio.sleep(0.2 if len(calls) == 1 else 0)
        return "v"

    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def first() -> None:
            with scope:
                await ex.cached("t", "k", slow)

        tg.start_soon(first)
        await started.wait()
        waiter = []

        async def second() -> None:
            waiter.append(await ex.cached("t", "k", slow))

        tg.start_soon(second)
        await anyio.sleep(0.01)
        scope.cancel()
    assert waiter == ["v"] and len(calls) == 2 and ex.flights.flights == {}


async def test_an_error_reaches_every_waiter_and_is_not_cached():
    ex = _executor()
    calls = []

    async def broken() -> str:
        calls.append(1)
        await anyio.sleep(0.01)
        raise ValueError("bad bytes")

    errors = []

    async def user() -> None:
        try:
            await ex.cached("t", "k", broken)
        except ValueError as e:
            errors.append(e)

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(user)
    assert len(errors) == 5 and len(calls) == 1
    with pytest.raises(ValueError):
        await ex.cached("t", "k", broken)
    assert len(calls) == 2


# ------------------------------------------------------------------ the cold herd, measured

HERD = textwrap.dedent("""
    import asyncio, json, resource, sys
    import numpy as np
    import zvf.aio
    import zvf.read.context as context
    import zvf.read.object_index as object_index

    counts = {"manifest_decodes": 0, "owner_tables": 0}

    def counted(name, fn):
        def run(*a, **k):
            counts[name] += 1
            return fn(*a, **k)
        return run

    object_index.decode_manifests_packed = counted("manifest_decodes", object_index.decode_manifests_packed)
    context._owners_of = counted("owner_tables", context._owners_of)
    path, warm = sys.argv[1], sys.argv[2] == "warm"
    boxes = [(c, c + 20) for c in np.random.default_rng(1).uniform(0, 980, (64, 3))]

    async def main():
        async with await zvf.aio.open(path) as ds:
            if warm:
                await ds.query(boxes[0])
                counts.update(dict.fromkeys(counts, 0))
            sels = await asyncio.gather(*(ds.query(b) for b in boxes))
        rows = sorted(int(i) for s in sels for i in s.object_ids)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps({"peak": peak, "rows": rows, **counts}))

    asyncio.run(main())
""")


def _herd(path: Path, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", HERD, str(path), mode], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cold_herd_decodes_the_object_index_once(tmp_path):
    rng = np.random.default_rng(0)
    n = 200_000
    path = tmp_path / "points.zarrvectors"
    zvf.write_points(str(path), rng.uniform(0, 1000, (n, 3)).astype(np.float32), chunk_shape=(100, 100, 100),
                     object_ids=rng.integers(0, n // 20, n))
    cold, warm = _herd(path, "cold"), _herd(path, "warm")
    assert cold["rows"] == warm["rows"] and cold["rows"]
    assert cold["manifest_decodes"] == 1 and cold["owner_tables"] == 1, cold  # 64 and 64 before
    assert cold["peak"] <= 2 * warm["peak"], (cold["peak"] >> 20, warm["peak"] >> 20)  # MiB: 926 vs 87 before
