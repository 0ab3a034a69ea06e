"""The mistakes table (issue 27): every CLI mistake ends in at most 3 lines on stderr, no traceback,
exit 2 for the command (arguments, options, targets) and 1 for the data (a malformed file or store).

Each mistake runs through ``main()`` in process (stderr captured; an exception escaping ``main`` fails
it as a traceback would), and a few again as real processes to check the entry point itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import zvf
from zvf.cli.main import main

laspy = pytest.importorskip("laspy")
SRC = str(Path(zvf.__file__).resolve().parents[1])
ZVF = [sys.executable, "-m", "zvf.cli.main"]


def _las(path: Path, n: int = 400, classes: int = 10) -> None:
    rng = np.random.default_rng(0)
    header = laspy.LasHeader(point_format=3, version="1.2")
    header.scales, header.offsets = [0.01] * 3, [0, 0, 0]
    las = laspy.LasData(header)
    las.x, las.y, las.z = (rng.uniform(0, 100, n) for _ in range(3))
    las.classification = rng.integers(0, classes, n)
    las.write(str(path))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """Every broken or odd input of the table, in one directory."""
    d = tmp_path_factory.mktemp("mistakes")
    _las(d / "ok.las")
    _las(d / "ok.laz")
    for name in ("ok.las", "ok.laz"):
        data = (d / name).read_bytes()
        (d / f"trunc{name[2:]}").write_bytes(data[: len(data) // 2])
    header = laspy.read(str(d / "ok.las")).header
    data = (d / "ok.las").read_bytes()
    start = header.offset_to_point_data
    (d / "header_only.las").write_bytes(data[:start])
    record = header.point_format.size
    (d / "cut_at_record.las").write_bytes(data[: start + 100 * record])  # reads cleanly: 100 of 400 points
    (d / "text.las").write_text("this is not a LAS file\n" * 20)
    (d / "text_column.csv").write_text("x,y,z,name\n1,2,3,a\n4,5,6,b\n")
    (d / "ragged.csv").write_text("x,y,z\n1,2,3\n4,5\n")
    (d / "binary.csv").write_bytes(b"\xff\xfe\x00\x81" * 50)
    (d / "header_only.csv").write_text("x,y,z\n")
    (d / "x_and_z.csv").write_text("x,z\n1,2\n4,5\n")
    (d / "x_twice.csv").write_text("x,X,y\n1,2,3\n")
    (d / "int_then_float.csv").write_text("x,y,k\n1,2,3\n4,5,6.5\n")
    import plyfile

    v = np.array([(i, i, i) for i in range(300)], dtype=[("x", "f4"), ("y", "f4"), ("z", "f4")])
    plyfile.PlyData([plyfile.PlyElement.describe(v, "vertex")]).write(str(d / "ok.ply"))
    data = (d / "ok.ply").read_bytes()
    (d / "trunc.ply").write_bytes(data[: len(data) // 2])
    (d / "text.ply").write_text("hello\n")
    (d / "bad.swc").write_text("1 1 0 0 0 1\n")
    (d / "bad_face.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 9\n")
    (d / "broken.graphml").write_text("<graphml><graph>")
    (d / "text.trk").write_text("not a trk file\n" * 40)
    pos = np.random.default_rng(1).uniform(0, 100, (500, 3))
    zvf.write_points(str(d / "pts.zvf"), pos, chunk_shape=(50.0,) * 3, attributes={"w": pos[:, 0].copy()})
    zvf.write_points(str(d / "classes.zvf"), pos, chunk_shape=(50.0,) * 3,
                     attributes={"classification": np.full(500, 40, np.uint8)})
    tri = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float64)
    zvf.write_mesh(str(d / "mesh.zvf"), tri, np.array([[0, 1, 2]]), chunk_shape=(5.0,) * 3)
    (d / "random_dir").mkdir()
    (d / "random_dir" / "notes.txt").write_text("x")
    os.symlink(d / "target.csv", d / "link.csv")
    os.mkfifo(d / "fifo.csv")
    (d / "a_dir.csv").mkdir()
    return d


# (argv, exit code, what stderr says); {d} is the files' directory
MISTAKES = [
    # files that are not what their suffix says: data errors, exit 1
    (["convert", "{d}/trunc.laz", "{d}/o"], 1, "trunc.laz: not a valid LAS file"),
    (["convert", "{d}/trunc.las", "{d}/o"], 1, "trunc.las: not a valid LAS file"),
    (["convert", "{d}/cut_at_record.las", "{d}/o"], 1, "holds 100 points, its header says 400"),
    (["convert", "{d}/header_only.las", "{d}/o"], 1, "holds 0 points, its header says 400"),
    (["convert", "{d}/text.las", "{d}/o"], 1, "text.las: not a valid LAS file"),
    (["convert", "{d}/text_column.csv", "{d}/o"], 1, "line 2, column 'name': 'a' is not a number"),
    (["convert", "{d}/ragged.csv", "{d}/o"], 1, "line 3 has 2 fields, the header names 3"),
    (["convert", "{d}/binary.csv", "{d}/o"], 1, "not a text file"),
    (["convert", "{d}/header_only.csv", "{d}/o"], 1, "no rows"),
    (["convert", "{d}/x_and_z.csv", "{d}/o"], 1, "needs position columns x, y[, z]"),
    (["convert", "{d}/x_twice.csv", "{d}/o"], 1, "both name axis x"),
    (["convert", "{d}/int_then_float.csv", "{d}/o", "--set", "batch_rows=1"], 1,
     "'6.5' is not an integer"),
    (["convert", "{d}/trunc.ply", "{d}/o"], 1, "trunc.ply: not a valid PLY file"),
    (["convert", "{d}/text.ply", "{d}/o"], 1, "text.ply: not a valid PLY file"),
    (["convert", "{d}/bad.swc", "{d}/o"], 1, "SWC lines have 7 fields"),
    (["convert", "{d}/bad_face.obj", "{d}/o"], 1, "a face refers to a vertex outside"),
    (["convert", "{d}/broken.graphml", "{d}/o"], 1, "broken.graphml: not a valid GRAPHML file"),
    (["convert", "{d}/text.trk", "{d}/o"], 1, "text.trk: not a valid TRK file"),
    (["info", "{d}/random_dir"], 2, "not a ZVF store"),
    # options: exit 2
    (["convert", "{d}/ok.las", "{d}/o", "--set", "batch_rows=abc"], 2, "batch_rows must be a whole number"),
    (["convert", "{d}/ok.las", "{d}/o", "--set", "batch_rows=0"], 2, "batch_rows must be >= 1"),
    (["convert", "{d}/ok.las", "{d}/o", "--set", "chunk_shap=1"], 2, "did you mean 'chunk_shape'?"),
    (["convert", "{d}/ok.las", "{d}/o", "--set", "chunk_shape=1,1,1"], 2, "given as --chunk-shape"),
    (["convert", "{d}/ok.las", "{d}/o", "--set", "nonsense"], 2, "--set expects key=value"),
    (["convert", "{d}/ok.las", "{d}/out/x.xyz"], 2, ".xyz is not a format zvf converts"),
    (["convert", "{d}/ok.las", "{d}/o", "--chunk-shape", "-1,-1,-1"], 2, "sizes must be positive"),
    (["convert", "{d}/ok.las", "{d}/o", "--chunk-shape=-1,-1,-1"], 2, "sizes must be positive"),
    (["convert", "{d}/ok.las", "{d}/o", "--chunk-shape", "a,b,c"], 2, "a shape must be 'auto' or numbers"),
    (["convert", "{d}/classes.zvf", "{d}/c.las", "--set", "point_format=3"], 2, "point_format=6"),
    (["convert", "{d}/classes.zvf", "{d}/c.las", "--set", "point_format=12"], 2, "point format 0..10"),
    (["convert", "{d}/nope.las", "{d}/o"], 2, "no such file"),
    (["convert", "{d}/ok.las", "{d}/o", "--shard-shape", "a,b"], 2, "--shard-shape must be whole numbers"),
    (["convert", "{d}/none*.swc", "{d}/o"], 2, "the pattern matches no file"),
    (["convert", "{d}/ok.las", "{d}/ok.laz", "{d}/o"], 2, "zvf converts several files of swc"),
    (["convert", "{d}/random_dir", "{d}/o"], 2, "neither names a file format"),
    (["convert", "{d}/pts.zvf", "{d}/p.csv", "--keep-order"], 2, "needs the vertex attribute 'zvf_source_row'"),
    (["convert", "{d}/pts.zvf", "{d}/link.csv"], 2, "is a symlink"),
    (["convert", "{d}/pts.zvf", "{d}/fifo.csv", "--overwrite"], 2, "is a FIFO"),
    (["query", "{d}/pts.zvf", "--count", "--explain"], 2, "not allowed with argument --count"),
    (["query", "{d}/pts.zvf", "--count", "--out", "{d}/q.csv"], 2, "print no rows"),
    (["query", "{d}/pts.zvf", "--out", "{d}/r.txt"], 2, "cannot tell the format of"),
    (["query", "{d}/pts.zvf", "--bbox", "-10,-10,-10", "x,5,5"], 2, "--bbox HI must be comma-separated"),
    (["query", "{d}/mesh.zvf", "--format", "csv"], 2, "faces table"),
    (["export", "{d}/pts.zvf", "{d}/link.csv"], 2, "is a symlink"),
    (["export", "{d}/pts.zvf", "{d}/fifo.csv"], 2, "is a FIFO"),
    (["export", "{d}/pts.zvf", "{d}/a_dir.csv"], 2, "is a directory"),
    (["export", "{d}/pts.zvf", "/dev/stdout", "--format", "csv"], 2, "write to '-' for stdout"),
    (["export", "{d}/pts.zvf", "-"], 2, "writing to stdout ('-') needs --format"),
    (["export", "{d}/mesh.zvf", "-", "--format", "csv"], 2, "faces table"),
    (["export", "{d}/pts.zvf", "{d}/x.xyz"], 2, "cannot tell the format"),
    (["info", "{d}/no_such_store"], 2, "no store"),
]


def _run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own checks
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv,code,says", MISTAKES, ids=[" ".join(a[:2] + a[2:][-2:]) for a, _, _ in MISTAKES])
def test_mistake(files, capsys, argv, code, says):
    argv = [a.format(d=files) for a in argv]
    got, err = _run(argv, capsys)
    lines = err.strip().splitlines()
    assert got == code and says in err, (got, err)
    assert 1 <= len(lines) <= 3 and "Traceback" not in err, err
    assert not (files / "o").exists() and not (files / "target.csv").exists()  # nothing half-made, nothing followed
    assert (files / "link.csv").is_symlink() and (files / "fifo.csv").is_fifo()


def test_the_table_counts(capsys):
    with capsys.disabled():
        print(f"\nmistakes table: {len(MISTAKES)} CLI mistakes")
    assert len(MISTAKES) >= 40


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": SRC}


@pytest.mark.parametrize("argv,code", [(["convert", "{d}/trunc.laz", "{d}/o"], 1),
                                       (["convert", "{d}/ok.las", "{d}/o", "--set", "batch_rows=abc"], 2),
                                       (["convert", "{d}/classes.zvf", "{d}/c.las", "--set", "point_format=3"], 2)])
def test_mistake_in_a_real_process(files, argv, code):
    r = subprocess.run([*ZVF, *[a.format(d=files) for a in argv]], capture_output=True, text=True, env=_env(),
                       timeout=120)
    assert r.returncode == code and 1 <= len(r.stderr.strip().splitlines()) <= 3, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("argv", [["info", "{d}/pts.zvf", "--json"],
                                  ["export", "{d}/pts.zvf", "-", "--format", "csv", "-q"],
                                  ["query", "{d}/pts.zvf", "--format", "json"]])
def test_reader_gone_is_quiet(files, argv):
    """``zvf ... | head`` whose reader has gone: no "Broken pipe", no traceback, SIGPIPE's exit status."""
    proc = subprocess.Popen([*ZVF, *[a.format(d=files) for a in argv]], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=_env())
    proc.stdout.close()  # the reader goes away before the first row
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 141, err
    assert "Broken pipe" not in err and "Traceback" not in err and "Exception ignored" not in err, err
