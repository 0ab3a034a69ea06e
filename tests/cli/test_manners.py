"""The ``zvf`` command behaves like a good tool: one test per manner of issue 12 item 4."""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import zvf
from tests.support.processes import ZVF, run_zvf_in_pty, zvf_env
from zvf.cli.main import main
from zvf.cli.progress import ProgressBar
from zvf.errors import RemoteError, StoreNotFoundError

# ``zvf`` with Ctrl-C live: a suite launched in the background of a non-interactive shell (or under
# nohup) passes SIGINT on ignored, and a command started that way rightly keeps ignoring it
ZVF_INTERRUPTIBLE = [sys.executable, "-c",
                     "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                     "from zvf.cli.main import main; sys.exit(main(sys.argv[1:]))"]


@pytest.fixture(scope="module")
def points(tmp_path_factory):
    path = tmp_path_factory.mktemp("manners") / "pts.zarrvectors"
    pos = np.random.default_rng(4).uniform(0, 100, (4000, 3)).astype(np.float32)
    zvf.write_points(str(path), pos, chunk_shape=(25.0,) * 3, attributes={"w": pos[:, 0].copy()})
    return str(path)


# -- --version ---------------------------------------------------------------------------


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"zvf {zvf.__version__}"


# -- progress bars -------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_a_terminal_only():
    tty, pipe = _Tty(), io.StringIO()
    for stream in (tty, pipe):
        with ProgressBar("job", unit="chunks", stream=stream) as bar:
            for i in range(1, 5):
                bar.update(i, 4, "note")
    assert "100.0% 4/4 chunks" in tty.getvalue() and tty.getvalue().endswith("\n")
    assert pipe.getvalue() == ""
    quiet = _Tty()
    with ProgressBar("job", stream=quiet, quiet=True) as bar, bar.ticking(0.01):
        time.sleep(0.05)
    assert quiet.getvalue() == ""
    ticking = _Tty()
    with ProgressBar("job", stream=ticking) as bar, bar.ticking(0.01):
        time.sleep(0.05)
    assert ticking.getvalue().count("\r") >= 2 and " s" in ticking.getvalue()


@pytest.mark.parametrize("command", ["export", "validate", "rechunk", "pyramid", "demo", "convert"])
def test_long_jobs_show_progress_on_a_terminal(points, tmp_path, command):
    import shutil

    store = tmp_path / "s.zarrvectors"
    shutil.copytree(points, store)
    argv = {"export": ["export", str(store), str(tmp_path / "o.npz")],
            "validate": ["validate", str(store)],
            "rechunk": ["rechunk", str(store), str(tmp_path / "r.zarrvectors"), "--chunk-shape", "50,50,50"],
            "pyramid": ["pyramid", str(store), "--factor", "2:1"],
            "demo": ["demo", str(tmp_path / "demo"), "--points", "2000", "--objects", "20"],
            "convert": ["convert", str(store), str(tmp_path / "c.csv")]}[command]
    code, shown = run_zvf_in_pty(argv)
    assert code == 0, shown
    label = "write points" if command == "demo" else command
    assert f"\r{label}" in shown and "\x1b[K" in shown, shown
    if command in ("export", "pyramid"):
        assert "100.0%" in shown
    # not on a terminal: tests/read/test_export.py::test_cli_export_npz_and_csv sees an empty stderr


# -- logging -------------------------------------------------------------------------------


def test_debug_log_has_one_line_per_request(tmp_path, caplog):
    path = str(tmp_path / "sharded.zarrvectors")
    pos = np.random.default_rng(6).uniform(0, 100, (3000, 3)).astype(np.float32)
    zvf.write_points(path, pos, chunk_shape=(25.0,) * 3, shard_shape=2)  # cells are byte ranges of shards
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="zvf"), zvf.open(path) as ds:
        ds.query(([0, 0, 0], [20, 20, 20]))  # one cell of a shard: its index, then a range
        requests = ds.stats.snapshot()["requests"]
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("zvf")]
    traces = [m for m in lines if re.search(r" status=\w+ bytes=\d+ ms=[\d.]+$", m)]
    assert len(traces) == requests > 0
    assert any(m.startswith("get ") and "zarr.json" in m and "status=ok" in m for m in traces)
    assert any(re.match(r"get_(range|suffix) \S+ bytes=\d+-\d* ", m) for m in traces), traces[:5]


# -- errors name the store and the cause -----------------------------------------------------


