"""A cold process's first point query imports the point readers only (issue 26: a serverless function pays
for every import on its first call): no object reader, ChunkSet, link, bulk read, file export, planner in
words, count or batch stream, Arrow/pandas columns, seed-layout reader, validator or writer -- each is
imported by the call that needs it; manifests and dense ids only with an object index -- and not
``numpy.ma`` either (numpy 2.4's first plain ``np.unique`` imports it: ~15 ms)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import zvf
from tests.support.processes import zvf_env

BOX = ([100.0, 100.0, 100.0], [150.0, 150.0, 150.0])
# modules (and packages, with everything under them) a point query never needs
NOT_IMPORTED = ("zvf.read.objects", "zvf.read.box", "zvf.read.chunkset", "zvf.read.links", "zvf.read.bulk",
                "zvf.read.sweep", "zvf.read.export", "zvf.read.writers", "zvf.read.npz", "zvf.read.query.objects",
                "zvf.read.query.chunked", "zvf.read.query.plan", "zvf.read.query.count", "zvf.read.batches",
                "zvf.read.columns", "zvf.read.seed", "zvf.validation", "zvf.write", "zvf.lifecycle",
                "zvf.converters", "zvf.distributed", "zvf.neuroglancer", "zvf.cli", "zvf.testing")
BLOCKING = """
import json, sys, zvf
with zvf.open({url!r}) as ds:
    sel = ds.query({box!r})
print(json.dumps([len(sel), sel.object_ids is not None,
                  sorted(m for m in sys.modules if m.startswith("zvf") or m == "numpy.ma")]))
"""
CHUNKS = """
import json, sys, zvf
with zvf.open({url!r}) as ds:
    n = sum(len(sel) for sel in ds.iter_chunks(batch_chunks=4))
print(json.dumps([n, sorted(m for m in sys.modules if m.startswith("zvf"))]))
"""
ASYNC = """
import asyncio, json, sys, zvf.aio
async def main():
    async with await zvf.aio.open({url!r}) as ds:
        return await ds.query({box!r})
sel = asyncio.run(main())
print(json.dumps([len(sel), sel.object_ids is not None,
                  sorted(m for m in sys.modules if m.startswith("zvf") or m == "numpy.ma")]))
"""


@pytest.fixture(scope="module", params=["plain", "with_ids", "auto"])
def point_store(request, tmp_path_factory):
    rng = np.random.default_rng(26)
    pos = rng.uniform(0, 1000, (20_000, 3)).astype(np.float32)
    ids = rng.integers(0, 50, len(pos)) if request.param == "with_ids" else None
    url = str(tmp_path_factory.mktemp("cold") / "pts.zarrvectors")
    layout = ({"chunk_shape": "auto", "bin_shape": "auto"} if request.param == "auto"  # seekable cells
              else {"chunk_shape": (250.0, 250.0, 250.0)})
    zvf.write_points(url, pos, **layout, object_ids=ids, compression="zstd")
    inside = int(np.all((pos >= BOX[0]) & (pos <= BOX[1]), axis=1).sum())
    return url, inside, ids is not None


@pytest.mark.parametrize("code", [BLOCKING, ASYNC], ids=["zvf.open", "zvf.aio.open"])
def test_a_point_query_imports_only_the_point_readers(point_store, code):
    url, inside, with_ids = point_store
    done = subprocess.run([sys.executable, "-c", code.format(url=url, box=BOX)], capture_output=True, text=True,
                          env=zvf_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    count, has_owners, modules = json.loads(done.stdout)
    assert (count, has_owners) == (inside, with_ids)
    assert "zvf.read.query.points" in modules  # the child did read through the query path
    loaded = [m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_IMPORTED)]
    assert not loaded, loaded
    assert "numpy.ma" not in modules
    # the object index (its manifests, its dense ids) only where the level has one (its owners label the points)
    assert ("zvf.read.object_index" in modules) == ("zvf.format.manifest" in modules) == with_ids
    assert ("zvf.read.dense" in modules) == with_ids


def test_a_point_clouds_bulk_read_leaves_the_object_readers_alone(point_store):
    url, _, _ = point_store
    done = subprocess.run([sys.executable, "-c", CHUNKS.format(url=url)], capture_output=True, text=True,
                          env=zvf_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    count, modules = json.loads(done.stdout)
    assert count == 20_000
    assert "zvf.read.bulk" in modules
    bulk = ("zvf.read.bulk", "zvf.read.batches")  # a bulk read streams its batches
    loaded = [m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_IMPORTED if n not in bulk)]
    assert not loaded, loaded
