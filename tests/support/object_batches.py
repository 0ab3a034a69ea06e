"""Object inputs cut into batches, for the streaming and Dask object writers' tests (which compare them
with the in-memory writers' stores, file for file)."""

from __future__ import annotations

import numpy as np

#: storage options each streaming test runs under
OPTS = [{"ndim": 3, "compression": None, "shard_shape": None}, {"ndim": 2, "compression": "zstd", "shard_shape": 2},
        {"ndim": 3, "compression": "zstd", "shard_shape": (1, 2, 2)}]


def kw_of(opt: dict) -> dict:
    """The writer keywords of one of ``OPTS`` (25-unit chunks)."""
    return {"chunk_shape": (25.0,) * opt["ndim"], "compression": opt["compression"], "shard_shape": opt["shard_shape"]}


def graph_batches(rng, sizes, ndim, *, skeleton=False, mesh=False):
    """Batches (edges/faces local to each) and their concatenation (global indices)."""
    batches, cat, base, tree = [], {"pos": [], "rec": [], "oid": [], "a": [], "la": []}, 0, 0
    for s in sizes:
        pos = np.clip(rng.uniform(0, 80, ndim) + np.cumsum(rng.normal(0, 9, (s, ndim)), 0), -20, 100)
        pos = pos.astype(np.float32)
        if skeleton:  # trees of ~8 vertices, parent shortly before the child
            oid = np.repeat(np.arange(tree, tree + s // 8 + 1), 8)[:s]
            tree += s // 8 + 1
            child = np.flatnonzero(np.r_[False, oid[1:] == oid[:-1]]) if s else np.zeros(0, np.int64)
            par = np.maximum(child - rng.integers(1, 3, len(child)), child - (child - np.searchsorted(oid, oid[child])))
            rec = np.stack([child, par], 1)
        elif mesh:
            i = rng.integers(0, max(s - 2, 1), s // 2) if s > 2 else np.zeros(0, np.int64)
            rec = np.stack([i, i + 1, i + 2], 1)
            oid = rng.integers(0, 3, s) * 5
        else:
            i = rng.integers(0, max(s - 3, 1), s) if s > 3 else np.zeros(0, np.int64)
            rec = np.stack([i, i + rng.integers(0, 3, len(i))], 1)  # self loops too
            oid = rng.integers(0, 4, s) * 3 + 2
        a = rng.random((s, 2)).astype(np.float32)
        la = rng.integers(-5, 5, len(rec)).astype(np.int16)
        b = {"vertices" if mesh else "positions": pos, "faces" if mesh else "edges": rec, "object_ids": oid,
             "attributes": {"a": a}}
        if not mesh:
            b["link_attributes"] = {"la": la}
        batches.append(b)
        for k, v in zip(("pos", "rec", "oid", "a", "la"), (pos, rec + base, oid, a, la)):
            cat[k].append(v)
        base += s
    return batches, {k: np.concatenate(v) for k, v in cat.items()}
