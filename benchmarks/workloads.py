"""Workloads, servers, floors and the zvf driver of the benchmark harness.

Everything here is shared by ``benchmarks/run.py`` (the one command) and by the
child processes it starts (``python benchmarks/workloads.py MODE ...``):

* ``proxy``       the counting, latency-adding reverse proxy (tests.servers.FaultProxy)
                  in its own process, driven by JSON lines on stdin/stdout;
* ``ingest-zvf``  the 10M-point ingest, so its peak RSS is its own.

Data are generated from fixed seeds, so every run builds the same stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import resource
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # tests.servers (FaultProxy) lives in the repo, not in the package
    sys.path.insert(0, str(REPO))

BUCKET = "zvf-bench"  # bucket names: zvf-bench-<store>
ACCESS_KEY = "bench"
SECRET_KEY = "bench"
REGION = "us-east-1"


# --------------------------------------------------------------------------------------
# sizes and data
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """One benchmark scale.  ``extent`` is the cube side; ``grid`` chunks per axis."""

    name: str
    n_points: int
    grid: int
    bins_per_axis: int
    n_lines: int
    line_len: int  # mean vertices per streamline (uniform in +-20%)
    n_queries: int
    query_side: float  # small-query box side, as a fraction of a chunk
    n_objects: int
    ingest_points: int
    ingest_batch: int
    extent: float = 1000.0
    seed: int = 20261

    @property
    def chunk(self) -> float:
        return self.extent / self.grid

    @property
    def bin(self) -> float:
        return self.chunk / self.bins_per_axis

    @property
    def hi(self) -> float:
        """Largest coordinate; keeps the grid at exactly ``grid`` chunks per axis."""
        return self.extent - self.chunk / 250.0

    @property
    def bounds(self) -> tuple[list[float], list[float]]:
        return [0.0, 0.0, 0.0], [self.hi] * 3


FULL = Sizes("full", n_points=1_000_000, grid=8, bins_per_axis=2, n_lines=20_000, line_len=50,
             n_queries=100, query_side=0.3, n_objects=50, ingest_points=10_000_000, ingest_batch=1_000_000)
QUICK = Sizes("quick", n_points=20_000, grid=4, bins_per_axis=2, n_lines=400, line_len=20,
              n_queries=10, query_side=0.3, n_objects=5, ingest_points=200_000, ingest_batch=50_000)


def uniform_points(rng: np.random.Generator, n: int, sizes: Sizes) -> np.ndarray:
    """float32 points uniform in [0, hi]^3 (no float64 temporaries of size n x 3)."""
    out = np.empty((n, 3), dtype=np.float32)
    step = 1_000_000
    for s in range(0, n, step):
        m = min(step, n - s)
        out[s:s + m] = rng.random((m, 3), dtype=np.float32) * np.float32(sizes.hi)
    np.minimum(out, np.float32(sizes.hi), out=out)
    return out


def make_points(sizes: Sizes) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The point workload: uniform positions and one float32 vertex attribute."""
    rng = np.random.default_rng(sizes.seed)
    pos = uniform_points(rng, sizes.n_points, sizes)
    return pos, {"intensity": rng.random(sizes.n_points, dtype=np.float32)}


def make_streamlines(sizes: Sizes) -> list[np.ndarray]:
    """Smooth random walks (persistent direction, step 3) folded back into the cube."""
    rng = np.random.default_rng(sizes.seed + 1)
    n, mean = sizes.n_lines, sizes.line_len
    lengths = rng.integers(int(mean * 0.8), int(mean * 1.2) + 1, n)
    longest = int(lengths.max())
    pos = np.empty((longest, n, 3), dtype=np.float64)
    pos[0] = rng.uniform(0.1 * sizes.extent, 0.9 * sizes.extent, (n, 3))
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    step = 3.0 * sizes.extent / 1000.0
    for t in range(1, longest):
        d += 0.25 * rng.normal(size=(n, 3))
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        pos[t] = pos[t - 1] + step * d
    e = sizes.extent
    folded = np.mod(pos, 2 * e)
    folded = np.where(folded > e, 2 * e - folded, folded)
    folded = np.clip(folded, 0.0, sizes.hi).astype(np.float32)
    return [np.ascontiguousarray(folded[: lengths[i], i]) for i in range(n)]


