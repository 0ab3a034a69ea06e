"""A serverless function (AWS Lambda style): open the store once per cold start, read objects per call.

``handler(event, context)`` uses the BLOCKING facade (``zvf.open``,
``ds.read_objects``), as a plain Python function runtime calls it.  The
opened dataset lives in a module-level cache, so it survives between warm
invocations of the same container: a warm call makes only the requests its
objects' data needs -- no metadata, no object index -- while a cold call also
pays for opening the store.

    event = {"ids": [3, 17, 42]}  ->  {"objects": [{"id", "vertices", "centroid"}, ...],
                                       "cold": bool, "requests": int}

Configuration comes from the environment, as in a deployed function:
ZVF_TARGET (e.g. s3://bucket/cells.zarrvectors) and optionally ZVF_ENDPOINT
(an S3-compatible endpoint; credentials from the usual AWS_* variables).

Run: python examples/serverless_handler.py
(starts an in-process S3 server, writes a store, then simulates a cold start and
warm calls, printing the requests each call made)
"""

import os
import time

import numpy as np

import zvf

_dataset = None  # module-level: kept by the runtime between warm invocations
_opens = 0


def _open():
    global _dataset, _opens
    if _dataset is None:
        options = {"endpoint": os.environ["ZVF_ENDPOINT"]} if os.environ.get("ZVF_ENDPOINT") else None
        _dataset = zvf.open(os.environ["ZVF_TARGET"], storage_options=options)
        _opens += 1
    return _dataset


def handler(event, context=None) -> dict:
    cold = _dataset is None
    ds = _open()
    before = 0 if cold else ds.stats.requests  # a cold call counts the open too
    ids = [int(i) for i in event["ids"]]
    objects = ds.read_objects(ids)
    return {
        "objects": [{"id": i, "vertices": len(sel),
                     "centroid": sel.positions.mean(axis=0).round(3).tolist() if len(sel) else None}
                    for i, sel in zip(ids, objects)],
        "cold": cold,
        "requests": ds.stats.requests - before,
    }


def simulate() -> None:
    from zvf.testing import EmbeddedS3

    s3 = EmbeddedS3.start()
    try:
        os.environ.update(AWS_ACCESS_KEY_ID=s3.access_key, AWS_SECRET_ACCESS_KEY=s3.secret_key,
                          AWS_REGION=s3.region, AWS_ALLOW_HTTP="true")
        os.environ["ZVF_ENDPOINT"] = s3.endpoint
        os.environ["ZVF_TARGET"] = target = f"s3://{s3.create_bucket()}/cells.zarrvectors"
        rng = np.random.default_rng(1)  # 1000 compact "cells" of 40 points each
        centers = rng.uniform(5, 95, (1000, 3))
        owners = np.repeat(np.arange(1000), 40)
        points = (centers[owners] + rng.normal(0, 1.5, (len(owners), 3))).clip(0, 100).astype(np.float32)
        zvf.write_points(target, points, object_ids=owners, chunk_shape=(25, 25, 25),
                         bounds=([0, 0, 0], [100, 100, 100]), compression="zstd",
                         storage_options={"endpoint": s3.endpoint})

        with zvf.open(target, storage_options={"endpoint": s3.endpoint}) as probe:
            open_cost = probe.stats.requests  # what opening alone costs (metadata documents)

        events = [{"ids": [3, 17, 42]}, {"ids": [3, 17, 42]}, {"ids": [500, 501]}, {"ids": [999]},
                  {"ids": [3, 17, 42]}]
        results = []
        for k, event in enumerate(events):
            t0 = time.perf_counter()
            out = handler(event, context=None)
            ms = (time.perf_counter() - t0) * 1000
            results.append(out)
            print(f"call {k}: {'cold' if out['cold'] else 'warm'} {event['ids']} -> "
                  f"{[o['vertices'] for o in out['objects']]} vertices, {out['requests']} requests, {ms:.0f} ms")
            for o in out["objects"]:
                mine = points[owners == o["id"]]
                assert o["vertices"] == len(mine), o
                assert np.allclose(o["centroid"], mine.mean(axis=0), atol=1e-2), o

        cold, warm = results[0], results[1:]
        assert cold["cold"] and not any(r["cold"] for r in warm) and _opens == 1
        # The same objects again: no metadata, no object index -- no more than the cold call minus
        # what opening alone costs (opening already brought this small store's manifests).
        assert warm[0]["requests"] <= cold["requests"] - open_cost, (warm[0], cold, open_cost)
        assert warm[-1]["requests"] == warm[0]["requests"]  # steady state: only the data cells
        print(f"opening costs {open_cost} requests; the cold call made {cold['requests']}, warm calls "
              f"{[r['requests'] for r in warm]}")
    finally:
        if _dataset is not None:
            _dataset.close()
        s3.stop()


if __name__ == "__main__":
    simulate()
