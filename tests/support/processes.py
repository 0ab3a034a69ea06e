"""Child processes the tests start: the ``zvf`` command (on a pseudo-terminal too), and a writer that
prints ``PAUSED <what it was about to do>`` before blocking, killed there."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import zvf

ZVF = [sys.executable, "-m", "zvf.cli.main"]
SRC = str(Path(zvf.__file__).resolve().parents[1])


def zvf_env(**extra) -> dict:
    """The environment of a ``zvf`` child: this one, with zvf's source tree first on its path."""
    return {**os.environ, "PYTHONPATH": SRC, **extra}


def run_zvf_in_pty(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run ``zvf ARGV`` with stderr on a pseudo-terminal; returns (exit code, what stderr showed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([*ZVF, *argv], stdout=subprocess.DEVNULL, stderr=slave, env=zvf_env())
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout), b"".join(chunks).decode(errors="replace")


def kill_when_paused(p: subprocess.Popen) -> str:
    """Wait for a writer child's ``PAUSED <what>`` line, SIGKILL it; returns what it was about to do."""
    try:
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([p.stdout], [], [], 1.0)
            if ready:
                line = p.stdout.readline()
                if line.startswith("PAUSED") or not line:
                    break
        assert line.startswith("PAUSED"), f"child did not pause: {line!r} {p.stderr.read() if p.poll() else ''}"
        os.kill(p.pid, signal.SIGKILL)
        assert p.wait(10) == -signal.SIGKILL
        return line.split(" ", 1)[1].strip()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
