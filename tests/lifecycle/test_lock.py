"""The store lock shared by appends and pyramid builds: one holder, waits, stale takeover by a conditional
create (never delete-then-create), compare-and-swap of documents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import anyio
import numpy as np
import pytest

import zvf.aio as za
from zvf.errors import ConcurrentModificationError
from zvf.io.executor import Executor
from zvf.io.store import StoreHandle, open_store
from zvf.testing import MemoryTransport
from zvf.write.lock import LOCK_KEY, TAKEOVER, StoreLock, read_document, replace_document


def _ex(transport=None):
    return Executor(StoreHandle.for_transport(transport or MemoryTransport(latency=0.002)))


def _stale_body(owner="dead"):
    return json.dumps({"owner": owner, "purpose": "append", "host": "h", "pid": 1, "time": 1.0}).encode()


async def test_one_holder_others_wait_then_time_out_naming_the_lock():
    ex = _ex()
    async with StoreLock(ex, "mem://s", purpose="append"):
        with pytest.raises(ConcurrentModificationError, match=r"\.zvf-writing: held by append"):
            await StoreLock(ex, "mem://s", purpose="pyramid build", timeout=0.2).acquire()
    assert await ex.get(LOCK_KEY) is None  # released
    order = []

    async def hold(name, delay):
        await anyio.sleep(delay)
        async with StoreLock(ex, "mem://s", purpose=name, timeout=5):
            order.append(f"{name} in")
            await anyio.sleep(0.1)
            order.append(f"{name} out")

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold, "a", 0)
        tg.start_soon(hold, "b", 0.02)  # waits for a, then gets it
    assert order == ["a in", "a out", "b in", "b out"]


async def test_stale_lock_taken_over_by_exactly_one_contender():
    t = MemoryTransport(latency=0.003)
    t.data[LOCK_KEY] = _stale_body()
    ex = _ex(t)
    winners, losers = [], []

    async def contend(i):
        lock = StoreLock(ex, "mem://s", purpose=f"c{i}", timeout=0.5, lease=60)
        try:
            await lock.acquire()
        except ConcurrentModificationError:
            losers.append(i)
            return
        winners.append(i)
        await anyio.sleep(1.0)  # hold past every other contender's timeout
        await lock.release()

    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(contend, i)
    assert len(winners) == 1 and len(losers) == 5
    assert not [k for k in t.data if k.startswith(".zvf")]  # lock and takeover marker gone


async def test_late_takeover_of_a_released_lock_backs_off():
    """A contender that wins the marker after the winner released finds the lock changed and waits."""
    t = MemoryTransport()
    ex = _ex(t)
    stale = _stale_body("dead")
    t.data[LOCK_KEY] = stale
    first = StoreLock(ex, "mem://s", purpose="first", lease=60)
    await first.acquire()
    await first.release()
    new = StoreLock(ex, "mem://s", purpose="new", lease=60)
    await new.acquire()  # a fresh holder
    late = StoreLock(ex, "mem://s", purpose="late", lease=60)
    assert not await late._take_over(stale, "dead")  # still believes the dead lock is there
    assert json.loads(t.data[LOCK_KEY])["purpose"] == "new"
    assert TAKEOVER + "dead" not in t.data


async def test_slow_holder_taken_over_does_not_publish():
    ex = _ex()
    slow = StoreLock(ex, "mem://s", purpose="append", lease=0)
    await slow.acquire()
    await anyio.sleep(0.01)
    other = StoreLock(ex, "mem://s", purpose="append", lease=0)
    await other.acquire()  # the slow holder's lock looks stale: taken over
    with pytest.raises(ConcurrentModificationError, match="no longer holds the lock"):
        await slow.check()
    await other.check()
    await slow.release()  # not ours any more: leaves the other's lock alone
    assert await ex.get(LOCK_KEY) == other.body


@pytest.mark.parametrize("backend", ["memory", "local"])
async def test_replace_document_is_a_compare_and_swap(tmp_path, backend):
    ex = _ex() if backend == "memory" else Executor(open_store(str(tmp_path / "s"), mode="w"))
    await ex.put("zarr.json", b"v1")
    before, tag = await read_document(ex, "zarr.json")
    assert before == b"v1" and (tag is None) == (backend == "local")  # LocalStore: no ETag put
    await ex.put("zarr.json", b"someone else")
    with pytest.raises(ConcurrentModificationError, match=r"zarr\.json: changed"):
        await replace_document(ex, "zarr.json", b"v2", before, tag, "url")
    before, tag = await read_document(ex, "zarr.json")
    await replace_document(ex, "zarr.json", b"v2", before, tag, "url")
    assert await ex.get("zarr.json") == b"v2"


async def test_append_and_pyramid_exclude_each_other(tmp_path):
    path = str(tmp_path / "s")
    rng = np.random.default_rng(0)
    await za.write_points(path, rng.uniform(0, 10, (50, 3)).astype(np.float32), chunk_shape=[5.0] * 3)
    ex = Executor(open_store(path, mode="a"))
    async with StoreLock(ex, path, purpose="append"):
        with pytest.raises(ConcurrentModificationError, match="held by append"):
            await za.build_pyramid(path, [(2, 1)], lock_timeout=0.2)
    async with StoreLock(ex, path, purpose="pyramid build"):
        ds = await za.open(path, mode="a")
        with pytest.raises(ConcurrentModificationError, match="held by pyramid build"):
            await ds.append_points(np.zeros((1, 3), np.float32), lock_timeout=0.2)
    assert len(await (await za.open(path)).read_all()) == 50  # neither changed the store


CHILD = textwrap.dedent("""
    import sys, time, anyio
    from zvf.errors import ConcurrentModificationError
    from zvf.io.executor import Executor
    from zvf.io.store import open_store
    from zvf.write.lock import StoreLock

    async def main():
        ex = Executor(open_store(sys.argv[1], mode="a"))
        lock = StoreLock(ex, sys.argv[1], purpose="child", timeout=1.5, lease=60)
        while time.time() < float(sys.argv[2]):  # start together
            time.sleep(0.001)
        try:
            await lock.acquire()
        except ConcurrentModificationError:
            print("WAITED OUT", flush=True)
            return
        print("GOT", flush=True)
        await anyio.sleep(3)  # hold past the other's timeout
        await lock.release()

    anyio.run(main)