@pytest.mark.s3
def test_missing_bucket_is_named(s3_endpoint, capsys):
    url = "s3://no-such-bucket-zvf/data"
    with pytest.raises(StoreNotFoundError, match=r"no-such-bucket-zvf.*bucket .*does not exist"):
        zvf.open(url, storage_options=s3_endpoint.storage_options())
    opts = [f"-o{k}={v}" for k, v in s3_endpoint.storage_options().items()]
    assert main(["info", url, *opts]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not exist" in err and "\n" not in err and "http://" not in err


@pytest.mark.s3
def test_access_denied_is_named(s3_proxied):
    url, opts, proxy = s3_proxied
    zvf.write_points(url, np.zeros((5, 3), np.float32), chunk_shape=(1.0,) * 3, storage_options=opts)
    proxy.fail(403, times=None)
    with pytest.raises(RemoteError, match=r"access denied: the credentials were rejected") as exc:
        zvf.open(url, storage_options=opts)
    assert url.split("/")[2] in str(exc.value) and exc.value.status == 403


@pytest.fixture
def blackhole():
    """A TCP port that accepts connections and never answers (an unreachable metadata service)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join()
    for c in held:
        c.close()
    srv.close()


def test_no_credentials_fail_fast(monkeypatch, blackhole, capsys):
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", blackhole)
    t0 = time.perf_counter()
    with pytest.raises(RemoteError, match="no AWS credentials found for s3://some-bucket/data") as exc:
        zvf.open("s3://some-bucket/data", storage_options={"region": "us-east-1"})
    assert time.perf_counter() - t0 < 5 and "127.0.0.1" not in str(exc.value)
    assert main(["info", "s3://some-bucket/data"]) == 2
    assert "no AWS credentials found" in capsys.readouterr().err


# -- info, demo ------------------------------------------------------------------------------


def test_info_shows_levels_and_objects(tmp_path, capsys):
    rng = np.random.default_rng(2)
    lines = [np.cumsum(rng.normal(0, 2, (20, 3)), axis=0).astype(np.float32) + 50 for _ in range(30)]
    path = str(tmp_path / "sl.zarrvectors")
    zvf.write_polylines(path, lines, chunk_shape=(10.0,) * 3, geometry_type="streamline")
    zvf.build_pyramid(path, [(2, 2)])
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    rows = {int(m.group(1)): m for m in re.finditer(r"^\s+(\d)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)$", out, re.M)}
    assert sorted(rows) == [0, 1] and rows[0].group(2) == "600" and rows[0].group(4) == "30"
    assert main(["info", path, "--json"]) == 0
    import json

    summary = json.loads(capsys.readouterr().out)["level_summary"]
    assert [r["level"] for r in summary] == [0, 1] and summary[0]["objects"] == 30


def test_demo_shows_points_and_objects(tmp_path, capsys):
    assert main(["demo", str(tmp_path / "d"), "--points", "3000", "--objects", "40", "-q"]) == 0
    out = capsys.readouterr().out
    assert "points: wrote 3,000 points" in out and "streamlines: wrote 40 streamlines" in out
    assert "whole streamlines" in out and re.search(r"object 20: \d+ vertices in traversal order", out)
    assert "GETs" in out and "MISMATCH" not in out


# -- argument errors: exit 2, one line, no traceback -----------------------------------------


@pytest.mark.parametrize("argv,says", [
    (["demo", "--points", "-5"], "--points: must be >= 1"),
    (["export", "{store}", "{tmp}/no/such/dir/out.csv"], "does not exist"),
    (["query", "{store}", "--bbox", "1,a,3", "5,5,5"], "--bbox LO must be comma-separated numbers"),
    (["query", "{store}", "--bbox", "1,1", "5,5"], "bbox"),
    (["query", "{store}", "--out", "{tmp}/missing/q.npz"], "does not exist"),
    (["export", "{store}", "{tmp}/o.xls"], "cannot tell the format"),
    (["export", "{store}", "{tmp}/o.csv", "--format", "xls"], "invalid choice"),
    (["export", "{store}", "{tmp}/o.csv", "--prefetch", "0"], "must be >= 1"),
    (["validate", "{store}", "--level", "9"], "invalid choice"),
    (["info", "{store}", "-o", "nonsense"], "-o expects key=value"),
    (["pyramid", "{store}", "--factor", "x:y"], "--factor must look like"),
    (["frobnicate"], "invalid choice"),
])
def test_argument_errors_exit_2_with_one_line(points, tmp_path, capsys, argv, says):
    argv = [a.format(store=points, tmp=tmp_path) for a in argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own checks
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and "\n" not in err and "Traceback" not in err, err


def test_argument_error_in_a_real_process_has_no_traceback(tmp_path):
    r = subprocess.run([*ZVF, "demo", "--points", "-5"], capture_output=True, text=True, env=zvf_env(), timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


# -- Ctrl-C during an export ---------------------------------------------------------------


@pytest.mark.s3
def test_ctrl_c_during_export_leaves_no_file(s3_proxied, tmp_path):
    url, opts, proxy = s3_proxied
    pos = np.random.default_rng(5).uniform(0, 100, (20_000, 3)).astype(np.float32)
    zvf.write_points(url, pos, chunk_shape=(20.0,) * 3, storage_options=opts)
    proxy.latency = 0.05
    out = tmp_path / "big.csv"
    flags = [f"-o{k}={v}" for k, v in opts.items()]
    argv = [*ZVF_INTERRUPTIBLE, "export", url, str(out), "--batch-chunks", "1", "--prefetch", "1", "-q", *flags]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=zvf_env())
    deadline = time.monotonic() + 60
    while not any(p.name.endswith(".partial") for p in tmp_path.iterdir()):  # the export has started writing
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []  # neither OUT nor a partial file
