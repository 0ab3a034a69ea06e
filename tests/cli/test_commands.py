"""The ``zvf`` command: info, query (npz/csv), validate exit codes, demo."""

import json

import numpy as np
import pytest

import zvf
from zvf.cli.main import main


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "pts.zarrvectors"
    rng = np.random.default_rng(3)
    pos = rng.uniform(0, 10, (500, 2)).astype(np.float32)
    zvf.write_points(str(path), pos, chunk_shape=(5, 5), bounds=([0, 0], [10, 10]),
                     attributes={"w": rng.random(500).astype(np.float32)})
    return str(path), pos


def test_info_json(store, capsys):
    assert main(["info", store[0], "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["vertex_count"] == 500 and info["ndim"] == 2 and info["vertex_attributes"] == ["w"]


def test_query_npz_and_csv(store, tmp_path, capsys):
    path, pos = store
    truth = int(np.all((pos >= [1, 1]) & (pos <= [6, 4]), axis=1).sum())
    out = tmp_path / "q.npz"
    assert main(["query", path, "--bbox", "1,1", "6,4", "--out", str(out)]) == 0
    assert f"{truth} vertices" in capsys.readouterr().out
    data = np.load(out)
    assert data["positions"].shape == (truth, 2) and data["attr_w"].shape == (truth,)
    csv = tmp_path / "q.csv"
    assert main(["query", path, "--bbox", "1,1", "6,4", "--out", str(csv)]) == 0
    lines = csv.read_text().splitlines()
    assert lines[0] == "x,y,w" and len(lines) == truth + 1


def test_errors_name_the_problem(store, tmp_path, capsys):
    assert main(["info", str(tmp_path / "nothing")]) == 2
    assert "StoreNotFoundError" in capsys.readouterr().err
    assert main(["query", store[0], "--bbox", "1,1,1", "2,2,2"]) == 2
    assert "bbox" in capsys.readouterr().err


def test_demo_small_local(tmp_path, capsys):
    assert main(["demo", str(tmp_path / "demo"), "--points", "20000", "--objects", "100"]) == 0
    out = capsys.readouterr().out
    assert "wrote 20,000 points" in out and "MISMATCH" not in out


def test_demo_embedded_s3(capsys):
    assert main(["demo", "--points", "5000", "--objects", "50"]) == 0
    out = capsys.readouterr().out
    assert "in-process S3 server" in out and "streamlines: wrote 50" in out and "MISMATCH" not in out