""")


def test_two_processes_finding_a_stale_lock_one_proceeds(tmp_path):
    store = tmp_path / "s"
    store.mkdir()
    (store / LOCK_KEY).write_bytes(_stale_body())
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    go = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, str(script), str(store), str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs.append(out.strip())
    assert sorted(outs) == ["GOT", "WAITED OUT"]
    assert not [f for f in os.listdir(store) if f.startswith(".zvf")]


async def test_heartbeat_keeps_a_live_holder_against_takeover():
    """A holder beats every third of its lease: contenders never presume it dead while it lives."""
    ex = _ex()
    async with StoreLock(ex, "mem://s", purpose="append", lease=0.3) as holder:
        first = json.loads(holder.body)["heartbeat"]
        with pytest.raises(ConcurrentModificationError, match="live"):
            await StoreLock(ex, "mem://s", purpose="other", timeout=1.0).acquire()  # > 3 leases
        await holder.check()
        assert json.loads(await ex.get(LOCK_KEY))["heartbeat"] > first
    assert await ex.get(LOCK_KEY) is None


HOLD = textwrap.dedent("""
    import sys, time, anyio
    from zvf.io.executor import Executor
    from zvf.io.store import open_store
    from zvf.write.lock import StoreLock

    async def main():
        ex = Executor(open_store(sys.argv[1], mode="a"))
        async with StoreLock(ex, sys.argv[1], purpose="append", lease=3600):
            print("HELD", flush=True)
            await anyio.sleep(300)

    anyio.run(main)
""")


def test_a_killed_holder_is_taken_over_at_once(tmp_path):
    """SIGKILL leaves the lock behind with an hour of lease; its process is gone from this host, so the
    next writer takes it over without waiting."""
    store = tmp_path / "s"
    store.mkdir()
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    p = subprocess.Popen([sys.executable, str(script), str(store)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("HELD")
    p.kill()
    p.wait(10)
    assert (store / LOCK_KEY).exists()

    async def take() -> float:
        t0 = time.monotonic()
        ex = Executor(open_store(str(store), mode="a"))
        async with StoreLock(ex, str(store), purpose="next", timeout=5):
            return time.monotonic() - t0

    assert anyio.run(take) < 2.0
    assert not [f for f in os.listdir(store) if f.startswith(".zvf")]


async def test_a_contender_killed_mid_takeover_does_not_block():
    """A dead holder's lock and the takeover marker of a contender that died before overwriting it: the next
    contender takes the marker over in turn, then the lock."""
    t = MemoryTransport()
    t.data[LOCK_KEY] = _stale_body("dead")
    t.data[TAKEOVER + "dead"] = _stale_body("contender")
    ex = _ex(t)
    async with StoreLock(ex, "mem://s", purpose="next", timeout=2):
        assert json.loads(t.data[LOCK_KEY])["purpose"] == "next"
    assert not [k for k in t.data if k.startswith(".zvf")]
