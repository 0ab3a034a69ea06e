"""A web service answering box and object queries from a ZVF store on S3 (aiohttp + zvf.aio).

    GET /bbox?lo=10,10,10&hi=30,30,30   -> {"count", "positions", "object_ids"}
    GET /object/<id>                    -> {"id", "count", "positions", "centroid"}
    GET /stats                          -> the dataset's request counters

The dataset is opened ONCE at startup and shared by every request: one
concurrency limit, one set of caches and in-flight reads shared between
concurrent requests -- the metadata and object index are fetched once, not
per request.

Run: python examples/service.py
(starts an in-process S3 server, writes a store, serves on 127.0.0.1:<free port>,
sends a few concurrent requests, checks the answers, shuts everything down)
"""

import asyncio

import numpy as np
from aiohttp import ClientSession, web

import zvf
from zvf.errors import InvalidArgumentError
from zvf.testing import EmbeddedS3

DATASET = web.AppKey("dataset", zvf.aio.AsyncDataset)


def _point(text: str, name: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except (AttributeError, ValueError):
        raise web.HTTPBadRequest(text=f"{name} must be comma-separated numbers, e.g. 10,20,5") from None


async def bbox(request: web.Request) -> web.Response:
    ds = request.app[DATASET]
    lo, hi = _point(request.query.get("lo"), "lo"), _point(request.query.get("hi"), "hi")
    try:
        sel = await ds.query((lo, hi))
    except InvalidArgumentError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None
    return web.json_response({"count": len(sel), "positions": sel.positions.tolist(),
                              "object_ids": None if sel.object_ids is None else sel.object_ids.tolist()})


async def one_object(request: web.Request) -> web.Response:
    ds = request.app[DATASET]
    try:
        oid = int(request.match_info["oid"])
        sel = await ds.read_object(oid)
    except ValueError as exc:  # not an integer, or not an object of the store (InvalidArgumentError)
        raise web.HTTPNotFound(text=str(exc)) from None
    centroid = sel.positions.mean(axis=0).tolist() if len(sel) else None
    return web.json_response({"id": oid, "count": len(sel), "positions": sel.positions.tolist(),
                              "centroid": centroid})


async def stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[DATASET].stats.snapshot())


def make_app(target: str, storage_options: dict | None = None) -> web.Application:
    async def dataset(app: web.Application):
        app[DATASET] = await zvf.aio.open(target, storage_options=storage_options)  # once, at startup
        yield
        await app[DATASET].close()

    app = web.Application()
    app.cleanup_ctx.append(dataset)
    app.router.add_get("/bbox", bbox)
    app.router.add_get(r"/object/{oid}", one_object)
    app.router.add_get("/stats", stats)
    return app


async def main() -> None:
    s3 = EmbeddedS3.start()
    try:
        opts = s3.storage_options()
        target = f"s3://{s3.create_bucket()}/cells.zarrvectors"
        rng = np.random.default_rng(0)
        n = 50_000
        points = rng.uniform(0, 100, (n, 3)).astype(np.float32)
        owners = rng.integers(0, 500, n)
        await zvf.aio.write_points(target, points, object_ids=owners, chunk_shape=(25, 25, 25),
                                   bounds=([0, 0, 0], [100, 100, 100]), compression="zstd", storage_options=opts)

        runner = web.AppRunner(make_app(target, opts))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = "http://{}:{}".format(*runner.addresses[0][:2])
        print(f"serving {target} at {base}")
        try:
            boxes = [([10, 10, 10], [20, 20, 20]), ([0, 40, 60], [15, 55, 75]), ([80, 0, 0], [100, 10, 12])]
            ids = [3, 141, 499]
            async with ClientSession() as http:

                async def get(path: str):
                    async with http.get(base + path) as r:
                        return r.status, (await r.json() if r.content_type == "application/json" else await r.text())

                paths = [f"/bbox?lo={','.join(map(str, lo))}&hi={','.join(map(str, hi))}" for lo, hi in boxes]
                paths += [f"/object/{i}" for i in ids] + ["/object/100000", "/bbox?lo=1,2&hi=3,4"]
                answers = await asyncio.gather(*(get(p) for p in paths))  # concurrently, one shared dataset

                for (lo, hi), (status, body) in zip(boxes, answers):
                    inside = np.all((points >= lo) & (points <= hi), axis=1)
                    assert status == 200 and body["count"] == int(inside.sum()), (lo, hi, status)
                    got = np.asarray(body["positions"], dtype=np.float32).reshape(-1, 3)
                    want = points[inside]
                    assert np.array_equal(got[np.lexsort(got.T)], want[np.lexsort(want.T)])
                    assert sorted(body["object_ids"]) == sorted(owners[inside].tolist())
                    print(f"GET /bbox {lo}..{hi}: {body['count']} points")
                for oid, (status, body) in zip(ids, answers[len(boxes):]):
                    mine = points[owners == oid]
                    assert status == 200 and body["count"] == len(mine), (oid, status)
                    assert np.allclose(body["centroid"], mine.mean(axis=0), atol=1e-3)
                    centroid = np.round(body["centroid"], 2).tolist()
                    print(f"GET /object/{oid}: {body['count']} points, centroid {centroid}")
                assert answers[-2][0] == 404 and "100000" in answers[-2][1], answers[-2]
                assert answers[-1][0] == 400, answers[-1]
                print("GET /object/100000 -> 404; GET /bbox with 2-D corners -> 400")

                _, counters = await get("/stats")
                print(f"{len(paths)} HTTP requests served with {counters['requests']} store requests "
                      f"(metadata fetched once at startup, {counters['inflight_shared']} reads shared in flight)")
        finally:
            await runner.cleanup()
    finally:
        s3.stop()


if __name__ == "__main__":
    asyncio.run(main())
