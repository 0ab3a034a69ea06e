"""A process forked after zvf was used (multiprocessing's default start on Linux, ``gunicorn --preload``,
Celery prefork) opens and reads normally.

Before: the child's first call waited forever -- the blocking facade's loop thread and obstore's tokio
runtime both stayed behind in the parent, and a store made in the child hung as well (obstore's runtime
is one per process).  Every child here runs under a deadline and is killed if it hangs.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
from typing import Any

import numpy as np
import pytest

import zvf
import zvf.aio
from tests.support.forks import DEADLINE, in_fork

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")

BOX = ([0.0, 0.0, 0.0], [40.0, 40.0, 40.0])


def _cloud(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 100, (n, 3)), rng.integers(0, 60, n)


def _rows(sel: zvf.Selection) -> list[list[float]]:
    return sorted(map(list, np.asarray(sel.positions).tolist()))


@pytest.fixture
def stores(s3_target, tmp_path) -> dict[str, Any]:
    url, opts = s3_target
    pos, ids = _cloud()
    zvf.write_points(url, pos, chunk_shape=(50, 50, 50), object_ids=ids, storage_options=opts)
    local = str(tmp_path / "local.zarrvectors")
    zvf.write_points(local, pos, chunk_shape=(50, 50, 50))
    with zvf.open(url, storage_options=opts) as ds:
        truth = _rows(ds.query(BOX))
    return {"url": url, "opts": opts, "local": local, "truth": truth, "n": len(pos)}


def test_forked_child_reads_through_every_entry_point(stores):
    url, opts, truth = stores["url"], stores["opts"], stores["truth"]
    inherited = zvf.open(url, storage_options=opts)
    assert _rows(inherited.query(BOX)) == truth  # the parent's facade and obstore runtime are running

    def child() -> dict[str, Any]:
        out: dict[str, Any] = {"inherited": _rows(inherited.query(BOX))}
        with zvf.open(url, storage_options=opts) as ds:
            out["new"] = len(ds.read_all().positions)
        with zvf.open(stores["local"]) as ds:
            out["local"] = len(ds.read_all().positions)

        async def aio() -> list[list[float]]:
            async with await zvf.aio.open(url, storage_options=opts) as ads:
                return _rows(await ads.query(BOX))

        out["aio"] = asyncio.run(aio())
        out["grandchild"] = in_fork(lambda: _rows(inherited.query(BOX)))  # a fork of a fork
        return out

    got = in_fork(child)
    assert got == {"inherited": truth, "new": stores["n"], "local": stores["n"], "aio": truth, "grandchild": truth}
    assert _rows(inherited.query(BOX)) == truth  # the parent goes on as before
    inherited.close()


_PRELOADED: zvf.Dataset | None = None  # a dataset opened before the workers fork (gunicorn --preload)


def _count_in(box: tuple[list[float], list[float]]) -> int:
    assert _PRELOADED is not None
    return len(_PRELOADED.query(box).positions)


def test_multiprocessing_fork_pool(stores):
    global _PRELOADED
    _PRELOADED = zvf.open(stores["url"], storage_options=stores["opts"])
    boxes = [([x, 0.0, 0.0], [x + 25.0, 100.0, 100.0]) for x in (0.0, 25.0, 50.0, 75.0)]
    want = [_count_in(b) for b in boxes]
    try:
        with multiprocessing.get_context("fork").Pool(2) as pool:
            got = pool.map_async(_count_in, boxes).get(timeout=DEADLINE)
    finally:
        _PRELOADED.close()
        _PRELOADED = None
    assert got == want and sum(got) == stores["n"]


def test_a_store_the_caller_built_and_a_memory_store_are_made_again(stores, s3_endpoint, memory_url):
    from obstore.store import S3Store

    url, opts = stores["url"], stores["opts"]
    bucket = url.removeprefix("s3://").split("/")[0]
    built = S3Store(bucket, prefix="data", endpoint=s3_endpoint.endpoint, access_key_id=opts["access_key_id"],
                    secret_access_key=opts["secret_access_key"], region=opts["region"],
                    client_options={"allow_http": True})
    mine = zvf.open(built)
    pos, _ = _cloud(500, seed=3)
    zvf.write_points(memory_url, pos, chunk_shape=(50, 50, 50))
    memory = zvf.open(memory_url)
    assert _rows(mine.query(BOX)) == stores["truth"]
    in_memory = len(memory.read_all().positions)

    def child() -> list[Any]:
        with zvf.open(memory_url) as again:  # the registry's store, as the fork left it
            return [_rows(mine.query(BOX)), len(memory.read_all().positions), len(again.read_all().positions)]

    assert in_fork(child) == [stores["truth"], in_memory, in_memory]
    mine.close()
    memory.close()


def test_a_child_forked_before_any_request_uses_obstore_as_it_is(stores):
    """Nothing to make again when no obstore runtime ran at the fork: the package itself serves the child."""
    code = f"""
import json, os, sys
sys.path.insert(0, {str(__import__("pathlib").Path(__file__).resolve().parents[2])!r})
import zvf, obstore
from zvf.io import fork
from tests.support.forks import in_fork
def child():
    with zvf.open({stores["local"]!r}) as ds:
        return [len(ds.read_all().positions), fork.obstore() is obstore]
print(json.dumps(in_fork(child)))
"""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [stores["n"], True]