def eight_chunk_box(sizes: Sizes) -> tuple[list[float], list[float]]:
    """A box spanning chunks 2..3 on every axis: exactly 8 chunks."""
    c = sizes.chunk
    return [2.3 * c] * 3, [3.7 * c] * 3


def small_boxes(sizes: Sizes) -> list[tuple[list[float], list[float]]]:
    rng = np.random.default_rng(sizes.seed + 2)
    side = sizes.query_side * sizes.chunk
    lo = rng.uniform(0, sizes.hi - side, (sizes.n_queries, 3))
    return [(a.tolist(), (a + side).tolist()) for a in lo]


def object_sample(sizes: Sizes) -> list[int]:
    rng = np.random.default_rng(sizes.seed + 3)
    return [int(i) for i in rng.choice(sizes.n_lines, size=sizes.n_objects, replace=False)]


def count_in_box(pos: np.ndarray, lo, hi) -> int:
    return int(np.all((pos >= np.asarray(lo, pos.dtype)) & (pos <= np.asarray(hi, pos.dtype)), axis=1).sum())


# --------------------------------------------------------------------------------------
# keys a read needs (for the floor rows), from the store layout
# --------------------------------------------------------------------------------------


def chunk_range(sizes: Sizes, lo, hi) -> list[tuple[int, int, int]]:
    a = np.clip(np.floor(np.asarray(lo) / sizes.chunk).astype(int), 0, sizes.grid - 1)
    b = np.clip(np.floor(np.asarray(hi) / sizes.chunk).astype(int), 0, sizes.grid - 1)
    return [(i, j, k) for i in range(a[0], b[0] + 1) for j in range(a[1], b[1] + 1) for k in range(a[2], b[2] + 1)]


def cell_key(array: str, chunk) -> str:
    return f"0/{array}/c/" + "/".join(str(int(x)) for x in chunk)


def point_meta_keys(attrs) -> list[str]:
    """Documents a bbox query must read before any cell: root, level, the arrays it decodes."""
    return ["zarr.json", "0/zarr.json", "0/vertices/zarr.json"] + [f"0/vertex_attributes/{a}/zarr.json" for a in attrs]


def point_cell_keys(chunks, attrs, existing: set[str]) -> list[str]:
    keys = []
    for c in chunks:
        keys.append(cell_key("vertices", c))
        keys.extend(cell_key(f"vertex_attributes/{a}", c) for a in attrs)
    return [k for k in keys if k in existing]


def object_cell_keys(line: np.ndarray, sizes: Sizes, existing: set[str]) -> list[str]:
    """Vertex and fragment-index cells of every chunk a streamline passes through."""
    chunks = np.unique(np.floor(line / sizes.chunk).astype(int), axis=0)
    keys = [cell_key(a, c) for c in chunks for a in ("vertices", "vertex_fragments")]
    return [k for k in keys if k in existing]


