"""Issue 27: rows to stdout (export/query ``-``), ``zvf query`` printing rows, a complete ``info``,
notebook reprs, ``Selection.to_pandas()/to_arrow()``, and the CSV/LAS inputs that used to fail."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import zvf
from zvf.cli.main import main
from zvf.errors import InvalidArgumentError, MissingDependencyError

SRC = str(Path(zvf.__file__).resolve().parents[1])
ZVF = [sys.executable, "-m", "zvf.cli.main"]


def _zvf(*argv: str) -> subprocess.CompletedProcess:
    r = subprocess.run([*ZVF, *argv], capture_output=True, env={**os.environ, "PYTHONPATH": SRC}, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    return r


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("stdout")
    rng = np.random.default_rng(3)
    pos = rng.uniform(0, 100, (3000, 3))
    zvf.write_points(str(d / "pts.zvf"), pos, chunk_shape=(25.0,) * 3,
                     attributes={"w": pos[:, 0].astype(np.float32), "rgb": rng.integers(0, 255, (3000, 3), np.uint8)})
    lines = [np.cumsum(rng.normal(0, 1, (12, 3)), axis=0) + 50 for _ in range(40)]
    zvf.write_polylines(str(d / "sl.zvf"), lines, chunk_shape=(4.0,) * 3, geometry_type="streamline",
                        attributes={"fa": [ln[:, 0].astype(np.float32) for ln in lines]},
                        object_attributes={"length": np.arange(40, dtype=np.float32),
                                           "cluster": (np.arange(40) % 3).astype(np.int32)},
                        groups={0: [1, 2, 3], 1: [4]}, compression="zstd", shard_shape=(2, 2, 2))
    return d


@pytest.mark.parametrize("fmt", ["csv", "npz", "parquet", "json"])
def test_export_to_stdout_is_the_file(stores, tmp_path, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    out = tmp_path / f"o.{fmt}"
    assert main(["export", str(stores / "pts.zvf"), str(out), "-q"]) == 0
    r = _zvf("export", str(stores / "pts.zvf"), "-", "--format", fmt, "-q")
    assert r.stdout == out.read_bytes()  # the same bytes as the file export
    assert b"exported 3,000 vertices" in r.stderr  # the summary goes to stderr: stdout carries the rows
    assert not (Path.cwd() / "-").exists()


def test_query_prints_rows(stores):
    store = str(stores / "pts.zvf")
    with zvf.open(store) as ds:
        want = ds.select(bbox=([0, 0, 0], [30, 30, 30])).read()
    r = _zvf("query", store, "--bbox", "0,0,0", "30,30,30", "--format", "csv")
    lines = r.stdout.decode().splitlines()
    assert lines[0] == "x,y,z,rgb_0,rgb_1,rgb_2,w" and len(lines) == len(want) + 1
    got = np.loadtxt(lines[1:], delimiter=",")
    assert np.array_equal(got[:, :3], want.positions)
    assert np.array_equal(got[:, 6].astype(np.float32), want.attributes["w"])
    assert f"{len(want)} vertices".encode() in r.stderr
    r = _zvf("query", store, "--format", "json", "--limit", "7")
    rows = [json.loads(x) for x in r.stdout.decode().splitlines()]
    assert len(rows) == 7 and set(rows[0]) == {"x", "y", "z", "rgb_0", "rgb_1", "rgb_2", "w"}
    r = _zvf("query", store, "--bbox", "0,0,0", "30,30,30", "--json")
    summary = json.loads(r.stdout)
    assert summary["vertices"] == len(want) and summary["requests"] > 0 and summary["files"] == []
    r = _zvf("query", store, "--bbox", "0,0,0", "30,30,30", "--count", "--json")
    assert json.loads(r.stdout)["vertices"] == len(want)
    r = _zvf("query", store, "--bbox", "0,0,0", "30,30,30", "--out", "-", "--format", "npz")
    npz = np.load(io.BytesIO(r.stdout))
    assert np.array_equal(npz["positions"], want.positions)


def test_query_rows_of_objects_carry_their_order(stores):
    r = _zvf("query", str(stores / "sl.zvf"), "--objects", "3,5", "--format", "csv")
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("x,y,z,object_id,vertex_index") and len(lines) == 25


def test_output_that_is_not_a_regular_file_is_never_replaced(stores, tmp_path, capsys):
    target = tmp_path / "real.csv"
    target.write_text("keep me\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    for argv in (["export", str(stores / "pts.zvf"), str(link), "-q"],
                 ["query", str(stores / "pts.zvf"), "--out", str(link)],
                 ["convert", str(stores / "pts.zvf"), str(link), "--overwrite", "-q"]):
        assert main(argv) == 2
        assert "is a symlink" in capsys.readouterr().err
        assert link.is_symlink() and target.read_text() == "keep me\n"
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    assert main(["export", str(stores / "pts.zvf"), str(fifo), "-q"]) == 2  # refused before opening it
    assert fifo.is_fifo() and "is a FIFO" in capsys.readouterr().err
    regular = tmp_path / "old.csv"
    regular.write_text("old\n")
    assert main(["export", str(stores / "pts.zvf"), str(regular), "-q"]) == 0  # a regular file is replaced
    assert regular.read_text().startswith("x,y,z")


def test_info_lists_attributes_groups_and_layout(stores, capsys):
    store = str(stores / "sl.zvf")
    assert main(["info", store, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["object_attributes"] == {"cluster": "int32", "length": "float32"}
    assert info["vertex_attribute_dtypes"] == {"fa": "float32"} and info["vertex_attributes"] == ["fa"]
    assert info["group_count"] == 2 and info["object_count"] == 40
    assert info["compression"] == "zstd" and info["shard_shape"] == [2, 2, 2] and info["dtype"] == "float64"
    assert main(["info", store]) == 0
    text = capsys.readouterr().out
    assert "length (float32)" in text and "cluster (int32)" in text and "shard_shape" in text
    with zvf.open(str(stores / "pts.zvf")) as ds:
        info = ds.info()
        assert info["vertex_attribute_dtypes"] == {"rgb": "uint8[3]", "w": "float32"}
        assert "object_attributes" not in info
        text = repr(ds)
        assert "vertices=3000" in text and "chunks=" in text and "vertex_attributes=['rgb', 'w']" in text
        assert "<table>" in ds._repr_html_() and "3000" in ds._repr_html_()
    with zvf.open(store) as ds:
        assert "objects=40" in repr(ds)


def test_selection_to_pandas_and_arrow(stores, monkeypatch):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    with zvf.open(str(stores / "sl.zvf")) as ds:
        sel = ds.select(objects=[2, 7]).read()
    df = sel.to_pandas()
    assert list(df.columns) == ["x", "y", "z", "object_id", "vertex_index", "fa"] and len(df) == 24
    assert df["fa"].dtype == np.float32 and np.array_equal(df[["x", "y", "z"]].to_numpy(), sel.positions)
    assert isinstance(df, pd.DataFrame)
    with zvf.open(str(stores / "pts.zvf")) as ds:
        sel = ds.select(bbox=([0, 0, 0], [20, 20, 20])).read()
    table = sel.to_arrow()
    assert table.column_names == ["x", "y", "z", "rgb", "w"] and table.num_rows == len(sel)
    assert np.array_equal(np.stack(table.column("rgb").to_pylist()), sel.attributes["rgb"])
    assert list(sel.to_pandas().columns) == ["x", "y", "z", "rgb_0", "rgb_1", "rgb_2", "w"]
    monkeypatch.setitem(sys.modules, "pandas", None)  # not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'zvf\[pandas\]'"):
        sel.to_pandas()


def test_open_refuses_modes_that_do_not_exist(stores):
    for mode in ("w", "x", "rw"):
        with pytest.raises(InvalidArgumentError, match="mode must be 'r'"):
            zvf.open(str(stores / "pts.zvf"), mode=mode)


# -- inputs that used to fail -------------------------------------------------------------


def test_csv_as_pyarrow_writes_it_is_read_quickly(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pcsv = pytest.importorskip("pyarrow.csv")
    n = 200_000
    rng = np.random.default_rng(0)
    cols = {"x": rng.random(n) * 10, "y": rng.random(n) * 10, "z": rng.random(n), "k": np.arange(n)}
    pcsv.write_csv(pa.table(cols), str(tmp_path / "q.csv"))
    assert (tmp_path / "q.csv").read_text()[:20].startswith('"x","y","z","k"')
    t0 = time.perf_counter()
    s = zvf.convert(tmp_path / "q.csv", tmp_path / "q.zvf", chunk_shape=[5, 5, 5])
    assert s["vertices"] == n and time.perf_counter() - t0 < 30
    with zvf.open(str(tmp_path / "q.zvf")) as ds:
        sel = ds.read_all()
    order = np.argsort(sel.attributes["k"])
    assert sel.attributes["k"].dtype == np.int64 and np.array_equal(sel.attributes["k"][order], cols["k"])
    assert np.array_equal(sel.positions[order], np.column_stack([cols["x"], cols["y"], cols["z"]]))


@pytest.mark.parametrize("text", ["X,Y,Z,w\n1,2,3,4\n5,6,7,8\n", "x;y;z;w\n1;2;3;4\n5;6;7;8\n",
                                  "x\ty\tz\tw\n1\t2\t3\t4\n5\t6\t7\t8\n"])
def test_csv_headers_in_any_case_and_delimiter(tmp_path, text):
    (tmp_path / "a.csv").write_text(text)
    zvf.convert(tmp_path / "a.csv", tmp_path / "a.zvf", chunk_shape=[10, 10, 10])
    with zvf.open(str(tmp_path / "a.zvf")) as ds:
        sel = ds.read_all()
        assert ds.ndim == 3
    order = np.argsort(sel.attributes["w"])
    assert np.array_equal(sel.positions[order], [[1, 2, 3], [5, 6, 7]]) and sel.attributes["w"].dtype == np.int64


def test_store_to_las_with_classes_above_31(tmp_path):
    laspy = pytest.importorskip("laspy")
    pos = np.random.default_rng(2).uniform(0, 100, (300, 3))
    classes = np.arange(300) % 200
    zvf.write_points(str(tmp_path / "c.zvf"), pos, chunk_shape=(50.0,) * 3,
                     attributes={"classification": classes.astype(np.uint8)})
    zvf.convert(tmp_path / "c.zvf", tmp_path / "c.las")
    back = laspy.read(str(tmp_path / "c.las"))
    assert back.header.point_format.id == 6 and str(back.header.version) == "1.4"
    assert sorted(np.asarray(back.classification).tolist()) == sorted(classes.tolist())
