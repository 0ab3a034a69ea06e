"""Bin-narrowed partial reads: same answers as whole-cell reads, fewer bytes when the cost model says so."""

import math

import numpy as np
import pytest

import zvf
from zvf.config import tuned


@pytest.fixture(scope="module")
def big_cells(tmp_path_factory):
    rng = np.random.default_rng(11)
    pos = rng.uniform(0, 100, (200_000, 3)).astype(np.float32)
    val = rng.random(len(pos)).astype(np.float32)
    path = str(tmp_path_factory.mktemp("planner") / "big.zarrvectors")
    zvf.write_points(path, pos, chunk_shape=(50, 50, 50), bin_shape=(10, 10, 10), bounds=([0] * 3, [100] * 3),
                     attributes={"val": val})
    return path, pos, val


def run(path, box, **opts):
    with zvf.open(path, storage_options=opts or None) as ds:
        sel = ds.query(box)
        first = ds.stats.snapshot()
        again = ds.query(box)  # fragment indexes are cached now
        second = ds.stats.snapshot()
    assert len(again) == len(sel)
    return sel, first, {k: second[k] - first[k] for k in ("requests", "bytes", "round_trips")}


def test_narrowed_reads_match_whole_reads_with_fewer_bytes(big_cells):
    path, pos, val = big_cells
    box = ([12, 12, 12], [33, 38, 29])
    truth = np.all((pos >= box[0]) & (pos <= box[1]), axis=1)
    with tuned(max_overread=math.inf):  # time alone, and bytes are free: one round trip
        whole, w_stats, _ = run(path, box, latency_hint=0.02, bandwidth_hint=1e12)
    narrow, n_stats, again = run(path, box, latency_hint=0.0001, bandwidth_hint=1e6)  # bytes are dear
    for sel in (whole, narrow):
        assert len(sel) == truth.sum()
        got = {(*tuple(p), v) for p, v in zip(sel.positions.tolist(), sel.attributes["val"].tolist())}
        assert got == {(*tuple(p), v) for p, v in zip(pos[truth].tolist(), val[truth].tolist())}
    assert n_stats["bytes"] < w_stats["bytes"] / 2
    # The second narrowed query reuses the cached fragment indexes: no fragment reads at all.
    assert again["bytes"] < n_stats["bytes"]
