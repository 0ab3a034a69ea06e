"""The interpreter's exit waits for obstore requests still running, and only for them (issue 26: a cold
process -- a serverless function, a CLI command -- paid a fixed 50 ms pause at exit after its last query)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

import zvf
from tests.support.processes import zvf_env

BOX = ([0.0, 0.0, 0.0], [50.0, 50.0, 50.0])
# the child's first atexit handler runs last: how long the exit's other handlers (zvf's pause) took
CHILD = """
import atexit, json, sys, time
atexit.register(lambda: print(json.dumps({{"exit_handlers": time.perf_counter() - ENDED}}), flush=True))
import asyncio, threading
import zvf.aio

async def query():
    async with await zvf.aio.open({url!r}, storage_options={opts!r}) as ds:
        return len(await ds.query({box!r}))

if {in_flight!r}:  # a loop in another thread (a service's) still waits for a slow answer
    opened, go = threading.Event(), threading.Event()
    async def slow():
        ds = await zvf.aio.open({url!r}, storage_options={opts!r})
        opened.set()
        await asyncio.to_thread(go.wait)
        await ds.query({box!r})
    threading.Thread(target=lambda: asyncio.run(slow()), daemon=True).start()
    opened.wait()
    print(json.dumps({{"opened": True}}), flush=True)
    sys.stdin.readline()  # the parent slowed the store down
    go.set()
    time.sleep(0.3)  # the query's requests are on the wire
else:
    print(json.dumps({{"points": asyncio.run(query())}}), flush=True)
ENDED = time.perf_counter()
"""


def _child(url: str, opts: dict, *, in_flight: bool, proxy=None) -> tuple[int, list[dict]]:
    """Run CHILD; with ``in_flight``, slow ``proxy`` down once the child opened the store."""
    code = CHILD.format(url=url, opts=opts, box=BOX, in_flight=in_flight)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=zvf_env())
    try:
        lines = [proc.stdout.readline()]
        if in_flight:
            proxy.latency = 5.0  # every request of the query is still running when the main thread ends
            proc.stdin.write("go\n")  # not communicate(): it would lose what readline() buffered
        proc.stdin.close()
        out = proc.stdout.read()
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, [json.loads(line) for line in lines + out.splitlines() if line.strip()]


def test_an_exit_after_the_last_answer_does_not_pause(s3_target):
    url, opts = s3_target
    pos = np.random.default_rng(26).uniform(0, 100, (2_000, 3)).astype(np.float32)
    zvf.write_points(url, pos, chunk_shape=(25.0, 25.0, 25.0), compression="zstd", storage_options=opts)
    status, out = _child(url, opts, in_flight=False)
    assert status == 0
    assert out[0]["points"] == int(np.all((pos >= BOX[0]) & (pos <= BOX[1]), axis=1).sum())
    assert out[1]["exit_handlers"] < 0.03  # it slept 0.05 s whatever was running


def test_an_exit_with_requests_on_the_wire_waits_for_them(s3_proxied):
    url, opts, proxy = s3_proxied
    pos = np.random.default_rng(26).uniform(0, 100, (2_000, 3)).astype(np.float32)
    zvf.write_points(url, pos, chunk_shape=(25.0, 25.0, 25.0), compression="zstd", storage_options=opts)
    status, out = _child(url, opts, in_flight=True, proxy=proxy)
    assert status == 0
    assert out[0] == {"opened": True}
    assert 0.045 <= out[1]["exit_handlers"] < 1.0  # the pause's bound: it cannot wait for the answers
