"""A pyramid build holds at most ``pyramid_block_bytes`` of estimated block memory at once (a larger block
runs alone), whatever ``pyramid_blocks_in_flight`` allows, and the budget never changes what is built."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

import zvf.aio as za
from tests.support.store_tree import tree
from zvf.config import tuned
from zvf.lifecycle.pyramid import coarsen as coarsening
from zvf.lifecycle.pyramid import tasks


async def _store(path: Path) -> None:
    rng = np.random.default_rng(2)
    pos = rng.uniform(0, 100, (100_000, 3)).astype(np.float32)  # ~100 points in each of 1,000 chunks
    await za.write_points(str(path), pos, chunk_shape=(10.0,) * 3, attributes={"a": rng.random(len(pos))})


async def test_blocks_in_flight_stay_within_the_budget(tmp_path, monkeypatch):
    small, big = tmp_path / "small" / "s", tmp_path / "big" / "s"
    await _store(small)
    await _store(big)
    await za.build_pyramid(str(big), [(2, 1), (2, 1)])  # the default budget: 8 blocks in flight here

    running = {"now": 0, "most": 0, "blocks": 0}
    lock = threading.Lock()
    coarsen = coarsening.coarsen_block

    def counted(plan, data, **kw):
        with lock:
            running["now"] += 1
            running["blocks"] += 1
            running["most"] = max(running["most"], running["now"])
        time.sleep(0.002)  # let other blocks catch up, were they allowed in
        try:
            return coarsen(plan, data, **kw)
        finally:
            with lock:
                running["now"] -= 1

    # every level-1 block: 2 x 2 x 2 chunks of ~100 rows, each row float32 xyz and a float64 attribute
    per_block = 800 * (2 * (12 + 8) + coarsening.COARSEN_ROW_BYTES)
    monkeypatch.setattr(tasks, "coarsen_block", counted)
    with tuned(pyramid_block_bytes=2 * per_block):
        await za.build_pyramid(str(small), [(2, 1)])
    assert running["blocks"] == 125
    assert running["most"] <= 2

    running.update(most=0, blocks=0)
    one = tmp_path / "one" / "s"
    await _store(one)
    with tuned(pyramid_block_bytes=1):  # every block is larger than the budget: one at a time
        await za.build_pyramid(str(one), [(2, 1), (2, 1)])
    assert running["most"] == 1
    assert tree(one) == tree(big)
