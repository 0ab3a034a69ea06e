"""A dict-backed :class:`~zvf.io.transport.Transport` with injectable latency,
bandwidth and faults and a request log, so executor and reader behaviour
(retries, round trips, concurrency) can be tested without a network.

It follows the same contract as the obstore adapter (:class:`zvf.testing.TransportTests`,
which zvf's tests run over both).
"""

from __future__ import annotations

import builtins
import fnmatch
import hashlib
import time
from collections.abc import AsyncIterable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from ..errors import (
    ConcurrentModificationError,
    InvalidArgumentError,
    RemoteError,
    StoreExistsError,
    TransientError,
)
from ..io.transport import Chunks, _check_mode, _dir_prefix

T = TypeVar("T")

__all__ = ["Fault", "FaultPlan", "LogEntry", "MemoryTransport"]


def _etag(blob: bytes) -> str:
    return '"' + hashlib.blake2b(blob, digest_size=8).hexdigest() + '"'


@dataclass
class Fault:
    """One injected failure for :class:`MemoryTransport`.

    ``kind``: "transient" (retryable, surely not applied — like 503),
    "ambiguous" (retryable, but a put IS applied before the error — like a lost
    response), "permanent" (RemoteError, not retryable) or "slow" (adds
    ``delay`` seconds, no error).  ``op`` limits it to operation names (str or
    tuple; None = all); ``key`` is a glob pattern if it has ``*?[``, else a
    substring.  The first ``skip`` matching requests pass; the next ``times``
    ones (None = forever) fault.
    """

    kind: str = "transient"
    op: str | tuple[str, ...] | None = None
    key: str | None = None
    skip: int = 0
    times: int | None = 1
    delay: float = 0.0
    status: int | None = None
    matched: int = 0
    fired: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("transient", "ambiguous", "permanent", "slow"):
            raise InvalidArgumentError(f"unknown fault kind {self.kind!r}")

    def matches(self, op: str, key: str) -> bool:
        if self.op is not None:
            ops = (self.op,) if isinstance(self.op, str) else self.op
            if op not in ops:
                return False
        if self.key is None:
            return True
        if any(c in self.key for c in "*?["):
            return fnmatch.fnmatchcase(key, self.key)
        return self.key in key


