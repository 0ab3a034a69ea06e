"""A web service answering box and object queries from a ZVF store on S3 (aiohttp + zvf.aio).

    GET /bbox?lo=10,10,10&hi=30,30,30   -> {"count", "positions", "object_ids"}
    GET /object/<id>                    -> {"id", "count", "positions", "centroid"}
    GET /stats                          -> the dataset's request counters

The dataset is opened ONCE at startup and shared by every request: one
concurrency limit, one set of caches and in-flight reads shared between
concurrent requests -- the metadata and object index are fetched once, not
per request.

Answers are capped: a response that would be larger than ``max_response_bytes`` of
JSON (``make_app(..., max_response_bytes=...)``, default 16 MiB) is refused
with ``413 Payload Too Large`` naming the limit.  A box query reads at most the
rows that fit (``select(..., limit=)``), so a box over the whole store costs a
bounded read, not gigabytes of JSON built in memory.

Run: python examples/service.py
(starts an in-process S3 server, writes a store, serves on 127.0.0.1:<free port>,
sends a few concurrent requests, checks the answers, shuts everything down)
"""

import asyncio
import json

import numpy as np
from aiohttp import ClientSession, web

import zvf
from zvf.errors import InvalidArgumentError
from zvf.testing import EmbeddedS3

DATASET = web.AppKey("dataset", zvf.aio.AsyncDataset)
MAX_BYTES = web.AppKey("max_response_bytes", int)
#: the default cap on one response's JSON
MAX_RESPONSE_BYTES = 16 << 20
# Most JSON bytes one vertex takes in an answer: a float's repr is at most 24 characters (", " apart), an id 20.
ROW_BYTES = 3 * 26 + 4 + 22


def _point(text: str, name: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",")]
    except (AttributeError, ValueError):
        raise web.HTTPBadRequest(text=f"{name} must be comma-separated numbers, e.g. 10,20,5") from None


def _too_large(request: web.Request, what: str) -> web.HTTPRequestEntityTooLarge:
    limit = request.app[MAX_BYTES]
    return web.HTTPRequestEntityTooLarge(
        max_size=limit, actual_size=limit + 1,
        text=f"{what}: the answer is larger than this service's limit of {limit} bytes of JSON "
             f"(max_response_bytes); ask for a smaller box")


def _json(request: web.Request, body: dict, what: str) -> web.Response:
    """The JSON response, or 413 when it is over the limit."""
    text = json.dumps(body)
    if len(text) > request.app[MAX_BYTES]:
        raise _too_large(request, what)
    return web.Response(text=text, content_type="application/json")


async def bbox(request: web.Request) -> web.Response:
    ds = request.app[DATASET]
    lo, hi = _point(request.query.get("lo"), "lo"), _point(request.query.get("hi"), "hi")
    most = max(1, request.app[MAX_BYTES] // ROW_BYTES)  # the rows that surely fit: read one more at most
    try:
        sel = await ds.select(bbox=(lo, hi), limit=most + 1).read()
    except InvalidArgumentError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from None
    if len(sel) > most:
        raise _too_large(request, f"box {lo}..{hi}")
    return _json(request, {"count": len(sel), "positions": sel.positions.tolist(),
                           "object_ids": None if sel.object_ids is None else sel.object_ids.tolist()},
                 f"box {lo}..{hi}")


async def one_object(request: web.Request) -> web.Response:
    ds = request.app[DATASET]
    try:
        oid = int(request.match_info["oid"])
        sel = await ds.read_object(oid)
    except ValueError as exc:  # not an integer, or not an object of the store (InvalidArgumentError)
        raise web.HTTPNotFound(text=str(exc)) from None
    if len(sel) * ROW_BYTES > request.app[MAX_BYTES]:
        raise _too_large(request, f"object {oid}")
    centroid = sel.positions.mean(axis=0).tolist() if len(sel) else None
    return _json(request, {"id": oid, "count": len(sel), "positions": sel.positions.tolist(),
                           "centroid": centroid}, f"object {oid}")


async def stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[DATASET].stats.snapshot())


def make_app(target: str, storage_options: dict | None = None,
             max_response_bytes: int = MAX_RESPONSE_BYTES) -> web.Application:
    async def dataset(app: web.Application):
        app[DATASET] = await zvf.aio.open(target, storage_options=storage_options)  # once, at startup
        yield
        await app[DATASET].close()

    app = web.Application()
    app[MAX_BYTES] = max_response_bytes
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

        limit = 1 << 20  # 1 MiB here, so the demo's whole-store box shows the cap
        runner = web.AppRunner(make_app(target, opts, max_response_bytes=limit))
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
                paths += [f"/object/{i}" for i in ids] + ["/object/100000", "/bbox?lo=1,2&hi=3,4",
                                                          "/bbox?lo=0,0,0&hi=100,100,100"]
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
                assert answers[-3][0] == 404 and "100000" in answers[-3][1], answers[-3]
                assert answers[-2][0] == 400, answers[-2]
                status, text = answers[-1]
                assert status == 413 and f"limit of {limit} bytes" in text, (status, text)
                print("GET /object/100000 -> 404; GET /bbox with 2-D corners -> 400; "
                      f"GET /bbox over the whole store -> 413 ({text})")

                _, counters = await get("/stats")
                print(f"{len(paths)} HTTP requests served with {counters['requests']} store requests "
                      f"(metadata fetched once at startup, {counters['inflight_shared']} reads shared in flight)")
        finally:
            await runner.cleanup()
    finally:
        s3.stop()


if __name__ == "__main__":
    asyncio.run(main())
