"""Request counters of one executor (what ``ds.stats`` shows)."""

from __future__ import annotations

__all__ = ["Stats"]


class Stats:
    """Counters of one executor.

    ``requests``: transport calls attempted (including retries and puts);
    ``bytes``: bytes received; ``retries``: re-attempts after transient
    errors; ``failures``: operations that finally raised RemoteError;
    ``cache_hits``/``cache_misses``: cache lookups; ``inflight_shared``:
    reads served by joining an identical in-flight read; ``puts``/
    ``bytes_put``: upload attempts and bytes stored; ``max_inflight``: peak
    concurrent requests; ``round_trips``: length of the longest chain of
    requests each started after the previous one finished — the number of
    sequential round trips the work needed (latency ~ round_trips * RTT).
    """

    requests: int
    bytes: int
    retries: int
    failures: int
    cache_hits: int
    cache_misses: int
    inflight_shared: int
    puts: int
    bytes_put: int
    max_inflight: int
    round_trips: int
    FIELDS = tuple(__annotations__)  # the counters above, in order (snapshot keys)

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        for name in self.FIELDS:
            setattr(self, name, 0)
        self._inflight = 0
        self._done_depth = 0  # deepest chain among finished requests

    def snapshot(self) -> dict[str, int]:
        return {f: getattr(self, f) for f in self.FIELDS}

    def __repr__(self) -> str:
        return "Stats(" + ", ".join(f"{k}={v}" for k, v in self.snapshot().items()) + ")"

    # round-trip estimator: depth(r) = 1 + deepest request finished before r started
    def begin(self) -> int:
        """A request starts: counted, and its depth in the chain of round trips returned (for :meth:`end`)."""
        self.requests += 1
        self._inflight += 1
        if self._inflight > self.max_inflight:
            self.max_inflight = self._inflight
        return self._done_depth + 1

    def end(self, depth: int) -> None:
        """A request that :meth:`begin` gave ``depth`` finished."""
        self._inflight -= 1
        if depth > self._done_depth:
            self._done_depth = depth
        if depth > self.round_trips:
            self.round_trips = depth

    def after_fork(self) -> None:
        """In a forked child: no request is in flight (the parent's stayed there)."""
        self._inflight = 0
