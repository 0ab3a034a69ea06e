"""A transport wrapper that logs every read a dataset makes (and can add latency), for tests that count
requests and waves."""

from __future__ import annotations


class Recorder:
    """Wraps a dataset's transport: logs (start time, op, key, start, end) of every read, with latency."""

    blocking_gets = False  # a remote store's reads: one get each, every one logged (no get_batch runs)

    def __init__(self, inner, latency: float = 0.0):
        self.inner = inner
        self.latency = latency
        self.log: list[tuple] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def _timed(self, op, key, start, end, fn):
        import time

        import anyio

        t0 = time.monotonic()
        if self.latency:
            await anyio.sleep(self.latency)
        try:
            return await fn()
        finally:
            self.log.append((t0, op, key, start, end, time.monotonic()))

    async def get(self, key):
        return await self._timed("get", key, None, None, lambda: self.inner.get(key))

    async def get_view(self, key):
        return await self._timed("get", key, None, None, lambda: self.inner.get_view(key))

    async def get_range(self, key, start, end=None):
        return await self._timed("get_range", key, start, end, lambda: self.inner.get_range(key, start, end))

    async def get_suffix(self, key, nbytes):
        return await self._timed("get_suffix", key, -nbytes, None, lambda: self.inner.get_suffix(key, nbytes))

    def requested(self) -> list[str]:
        return [e[2] for e in self.log]

    def waves(self) -> list[set[str]]:
        """Keys by dependency depth: a request is one wave after the deepest request that ended before it began."""
        depth: list[tuple[float, int]] = []  # (end, wave) of earlier requests
        out: list[set[str]] = []
        for t0, _, key, _, _, t1 in sorted(self.log):
            w = 1 + max((d for end, d in depth if end <= t0), default=0)
            depth.append((t1, w))
            while len(out) < w:
                out.append(set())
            out[w - 1].add(key)
        return out

    def clear(self) -> None:
        self.log.clear()


def record(ds, latency: float = 0.0) -> Recorder:
    """Install a Recorder on a (sync or async) dataset's executor."""
    inner = getattr(ds, "aio", ds)
    ex = inner.context.executor
    rec = Recorder(ex.transport, latency)
    ex.transport = rec
    return rec
