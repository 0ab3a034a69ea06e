"""Writers killed with SIGKILL part-way, on a local directory and on S3 (moto).

The child process below wraps ``Executor.put``/``Executor.delete`` (test code
only, nothing in src): after ``ZVF_CRASH_AFTER`` store operations it prints
``PAUSED`` and blocks, and the test SIGKILLs it.  Then: ``zvf.open`` must
never return a torn store, ``zvf validate`` must name what is left over,
and a new write with ``overwrite=True`` must succeed.  Two writers racing
for one new store: exactly one wins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import zvf
from tests.support.processes import kill_when_paused
from tests.support.results import record_table
from zvf.errors import IncompleteStoreError, StoreExistsError, StoreNotFoundError

CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    import numpy as np
    import zvf
    from zvf.errors import StoreExistsError
    from zvf.io import executor as exmod

    mode = os.environ.get("ZVF_CRASH_MODE", "none")   # none | pause
    after = int(os.environ.get("ZVF_CRASH_AFTER", "-1"))
    go = os.environ.get("ZVF_CRASH_GO")                # barrier file for racing writers
    ops = []
    put0, delete0 = exmod.Executor.put, exmod.Executor.delete

    def hook(kind, key):
        if mode == "pause" and len(ops) >= after:
            print("PAUSED", kind, key, flush=True)
            time.sleep(120)                            # the test SIGKILLs us here
        ops.append((kind, key))

    async def put(self, key, data, *, mode="overwrite"):
        hook("put", key)
        return await put0(self, key, data, mode=mode)

    async def delete(self, keys):
        hook("delete", keys if isinstance(keys, str) else ",".join(keys))
        return await delete0(self, keys)

    exmod.Executor.put, exmod.Executor.delete = put, delete
    exmod.Executor.batch_puts = property(lambda self: False)  # every cell through put: the kill points
    opts = json.loads(os.environ.get("ZVF_CRASH_OPTS") or "null")
    rng = np.random.default_rng(int(os.environ.get("ZVF_CRASH_SEED", "5")))
    pos = rng.uniform(0, 100, (400, 3)).astype(np.float32)
    if go:
        while not os.path.exists(go):
            time.sleep(0.002)
    try:
        zvf.write_points(os.environ["ZVF_CRASH_TARGET"], pos, chunk_shape=(50,) * 3, bin_shape=(25,) * 3,
                         attributes={"a": rng.random(400).astype(np.float32)},
                         overwrite=os.environ.get("ZVF_CRASH_OVERWRITE") == "1", storage_options=opts)
    except StoreExistsError as e:
        print("EXISTS", str(e).replace(chr(10), " "), flush=True)
        sys.exit(3)
    print("DONE", len(ops), json.dumps(ops), flush=True)
    """
)

ROWS: list[str] = []


