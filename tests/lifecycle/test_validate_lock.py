"""What ``zvf validate`` says about the store lock ``.zvf-writing``: a held lock (live or stale) is a
warning naming its holder and age, not corruption; a creation claim stays an unfinished write."""

from __future__ import annotations

import json

import numpy as np
import pytest

import zvf
import zvf.aio as za
from zvf.io.executor import Executor
from zvf.io.store import open_store
from zvf.write.lock import LOCK_KEY, TAKEOVER, StoreLock


@pytest.fixture
def store(tmp_path):
    path = str(tmp_path / "s.zarrvectors")
    zvf.write_points(path, np.random.default_rng(0).uniform(0, 10, (50, 3)), chunk_shape=(5.0,) * 3)
    return path


def _lock_issues(rep):
    return [i for i in rep.issues if i.key.startswith(LOCK_KEY)]


async def test_live_lock_is_a_warning_naming_its_holder(store):
    async with StoreLock(Executor(open_store(store, mode="a")), store, purpose="append") as lock:
        rep = await za.validate(store, level=5)
    assert rep.ok, rep.summary()
    (issue,) = _lock_issues(rep)
    assert issue.severity == "warning" and issue.key == LOCK_KEY
    assert f"held by append (owner {lock.owner}" in issue.message and "live" in issue.message
    assert "interrupted" not in issue.message


def test_stale_lock_and_its_takeover_marker_are_warnings(store, tmp_path):
    body = {"owner": "dead0", "purpose": "pyramid build", "host": "h", "pid": 7, "time": 1.0}
    (tmp_path / "s.zarrvectors" / LOCK_KEY).write_text(json.dumps(body))
    (tmp_path / "s.zarrvectors" / (TAKEOVER + "dead0")).write_text("{}")
    rep = zvf.validate(store, level=5)
    assert rep.ok, rep.summary()  # the marker is no orphan either
    (issue,) = _lock_issues(rep)
    assert issue.severity == "warning"
    assert "held by pyramid build (owner dead0, pid 7 on h)" in issue.message
    assert "dead" in issue.message and " d;" in issue.message  # its age, in days
    assert "zvf gc" in issue.message  # the leftover of a failed change, and its remedy
    assert "1 takeover marker(s)" in issue.message


def test_a_claim_is_an_error_only_where_no_root_was_published(store, tmp_path):
    """A first write's claim beside a published root is a leftover (warning, `zvf gc` clears it); without a
    root the store is unfinished (error)."""
    (tmp_path / "s.zarrvectors" / LOCK_KEY).write_bytes(b"zvf write in progress 0123\n")
    rep = zvf.validate(store)
    assert rep.ok and LOCK_KEY in rep.keys("warning")
    assert "zvf gc" in next(i.message for i in _lock_issues(rep))
    (tmp_path / "s.zarrvectors" / "zarr.json").unlink()
    rep = zvf.validate(store)
    assert not rep.ok and LOCK_KEY in rep.keys("error")
    assert "interrupted" in next(i.message for i in _lock_issues(rep))


def test_a_dead_holder_is_not_reported_live(store):
    """A holder on this host whose process is gone is dead at once, whatever its heartbeat says."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(p.stdout)
    body = {"owner": "gone", "purpose": "append", "host": __import__("socket").gethostname(), "pid": pid,
            "time": __import__("time").time(), "heartbeat": __import__("time").time(), "lease": 30.0}
    (__import__("pathlib").Path(store) / LOCK_KEY).write_text(json.dumps(body))
    (issue,) = _lock_issues(zvf.validate(store))
    assert issue.severity == "warning" and "dead" in issue.message and "live" not in issue.message
    assert f"process {pid}" in issue.message
