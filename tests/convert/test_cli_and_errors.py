"""`zvf convert` on the command line, the missing-extra error, and stores that carry a source record."""

import sys

import numpy as np
import pytest

import zvf
from zvf.cli.main import main
from zvf.errors import MissingDependencyError


def test_cli_convert_both_ways(tmp_path, capsys):
    src = tmp_path / "p.csv"
    rng = np.random.default_rng(0)
    np.savetxt(src, np.column_stack([rng.random((50, 3)), np.arange(50)]), delimiter=",",
               header="x,y,z,k", comments="", fmt=["%.17g"] * 3 + ["%d"])
    store = str(tmp_path / "p.zarrvectors")
    assert main(["convert", str(src), store, "--chunk-shape", "0.5,0.5,0.5", "--set", "batch_rows=7"]) == 0
    assert "50 vertices" in capsys.readouterr().out
    assert main(["convert", str(src), str(tmp_path / "n.zvf"), "--chunk-shape", "none"]) == 2  # was a TypeError
    assert "--chunk-shape" in capsys.readouterr().err
    assert main(["convert", store, str(tmp_path / "o.txt"), "--to", "csv"]) == 0
    assert (tmp_path / "o.txt").read_text().startswith("x,y,z,k\n")
    # the file exists now: refused without --overwrite, with a message and exit status 2
    assert main(["convert", store, str(tmp_path / "o.txt"), "--to", "csv"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["convert", store, str(tmp_path / "o.txt"), "--to", "csv", "--overwrite"]) == 0
    assert main(["convert", store, str(tmp_path / "missing" / "o.csv")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["convert", store, str(tmp_path / "o.csv"), "--set", "nope=1"]) == 2
    assert "nope" in capsys.readouterr().err
    assert not (tmp_path / "o.csv").exists()  # nothing half-written left behind


def test_missing_extra_names_it(tmp_path, monkeypatch):
    (tmp_path / "a.ply").write_bytes(b"ply\n")
    monkeypatch.setitem(sys.modules, "plyfile", None)  # as if not installed
    with pytest.raises(MissingDependencyError, match=r"zvf\[ply\]"):
        zvf.convert(tmp_path / "a.ply", tmp_path / "s.zarrvectors")


def test_source_record_keeps_store_valid(tmp_path):
    laspy = pytest.importorskip("laspy")
    las = laspy.LasData(laspy.LasHeader(point_format=1, version="1.2"))
    las.X = np.arange(100)
    las.Y = np.arange(100)
    las.Z = np.arange(100)
    las.write(str(tmp_path / "a.las"))
    store = str(tmp_path / "s.zarrvectors")
    zvf.convert(tmp_path / "a.las", store)
    report = zvf.validate(store, level=5)
    assert report.ok, report.summary()
    with zvf.open(store) as ds:
        assert ds.aio.root.raw["attributes"]["zvf_source"]["format"] == "las"
    zarr = pytest.importorskip("zarr")
    assert zarr.open_group(store, mode="r").attrs["zvf_source"]["point_format"] == 1  # plain Zarr sees it too