# --------------------------------------------------------------------------------------
# servers: moto and the proxy, each in its own process
# --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proxy:
    """The counting, latency-adding proxy (:func:`proxy_main`) in a child process, in front of ``upstream``.

    Its own process, so it does not share the benchmark's GIL; driven over a pipe.
    """

    def __init__(self, upstream: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "proxy", upstream],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        self.url = json.loads(self.process.stdout.readline())["url"]

    def _ask(self, **cmd) -> dict:
        self.process.stdin.write(json.dumps(cmd) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def set_latency(self, seconds: float) -> None:
        self._ask(op="latency", value=seconds)

    def reset(self) -> None:
        self._ask(op="reset")

    def counts(self) -> dict:
        return self._ask(op="counts")

    def log(self) -> list:
        """(seconds since the first, method, path, status, response bytes) of each request since reset."""
        return self._ask(op="log")["log"]

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(Exception):
                self._ask(op="stop")
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()


class Servers:
    """moto (child process) behind the counting proxy (another child process).

    Neither shares the benchmark's GIL, so neither implementation pays for
    the other side's Python.  The proxy's counters are read over a pipe.
    """

    def __init__(self) -> None:
        port = free_port()
        self.moto = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.endpoint = f"http://127.0.0.1:{port}"
        self._wait_for_moto()
        self.proxy = Proxy(self.endpoint)
        self.proxy_url = self.proxy.url

    def _wait_for_moto(self) -> None:
        import boto3
        from botocore.config import Config

        self._s3 = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                                aws_secret_access_key=SECRET_KEY, region_name=REGION,
                                config=Config(retries={"max_attempts": 0}))
        self._buckets: set[str] = set()
        deadline = time.monotonic() + 30
        while True:
            try:
                self._s3.list_buckets()
                return
            except Exception:
                if time.monotonic() > deadline or self.moto.poll() is not None:
                    raise RuntimeError(f"moto did not start on {self.endpoint}") from None
                time.sleep(0.1)

    def bucket(self, prefix: str) -> str:
        """The bucket holding store ``prefix`` -- one per store, created on first use.

        moto answers a LIST by scanning every key of the bucket (4 ms with 10 keys,
        12 ms with 8,000), which S3 does not; one bucket per store keeps the LISTs
        both implementations make from paying for the other stores.
        """
        name = BUCKET + "-" + re.sub(r"[^a-z0-9]+", "-", prefix.split(".")[0].lower()).strip("-")
        if name not in self._buckets:
            self._s3.create_bucket(Bucket=name)
            self._buckets.add(name)
        return name

    def set_latency(self, seconds: float) -> None:
        self.proxy.set_latency(seconds)

    def reset(self) -> None:
        self.proxy.reset()

    def counts(self) -> dict:
        return self.proxy.counts()

    def log(self) -> list:
        return self.proxy.log()

    def zvf_options(self, *, direct: bool = False) -> dict:
        return {"endpoint": self.endpoint if direct else self.proxy_url, "access_key_id": ACCESS_KEY,
                "secret_access_key": SECRET_KEY, "region": REGION, "allow_http": True}

    def obstore_options(self, *, direct: bool = False) -> dict:
        """Keyword arguments of obstore's S3Store/from_url (what zarr-vectors forwards)."""
        return {"endpoint": self.endpoint if direct else self.proxy_url, "access_key_id": ACCESS_KEY,
                "secret_access_key": SECRET_KEY, "region": REGION, "virtual_hosted_style_request": False,
                "client_options": {"allow_http": True, "timeout": "120s", "connect_timeout": "5s"}}

    def obstore(self, prefix: str, *, direct: bool = False):
        from obstore.store import S3Store

        return S3Store(self.bucket(prefix), prefix=prefix, **self.obstore_options(direct=direct))

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket(prefix)}/{prefix}"

    def stop(self) -> None:
        self.proxy.stop()
        if self.moto.poll() is None:
            self.moto.terminate()
            try:
                self.moto.wait(5)
            except subprocess.TimeoutExpired:
                self.moto.kill()


def summarize_log(log) -> dict:
    """Per-kind request counts and response bytes from FaultProxy.log entries."""
    out = {"GET": 0, "LIST": 0, "HEAD": 0, "PUT": 0, "POST": 0, "DELETE": 0, "404": 0, "bytes": 0, "requests": 0}
    for _t, method, path, status, nbytes in log:
        kind = "LIST" if method == "GET" and path.strip("/").count("/") == 0 else method
        out[kind] = out.get(kind, 0) + 1
        out["requests"] += 1
        out["bytes"] += nbytes
        if status == 404:
            out["404"] += 1
    return out


