"""Transports: the only code that talks to a store.

A transport performs exactly one store operation per call and never retries;
the executor decides about retries, concurrency and caching.  Failures are
normalised so the executor can decide without knowing the backend:

* missing object       -> ``None`` (``get``, ``get_range``, ``get_suffix``, ``head``)
* range past the end   -> the shorter slice, ``b""`` when it starts past the end
* create conflict      -> :class:`zvf.errors.StoreExistsError`
* retryable failure    -> :class:`TransientError` (a ``RemoteError``) with
  ``ambiguous=True`` when the request may have been applied (500, dropped
  connection) and ``False`` when it surely was not (429, 503, connect refused)
* anything else        -> :class:`zvf.errors.RemoteError` (not retried)

Messages name the operation and key and pass through :meth:`_scrub` so
credentials handed to the store never appear in them.

:class:`ObstoreTransport` wraps any obstore store.  :class:`MemoryTransport` is
a dict with injectable latency and faults (:class:`FaultPlan`) and a request
log, so executor behaviour can be tested without a network.
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import AsyncIterable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from ..errors import InvalidArgumentError, ReadOnlyError, RemoteError, StoreExistsError

__all__ = [
    "Transport",
    "TransientError",
    "ObstoreTransport",
    "ReadOnlyTransport",
    "MemoryTransport",
    "Fault",
    "FaultPlan",
    "LogEntry",
    "Chunks",
]

Chunks = Any  # bytes-like, Iterable[bytes-like] or AsyncIterable[bytes-like]


class TransientError(RemoteError):
    """A failure worth retrying.  ``ambiguous``: the request may have taken effect."""

    def __init__(
        self, message: str, *, key: str = "", op: str = "", status: int | None = None,
        ambiguous: bool = True, reason: str = "",
    ) -> None:
        super().__init__(message)
        self.key = key
        self.op = op
        self.status = status
        self.ambiguous = ambiguous
        self.reason = reason or message  # the cause without the "op of key on store" part


@runtime_checkable
class Transport(Protocol):
    """One store operation per call; see the module docstring for error rules.

    Keys are ``/``-separated paths relative to the store root.  ``list`` and
    ``list_dirs`` treat ``prefix`` as a directory ("a" lists "a/..." only; ""
    lists everything); keys come back sorted.
    """

    label: str

    async def get(self, key: str) -> bytes | None: ...
    async def get_range(self, key: str, start: int, end: int | None) -> bytes | None: ...
    async def get_ranges(
        self, key: str, starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes] | None: ...
    async def get_suffix(self, key: str, nbytes: int) -> bytes | None: ...
    async def head(self, key: str) -> int | None: ...
    async def put(self, key: str, data: Any, *, mode: str = "overwrite") -> None: ...
    async def put_multipart(
        self, key: str, chunks: Chunks, *, part_size: int, max_concurrency: int = 4
    ) -> None: ...
    async def list(self, prefix: str = "") -> list[tuple[str, int]]: ...
    async def list_dirs(self, prefix: str = "") -> tuple[list[str], list[tuple[str, int]]]: ...
    async def delete(self, keys: Iterable[str]) -> None: ...


def _check_mode(mode: str, key: str) -> None:
    if mode not in ("overwrite", "create"):
        raise InvalidArgumentError(f"put mode for {key!r} must be 'overwrite' or 'create', got {mode!r}")


def _flat(data: Any) -> Any:
    """A 1-d uint8 view of any C-contiguous buffer (what obstore accepts)."""
    if isinstance(data, (bytes, bytearray)):
        return data
    mv = memoryview(data)
    if mv.format == "B" and mv.ndim == 1 and mv.c_contiguous:
        return mv
    return mv.cast("B") if mv.c_contiguous else mv.tobytes()


def _dir_prefix(prefix: str | None) -> str:
    p = (prefix or "").strip("/")
    return p + "/" if p else ""


# --------------------------------------------------------------------------------------
# obstore
# --------------------------------------------------------------------------------------

_STATUS_RE = re.compile(r"status(?: code)?:? (\d{3})")
_RANGE_PAST_END = ("StartTooLarge", "Requested range was invalid", "Wanted range starting at")
# Statuses that say "not processed, try later": safe to retry even for non-idempotent puts.
_SURELY_NOT_APPLIED = {429, 503}


class _RangePastEnd(Exception):
    pass


class _NotPartial(Exception):
    """The server answered a range request with the whole object (empty objects, or
    servers that ignore Range): fetch it whole and slice."""


def _under_a_file(exc: BaseException) -> bool:
    """A local key below a path that is a file (``a/data`` a blob, ``a/data/zarr.json`` asked): missing."""
    return "os error 20" in str(exc) or "Not a directory" in str(exc)


class ObstoreTransport:
    """Transport over an obstore store (S3, GCS, Azure, HTTP, local, memory).

    ``prefix`` is applied by this class (used for ``memory://name/sub``; the
    cloud stores take their prefix natively).  ``secrets`` are strings scrubbed
    from every error message.  ``label`` is a credential-free description used
    in messages (the store URL).
    """

    def __init__(
        self, store: Any, *, prefix: str = "", secrets: Iterable[str] = (), label: str = ""
    ) -> None:
        self.store = store
        self.prefix = _dir_prefix(prefix)
        self._secrets = tuple(s for s in secrets if s and len(s) >= 3)
        self.label = label or type(store).__name__

    def __repr__(self) -> str:
        return f"ObstoreTransport({self.label!r})"

    # -- helpers ----------------------------------------------------------------------

    def _path(self, key: str) -> str:
        return self.prefix + key if self.prefix else key

    def _scrub(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "***")
        return text

    def _error(self, exc: BaseException, op: str, key: str) -> BaseException:
        """Translate an obstore exception into zvf's (see module docstring)."""
        from obstore import exceptions as oe

        raw = str(exc)
        first = raw.split("\n\nDebug source:", 1)[0].strip().replace("\n", " ")
        if len(first) > 400:
            first = first[:400] + "..."
        detail = self._scrub(first)
        where = f"{op} of {key!r} on {self.label}"
        if isinstance(exc, (oe.AlreadyExistsError, oe.PreconditionError)):
            return StoreExistsError(f"{key!r} already exists on {self.label} ({op})")
        if isinstance(exc, oe.InvalidPathError) or (
            isinstance(exc, ValueError) and "parse path" in raw
        ):
            return InvalidArgumentError(f"invalid key {key!r} for {self.label}: {detail}")
        if any(m in raw for m in _RANGE_PAST_END):
            return _RangePastEnd()
        if "non-partial response" in raw:
            return _NotPartial()
        if isinstance(exc, (oe.PermissionDeniedError, oe.UnauthenticatedError)):
            e = RemoteError(f"{where} was refused (permission/credentials): {detail}")
            e.status = 403  # type: ignore[attr-defined]
            return e
        if isinstance(exc, (oe.NotSupportedError, oe.UnknownConfigurationKeyError)):
            return RemoteError(f"{where} is not supported: {detail}")
        m = _STATUS_RE.search(raw)
        status = int(m.group(1)) if m else None
        if status == 416:
            return _RangePastEnd()
        if status is not None:
            if status >= 500 or status in (408, 429):
                return TransientError(
                    f"{where} failed with HTTP {status}: {detail}", key=key, op=op,
                    status=status, ambiguous=status not in _SURELY_NOT_APPLIED,
                    reason=f"HTTP {status}: {detail}",
                )
            e = RemoteError(f"{where} failed with HTTP {status}: {detail}")
            e.status = status  # type: ignore[attr-defined]
            return e
        low = raw.lower()
        if any(s in low for s in ("error sending request", "timed out", "timeout", "connection",
                                   "connect", "incompletemessage", "broken pipe", "reset by peer",
                                   "body", "decoding response")):
            not_sent = "kind: connect" in low or "tcp connect error" in low
            what = "timed out" if ("timed out" in low or "timedout" in low) else "network error"
            return TransientError(
                f"{where} failed ({what}): {detail}", key=key, op=op, ambiguous=not not_sent,
                reason=f"{what}: {detail}",
            )
        return RemoteError(f"{where} failed: {detail}")

    def _raise(self, exc: BaseException, op: str, key: str) -> None:
        err = self._error(exc, op, key)
        if isinstance(err, (_RangePastEnd, _NotPartial)):  # only meaningful for ranged reads
            err = RemoteError(f"{op} of {key!r} on {self.label} failed: unexpected range error")
        raise err from None

    # -- reads ------------------------------------------------------------------------

    async def get(self, key: str) -> bytes | None:
        import obstore as obs

        try:
            res = await obs.get_async(self.store, self._path(key))
            return bytes(await res.bytes_async())
        except FileNotFoundError:
            return None
        except Exception as e:
            if _under_a_file(e):
                return None
            self._raise(e, "get", key)
            raise  # unreachable

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes | None:
        import obstore as obs

        if end is not None and end <= start:
            return b""
        try:
            if end is None:
                if start < 0:
                    return await self.get_suffix(key, -start)
                if start == 0:
                    return await self.get(key)
                res = await obs.get_async(
                    self.store, self._path(key), options={"range": {"offset": start}}
                )
                return bytes(await res.bytes_async())
            return bytes(await obs.get_range_async(self.store, self._path(key), start=start, end=end))
        except FileNotFoundError:
            return None
        except Exception as e:
            err = self._error(e, "get_range", key)
            if isinstance(err, _RangePastEnd):
                return b""
            if isinstance(err, _NotPartial):
                whole = await self.get(key)
                return None if whole is None else whole[start:end]
            raise err from None

    async def get_ranges(
        self, key: str, starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes] | None:
        """Several bounded ranges of one object; obstore does not merge them (coalesce=0)."""
        import obstore as obs

        starts, ends = [int(s) for s in starts], [int(e) for e in ends]
        if len(starts) != len(ends):
            raise InvalidArgumentError(f"get_ranges of {key!r}: starts and ends differ in length")
        live = [i for i in range(len(starts)) if ends[i] > starts[i]]
        out = [b""] * len(starts)
        if not live:
            return out
        try:
            got = await obs.get_ranges_async(
                self.store, self._path(key),
                starts=[starts[i] for i in live], ends=[ends[i] for i in live], coalesce=0,
            )
        except FileNotFoundError:
            return None
        except Exception as e:
            err = self._error(e, "get_ranges", key)
            if not isinstance(err, (_RangePastEnd, _NotPartial)):
                raise err from None
            got = []
            for i in live:  # some range starts past the end: do them one by one
                piece = await self.get_range(key, starts[i], ends[i])
                if piece is None:
                    return None
                got.append(piece)
        for i, g in zip(live, got):
            out[i] = bytes(g)
        return out

    async def get_suffix(self, key: str, nbytes: int) -> bytes | None:
        import obstore as obs

        if nbytes <= 0:
            raise InvalidArgumentError(f"suffix of {key!r} needs nbytes > 0, got {nbytes}")
        try:
            res = await obs.get_async(self.store, self._path(key), options={"range": {"suffix": nbytes}})
            return bytes(await res.bytes_async())
        except FileNotFoundError:
            return None
        except Exception as e:
            err = self._error(e, "get_suffix", key)
            if isinstance(err, _RangePastEnd):  # empty object
                return b""
            if isinstance(err, _NotPartial):
                whole = await self.get(key)
                return None if whole is None else whole[-nbytes:]
            raise err from None

    async def head(self, key: str) -> int | None:
        import obstore as obs

        try:
            meta = await obs.head_async(self.store, self._path(key))
            return int(meta["size"])
        except FileNotFoundError:
            return None
        except Exception as e:
            self._raise(e, "head", key)
            raise

    # -- writes -----------------------------------------------------------------------

    async def put(self, key: str, data: Any, *, mode: str = "overwrite") -> None:
        import obstore as obs

        _check_mode(mode, key)
        try:
            await obs.put_async(
                self.store, self._path(key), _flat(data), mode=mode, use_multipart=False
            )
        except Exception as e:
            self._raise(e, "put", key)

    async def put_multipart(
        self, key: str, chunks: Chunks, *, part_size: int, max_concurrency: int = 4
    ) -> None:
        """Upload in parts of ``part_size`` bytes (S3 needs >= 5 MiB except the last)."""
        import obstore as obs

        if isinstance(chunks, (bytes, bytearray, memoryview)) or hasattr(chunks, "__array__"):
            chunks = _flat(chunks)
        elif isinstance(chunks, (list, tuple)):
            chunks = [_flat(c) for c in chunks]
        try:
            await obs.put_async(
                self.store, self._path(key), chunks, use_multipart=True,
                chunk_size=int(part_size), max_concurrency=max(1, int(max_concurrency)),
            )
        except Exception as e:
            self._raise(e, "put_multipart", key)

    async def delete(self, keys: Iterable[str]) -> None:
        """Delete ``keys``; missing ones are ignored."""
        import obstore as obs

        keys = list(keys)
        if not keys:
            return
        try:
            await obs.delete_async(self.store, [self._path(k) for k in keys])
            return
        except FileNotFoundError:
            pass
        except Exception as e:
            self._raise(e, "delete", keys[0])
        for k in keys:  # a backend that refuses missing keys in bulk (local files)
            try:
                await obs.delete_async(self.store, self._path(k))
            except FileNotFoundError:
                continue
            except Exception as e:
                self._raise(e, "delete", k)

    # -- listing ----------------------------------------------------------------------

    def _strip(self, path: str) -> str:
        return path[len(self.prefix):] if self.prefix and path.startswith(self.prefix) else path

    async def list(self, prefix: str = "") -> list[tuple[str, int]]:
        import obstore as obs

        p = (self.prefix + (prefix or "").strip("/")).strip("/") or None
        out: list[tuple[str, int]] = []
        try:
            async for batch in obs.list(self.store, p, chunk_size=1000):
                out.extend((self._strip(m["path"]), int(m["size"])) for m in batch)
        except FileNotFoundError:
            return []
        except Exception as e:
            self._raise(e, "list", prefix or "")
        out.sort()
        return out

    async def list_dirs(self, prefix: str = "") -> tuple[list[str], list[tuple[str, int]]]:
        import obstore as obs

        p = (self.prefix + (prefix or "").strip("/")).strip("/") or None
        try:
            res = await obs.list_with_delimiter_async(self.store, p)
        except FileNotFoundError:
            return [], []
        except Exception as e:
            self._raise(e, "list_dirs", prefix or "")
            raise
        dirs = sorted(self._strip(d.rstrip("/")) for d in res["common_prefixes"])
        objs = sorted((self._strip(m["path"]), int(m["size"])) for m in res["objects"])
        return dirs, objs


