"""Readers while writers publish (issue 24): writer PROCESSES append, build a pyramid and rechunk in place,
one at a time or two overlapping (the store lock serialises them), in a seeded order; meanwhile asyncio
reader tasks (a dataset opened once and kept, datasets opened fresh, one opened with ``refresh="auto"``)
and a reader process query the whole level 0, fixed boxes, counts and the coarse level.  Every answer must
be one published version's truth -- level 0 is known for every version from the seeds; a coarse level
must hold as many rows as its count says, each a row of the same version's level 0 -- or
``StaleDatasetError``.  Zero wrong answers; the counts are printed.  ``ZVF_CONCURRENCY_OPS`` sets how many
writer operations run (default 4 per backend; ``ZVF_CONCURRENCY_SEED`` picks another plan)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import zvf
import zvf.aio as za
from tests.support.concurrency import BOXES, CHUNK, appended_points, base_points, fingerprint, truths
from zvf.errors import InvalidArgumentError, StaleDatasetError

REPO = Path(__file__).resolve().parents[2]
OPS = int(os.environ.get("ZVF_CONCURRENCY_OPS", "4"))
#: Seeds of the writer plans: 23 runs append, pyramid || append, rechunk; 30 append || append || pyramid, rechunk.
SEEDS = {"local": 23, "s3": 30}


def plan(seed: int, n: int) -> list[tuple[str, int, bool]]:
    """(operation, its seed, overlaps the next one) for ``n`` writer operations, appends most often."""
    rng = np.random.default_rng(seed)
    ops = ["append", "pyramid", "rechunk"]
    out = []
    for i in range(n):
        op = ops[int(rng.choice(3, p=[0.5, 0.25, 0.25]))] if i else "append"
        out.append((op, i, bool(rng.random() < 0.3)))
    return out


def valid_versions(steps: list[tuple[str, int, bool]]) -> list[dict[str, str]]:
    """The truths of every version the writers may publish: level 0 after every append of the groups of
    steps that ran before, and any of the appends of the group running (its steps overlap: any order)."""
    groups: list[list[int]] = [[]]
    for op, seed, overlap in steps:
        if op == "append":
            groups[-1].append(seed)
        if not overlap:
            groups.append([])
    sets, before = [], []
    for group in groups:
        sets += [before + [s for k, s in enumerate(group) if mask >> k & 1] for mask in range(2 ** len(group))]
        before = before + group
    base = base_points()
    return [truths(np.concatenate([base] + [appended_points(s) for s in chosen])) for chosen in sets]


class Tally:
    def __init__(self, valid: list[dict[str, str]]):
        self.valid = {name: {t[name] for t in valid} for name in valid[0]}
        self.answers = self.stale = self.coarse = 0
        self.versions: set[str] = set()
        self.wrong: list[str] = []

    def check(self, who: str, name: str, got: str, version: str) -> None:
        self.answers += 1
        self.versions.add(version)
        if got not in self.valid[name]:
            self.wrong.append(f"{who} {name}: {got} at version {version}")


async def query(ds, tally: Tally, who: str, i: int) -> None:
    """One answer of ``ds`` (turn ``i`` picks which), checked."""
    kind = i % 5
    if kind == 0:
        tally.check(who, "all", fingerprint((await ds.read_all()).positions), ds.version)
    elif kind in (1, 2):
        b = (i // 5) % len(BOXES)
        if kind == 1:
            tally.check(who, f"box{b}", fingerprint((await ds.select(bbox=BOXES[b]).read()).positions), ds.version)
        else:
            tally.check(who, f"count{b}", str(await ds.select(bbox=BOXES[b]).count()), ds.version)
    else:
        levels = ds.levels
        if len(levels) < 2:
            tally.check(who, "all", fingerprint((await ds.read_all()).positions), ds.version)
            return
        try:
            coarse = (await ds.read_all(level=levels[1])).positions
        except InvalidArgumentError:
            if levels[1] in ds.levels:
                raise
            return  # refresh="auto" moved the dataset, mid-read, to a version without that level
        count = await ds.select(level=levels[1]).count()
        full = (await ds.read_all()).positions
        tally.check(who, "all", fingerprint(full), ds.version)
        rows = {r.tobytes() for r in np.asarray(full, dtype=np.float32)}
        tally.coarse += 1
        if count != len(coarse) or not all(r.tobytes() in rows for r in np.asarray(coarse, dtype=np.float32)):
            tally.wrong.append(f"{who} level {levels[1]}: {len(coarse)} rows, count {count}, at {ds.version}")


async def kept_reader(url, opts, tally, done, pause, *, refresh):
    """A dataset opened once and kept: on staleness it refreshes (``refresh="auto"`` does so itself)."""
    who = "auto" if refresh else "kept"
    ds = await za.open(url, storage_options=opts, **({"refresh": "auto"} if refresh else {}))
    try:
        i = 0
        while not done.is_set():
            try:
                await query(ds, tally, who, i)
            except StaleDatasetError:
                tally.stale += 1
                await ds.refresh()
            i += 1
            await asyncio.sleep(pause)
    finally:
        await ds.close()


async def fresh_reader(url, opts, tally, done, pause):
    i = 0
    while not done.is_set():
        try:
            ds = await za.open(url, storage_options=opts)
            try:
                await query(ds, tally, "fresh", i)
            finally:
                await ds.close()
        except StaleDatasetError:
            tally.stale += 1
        i += 1
        await asyncio.sleep(pause)


async def run_writers(url, opts, steps) -> list[str]:
    """Each step in its own process; an overlapping step lets the next one start before it ends."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    failures, running = [], []

    def start(op, seed):
        return subprocess.Popen([sys.executable, "-m", "tests.support.concurrency", "writer", op, url,
                                 json.dumps(opts), str(seed)], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    async def finish(proc, op):
        err = (await asyncio.to_thread(proc.communicate))[1].decode()
        if proc.returncode and op != "append" and "nothing was published" in err and "no longer holds the lock" in err:
            # the protocol's safe abort: a writer whose heartbeat stalled past its lease (a machine loaded several
            # times over) stops unpublished; a rechunk or pyramid leaves level 0 as it was, so every truth holds
            print(f"{op}: lock lost, nothing published", file=sys.stderr)
        elif proc.returncode and "ConcurrentModificationError" in err and "s. A holder that stops its heartbeat" in err:
            # the lock's wait ran out (60 s: another step held the lock that long on a machine loaded several times
            # over, e.g. beside the long chain tests): refused before taking the lock, so nothing changed
            print(f"{op}: the lock stayed busy past its wait, nothing done", file=sys.stderr)
        elif proc.returncode:
            failures.append(f"{op}: {err[-2000:]}")

    for op, seed, overlap in steps:
        running.append((start(op, seed), op))
        if not overlap:
            for proc, name in running:
                await finish(proc, name)
            running = []
    for proc, name in running:
        await finish(proc, name)
    return failures


async def scenario(url, opts, tmp_path, seed) -> tuple[Tally, dict]:
    zvf.write_points(url, base_points(), chunk_shape=(CHUNK,) * 3, storage_options=opts)
    steps = plan(seed, OPS)
    tally = Tally(valid_versions(steps))
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-m", "tests.support.concurrency", "reader", url, json.dumps(opts),
                               str(stop)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = asyncio.Event()
    # moto serves S3 from this process: readers pause longer there, so the writers get the server too
    pause = 0.1 if url.startswith("s3://") else 0.01
    readers = [asyncio.create_task(kept_reader(url, opts, tally, done, pause, refresh=False)),
               asyncio.create_task(kept_reader(url, opts, tally, done, pause, refresh=True)),
               asyncio.create_task(fresh_reader(url, opts, tally, done, pause)),
               asyncio.create_task(fresh_reader(url, opts, tally, done, pause))]
    t0 = time.monotonic()
    try:
        failures = await run_writers(url, opts, steps)
    finally:
        done.set()
        stop.touch()
        await asyncio.gather(*readers)
    out, err = await asyncio.to_thread(reader.communicate)
    assert reader.returncode == 0, err.decode()[-2000:]
    assert not failures, failures
    for line in out.decode().splitlines():
        answer = json.loads(line)
        if answer.get("stale"):
            tally.stale += 1
        else:
            tally.check("process", answer["name"], answer["got"], answer["version"])
    return tally, {"steps": [op for op, _, _ in steps], "overlaps": sum(o for _, _, o in steps[:-1]),
                   "seconds": time.monotonic() - t0}


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_readers_see_only_published_versions(backend, tmp_path, request, capsys):
    if backend == "s3":
        url, opts = request.getfixturevalue("s3_target")
    else:
        url, opts = str(tmp_path / "c.zarrvectors"), {}
    seed = int(os.environ.get("ZVF_CONCURRENCY_SEED", SEEDS[backend]))
    tally, run = asyncio.run(scenario(url, opts, tmp_path, seed=seed))
    with capsys.disabled():
        print(f"\nconcurrency {backend}: {run['steps']} ({run['overlaps']} overlapping) in {run['seconds']:.1f} s: "
              f"{tally.answers} answers ({tally.coarse} coarse-level checks), {len(tally.versions)} versions seen, "
              f"{tally.stale} StaleDatasetError, {len(tally.wrong)} wrong")
    assert not tally.wrong, tally.wrong[:5]
    assert tally.answers > 0 and len(tally.versions) > 1
