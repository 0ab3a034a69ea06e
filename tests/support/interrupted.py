"""The process tests/api/test_interrupt.py sends SIGINT to: ``python -m tests.support.interrupted write
TARGET OPTS N CHUNK`` writes a cloud of N points and, interrupted or not, reports what the store holds;
``... read TARGET OPTS`` loops blocking iterations then queries until interrupted.  The last line
printed is ``RESULT <json>``."""

from __future__ import annotations

import json
import signal
import sys
import time

import numpy as np

import zvf
from zvf.errors import IncompleteStoreError, StoreNotFoundError

BOUNDS = ([0.0, 0.0, 0.0], [100.0, 100.0, 100.0])
BOX = ([10.0, 10.0, 10.0], [60.0, 70.0, 80.0])
WAIT_AFTER = 1.5  # s the child stays alive after the interrupt, watching for late writes


def cloud(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(42)
    return rng.uniform(0.0, 100.0, (n, 3)).astype(np.float32), rng.random(n, dtype=np.float32)


def write_cloud(target: str, opts: dict, n: int, chunk: float, *, overwrite: bool = False) -> zvf.WriteSummary:
    pos, v = cloud(n)
    return zvf.write_points(target, pos, chunk_shape=(chunk,) * 3, bounds=BOUNDS, attributes={"v": v},
                            overwrite=overwrite, storage_options={**opts, "concurrency": 4})


def _keys(target: str, opts: dict) -> list[str]:
    from zvf.api.sync import _call
    from zvf.io.executor import Executor
    from zvf.io.store import open_store

    try:
        handle = open_store(target, storage_options=opts)
    except StoreNotFoundError:
        return []
    return sorted(k for k, _ in _call(Executor(handle).list, ""))


def _loop_tasks() -> int:
    """Tasks alive on the facade's event loop (the portal's own included)."""
    import asyncio

    from zvf.api.sync import _call

    async def count() -> int:
        return len(asyncio.all_tasks())

    return _call(count)


def _child_write(target: str, opts: dict, n: int, chunk: float) -> dict:
    out: dict = {}
    print("ready", flush=True)
    try:
        write_cloud(target, opts, n, chunk)
        out["outcome"] = "finished"
    except KeyboardInterrupt:
        out["outcome"] = "interrupted"
    out["returned_at"] = time.monotonic()
    keys = _keys(target, opts)
    time.sleep(WAIT_AFTER)  # the old facade kept writing here, then published the root
    later = _keys(target, opts)
    out.update(keys_at_return=len(keys), keys_after_wait=len(later), new_keys=sorted(set(later) - set(keys))[:5],
               root="zarr.json" in later)
    try:
        zvf.open(target, storage_options=opts)
        out["open"] = "opened"
    except (IncompleteStoreError, StoreNotFoundError) as exc:
        out["open"] = type(exc).__name__
    out["validate_ok"] = zvf.validate(target, storage_options=opts).ok
    t0 = time.monotonic()
    out["rerun_vertices"] = write_cloud(target, opts, n, chunk, overwrite=True).vertex_count  # the notebook re-run
    out["rerun_seconds"] = time.monotonic() - t0
    return out


def _child_read(target: str) -> dict:
    out: dict = {}
    with zvf.open(target) as ds:
        base = _loop_tasks()
        for phase, step in [("iterate", lambda: [None for _ in ds.iter_chunks(batch_chunks=1, prefetch=4)]),
                            ("query", lambda: ds.query(BOX))]:
            print(phase, flush=True)
            try:
                while True:
                    step()
            except KeyboardInterrupt:
                out[phase] = "interrupted"
            requests = ds.stats.requests
            time.sleep(0.3)
            out[f"{phase}_late_requests"] = ds.stats.requests - requests
            out[f"{phase}_extra_tasks"] = _loop_tasks() - base
        out["rows_after"] = len(ds.query(BOX))
    return out


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a background launcher may have set SIG_IGN
    mode, target, opts, *rest = argv
    if mode == "write":
        out = _child_write(target, json.loads(opts), int(rest[0]), float(rest[1]))
    else:
        out = _child_read(target)
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
