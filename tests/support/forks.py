"""Work run in a forked child, its result or error brought back to the test (the fork-safety tests)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

DEADLINE = 60.0


def in_fork(work: Callable[[], Any], deadline: float = DEADLINE) -> Any:
    """``work()`` run in a forked child; its JSON result, or the child's error as a test failure."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running the parent's cleanup
        try:
            os.close(read)
            message = {"ok": work()}
        except BaseException as e:  # anything goes back to the parent
            message = {"error": f"{type(e).__name__}: {e}"}
        os.write(write, json.dumps(message).encode())
        os._exit(0)
    os.close(write)
    try:
        end = time.monotonic() + deadline
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > end:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail(f"the forked child hung for {deadline:.0f} s")
            time.sleep(0.02)
        with os.fdopen(read, "rb") as f:
            read = -1
            raw = f.read()
    finally:
        if read >= 0:
            os.close(read)
    message = json.loads(raw or b'{"error": "the child died without a word"}')
    assert "error" not in message, message["error"]
    return message["ok"]
