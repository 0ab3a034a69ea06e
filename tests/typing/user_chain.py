# pyright: strict
"""Checked by mypy --strict and pyright (strict), never run: a user's query chain over the public API.

Every value it touches has a concrete type (``assert_type``); pyright's strict mode
rejects any Unknown, and tests/typing/test_types.py fails on a revealed ``Any``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import assert_type, reveal_type

import numpy as np
import numpy.typing as npt

import zvf
import zvf.aio

positions: npt.NDArray[np.float32] = np.zeros((4, 3), dtype=np.float32)


def blocking() -> None:
    ds = zvf.open("s3://bucket/cloud", storage_options={"region": "eu-west-1"})
    query = ds.select(bbox=([0, 0, 0], [10, 10, 10]), where={"intensity": (0.5, None)})
    narrower = query.select(objects=[1, 2, 3], limit=100).select(level="auto", max_vertices=1_000)
    reveal_type(narrower)
    assert_type(narrower, zvf.Query)
    assert_type(narrower.read(), zvf.Selection)
    assert_type(narrower.count(), int)
    assert_type(narrower.object_ids(), npt.NDArray[np.int64])
    assert_type(zvf.open("s").select().select(near=([1, 2, 3], 4.0)).count(), int)
    assert_type(ds.select(groups=np.arange(3), clip=True, attributes=["rgb"]).iter(batch=8), Iterator[zvf.Selection])
    assert_type(narrower.explain(), str)
    for sel in query.iter(prefetch=2):
        assert_type(sel, zvf.Selection)
    narrowing: zvf.SelectArgs = {"bbox": ([0, 0, 0], [5, 5, 5]), "attributes": "rgb"}
    reveal_type(ds.select(**narrowing).select(**narrowing).read())
    ds.close()


async def asynchronous() -> None:
    async with await zvf.aio.open("s3://bucket/cloud") as ds:
        query = ds.select(bbox=([0, 0, 0], [10, 10, 10])).select(where={"kind": [1, 2]})
        assert_type(query, zvf.aio.AsyncQuery)
        assert_type(await query.read(), zvf.Selection)
        assert_type(await query.count(), int)
        assert_type(await query.object_ids(), npt.NDArray[np.int64])
        async for sel in query.select(limit=10).iter():
            assert_type(sel, zvf.Selection)
