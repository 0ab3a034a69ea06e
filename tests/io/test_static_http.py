"""A store on a static web host (``python -m http.server``: GET and HEAD only, no listing, no ranges) opens and
reads as it does locally, with no other request method."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import zvf
from zvf.errors import StoreNotFoundError, UnsupportedRequestError

RNG = np.random.default_rng(24)
POS = RNG.uniform(0, 100, (6000, 3)).astype(np.float32)
OIDS = RNG.integers(0, 60, 6000)
LINES = [np.cumsum(RNG.normal(0, 2, (int(RNG.integers(5, 40)), 3)), axis=0) + 50 for _ in range(150)]
# http.server accepts 5 pending connections (its listen backlog): more in flight wait out dropped SYNs
OPTS = {"concurrency": 4}
BOXES = [([10, 10, 10], [40, 45, 50]), ([0, 0, 0], [100, 100, 100]), ([60, 60, 60], [61, 61, 61])]


class StaticHost:
    """``python -m http.server`` on 127.0.0.1 (a free port) serving ``root``; its request log kept."""

    def __init__(self, root, log):
        self.log = log  # a file, not a pipe: a full pipe would stall the server's request threads
        with open(log, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "0", "--directory", str(root)],
                stdout=subprocess.PIPE, stderr=err, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (http://127.0.0.1:N/) ..."
        m = re.search(r"port (\d+)", line)
        assert m, line
        self.url = f"http://127.0.0.1:{m.group(1)}"

    def stop(self) -> list[str]:
        """Stop the server; -> the request lines it logged (method, path, status)."""
        self.proc.terminate()
        self.proc.communicate(timeout=10)
        return re.findall(r'"([A-Z]+ \S+) HTTP/[\d.]+" (\d+)', self.log.read_text())


@pytest.fixture(scope="module")
def hosted(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    zvf.write_points(str(root / "points"), POS, object_ids=OIDS, chunk_shape=(25, 25, 25), bin_shape=(12.5,) * 3,
                     attributes={"w": RNG.random(6000).astype(np.float32)}, compression="zstd")
    zvf.build_pyramid(str(root / "points"), factors=[(2, 1)])
    zvf.write_polylines(str(root / "lines"), LINES, chunk_shape=(20, 20, 20), compression="zstd")
    host = StaticHost(root, tmp_path_factory.mktemp("log") / "requests.log")
    try:
        yield root, host
    finally:
        requests = host.stop()
        served = [r for r in requests if r[0].split()[1].startswith(("/points/", "/lines/"))]
        assert len(served) > 100
        other = sorted({r for r in served if r[0].split()[0] not in ("GET", "HEAD")})
        assert not other, f"requests a static host cannot answer: {other[:5]}"  # listings (PROPFIND) above all


def _same(a, b) -> None:
    order_a, order_b = np.lexsort(a.positions.T), np.lexsort(b.positions.T)
    assert np.array_equal(a.positions[order_a], b.positions[order_b])
    for name in a.attributes:
        assert np.array_equal(a.attributes[name][order_a], b.attributes[name][order_b])
    if a.object_ids is not None:
        assert np.array_equal(a.object_ids[order_a], b.object_ids[order_b])


def test_points_read_over_a_static_host_as_locally(hosted):
    root, host = hosted
    with zvf.open(f"{host.url}/points", storage_options=OPTS) as web, zvf.open(str(root / "points")) as local:
        assert web.levels == local.levels == [0, 1]
        _same(web.read_all(), local.read_all())
        for lo, hi in BOXES:
            inside = np.all((lo <= POS) & (hi >= POS), axis=1)
            got = web.query((lo, hi))
            assert len(got) == int(inside.sum())
            _same(got, local.query((lo, hi)))
            assert web.select(bbox=(lo, hi), level=1).count() == local.select(bbox=(lo, hi), level=1).count()
        for oid in (0, 17, 59):
            obj = web.read_object(oid)
            assert len(obj) == int((oid == OIDS).sum())
            _same(obj, local.read_object(oid))
        _same(web.read_all(level=1), local.read_all(level=1))


def test_polylines_read_over_a_static_host_as_locally(hosted):
    root, host = hosted
    with zvf.open(f"{host.url}/lines", storage_options=OPTS) as web:
        got = web.read_objects([0, 7, 149])
        for oid, obj in zip([0, 7, 149], got):
            assert np.allclose(obj.positions, LINES[oid].astype(np.float32))
        assert len(web.read_all()) == sum(len(p) for p in LINES)
        lo, hi = [40, 40, 40], [60, 60, 60]
        with zvf.open(str(root / "lines")) as local:
            _same(web.query((lo, hi)), local.query((lo, hi)))


def test_a_store_without_consolidated_metadata_says_why_it_cannot_be_served(hosted):
    """zarr-vectors 0.9.2 writes no consolidated section: its attribute groups must be listed, which a static
    host cannot do -- a clear error at once (no retries of a request the server never implements)."""
    root, host = hosted
    bare = root / "bare"
    zvf.write_points(str(bare), POS[:100], chunk_shape=(50, 50, 50), attributes={"w": np.zeros(100, np.float32)})
    doc = json.loads((bare / "zarr.json").read_text())
    del doc["consolidated_metadata"]
    (bare / "zarr.json").write_text(json.dumps(doc))
    t0 = time.perf_counter()
    with pytest.raises(UnsupportedRequestError, match=r"consolidated metadata.*cannot list"):
        zvf.open(f"{host.url}/bare", storage_options=OPTS)
    assert time.perf_counter() - t0 < 1.5
    assert len(zvf.open(str(bare)).read_all()) == 100  # locally it lists, as before


def test_nothing_at_the_url_is_store_not_found(hosted):
    _, host = hosted
    with pytest.raises(StoreNotFoundError, match="no store here"):
        zvf.open(f"{host.url}/nothing", storage_options=OPTS)
