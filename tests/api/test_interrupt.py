"""Ctrl-C in the blocking facade: a real SIGINT sent to a process blocked in ``zvf.write_points``
(local store and S3), in a blocking iterator and in a blocking query.

The interrupted call must return only once its coroutine has stopped: no key
is written after it returns, no root is ever published, and the same process
(a notebook, say) can re-run the write with ``overwrite=True`` and get a store
that validates and reads back to the input.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import zvf
from tests.support.interrupted import BOX, cloud, write_cloud

ROOT = Path(__file__).resolve().parents[2]


def _spawn(*args: str) -> subprocess.Popen:
    """``python -m tests.support.interrupted ARGS``, its first lines read by the test as they come."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "tests.support.interrupted", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"child failed ({proc.returncode}):\n{stdout}\n{stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def _interrupt_write(target: str, opts: dict, n: int, chunk: float, count_keys) -> dict:
    proc = _spawn("write", target, json.dumps(opts), str(n), str(chunk))
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 60
    while count_keys() < 30:  # cells are going up: the write is under way
        assert proc.poll() is None and time.monotonic() < deadline, "the write never started uploading"
        time.sleep(0.02)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out = _result(proc)
    out["cancel_seconds"] = out["returned_at"] - sent
    print(f"\n{target}: {json.dumps(out)}")
    return out


def _check(out: dict, target: str, opts: dict, n: int) -> None:
    assert out["outcome"] == "interrupted", out
    assert out["keys_after_wait"] == out["keys_at_return"] and not out["root"], out  # nothing ran on
    assert out["open"] in ("IncompleteStoreError", "StoreNotFoundError") and not out["validate_ok"], out
    assert out["rerun_vertices"] == n
    report = zvf.validate(target, storage_options=opts)
    assert report.ok, [str(i) for i in report.errors][:5]
    pos, v = cloud(n)
    with zvf.open(target, storage_options=opts) as ds:
        sel = ds.read_all()
    got = np.column_stack([sel.positions, sel.attributes["v"]])
    want = np.column_stack([pos, v])
    assert np.array_equal(got[np.lexsort(got.T[::-1])], want[np.lexsort(want.T[::-1])])


def test_sigint_during_local_write(tmp_path):
    target = str(tmp_path / "big.zarrvectors")
    n = 60_000

    def count_keys() -> int:
        return sum(len(files) for _, _, files in os.walk(target))

    out = _interrupt_write(target, {}, n, 10.0, count_keys)
    _check(out, target, {}, n)


@pytest.mark.s3
def test_sigint_during_s3_write(s3_endpoint):
    import boto3

    bucket = s3_endpoint.create_bucket()
    target, opts = f"s3://{bucket}/big.zarrvectors", s3_endpoint.storage_options()
    client = boto3.client("s3", endpoint_url=s3_endpoint.endpoint, aws_access_key_id=s3_endpoint.access_key,
                          aws_secret_access_key=s3_endpoint.secret_key, region_name=s3_endpoint.region)
    n = 20_000

    def count_keys() -> int:
        return client.list_objects_v2(Bucket=bucket).get("KeyCount", 0)

    out = _interrupt_write(target, opts, n, 20.0, count_keys)
    _check(out, target, opts, n)


def test_sigint_during_blocking_iterator_and_query(tmp_path):
    target = str(tmp_path / "s.zarrvectors")
    pos, _ = cloud(20_000)
    write_cloud(target, {}, 20_000, 10.0)
    want = int(np.all((pos >= BOX[0]) & (pos <= BOX[1]), axis=1).sum())
    proc = _spawn("read", target, "{}")
    for phase in ("iterate", "query"):
        line = proc.stdout.readline().strip()
        assert line == phase, (line, proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
        time.sleep(0.4)  # well inside the loop of blocking calls
        proc.send_signal(signal.SIGINT)
    out = _result(proc)
    print(f"\n{json.dumps(out)}")
    assert out["iterate"] == out["query"] == "interrupted"
    assert out["iterate_late_requests"] == out["query_late_requests"] == 0  # no read kept running
    assert out["iterate_extra_tasks"] == out["query_extra_tasks"] == 0  # nothing left on the facade's loop
    assert out["rows_after"] == want  # the dataset still answers, correctly
