"""The one progress line every long ``zvf`` job draws on stderr.

It draws only when stderr is a terminal (a log file or a pipe gets no
carriage-return noise) and ``-q`` was not given.  Jobs that report their
progress call ``update(done, total)``; jobs that cannot (validate, convert,
rechunk, a write) run inside ``with bar.ticking():`` which redraws the
elapsed time from a thread until the job returns.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Self, TextIO


class ProgressBar:
    """A one-line bar ``label [####....] 42.0% 21/50 unit  note``, redrawn at most ``hz`` times a second."""

    def __init__(self, label: str = "", *, unit: str = "", quiet: bool = False, stream: TextIO | None = None,
                 width: int = 30, hz: float = 10.0):
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = not quiet and bool(isatty and isatty())
        self.label = label
        self.unit = unit
        self.width = width
        self.every = 1.0 / hz
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.state: tuple[int, int | None, str] = (0, None, "")
        self.lock = threading.Lock()
        self.drawn = False

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        """Record progress; redraw unless the last redraw was under 1/hz s ago (the final one always draws)."""
        self.state = (done, total, note)
        now = time.perf_counter()
        if self.enabled and (now - self.last >= self.every or (total is not None and done >= total)):
            self._draw(now)

    def _draw(self, now: float) -> None:
        done, total, note = self.state
        parts = [self.label] if self.label else []
        if total:
            frac = min(done / total, 1.0)
            fill = round(frac * self.width)
            parts.append(f"[{'#' * fill}{'.' * (self.width - fill)}] {frac * 100:5.1f}% {done:,}/{total:,} {self.unit}")
        elif done:
            parts.append(f"{done:,} {self.unit}")
        parts.append(f"{now - self.t0:6.1f} s")
        if note:
            parts.append(note)
        with self.lock:
            self.stream.write("\r" + " ".join(p for p in parts if p) + "\x1b[K")
            self.stream.flush()
            self.last = now
            self.drawn = True

    @contextlib.contextmanager
    def ticking(self, every: float = 0.5) -> Iterator[ProgressBar]:
        """Redraw the elapsed time every ``every`` s while the block runs (for jobs without progress hooks)."""
        if not self.enabled:
            yield self
            return
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(every):
                self._draw(time.perf_counter())

        self._draw(time.perf_counter())
        thread = threading.Thread(target=tick, name="zvf-progress", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()

    def close(self) -> None:
        """End the line so the job's own output starts on a fresh one."""
        if self.drawn:
            with self.lock:
                self.stream.write("\n")
                self.stream.flush()
            self.drawn = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