class ReadOnlyTransport:
    """Wraps a transport and refuses every write with ReadOnlyError naming the key."""

    def __init__(self, inner: Any, *, reason: str = "the store is opened read-only") -> None:
        self.inner = inner
        self.reason = reason
        self.label = getattr(inner, "label", "store")

    def __repr__(self) -> str:
        return f"ReadOnlyTransport({self.inner!r})"

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _refuse(self, key: str) -> None:
        raise ReadOnlyError(f"cannot write {key!r} on {self.label}: {self.reason}")

    async def get(self, key: str) -> bytes | None:
        return await self.inner.get(key)

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes | None:
        return await self.inner.get_range(key, start, end)

    async def get_ranges(self, key: str, starts: Sequence[int], ends: Sequence[int]) -> Any:
        return await self.inner.get_ranges(key, starts, ends)

    async def get_suffix(self, key: str, nbytes: int) -> bytes | None:
        return await self.inner.get_suffix(key, nbytes)

    async def head(self, key: str) -> int | None:
        return await self.inner.head(key)

    async def list(self, prefix: str = "") -> list[tuple[str, int]]:
        return await self.inner.list(prefix)

    async def list_dirs(self, prefix: str = "") -> tuple[list[str], list[tuple[str, int]]]:
        return await self.inner.list_dirs(prefix)

    async def put(self, key: str, data: Any, *, mode: str = "overwrite") -> None:
        self._refuse(key)

    async def put_multipart(self, key: str, chunks: Chunks, *, part_size: int, max_concurrency: int = 4) -> None:
        self._refuse(key)

    async def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if keys:
            self._refuse(keys[0])


# --------------------------------------------------------------------------------------
# In-memory transport with faults
# --------------------------------------------------------------------------------------


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
                       nbytes: int = 0, apply: Any = None) -> Any:
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
                if fault.kind == "ambiguous" and apply is not None and op.startswith("put"):
                    apply()  # the write lands, the answer is lost
                raise TransientError(
                    f"{op} of {key!r} failed (injected {fault.kind} fault)", key=key, op=op,
                    status=fault.status, ambiguous=fault.kind == "ambiguous",
                    reason=f"injected {fault.kind} fault",
                )
            result = apply() if apply is not None else None
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

    async def put(self, key: str, data: Any, *, mode: str = "overwrite") -> None:
        _check_mode(mode, key)
        blob = bytes(data)

        def apply() -> None:
            if mode == "create" and key in self.data:
                raise StoreExistsError(f"{key!r} already exists on {self.label} (put)")
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

    async def list_dirs(self, prefix: str = "") -> tuple[list[str], list[tuple[str, int]]]:
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
