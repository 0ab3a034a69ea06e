"""The reference side of the benchmark: zarr-vectors 0.9.2, driven through its public API.

How it reads S3: ``zv.open("s3://bucket/prefix", storage=StorageOptions(options=...))``
resolves the ``obstore`` backend from the URL scheme (s3fs/fsspec is not
installed) and wraps ``obstore.store.from_url(url, **options)`` in
``zarr.storage.ObjectStore``; from there every read goes through zarr 3.1.6
(its default ``async.concurrency`` of 10).  That is the reference's natural
S3 path, so both implementations talk to the same proxy with the same HTTP
client library (obstore).

How it writes: ``zarr_vectors.building.write_points|write_polylines`` to a
local directory (its S3 write path issues its PUTs one after another --
about 12 s per 100k points against moto), then the files are uploaded.

Child mode ``python benchmarks/reference.py ingest SIZES DIR``: peak RSS of an
in-memory write of N points, in a process of its own.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


def _zv():
    import zarr_vectors as zv

    return zv


class RefReader:
    """One opened reference dataset."""

    def __init__(self, url: str, options: dict):
        zv = _zv()
        self.ds = zv.open(url, storage=zv.StorageOptions(options=dict(options)))

    def query(self, lo, hi):
        return self.ds.level(0).select(bbox=(list(lo), list(hi))).read()

    def read_object(self, oid: int):
        return self.ds.level(0).objects[int(oid)]

    def read_objects(self, ids):
        return self.ds.level(0).objects[[int(i) for i in ids]]

    def export(self):
        return self.ds.level(0).read()


def write_points_local(path: Path, sizes, pos, attrs) -> dict:
    from zarr_vectors import building

    return building.write_points(str(path), pos, chunk_shape=(sizes.chunk,) * 3, bin_shape=(sizes.bin,) * 3,
                                 bounds=sizes.bounds, vertex_attributes=attrs)


def write_streamlines_local(path: Path, sizes, lines) -> dict:
    from zarr_vectors import building

    return building.write_polylines(str(path), lines, chunk_shape=(sizes.chunk,) * 3, bounds=sizes.bounds,
                                    geometry_type="streamline")


def n_vertices(result) -> int:
    return int(result.vertex_count)


# --------------------------------------------------------------------------------------
# child processes
# --------------------------------------------------------------------------------------


def ingest_main(args: list[str]) -> None:
    """Child: the reference's write_points of N in-memory points to a local directory."""
    import shutil

    import numpy as np
    import workloads as w

    sizes = w.QUICK if args[0] == "quick" else w.FULL
    out = Path(args[1])
    base = w.peak_rss_mib()
    pos = np.concatenate(list(w.ingest_batches(sizes, sizes.ingest_points, sizes.ingest_batch)))
    data_rss = w.peak_rss_mib()
    shutil.rmtree(out, ignore_errors=True)
    from zarr_vectors import building

    t0 = time.perf_counter()
    summary = building.write_points(str(out), pos, chunk_shape=(sizes.chunk,) * 3, bin_shape=(sizes.bin,) * 3,
                                    bounds=sizes.bounds)
    secs = time.perf_counter() - t0
    nbytes = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    shutil.rmtree(out, ignore_errors=True)
    print(json.dumps({"seconds": secs, "peak_rss_mib": w.peak_rss_mib(), "base_rss_mib": base,
                      "data_rss_mib": data_rss, "mode": "in-memory array, local directory",
                      "vertex_count": int(summary["vertex_count"]), "bytes": nbytes}))


if __name__ == "__main__":
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "ingest":
        ingest_main(rest)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