@pytest.fixture(scope="module")
def child(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("crash") / "child.py"
    p.write_text(CHILD)
    return p


def _env(target: str, opts, **extra) -> dict:
    env = dict(os.environ)
    env.update({"ZVF_CRASH_TARGET": target, "ZVF_CRASH_OPTS": json.dumps(opts)})
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _run_to_end(child: Path, target: str, opts) -> list:
    r = subprocess.run([sys.executable, str(child)], env=_env(target, opts), capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("DONE"))
    return json.loads(line.split(" ", 2)[2])


def _start_paused(child: Path, target: str, opts, after: int, overwrite: bool = False) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(child)],
                            env=_env(target, opts, ZVF_CRASH_MODE="pause", ZVF_CRASH_AFTER=after,
                                     ZVF_CRASH_OVERWRITE=int(overwrite)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill_after(child: Path, target: str, opts, after: int, overwrite: bool = False) -> str:
    """Run the child until it has made ``after`` store operations, then SIGKILL it."""
    return kill_when_paused(_start_paused(child, target, opts, after, overwrite))


def _check_after_kill(target: str, opts, label: str, paused_at: str, root_written: bool) -> None:
    # 1. never a torn store
    if root_written:
        ds = zvf.open(target, storage_options=opts)  # the root comes last: a complete store
        assert len(ds.read_all()) == 400
        opened = "complete store (root was published)"
    else:
        with pytest.raises((IncompleteStoreError, StoreNotFoundError)) as ei:
            zvf.open(target, storage_options=opts)
        opened = type(ei.value).__name__
    # 2. validate names the leftovers
    rep = zvf.validate(target, storage_options=opts)
    errs = rep.keys("error")
    if paused_at.startswith("put .zvf-writing"):
        assert not rep.ok  # nothing was written at all
        left = "nothing (empty location)"
    else:
        # the claim of an unfinished write is an error; beside a published root, a failed change's leftover
        assert ".zvf-writing" in (rep.keys("warning") if root_written else errs), rep.summary()
        orphan = sorted(k for k in errs if k not in (".zvf-writing", "zarr.json"))
        if not root_written:
            assert "zarr.json" in errs, rep.summary()
        left = "claim" + ("" if root_written else " + no root") + (f" + orphans {orphan[:2]}" if orphan else "")
        # 3. a plain write refuses (claim or store present)
        with pytest.raises(StoreExistsError):
            zvf.write_points(target, np.zeros((1, 3)), chunk_shape=(50,) * 3, storage_options=opts)
    # 4. overwrite=True recovers
    zvf.write_points(target, np.random.default_rng(0).uniform(0, 100, (77, 3)), chunk_shape=(50,) * 3,
                     overwrite=True, storage_options=opts)
    assert len(zvf.open(target, storage_options=opts).read_all()) == 77
    assert zvf.validate(target, level=5, storage_options=opts).ok
    ROWS.append(f"| {label} | {paused_at} | {opened} | {left} | overwrite=True ok |")


def _kill_points(ops: list) -> dict[str, int]:
    n = len(ops)
    first_doc = next(i for i, (_, k) in enumerate(ops) if k.endswith("zarr.json"))
    root = next(i for i, (_, k) in enumerate(ops) if k == "zarr.json")
    return {
        "before the claim": 0,
        "after the claim": 1,
        "mid cells": first_doc // 2,
        "before metadata": first_doc,
        "before the root": root,
        "before claim removal": n - 1,
    }


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_sigkill_during_write(backend, child, tmp_path, request):
    if backend == "local":
        def new_target():
            return str(tmp_path / f"store-{uuid.uuid4().hex[:6]}.zarrvectors"), None
    else:
        ep = request.getfixturevalue("s3_endpoint")
        from tests.servers import create_bucket

        bucket = create_bucket(ep)
        opts = ep.storage_options()

        def new_target():
            return f"s3://{bucket}/store-{uuid.uuid4().hex[:6]}", opts
    target, opts = new_target()
    ops = _run_to_end(child, target, opts)
    assert ops[0] == ["put", ".zvf-writing"] and ops[-1][0] == "delete"
    points = _kill_points(ops)
    if backend == "s3":  # keep the S3 run short: the interesting three
        points = {k: points[k] for k in ("after the claim", "mid cells", "before claim removal")}
    runs = []
    for label, after in points.items():  # all children start together, each pauses at its point
        target, opts = new_target()
        runs.append((label, after, target, opts, _start_paused(child, target, opts, after)))
    killed = [(label, after, target, opts, kill_when_paused(p)) for label, after, target, opts, p in runs]
    for label, after, target, opts, paused_at in killed:
        root_written = any(k == "zarr.json" for _, k in ops[:after])
        _check_after_kill(target, opts, f"{backend}: {label} (op {after}/{len(ops)})", paused_at, root_written)


def test_sigkill_during_overwrite_keeps_the_old_store(child, tmp_path):
    """Killed while replacing a store: it is a publication (zvf.write.publish), so readers go on reading the
    old store whole -- never old and new mixed -- and the next overwrite replaces it."""
    target = str(tmp_path / "replace.zarrvectors")
    old = np.random.default_rng(1).uniform(0, 100, (50, 3))
    zvf.write_points(target, old, chunk_shape=(50,) * 3)
    paused_at = _kill_after(child, target, None, after=6, overwrite=True)
    got = zvf.open(target).read_all().positions
    assert np.array_equal(np.sort(got, axis=0), np.sort(old.astype(got.dtype), axis=0))
    rep = zvf.validate(target, level=5)
    assert rep.ok and ".zvf-writing" in rep.keys("warning"), rep.summary()
    zvf.write_points(target, np.zeros((3, 3)), chunk_shape=(50,) * 3, overwrite=True)
    assert len(zvf.open(target).read_all()) == 3
    ROWS.append(f"| local: overwrite of an existing store (op 6) | {paused_at} | the old store, whole | "
                "dead lock (warning) + unreferenced new cells | overwrite=True ok |")


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_two_writers_one_wins(backend, child, tmp_path, request):
    if backend == "local":
        target, opts = str(tmp_path / "race.zarrvectors"), None
    else:
        ep = request.getfixturevalue("s3_endpoint")
        from tests.servers import create_bucket

        target, opts = f"s3://{create_bucket(ep)}/race", ep.storage_options()
    go = tmp_path / f"go-{backend}"
    procs = [subprocess.Popen([sys.executable, str(child)],
                              env=_env(target, opts, ZVF_CRASH_GO=go, ZVF_CRASH_SEED=s),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in (1, 2)]
    time.sleep(1.5)  # both imported and spinning on the barrier
    go.write_text("go")
    outs = [p.communicate(timeout=60) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 3], (codes, outs)
    loser = next(o for p, o in zip(procs, outs) if p.returncode == 3)[0]
    assert "EXISTS" in loser and target.rsplit("/", 1)[-1] in loser
    winner = 1 if procs[0].returncode == 0 else 2
    want = np.random.default_rng(winner).uniform(0, 100, (400, 3)).astype(np.float32)
    got = zvf.open(target, storage_options=opts).read_all().positions
    rep = zvf.validate(target, level=5, storage_options=opts)
    intact = rep.ok and _same_rows(got, want)
    ROWS.append(f"| {backend}: two writers race for one new store | - | one complete store | "
                f"{'nothing' if rep.ok else sorted(rep.keys('error'))} | exactly one wins, the other "
                f"StoreExistsError{'' if intact else '; RACE: loser clobbered the winner'} |")
    assert intact, "the losing writer must not touch the winner's store"


def _same_rows(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and np.array_equal(a[np.lexsort(a.T[::-1])], b[np.lexsort(b.T[::-1])])


async def test_late_loser_cannot_clobber_the_winner(memory_url):
    """Deterministic form of the race: B starts first, but its claim lands only after A has finished."""
    import anyio

    from zvf.io.executor import Executor
    from zvf.write.points import memory as wp

    a_pos = np.random.default_rng(1).uniform(0, 100, (300, 3)).astype(np.float32)
    b_pos = np.random.default_rng(2).uniform(0, 100, (300, 3)).astype(np.float32)
    a_done = anyio.Event()
    put0 = Executor.put
    made = []

    async def put(self, key, data, *, mode="overwrite"):
        if key == ".zvf-writing" and self is made[0]:
            await a_done.wait()  # B's conditional create reaches the store late
        return await put0(self, key, data, mode=mode)

    def executor(handle, *a, **kw):
        ex = Executor(handle, *a, **kw)
        made.append(ex)  # B creates its executor first
        return ex

    async def run_a():
        await anyio.sleep(0.05)
        await zvf.aio.write_points(memory_url, a_pos, chunk_shape=(50,) * 3)
        a_done.set()

    async def run_b():
        with pytest.raises(StoreExistsError):
            await zvf.aio.write_points(memory_url, b_pos, chunk_shape=(50,) * 3)

    orig_ex = wp.Executor
    Executor.put, wp.Executor = put, executor
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_b)
                tg.start_soon(run_a)
    finally:
        Executor.put, wp.Executor = put0, orig_ex
    ds = await zvf.aio.open(memory_url)
    got = (await ds.read_all()).positions
    rep = await zvf.aio.validate(memory_url, level=5)
    assert _same_rows(got, a_pos) and rep.ok, rep.summary()


@pytest.fixture(scope="module", autouse=True)
def crash_table():
    """After the crash runs of this module that ran: their table, for the terminal summary (see conftest).
    A fixture, not a test: a test would skip when run alone or on another worker."""
    yield
    if not ROWS:
        return
    record_table("crash", "\n".join([
        "| case | killed before | zvf.open afterwards | zvf validate names | recovery |",
        "|---|---|---|---|---|",
        *ROWS,
    ]))
