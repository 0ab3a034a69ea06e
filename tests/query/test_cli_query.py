"""``zvf query``: every selection flag, --count, --explain, outputs, negative coordinates."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.query_truth import vertex_pass
from zvf.cli.main import main


def test_negative_bbox_near_where_npz(stores, tmp_path, capsys):
    st = stores["points"]
    out = tmp_path / "q.npz"
    argv = ["query", st.path, "--bbox", "-10,-10,-10", "5,5,5", "--near", "-2,-1.5,0", "9",
            "--where", "cls=1:5", "--where", "rgb[1]=:200", "--out", str(out)]
    assert main(argv) == 0
    kw = {"bbox": ([-10] * 3, [5] * 3), "near": ([-2, -1.5, 0], 9.0), "where": {"cls": (1, 5), "rgb[1]": (0, 200)}}
    truth = int(vertex_pass(st, kw).sum())
    assert f"{truth} vertices" in capsys.readouterr().out
    data = np.load(out)
    assert data["positions"].shape == (truth, 3) and data["attr_rgb"].shape == (truth, 3)


def test_count_and_explain(stores, capsys):
    st = stores["points"]
    assert main(["query", st.path, "--bbox", "-25,-25,-25", "0,0,0", "--count"]) == 0
    truth = int(((st.pos >= -25) & (st.pos <= 0)).all(1).sum())
    assert capsys.readouterr().out.startswith(f"{truth} vertices")
    assert main(["query", st.path, "--where", "cls=2,3", "--explain"]) == 0
    text = capsys.readouterr().out
    assert "where cls in [2, 3]" in text and "wave 1" in text and "round trip" in text


def test_objects_groups_clip_csv(stores, tmp_path, capsys):
    st = stores["streamlines"]
    out = tmp_path / "s.csv"
    assert main(["query", st.path, "--groups", "0,1", "--objects", "1,2,3,4", "--near", "0,0,0", "30",
                 "--clip", "--out", str(out)]) == 0
    kw = {"near": ([0, 0, 0], 30.0)}
    p = vertex_pass(st, kw)
    want = sum(int(p[st.lines[o]].sum()) for o in (2, 3, 4))  # groups 0|1 = {0..6}, objects 1..4 -> 1..4; 1 in g1
    want += int(p[st.lines[1]].sum())
    lines = out.read_text().splitlines()
    assert len(lines) == want + 1 and lines[0].startswith("x,y,z,object_id")
    assert f"{want} vertices" in capsys.readouterr().out


def test_parquet_out(stores, tmp_path, capsys):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    st = stores["graph"]
    out = tmp_path / "g.parquet"
    assert main(["query", st.path, "--where", "val=0.25:0.75", "--limit", "2", "--out", str(out)]) == 0
    assert pq.read_table(out).num_rows == int(capsys.readouterr().out.split()[0])


def test_level_auto_flag(stores, capsys):
    assert main(["query", stores["points"].path, "--max-vertices", "100000", "--explain"]) == 0
    assert "auto" in capsys.readouterr().out


@pytest.mark.parametrize("argv,word", [
    (["--where", "cls"], "--where"), (["--where", "cls=a:b"], "--where cls"), (["--objects", "x"], "--objects"),
    (["--bbox", "1,2", "3,4,5"], "bbox"), (["--near", "0,0,0", "-1"], "radius"), (["--out", "x.txt"], "x.txt"),
])
def test_bad_flags_name_the_problem(stores, capsys, argv, word):
    try:
        code = main(["query", stores["points"].path, *argv])
    except SystemExit as exc:
        assert word in str(exc)
        return
    assert code == 2 and word in capsys.readouterr().err
