"""Batched gets (local files, memory): runs of whole-object reads in worker-thread calls give what
one get each gives -- same bytes, None for missing keys, the same errors and request counts."""

from __future__ import annotations

import re

import numpy as np
import pytest

from zvf.config import tuning
from zvf.errors import InvalidArgumentError
from zvf.io.executor import Executor
from zvf.io.store import open_store


def _items(n: int) -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(3)
    return [(f"a/c/{i // 5}/{i % 5}", rng.integers(0, 256, int(rng.integers(0, 200)), np.uint8).tobytes())
            for i in range(n)]


async def _filled(url: str, items) -> Executor:
    ex = Executor(open_store(url, mode="w"))
    await ex.put_batch(items)
    return ex


@pytest.mark.parametrize("where", ["memory", "local", "local read-only"])
async def test_get_many_returns_every_object_in_order_and_none_for_missing(where, tmp_path):
    items = _items(5 * tuning().get_batch)
    url = "memory://" if where == "memory" else str(tmp_path / "s")
    ex = await _filled(url, items)
    if where == "local read-only":
        ex = Executor(open_store(url, mode="r"))
    assert ex.batch_gets
    keys = [k for k, _ in items]
    keys.insert(7, "a/missing")
    keys.insert(40, "a/c/0/0/below-a-file")  # a path under an existing object: missing too
    before = ex.stats.requests
    got = await ex.get_many(keys)
    want = dict(items)
    assert [None if g is None else bytes(g) for g in got] == [want.get(k) for k in keys]
    assert ex.stats.requests - before == len(keys)  # counted per object, as one get each would be
    assert ex.stats.bytes >= sum(len(d) for _, d in items)


async def test_get_many_reports_a_failure_through_get_naming_the_key():
    items = _items(2 * tuning().get_batch)
    ex = await _filled("memory://", items)
    keys = [k for k, _ in items]
    keys[5] = "bad/../key"
    with pytest.raises(InvalidArgumentError, match=re.escape("bad/../key")):
        await ex.get_many(keys)


async def test_get_many_without_blocking_gets_goes_one_get_each(monkeypatch):
    items = _items(3 * tuning().get_batch)
    ex = await _filled("memory://", items)
    monkeypatch.setattr(ex.transport, "blocking_gets", False)
    assert not ex.batch_gets
    got = await ex.get_many([k for k, _ in items])
    assert [bytes(g) for g in got if g is not None] == [d for _, d in items]