def proxy_main(upstream: str) -> None:
    """Child process: a FaultProxy driven by JSON lines (latency / reset / counts / stop)."""
    from tests.servers import FaultProxy

    proxy = FaultProxy(upstream).start()
    print(json.dumps({"url": proxy.url}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "latency":
            proxy.latency = float(cmd["value"])
            reply: dict = {"ok": True}
        elif op == "reset":
            proxy.reset_counters()
            reply = {"ok": True}
        elif op == "counts":
            reply = summarize_log(list(proxy.log))
            reply["bytes_in"] = sum(proxy.counts()["bytes_in"].values())
        elif op == "log":
            t0 = proxy.log[0][0] if proxy.log else 0.0
            reply = {"log": [(round(t - t0, 4), m, pth, st, nb) for t, m, pth, st, nb in list(proxy.log)]}
        elif op == "stop":
            print(json.dumps({"ok": True}), flush=True)
            break
        else:
            reply = {"error": f"unknown op {op!r}"}
        print(json.dumps(reply), flush=True)
    proxy.stop()


# --------------------------------------------------------------------------------------
# uploading local stores, comparing stores
# --------------------------------------------------------------------------------------


async def upload_dir(store, root: Path, concurrency: int = 32) -> int:
    """PUT every file under ``root`` to ``store`` (keys relative to root). Returns bytes."""
    import obstore

    files = [p for p in root.rglob("*") if p.is_file()]
    sem = asyncio.Semaphore(concurrency)
    total = 0

    async def one(p: Path) -> None:
        nonlocal total
        data = p.read_bytes()
        total += len(data)
        async with sem:
            await obstore.put_async(store, p.relative_to(root).as_posix(), data)

    await asyncio.gather(*(one(p) for p in files))
    return total


async def list_sizes(store) -> dict[str, int]:
    import obstore

    out: dict[str, int] = {}
    async for batch in obstore.list(store):
        for meta in batch:
            out[meta["path"]] = int(meta["size"])
    return out


def _without_consolidated(key: str, data: bytes) -> bytes:
    """The root document minus zvf's ``consolidated_metadata`` (an index of the other documents that
    0.9.2 does not write); every other object as it is."""
    if key != "zarr.json":
        return data
    doc = json.loads(data)
    doc.pop("consolidated_metadata", None)
    return json.dumps(doc, sort_keys=True).encode()


async def compare_stores(a, b) -> dict:
    """Keys and bytes of two stores: identical (the root's consolidated index aside), or where they differ."""
    import obstore

    sa, sb = await asyncio.gather(list_sizes(a), list_sizes(b))
    only_a = sorted(set(sa) - set(sb))
    only_b = sorted(set(sb) - set(sa))
    common = sorted(set(sa) & set(sb))
    sem = asyncio.Semaphore(32)

    async def same(k: str) -> bool:
        async with sem:
            ra, rb = await asyncio.gather(obstore.get_async(a, k), obstore.get_async(b, k))
            da, db = bytes(await ra.bytes_async()), bytes(await rb.bytes_async())
            return _without_consolidated(k, da) == _without_consolidated(k, db)

    equal = await asyncio.gather(*(same(k) for k in common))
    differ = [k for k, e in zip(common, equal) if not e]
    return {"keys": len(sa), "only_ref": only_a[:5], "only_zvf": only_b[:5], "n_only_ref": len(only_a),
            "n_only_zvf": len(only_b), "differ": differ[:5], "n_differ": len(differ),
            "identical": not (only_a or only_b or differ)}


# --------------------------------------------------------------------------------------
# the floor: plain obstore, exactly the needed keys, all at once
# --------------------------------------------------------------------------------------


# More than this many requests at once only opens new connections through the proxy to moto,
# each costing a thread there: 192 cells took 1.06 s all at once and 0.49 s capped at 64
# (capped at 32, 16 or 8: the same 0.48 s).  A floor should not pay for a connection storm.
FLOOR_CONCURRENCY = 64


async def fetch_all(store, keys: list[str], concurrency: int = FLOOR_CONCURRENCY) -> int:
    """GET every key at once (at most ``concurrency`` in flight); returns the bytes received."""
    import obstore

    sem = asyncio.Semaphore(concurrency)

    async def one(k: str) -> int:
        async with sem:
            r = await obstore.get_async(store, k)
            return len(await r.bytes_async())

    return sum(await asyncio.gather(*(one(k) for k in keys)))


# --------------------------------------------------------------------------------------
# zvf driver
# --------------------------------------------------------------------------------------


def zvf_features() -> dict[str, bool]:
    """Which of the parts colleagues are finishing are present in this checkout."""
    import importlib.util

    import zvf.aio

    ds = zvf.aio.AsyncDataset
    return {
        "read_object": hasattr(ds, "read_object"),
        "read_objects": hasattr(ds, "read_objects"),
        "write_polylines": importlib.util.find_spec("zvf.write.objects") is not None,
    }


def n_vertices(result) -> int:
    """Vertex count of whatever a read returned (Selection, array, list of them, ReadResult)."""
    if result is None:
        return 0
    if hasattr(result, "positions"):
        return len(result.positions)
    if hasattr(result, "vertex_count"):
        return int(result.vertex_count)
    if isinstance(result, np.ndarray):
        return int(result.shape[0])
    if isinstance(result, dict):
        return sum(n_vertices(v) for v in result.values())
    if isinstance(result, (list, tuple)):
        return sum(n_vertices(v) for v in result)
    raise TypeError(f"cannot count vertices of {type(result).__name__}")


async def zvf_read_object(ds, oid: int):
    return await ds.read_object(int(oid))


async def zvf_read_objects(ds, ids: list[int]):
    if hasattr(ds, "read_objects"):
        return await ds.read_objects([int(i) for i in ids])
    return await asyncio.gather(*(ds.read_object(int(i)) for i in ids))


# --------------------------------------------------------------------------------------
# child processes
# --------------------------------------------------------------------------------------


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def ingest_batches(sizes: Sizes, n: int, batch: int):
    """Deterministic batches of float32 points (one generator per batch index)."""
    for b, s in enumerate(range(0, n, batch)):
        rng = np.random.default_rng([sizes.seed, 7, b])
        yield uniform_points(rng, min(batch, n - s), sizes)


def ingest_zvf_main(args: list[str]) -> None:
    """Child: write ``n`` points with zvf, streaming batches if supported; print JSON."""
    sizes = QUICK if args[0] == "quick" else FULL
    url, opts = args[1], json.loads(args[2])
    n = sizes.ingest_points
    import zvf.aio

    base = peak_rss_mib()
    kw = dict(chunk_shape=(sizes.chunk,) * 3, bin_shape=(sizes.bin,) * 3, bounds=sizes.bounds,
              overwrite=True, storage_options=opts)

    async def go():
        t0 = time.perf_counter()
        try:
            summary = await zvf.aio.write_points(url, ingest_batches(sizes, n, sizes.ingest_batch), **kw)
            mode = "streaming batches"
        except Exception as exc:  # this checkout's write_points takes one array only
            pos = np.concatenate(list(ingest_batches(sizes, n, sizes.ingest_batch)))
            t0 = time.perf_counter()
            summary = await zvf.aio.write_points(url, pos, **kw)
            mode = f"in-memory array (batches refused: {type(exc).__name__}: {str(exc)[:80]})"
        return time.perf_counter() - t0, summary, mode

    secs, summary, mode = asyncio.run(go())
    print(json.dumps({"seconds": secs, "peak_rss_mib": peak_rss_mib(), "base_rss_mib": base, "mode": mode,
                      "vertex_count": summary.vertex_count, "requests": summary.requests}))


if __name__ == "__main__":
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "proxy":
        proxy_main(rest[0])
    elif mode == "ingest-zvf":
        ingest_zvf_main(rest)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
