"""Hostile stores: a few bytes crafted to cost gigabytes, to read outside the store or to answer wrongly in
silence.  Each is refused with a zvf error naming the key, before the cost is paid: decoded rows are checked
against the counts the metadata declares, decompression is bounded by what the metadata allows before any
byte is inflated, local stores refuse symlinks that leave them, documents are capped at the validator's size,
and grids with absurdly many cells are refused at open and by the validator.

Costs are measured in a child process (its peak RSS), beside the same read of the honest store."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zstandard

import zvf
from zvf.errors import FormatError

N = 20_000
RNG = np.random.default_rng(24)
POS = RNG.uniform(0, 100, (N, 3)).astype(np.float32)
CELL = "0/vertices/c/0/0/0"
# what a refused hostile read may cost beyond the honest read of the same store (peak RSS, MB)
SLACK_MB = 60


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    zvf.write_points(str(root / "points"), POS, chunk_shape=(25, 25, 25), compression="zstd")
    zvf.write_points(str(root / "attributed"), POS, chunk_shape=(25, 25, 25), compression="zstd",
                     attributes={"w": RNG.random(N).astype(np.float32)})
    zvf.write_points(str(root / "labelled"), POS, object_ids=RNG.integers(0, 500, N), chunk_shape=(25, 25, 25),
                     compression="zstd")
    honest = {name: _child(root / name, "len(ds.read_all())") for name in ("points", "attributed", "labelled")}
    assert [h["result"] for h in honest.values()] == [N] * 3
    return root, honest


def _copy(stores, name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(stores[0] / name, dst, symlinks=True)
    return dst


def _child(store: Path, expr: str) -> dict:
    """``expr`` evaluated on ``ds = zvf.open(store)`` in a fresh process: its result or error, and peak RSS."""
    code = textwrap.dedent(f"""
        import json, resource, zvf
        out = {{}}
        try:
            ds = zvf.open({str(store)!r})
            out["result"] = {expr}
        except Exception as e:
            out["error"], out["message"] = type(e).__name__, str(e)[:2000]
            out["kinds"] = [c.__name__ for c in type(e).__mro__]
        # this process image's peak (ru_maxrss would count the test process it was forked from)
        hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]
        peak_kb = int(hwm[0].split()[1]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["rss_mb"] = peak_kb / 1024
        print(json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _refused(got: dict, honest: dict, *, match: str, error: str = "FormatError") -> None:
    assert "error" in got, f"answered {got.get('result')!r} instead of refusing"
    assert error in got["kinds"], got
    assert match in got["message"], got["message"]
    assert got["rss_mb"] < honest["rss_mb"] + SLACK_MB, (got["rss_mb"], honest["rss_mb"], got["message"])


def _edit_doc(store: Path, node: str, edit) -> None:
    """Change a node's zarr.json and its copy in the root's consolidated section alike (as a forger would)."""
    root = json.loads((store / "zarr.json").read_text())
    path = store / node / "zarr.json" if node else store / "zarr.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    if node:
        root["consolidated_metadata"]["metadata"][node] = doc
        (store / "zarr.json").write_text(json.dumps(root))


def _zstd_bomb(path: Path, payload_bytes: int, *, content_size: bool) -> None:
    """A vertex cell (a one-item vlen frame of float32 zeros) of ``payload_bytes``, zstd-compressed to a few KB."""
    cctx = zstandard.ZstdCompressor(level=3, write_content_size=content_size)
    with open(path, "wb") as f, cctx.stream_writer(f, size=8 + payload_bytes if content_size else -1,
                                                     closefd=False) as w:
        w.write(struct.pack("<II", 1, payload_bytes))
        zeros = bytes(1 << 20)
        for left in range(payload_bytes, 0, -len(zeros)):
            w.write(zeros[:min(left, len(zeros))])
    assert payload_bytes < 1 << 20 or path.stat().st_size < payload_bytes // 1000


@pytest.mark.parametrize("content_size", [True, False], ids=["size-declared", "size-undeclared"])
def test_a_zstd_bomb_cell_is_refused_before_inflating(stores, tmp_path, content_size):
    """58 KB inflating to 1.9 GB made read_all() return 158 M rows of a 20 000-point store (GBs of RSS)."""
    store = _copy(stores, "points", tmp_path)
    _zstd_bomb(store / CELL, 1_900_000_000 // 12 * 12, content_size=content_size)
    honest = stores[1]["points"]
    for expr in ("len(ds.read_all())", "len(ds.query(([0, 0, 0], [20, 20, 20])))",
                 "sum(len(b) for b in ds.iter_chunks())"):
        _refused(_child(store, expr), honest, match=CELL)


def test_a_cell_holding_more_rows_than_the_level_is_refused(stores, tmp_path):
    """A bomb small enough for one cell: the rows decoded exceed the level's vertex_count."""
    store = _copy(stores, "points", tmp_path)
    _zstd_bomb(store / CELL, N * 12, content_size=True)  # as many rows as the whole level declares
    got = _child(store, "len(ds.read_all())")
    _refused(got, stores[1]["points"], match="vertex_count")
    assert "0/zarr.json" in got["message"]


def test_a_level_short_of_its_vertex_count_is_refused(stores, tmp_path):
    """Rows fewer than the level declares (a cell swapped for a smaller one): read_all is refused, not short."""
    store = _copy(stores, "points", tmp_path)
    _zstd_bomb(store / CELL, 12, content_size=True)
    _refused(_child(store, "len(ds.read_all())"), stores[1]["points"], match="vertex_count")


def test_symlinks_leaving_a_local_store_are_refused(stores, tmp_path):
    """A cell that is a symlink read a file outside the store as float32 coordinates."""
    store = _copy(stores, "points", tmp_path)
    outside = tmp_path / "secret.bin"
    outside.write_bytes(struct.pack("<II", 1, 12 * 100) + np.arange(300, dtype=np.float32).tobytes())
    (store / CELL).unlink()
    os.symlink(outside, store / CELL)
    for expr in ("len(ds.read_all())", "len(ds.query(([0, 0, 0], [20, 20, 20])))"):
        _refused(_child(store, expr), stores[1]["points"], match=CELL)
    # a directory link too (every cell of an attribute), and a link whose target is inside the store reads
    store2 = _copy(stores, "attributed", tmp_path / "b")
    attr = store2 / "0" / "vertex_attributes" / "w"
    shutil.move(attr / "c", tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", attr / "c")
    got = _child(store2, "len(ds.read_all())")
    _refused(got, stores[1]["attributed"], match="0/vertex_attributes/w/c/")
    store3 = _copy(stores, "points", tmp_path / "c")
    cell = store3 / CELL
    (store3 / "kept").write_bytes(cell.read_bytes())
    cell.unlink()
    os.symlink(store3 / "kept", cell)
    assert _child(store3, "len(ds.read_all())")["result"] == N


def test_a_huge_id_array_document_is_refused_before_allocating(stores, tmp_path):
    """A 500-byte document declaring a 1 GiB id array cost 2.1 GB before its error."""
    store = _copy(stores, "labelled", tmp_path)

    def huge(doc):
        doc["shape"] = [1 << 27]
        doc["chunk_grid"]["configuration"]["chunk_shape"] = [1 << 27]

    _edit_doc(store, "0/object_index/object_ids", huge)
    got = _child(store, "ds.read_object(3).positions.shape[0]")
    _refused(got, stores[1]["labelled"], match="0/object_index/object_ids")


def test_an_absurd_vertex_count_is_refused_before_allocating(stores, tmp_path):
    """``vertex_count = 1e15`` cost 1.3 GB (outputs sized from it) before any error."""
    for name in ("points", "labelled"):
        store = _copy(stores, name, tmp_path / name)
        _edit_doc(store, "0", lambda d: d["attributes"]["zarr_vectors_level"].update(vertex_count=10**15))
        got = _child(store, "len(ds.read_all())")
        _refused(got, stores[1][name], match="vertex_count")
        assert "0/zarr.json" in got["message"]


def test_an_oversized_root_document_is_not_parsed(stores, tmp_path):
    """Readers parsed a 150 MB root (the validator caps documents at 64 MiB): one cap for both."""
    assert zvf.config.tuning().max_document_bytes == 64 << 20  # readers and the validator read this setting
    store = _copy(stores, "points", tmp_path)
    root = json.loads((store / "zarr.json").read_text())
    root["attributes"]["padding"] = [[i, "x" * 40] for i in range(150_000_000 // 50)]
    (store / "zarr.json").write_text(json.dumps(root))
    assert (store / "zarr.json").stat().st_size > 150_000_000
    got = _child(store, "len(ds.read_all())")
    # the document is fetched whole (a GET cannot know its size first), never parsed: parsing it cost GBs
    mb = (store / "zarr.json").stat().st_size / 2**20
    _refused(got, {"rss_mb": stores[1]["points"]["rss_mb"] + 2.2 * mb}, match="zarr.json")
    assert "64 MiB" in got["message"]
    report = zvf.validate(str(store))
    assert not report.ok and "zarr.json" in str(report)


@pytest.mark.parametrize("where", ["root chunk_shape", "level chunk_shape", "root base_bin_shape"])
def test_an_absurd_grid_is_refused_at_open_and_by_the_validator(stores, tmp_path, where):
    """``chunk_shape = 1e-300`` made every query answer 0 rows while validate(level=5) passed."""
    store = _copy(stores, "points", tmp_path)
    if where == "root chunk_shape":
        root = json.loads((store / "zarr.json").read_text())
        root["attributes"]["zarr_vectors"]["chunk_shape"] = [1e-300] * 3
        (store / "zarr.json").write_text(json.dumps(root))
    elif where == "level chunk_shape":
        _edit_doc(store, "0", lambda d: d["attributes"]["zarr_vectors_level"].update(chunk_shape=[1e-9] * 3))
    else:
        root = json.loads((store / "zarr.json").read_text())
        root["attributes"]["zarr_vectors"]["base_bin_shape"] = [25 / 2**30] * 3
        (store / "zarr.json").write_text(json.dumps(root))
    with pytest.raises(FormatError, match=r"zarr\.json.*(chunk_shape|bin_shape).*cells"):
        zvf.open(str(store))
    report = zvf.validate(str(store), level=5)
    assert not report.ok and "cells" in str(report), str(report)