class FaultPlan:
    """An ordered list of :class:`Fault`; the first live matching error fault applies."""

    def __init__(self, *faults: Fault) -> None:
        self.faults: list[Fault] = list(faults)

    def add(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def fail(self, kind: str = "transient", **kw: Any) -> Fault:
        return self.add(Fault(kind, **kw))

    def nth(self, n: int, kind: str = "transient", **kw: Any) -> Fault:
        """Fail the n-th (1-based) request matching ``op``/``key``."""
        return self.add(Fault(kind, skip=n - 1, times=1, **kw))

    def clear(self) -> None:
        self.faults.clear()

    def check(self, op: str, key: str) -> tuple[Fault | None, float]:
        """(error fault or None, extra delay) for this request; updates counters."""
        error: Fault | None = None
        delay = 0.0
        for f in self.faults:
            if (f.times is not None and f.fired >= f.times) or not f.matches(op, key):
                continue
            if f.kind != "slow" and error is not None:
                continue
            f.matched += 1
            if f.matched <= f.skip:
                continue
            f.fired += 1
            if f.kind == "slow":
                delay += f.delay
            else:
                error = f
                delay += f.delay
        return error, delay


class LogEntry(NamedTuple):
    op: str
    key: str
    start: int | None
    end: int | None
    t0: float
    t1: float
    outcome: str  # "ok", "missing", or the fault kind / error class name


class MemoryTransport:
    """A dict-backed transport with latency, bandwidth, faults and a request log.

    ``latency`` seconds are slept per request (plus ``nbytes / bandwidth`` when
    ``bandwidth`` is set) with anyio, so it runs under asyncio or trio.
    ``log`` records every request; ``max_inflight`` the peak concurrency seen.
    """

    label = "memory-transport"

    def __init__(
        self,
        data: dict[str, bytes] | None = None,
        *,
        latency: float = 0.0,
        bandwidth: float | None = None,
        faults: FaultPlan | None = None,
    ) -> None:
        self.data: dict[str, bytes] = dict(data or {})
        self.latency = latency
        self.bandwidth = bandwidth
        self.faults = faults if faults is not None else FaultPlan()
        self.log: list[LogEntry] = []
        self.inflight = 0
        self.max_inflight = 0

    def __repr__(self) -> str:
        return f"MemoryTransport({len(self.data)} objects)"

    # -- log helpers ------------------------------------------------------------------

    def requests(self, op: str | tuple[str, ...] | None = None, key: str | None = None) -> int:
        ops = (op,) if isinstance(op, str) else op
        return sum(
            1 for e in self.log
            if (ops is None or e.op in ops) and (key is None or e.key == key)
        )

    def round_trips(self) -> int:
        """Longest chain of requests each starting after the previous ended.

        This is the number of sequential round trips the workload needed
        (greedy by end time gives the maximum set of non-overlapping intervals).
        """
        count, last_end = 0, float("-inf")
        for e in sorted(self.log, key=lambda e: e.t1):
            if e.t0 >= last_end:
                count += 1
                last_end = e.t1
        return count

    def reset_log(self) -> None:
        self.log.clear()
        self.max_inflight = 0

    # -- request core -----------------------------------------------------------------

    async def _request(self, op: str, key: str, start: int | None = None, end: int | None = None,
                       nbytes: int = 0, *, apply: Callable[[], T]) -> T:
        import anyio

        t0 = time.monotonic()
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        outcome = "ok"
        try:
            fault, extra = self.faults.check(op, key)
            delay = self.latency + extra
            if self.bandwidth:
                delay += nbytes / self.bandwidth
            if delay > 0:
                await anyio.sleep(delay)
            else:
                await anyio.lowlevel.checkpoint()
            if fault is not None:
                outcome = fault.kind
                if fault.kind == "permanent":
                    raise RemoteError(f"{op} of {key!r} failed permanently (injected fault)")
                if fault.kind == "ambiguous" and op.startswith("put"):
                    apply()  # the write lands, the answer is lost
                raise TransientError(
                    f"{op} of {key!r} failed (injected {fault.kind} fault)", key=key, op=op,
                    status=fault.status, ambiguous=fault.kind == "ambiguous",
                    reason=f"injected {fault.kind} fault",
                )
            result = apply()
            if result is None and op in ("get", "get_range", "get_ranges", "get_suffix", "head"):
                outcome = "missing"
            return result
        except BaseException as e:
            if outcome == "ok":
                outcome = type(e).__name__
            raise
        finally:
            self.inflight -= 1
            self.log.append(LogEntry(op, key, start, end, t0, time.monotonic(), outcome))

    # -- reads ------------------------------------------------------------------------

    async def get(self, key: str) -> bytes | None:
        return await self._request("get", key, nbytes=len(self.data.get(key, b"")),
                                   apply=lambda: self.data.get(key))

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes | None:
        if end is not None and end <= start:
            return b""

        def apply() -> bytes | None:
            d = self.data.get(key)
            if d is None:
                return None
            return d[start:end] if start >= 0 or end is not None else d[start:]

        n = (end - start) if end is not None else len(self.data.get(key, b""))
        return await self._request("get_range", key, start, end, nbytes=n, apply=apply)

    async def get_ranges(self, key: str, starts: Sequence[int], ends: Sequence[int]) -> list[bytes] | None:
        if len(starts) != len(ends):
            raise InvalidArgumentError(f"get_ranges of {key!r}: starts and ends differ in length")

        def apply() -> list[bytes] | None:
            d = self.data.get(key)
            if d is None:
                return None
            return [d[s:e] if e > s else b"" for s, e in zip(starts, ends)]

        n = sum(max(0, e - s) for s, e in zip(starts, ends))
        return await self._request("get_ranges", key, min(starts, default=0), max(ends, default=0),
                                   nbytes=n, apply=apply)

    async def get_suffix(self, key: str, nbytes: int) -> bytes | None:
        if nbytes <= 0:
            raise InvalidArgumentError(f"suffix of {key!r} needs nbytes > 0, got {nbytes}")

        def apply() -> bytes | None:
            d = self.data.get(key)
            return None if d is None else d[-nbytes:]

        return await self._request("get_suffix", key, -nbytes, None, nbytes=nbytes, apply=apply)

    async def head(self, key: str) -> int | None:
        def apply() -> int | None:
            d = self.data.get(key)
            return None if d is None else len(d)

        return await self._request("head", key, apply=apply)

    # -- writes -----------------------------------------------------------------------

    async def get_tagged(self, key: str) -> tuple[bytes, dict[str, str] | None] | None:
        """The object and its tag (an ETag hashing its bytes) for ``put(key, data, mode=tag)``."""
        def apply() -> tuple[bytes, dict[str, str] | None] | None:
            d = self.data.get(key)
            return None if d is None else (d, {"e_tag": _etag(d)})

        return await self._request("get", key, nbytes=len(self.data.get(key, b"")), apply=apply)

    async def put(self, key: str, data: Any, *, mode: str | dict[str, str] = "overwrite") -> None:
        _check_mode(mode, key)
        blob = bytes(data)

        def apply() -> None:
            if mode == "create" and key in self.data:
                raise StoreExistsError(f"{key!r} already exists on {self.label} (put)")
            if isinstance(mode, dict) and (key not in self.data or _etag(self.data[key]) != mode["e_tag"]):
                raise ConcurrentModificationError(f"{key!r} on {self.label} changed since its ETag was read")
            self.data[key] = blob

        await self._request("put", key, nbytes=len(blob), apply=apply)

    async def put_multipart(
        self, key: str, chunks: Chunks, *, part_size: int, max_concurrency: int = 4
    ) -> None:
        if isinstance(chunks, (bytes, bytearray, memoryview)):
            blob = bytes(chunks)
        elif isinstance(chunks, AsyncIterable):
            blob = b"".join([bytes(c) async for c in chunks])
        else:
            blob = b"".join(bytes(c) for c in chunks)

        def apply() -> None:
            self.data[key] = blob

        await self._request("put_multipart", key, 0, len(blob), nbytes=len(blob), apply=apply)

    async def copy(self, src: str, dst: str) -> None:
        def apply() -> None:
            if src not in self.data:
                raise RemoteError(f"copy of {src!r} to {dst!r} on {self.label}: {src!r} does not exist")
            self.data[dst] = self.data[src]

        await self._request("copy", dst, apply=apply)

    async def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if not keys:
            return

        def apply() -> None:
            for k in keys:
                self.data.pop(k, None)

        await self._request("delete", keys[0], apply=apply)

    # -- listing ----------------------------------------------------------------------

    async def list(self, prefix: str = "") -> list[tuple[str, int]]:
        p = _dir_prefix(prefix)

        def apply() -> list[tuple[str, int]]:
            return sorted((k, len(v)) for k, v in self.data.items() if k.startswith(p))

        return await self._request("list", prefix or "", apply=apply)

    async def list_dirs(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[tuple[str, int]]]:

        p = _dir_prefix(prefix)

        def apply() -> tuple[list[str], list[tuple[str, int]]]:
            dirs: set[str] = set()
            objs: list[tuple[str, int]] = []
            for k, v in self.data.items():
                if not k.startswith(p):
                    continue
                rest = k[len(p):]
                if "/" in rest:
                    dirs.add(p + rest.split("/", 1)[0])
                else:
                    objs.append((k, len(v)))
            return sorted(dirs), sorted(objs)

        return await self._request("list_dirs", prefix or "", apply=apply)
