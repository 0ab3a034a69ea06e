"""Pieces of tests/reliability/test_concurrency.py shared with the processes it starts.

The store and every append are made from seeds, so the test knows each published version's level 0
before any writer runs.  ``python -m tests.support.concurrency writer OP URL OPTS SEED`` runs one writer
operation; ``... reader URL OPTS STOP`` queries until the file ``STOP`` exists, one answer a line.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import numpy as np

BASE_POINTS = 400
APPEND_POINTS = 60
CHUNK = 25.0
RETENTION = 1.0  # seconds: superseded versions are reclaimed within the run, so readers meet staleness
#: Boxes every reader queries (edges no point of the seeded data sits on).
BOXES = (((10.5, 10.5, 10.5), (60.5, 55.5, 70.5)), ((0.0, 0.0, 0.0), (33.3, 100.0, 100.0)),
         ((70.1, 20.2, 5.3), (99.9, 80.4, 95.5)))


def base_points() -> np.ndarray:
    return np.random.default_rng(1).uniform(0, 100, (BASE_POINTS, 3)).astype(np.float32)


def appended_points(seed: int) -> np.ndarray:
    return np.random.default_rng(1000 + seed).uniform(0, 100, (APPEND_POINTS, 3)).astype(np.float32)


def in_box(points: np.ndarray, box) -> np.ndarray:
    lo, hi = np.asarray(box[0]), np.asarray(box[1])
    return points[np.all((points >= lo) & (points <= hi), axis=1)]


def fingerprint(positions: np.ndarray) -> str:
    """The rows of an answer as a set (order-free: a rechunk reorders them)."""
    rows = np.ascontiguousarray(np.asarray(positions, dtype=np.float32))
    rows = rows[np.lexsort(rows.T[::-1])] if len(rows) else rows.reshape(0, 3)
    return f"{len(rows)}:{hashlib.sha1(rows.tobytes()).hexdigest()}"


def truths(points: np.ndarray) -> dict[str, str]:
    """Answer name -> fingerprint of a version whose level 0 is ``points``."""
    out = {"all": fingerprint(points)}
    for i, box in enumerate(BOXES):
        inside = in_box(points, box)
        out[f"box{i}"] = fingerprint(inside)
        out[f"count{i}"] = str(len(inside))
    return out


def run_writer(op: str, url: str, opts: dict, seed: int) -> None:
    import zvf
    from zvf.errors import InvalidArgumentError

    if op == "append":
        with zvf.open(url, mode="a", storage_options=opts) as ds:
            ds.append_points(appended_points(seed), retention=RETENTION)
    elif op == "pyramid":
        with zvf.open(url, storage_options=opts) as ds:
            built = len(ds.levels) > 1
        if not built:  # a pyramid is built on a store holding level 0 only
            try:
                zvf.build_pyramid(url, [(2, 1)], storage_options=opts, retention=RETENTION)
            except InvalidArgumentError as e:
                # an overlapping pyramid writer published first: the refusal is the right answer, nothing changed
                if "already has levels" not in str(e):
                    raise
    else:
        shape = (CHUNK if seed % 2 else 40.0,) * 3
        zvf.rechunk(url, url, chunk_shape=shape, overwrite=True, storage_options=opts, target_storage_options=opts,
                    retention=RETENTION)


def run_reader(url: str, opts: dict, stop: str) -> None:
    """Fresh datasets (``refresh="auto"``) until ``stop`` exists: one JSON line per answer."""
    import zvf
    from zvf.errors import StaleDatasetError

    i = 0
    while not os.path.exists(stop):
        name = ("all", "box0", "box1", "box2")[i % 4]
        i += 1
        try:
            with zvf.open(url, storage_options=opts, refresh="auto") as ds:
                if name == "all":
                    got = fingerprint(ds.read_all().positions)
                else:
                    got = fingerprint(ds.select(bbox=BOXES[int(name[3:])]).read().positions)
                print(json.dumps({"name": name, "got": got, "version": ds.version}), flush=True)
        except StaleDatasetError:
            print(json.dumps({"name": name, "stale": True}), flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    if sys.argv[1] == "writer":
        run_writer(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), int(sys.argv[5]))
    else:
        run_reader(sys.argv[2], json.loads(sys.argv[3]), sys.argv[4])
