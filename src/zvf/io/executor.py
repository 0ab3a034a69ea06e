"""Run store requests for one dataset: limiter, retries, in-flight sharing, caches, stats.

Every request an :class:`Executor` makes passes through ONE
``anyio.CapacityLimiter`` (``concurrency`` tokens).  A multipart upload takes
``min(multipart_concurrency, concurrency)`` tokens at once because obstore
sends that many parts in parallel; multi-token acquisition is serialised by a
lock so two uploads cannot deadlock each holding half the tokens.

Retries -- decision: zvf's executor is the single retry layer, with the policy of
:mod:`zvf.io.retry`.  obstore's own retries are off by default (``transport_retries=0`` in
storage_options), so every HTTP attempt is visible here: ``Stats.requests`` counts attempts and
``Stats.retries`` counts re-attempts exactly, and the same policy is testable on
:class:`~zvf.testing.MemoryTransport`.

Idempotency: GET/HEAD/LIST/DELETE and whole-object overwrite PUTs are retried
on any transient error.  A ``mode="create"`` PUT is retried only when the
failure proves the request was not applied (429, 503, connect refused); on an
ambiguous failure (500, dropped connection after sending) it raises
RemoteError instead, because a retry could report "exists" for our own write.
A multipart upload fed by a one-shot iterator is not retried (the data is
gone); pass bytes or a sequence of chunks to make it retryable.

In-flight sharing and caches (:mod:`zvf.io.cache`): identical concurrent reads (same op/key/range)
run once, and so does what is decoded from the bytes (:meth:`Executor.once`,
:meth:`Executor.cached`, :meth:`Executor.cached_many`).  ``get(key, cache="meta")`` reads through
the byte-budget caches, ``get_cached``/``put_cached`` store any object with an explicit size; this
executor's own puts and deletes invalidate the entries of their key.

Concurrency from the plan: unless ``concurrency`` was given (storage option or
argument), a remote store's limit grows with the work asked of it.  A plan of
``n`` requests moving ``b`` bytes gets enough requests in flight that its
round trips cost at most a quarter of its transfer time: ``4 * n * latency_hint
* bandwidth_hint / b``, between the scheme default and ``min(n, max_width)`` (:mod:`zvf.config`).
Many small requests (latency-bound) thus run wide, a few big ones (bandwidth-
bound) stay at the default; a plan of unknown sizes (``map``) is taken as
latency-bound.  The limiter stays one per executor; it only grows.

Batched puts: where the transport can put with blocking calls (local files,
memory: ``blocking_puts``), :meth:`Executor.put_batch` stores many small blobs
in one worker-thread call under one token -- an async put there costs more
event-loop time than the write itself.  Counted per blob in ``Stats``; the
first blob that fails, and those after it, go through :meth:`Executor.put`.

Batched gets likewise: :meth:`Executor.get_many` fetches whole objects in runs of
worker-thread calls there, which a full read of a local level of a thousand cells
needs a third of the time of one async get each.

Fork: in a forked child every live executor gets a fresh limiter and forgets its
in-flight requests (their tasks stayed in the parent); see :mod:`zvf.io.fork`.
"""

from __future__ import annotations

import builtins
import inspect
import logging
import random
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar, cast

import anyio

from ..config import tuning
from ..errors import DatasetClosedError, InvalidArgumentError, ReadOnlyError, RemoteError, TransientError
from . import fork
from .cache import ByteLRU, Caches, SingleFlight, default_cache_bytes
from .plan import ByteRange, Request, coalesce, scatter
from .retry import RetryPolicy
from .stats import Stats
from .store import StoreHandle

__all__ = ["Executor"]

T = TypeVar("T")
_log = logging.getLogger("zvf.io")  # a child of "zvf": request traces at DEBUG



#: Operations whose completion a dataset's pin is told of (see ``Executor.pin``).
PINNED_OPS = frozenset({"get", "get_range", "get_suffix", "get_ranges", "head"})


class ReadPin(Protocol):
    """What an executor tells of completed reads (``zvf.read.pin.Pin``)."""

    async def after_read(self, key: str) -> None: ...
    async def missing(self, key: str, what: str) -> Exception: ...


class Executor:
    """All requests of one dataset; see the module docstring for the policies."""

    def __init__(
        self,
        handle: StoreHandle,
        *,
        concurrency: int | None = None,
        cache_bytes: dict[str, int] | None = None,
        retry: RetryPolicy | None = None,
        seed: int | None = None,
    ) -> None:
        self.handle = handle
        self.transport = handle.transport
        self.concurrency = int(concurrency or handle.concurrency)
        self.auto_width = concurrency is None and getattr(handle, "concurrency_auto", False)
        if self.concurrency < 1:
            raise InvalidArgumentError(f"concurrency must be >= 1, got {concurrency}")
        self.retry = retry or handle.retry
        self.limiter = anyio.CapacityLimiter(self.concurrency)
        self._multi_lock = anyio.Lock()
        self.stats = Stats()
        self.flights = SingleFlight(self.stats)
        self.caches = Caches({**default_cache_bytes(), **(cache_bytes or {})}, self.stats, self.flights)
        self._rng = random.Random(seed)
        #: the version a reading dataset is pinned to (``zvf.read.pin``): told of every read request that
        #: completed, so bytes of a version no longer kept never reach the reader
        self.pin: ReadPin | None = None
        fork.track(self)

    def after_fork(self) -> None:
        """In a forked child: a fresh limiter and no in-flight work -- what the parent's tasks held or were
        fetching would be waited for forever.  Cached data stays: it is the same store's bytes."""
        self.limiter = anyio.CapacityLimiter(self.concurrency)
        self._multi_lock = anyio.Lock()
        self.flights.after_fork()
        self.stats.after_fork()

    def close(self) -> None:
        """Drop the caches and let go of the store (its connections close with the last user of it); later
        requests raise DatasetClosedError."""
        self.clear_caches()
        self.transport = self.handle.transport = _ClosedTransport(self.label)

    def __repr__(self) -> str:
        return f"Executor({self.handle.url!r}, concurrency={self.concurrency})"

    @property
    def label(self) -> str:
        return self.handle.url

    # ------------------------------------------------------------------------------
    # core: limiter + retries
    # ------------------------------------------------------------------------------

    async def _take_one(self) -> None:
        """One token for the current task; give it back with ``limiter.release()``.  ``acquire``'s
        checkpoint is kept on purpose: concurrent requests start on the loop's next turn, in order, so a
        process that stops mid-publish has sent none of the documents queued behind the one it stopped at."""
        await self.limiter.acquire()

    async def _take(self, tokens: int) -> list[object]:
        """Take ``tokens`` limiter tokens (at most ``concurrency``) for one request; give them back with
        :meth:`_give_back`.  Serialised by a lock so two multi-token requests never each hold half."""
        taken: list[object] = []
        try:
            async with self._multi_lock:
                for _ in range(min(tokens, self.concurrency)):
                    b = object()
                    await self.limiter.acquire_on_behalf_of(b)
                    taken.append(b)
        except BaseException:
            self._give_back(taken)
            raise
        return taken

    def _give_back(self, taken: list[object]) -> None:
        for b in taken:
            self.limiter.release_on_behalf_of(b)

    async def call(
        self,
        op: str,
        key: str,
        fn: Callable[[], Awaitable[T]],
        *,
        retry: bool = True,
        retry_ambiguous: bool = True,
        tokens: int = 1,
        put: bool = False,
        span: tuple[int, int | None] | None = None,
    ) -> T:
        """Run one transport call under the limiter with the retry policy.

        ``retry=False``: a transient error fails at once; ``retry_ambiguous=False``:
        only failures that prove the request was not applied are retried.
        Each attempt is one DEBUG line on the ``zvf.io`` logger (``span``: the byte range).
        """
        policy = self.retry
        t0 = time.monotonic()
        trace = _log.isEnabledFor(logging.DEBUG)
        limiter = self.limiter
        attempt = 0
        while True:
            attempt += 1
            try:
                held = None
                if tokens > 1:
                    held = await self._take(tokens)
                else:
                    await self._take_one()
                try:
                    depth = self.stats.begin()
                    if put:
                        self.stats.puts += 1
                    sent = anyio.current_time() if trace else 0.0
                    try:
                        result = await fn()
                    except BaseException as exc:
                        if trace:
                            _trace(op, key, span, getattr(exc, "reason", None) or type(exc).__name__, None, sent)
                        raise
                    finally:
                        self.stats.end(depth)
                    if trace:
                        _trace(op, key, span, "missing" if result is None else "ok", result, sent)
                finally:
                    if held is None:
                        limiter.release()
                    else:
                        self._give_back(held)
            except TransientError as e:
                try:
                    delay = policy.delay(e, attempt=attempt, elapsed=time.monotonic() - t0, rng=self._rng,
                                         what=f"{op} of {key!r} on {self.label}", replayable=retry,
                                         retry_ambiguous=retry_ambiguous)
                except RemoteError:
                    self.stats.failures += 1
                    raise
                self.stats.retries += 1
                await anyio.sleep(delay)
                continue
            except (RemoteError, ReadOnlyError):
                self.stats.failures += 1
                raise
            if isinstance(result, (bytes, bytearray, memoryview)):
                self.stats.bytes += len(result)
            elif isinstance(result, list) and result and isinstance(result[0], (bytes, bytearray, memoryview)):
                self.stats.bytes += sum(len(r) for r in result)
            if self.pin is not None and op in PINNED_OPS:
                await self.pin.after_read(key)
            return result

    def count_sent_before(self, keys: Sequence[str], results: Sequence[Any], sent: float) -> None:
        """Gets of ``keys`` sent at once before this executor existed (``read.load.FirstWave``), with their
        ``results`` (bytes, None: absent, or the exception raised): counted in its stats as the one round
        trip they were, and logged as its own requests are."""
        for depth in [self.stats.begin() for _ in keys]:
            self.stats.end(depth)
        for key, r in zip(keys, results):
            if isinstance(r, BaseException):
                _trace("get", key, None, getattr(r, "reason", None) or type(r).__name__, None, sent)
                continue
            _trace("get", key, None, "missing" if r is None else "ok", r, sent)
            self.stats.bytes += 0 if r is None else len(r)

    async def once(self, fkey: tuple[Any, ...], fn: Callable[[], Awaitable[T]]) -> T:
        """``await fn()``, run once for concurrent callers with the same ``fkey`` (:class:`SingleFlight`)."""
        return await self.flights.run(fkey, fn)

    def _check_writable(self, key: str) -> None:
        if self.handle.read_only:
            raise ReadOnlyError(f"cannot write {key!r} on {self.label}: the store is opened read-only")

    def plan_width(self, n_requests: int, nbytes: float | None = None) -> int:
        """Requests in flight for a plan of ``n_requests`` moving ``nbytes`` (see module docstring).

        ``nbytes`` None (a plan of unknown sizes, e.g. ``map`` over cells): taken as
        latency-bound, ``min(n, max_width)`` -- the bytes seen so far (whole manifest
        shards, documents) say little about the requests to come.
        """
        if not self.auto_width or n_requests <= self.concurrency:
            return self.concurrency
        if nbytes is None:
            return min(n_requests, tuning().max_width)
        h = self.handle
        need = 4 * n_requests * h.latency_hint * h.bandwidth_hint / max(float(nbytes), 1.0)
        return int(min(n_requests, tuning().max_width, max(self.concurrency, -(-need // 1))))

    def widen(self, n_requests: int, nbytes: float | None = None) -> int:
        """Grow the store-wide limit to :meth:`plan_width` (never shrinks it); returns the limit."""
        width = self.plan_width(n_requests, nbytes)
        if width > self.concurrency:
            self.concurrency = width
            self.limiter.total_tokens = width
        return self.concurrency

    # ------------------------------------------------------------------------------
    # caches
    # ------------------------------------------------------------------------------

    def cache(self, namespace: str) -> ByteLRU:
        return self.caches[namespace]

    def get_cached(self, namespace: str, key: Any) -> Any:
        """Cached value or None; counts a hit or a miss."""
        return self.caches.get(namespace, key)

    def put_cached(self, namespace: str, key: Any, value: Any, nbytes: int | None = None) -> None:
        """Cache any object; its cost is ``nbytes`` (default: ``value.nbytes`` or ``len``)."""
        self.caches.put(namespace, key, value, nbytes)

    async def cached(self, namespace: str, key: Any, compute: Callable[[], Awaitable[T]],
                     nbytes: Callable[[T], int] | None = None) -> T:
        """:meth:`Caches.cached`: the cached value, else computed once for all concurrent callers."""
        return await self.caches.cached(namespace, key, compute, nbytes)

    async def cached_many(self, namespace: str, keys: Sequence[Any],
                          compute: Callable[[builtins.list[Any]], Awaitable[Sequence[T]]],
                          nbytes: Callable[[T], int] | None = None) -> builtins.list[T]:
        """:meth:`Caches.cached_many`: the missing values computed in one batched call."""
        return await self.caches.cached_many(namespace, keys, compute, nbytes)

    def invalidate(self, key: str) -> None:
        """Forget cached entries for object ``key``."""
        self.caches.invalidate(key)

    def clear_caches(self) -> None:
        self.caches.clear()

    # ------------------------------------------------------------------------------
    # reads
    # ------------------------------------------------------------------------------

    async def get(self, key: str, *, cache: str | None = None) -> bytes | None:
        """The whole object, or None if it does not exist."""
        if cache is not None:
            hit = self.get_cached(cache, key)
            if hit is not None:
                return cast(bytes, hit)
        t = self.transport
        data: bytes | None = await self.once(("get", key), lambda: self.call("get", key, lambda: t.get(key)))
        if cache is not None and data is not None:
            self.put_cached(cache, key, data)
        return data

    async def get_view(self, key: str) -> bytes | memoryview | None:
        """:meth:`get` without the copy where the transport can lend its buffer (cell payloads: no cache)."""
        t = self.transport
        view = getattr(t, "get_view", None)
        if view is None:
            return await self.get(key)
        data: memoryview | None = await self.once(("get_view", key),
                                                      lambda: self.call("get", key, lambda: view(key)))
        return data

    @property
    def batch_gets(self) -> bool:
        """Whether :meth:`get_many` fetches many objects per worker-thread call (local files, memory)."""
        return bool(getattr(self.transport, "blocking_gets", False))

    async def get_many(self, keys: Sequence[str]) -> builtins.list[bytes | memoryview | None]:
        """Whole objects of ``keys``, in order (None where missing), concurrently.  Where the transport
        allows blocking gets (:attr:`batch_gets`), in runs of at least ``get_batch`` (:mod:`zvf.config`) keys, each one
        worker-thread call under one limiter token; whatever a run did not fetch (from its first failure
        on) goes through :meth:`get`, with its retries and errors."""
        keys = list(keys)
        get_batch = getattr(self.transport, "get_batch", None)
        if len(keys) < 2 or get_batch is None or not self.batch_gets or _log.isEnabledFor(logging.DEBUG):
            return builtins.list(await self.gather([self.get_view(k) for k in keys]))
        per = max(tuning().get_batch, -(-len(keys) // self.concurrency))
        out: builtins.list[bytes | memoryview | None] = [None] * len(keys)

        async def run(lo: int) -> None:
            part = keys[lo:lo + per]
            await self._take_one()
            try:
                depth = self.stats.begin()
                got: builtins.list[memoryview | None] = []
                try:
                    got = await anyio.to_thread.run_sync(get_batch, part)
                finally:
                    self.stats.end(depth + max(len(got), 1) - 1)  # one request after another
            finally:
                self.limiter.release()
            self.stats.requests += max(len(got), 1) - 1
            self.stats.bytes += sum(len(b) for b in got if b is not None)
            out[lo:lo + len(got)] = got
            if self.pin is not None and got:
                await self.pin.after_read(part[0])
            for j in range(lo + len(got), lo + len(part)):
                out[j] = await self.get_view(keys[j])

        await self.gather([run(lo) for lo in range(0, len(keys), per)])
        return out

    async def get_range(
        self, key: str, start: int, end: int | None, *, cache: str | None = None
    ) -> bytes | None:
        """``data[start:end]`` of one object (None if missing)."""
        if end is not None and end <= start:
            return b""
        ckey = ("range", key, start, end)
        if cache is not None:
            hit = self.get_cached(cache, ckey)
            if hit is not None:
                return cast(bytes, hit)
        data = await self._fetch(Request(key, start, end))
        if cache is not None and data is not None:
            self.put_cached(cache, ckey, data)
        return data

    async def get_suffix(self, key: str, nbytes: int, *, cache: str | None = None) -> bytes | None:
        """The last ``nbytes`` of an object (all of it if shorter; None if missing)."""
        if nbytes <= 0:
            raise InvalidArgumentError(f"suffix of {key!r} needs nbytes > 0, got {nbytes}")
        if cache is not None:
            hit = self.get_cached(cache, ("suffix", key, nbytes))
            if hit is not None:
                return cast(bytes, hit)
        data = await self._fetch(Request(key, -nbytes, None))
        if cache is not None and data is not None:
            data = bytes(data)
            self.cache_suffix(cache, key, data)
            if len(data) < nbytes:  # the whole object: what this read returns again (it missed when keyed by length)
                self.put_cached(cache, ("suffix", key, nbytes), data)
        return data

    def cache_suffix(self, cache: str, key: str, tail: bytes | memoryview) -> None:
        """Cache ``tail`` as what :meth:`get_suffix` of ``len(tail)`` bytes of ``key`` returns (e.g. a shard
        index taken from a whole shard read another way)."""
        self.put_cached(cache, ("suffix", key, len(tail)), bytes(tail))

    async def head(self, key: str) -> int | None:
        """Object size, or None if it does not exist."""
        t = self.transport
        return await self.once(("head", key), lambda: self.call("head", key, lambda: t.head(key)))

    async def _fetch(self, req: Request) -> bytes | None:
        t, key, s, e = self.transport, req.key, req.start, req.end
        if e is None and s == 0:
            return await self.get(key)
        if e is None and s < 0:
            return await self.once(
                ("suffix", key, -s), lambda: self.call("get_suffix", key, lambda: t.get_suffix(key, -s), span=(s, None))
            )
        return await self.once(
            ("range", key, s, e), lambda: self.call("get_range", key, lambda: t.get_range(key, s, e), span=(s, e))
        )

    async def read_ranges(
        self,
        ranges: Sequence[ByteRange],
        *,
        max_gap: int | None = None,
        max_size: int | None = None,
    ) -> list[bytes | None]:
        """Fetch many byte ranges; merged per :func:`zvf.io.plan.coalesce`, run concurrently.

        Returns one entry per input range (None where the object is missing).
        ``max_gap``/``max_size`` default to the handle's ``coalesce_gap``/``coalesce_max``.
        """
        if not ranges:
            return []
        reqs = coalesce(
            ranges,
            max_gap=self.handle.coalesce_gap if max_gap is None else max_gap,
            max_size=self.handle.coalesce_max if max_size is None else max_size,
        )
        self.widen(len(reqs), sum(r.end - r.start for r in reqs if r.end is not None and r.start >= 0))
        payloads = await self.map(self._fetch, reqs)
        return scatter(ranges, reqs, payloads)

    # ------------------------------------------------------------------------------
    # writes
    # ------------------------------------------------------------------------------

    async def put(self, key: str, data: Any, *, mode: str = "overwrite") -> None:
        """Store ``data`` (bytes-like) at ``key``.

        ``mode="create"`` raises StoreExistsError when the key exists.  Large
        overwrites (> handle.multipart_threshold) go through multipart upload.
        """
        self._check_writable(key)
        if mode not in ("overwrite", "create"):
            raise InvalidArgumentError(f"put mode for {key!r} must be 'overwrite' or 'create', got {mode!r}")
        size = memoryview(data).nbytes
        if mode == "overwrite" and size > self.handle.multipart_threshold:
            await self.put_multipart(key, data)
            return
        t = self.transport
        try:
            await self.call(
                "put", key, lambda: t.put(key, data, mode=mode),
                retry_ambiguous=(mode == "overwrite"), put=True,
            )
        finally:
            self.invalidate(key)
        self.stats.bytes_put += size

    @property
    def batch_puts(self) -> bool:
        """Whether :meth:`put_batch` stores many blobs in one worker-thread call (local files, memory)."""
        return bool(getattr(self.transport, "blocking_puts", False)) and not self.handle.read_only

    async def put_batch(self, items: Sequence[tuple[str, Any]]) -> None:
        """Overwrite-put many small blobs: one limiter token and one worker-thread call where the transport
        allows blocking puts (:attr:`batch_puts`), else one :meth:`put` each.  Whatever the batch did not
        store (from its first failure on) goes through :meth:`put`, with its retries and errors."""
        if not items:
            return
        self._check_writable(items[0][0])
        sizes = [memoryview(d).nbytes for _, d in items]
        t = self.transport
        put_batch = getattr(t, "put_batch", None)
        done = 0
        if (put_batch is not None and self.batch_puts and len(items) > 1 and not _log.isEnabledFor(logging.DEBUG)
                and max(sizes) <= self.handle.multipart_threshold):
            await self._take_one()
            try:
                depth = self.stats.begin()
                try:
                    done = int(await anyio.to_thread.run_sync(put_batch, items))
                finally:
                    self.stats.end(depth + max(done, 1) - 1)  # one request after another
            finally:
                self.limiter.release()
            self.stats.requests += max(done, 1) - 1
            self.stats.puts += done
            self.stats.bytes_put += sum(sizes[:done])
            for key, _ in items[:done]:
                self.invalidate(key)
        for key, data in items[done:]:
            await self.put(key, data)

    async def put_multipart(
        self, key: str, chunks: Any, *, part_size: int | None = None
    ) -> None:
        """Upload a large blob in parts.

        ``chunks``: bytes-like, a sequence of bytes-like (both retryable), or a
        one-shot iterator / async iterator (not retried).  Parts are
        ``part_size`` bytes (default handle.part_size; S3 needs >= 5 MiB).
        """
        self._check_writable(key)
        part = int(part_size or self.handle.part_size)
        if part <= 0:
            raise InvalidArgumentError(f"part_size for {key!r} must be positive, got {part_size}")
        tokens = max(1, min(self.handle.multipart_concurrency, self.concurrency))
        t = self.transport
        counted = [0]
        if hasattr(chunks, "__array_interface__"):  # a numpy buffer (a cell framed in place) is one blob
            chunks = memoryview(chunks)

        if isinstance(chunks, (bytes, bytearray, memoryview)):
            replayable = True
            counted[0] = memoryview(chunks).nbytes

            def source() -> Any:
                return chunks
        elif isinstance(chunks, Sequence):
            replayable = True
            counted[0] = sum(memoryview(c).nbytes for c in chunks)

            def source() -> Any:
                return list(chunks)
        else:
            replayable = False

            def source() -> Any:
                return _counting(chunks, counted)

        try:
            await self.call(
                "put_multipart", key,
                lambda: t.put_multipart(key, source(), part_size=part, max_concurrency=tokens),
                retry=replayable, tokens=tokens, put=True,
            )
        finally:
            self.invalidate(key)
        self.stats.bytes_put += counted[0]

    async def delete(self, keys: str | Iterable[str]) -> None:
        """Delete objects (missing ones are ignored)."""
        keys = [keys] if isinstance(keys, str) else list(keys)
        if not keys:
            return
        self._check_writable(keys[0])
        t = self.transport
        try:
            await self.call("delete", keys[0], lambda: t.delete(keys))
        finally:
            for k in keys:
                self.invalidate(k)

    # ------------------------------------------------------------------------------
    # listing
    # ------------------------------------------------------------------------------

    async def list(self, prefix: str = "") -> list[tuple[str, int]]:
        """All (key, size) under directory ``prefix``, sorted."""
        t = self.transport
        return await self.call("list", prefix, lambda: t.list(prefix))

    async def list_dirs(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[tuple[str, int]]]:
        """(sub-directory prefixes, objects) directly under ``prefix``."""
        t = self.transport
        return await self.call("list_dirs", prefix, lambda: t.list_dirs(prefix))

    # ------------------------------------------------------------------------------
    # concurrency helpers
    # ------------------------------------------------------------------------------

    async def map(
        self, fn: Callable[[Any], Awaitable[T]], items: Iterable[Any], *, limit: int | None = None
    ) -> builtins.list[T]:
        """``[await fn(x) for x in items]`` run concurrently; results in input order.

        At most ``limit`` (default 2 x concurrency) calls run at once.  The
        calls themselves do not hold limiter tokens — the requests they make
        do — so ``fn`` may call any executor method without deadlock.  The
        first exception cancels the rest and is raised as is (no ExceptionGroup).
        """
        items = list(items)
        n = len(items)
        if n == 0:
            return []
        if n == 1:
            return [await fn(items[0])]
        self.widen(n)
        results: builtins.list[Any] = [None] * n
        errors: builtins.list[BaseException] = []
        next_index = iter(range(n))
        width = min(n, limit or 2 * self.concurrency)

        async def worker(scope: anyio.CancelScope) -> None:
            for i in next_index:
                try:
                    results[i] = await fn(items[i])
                except Exception as e:
                    errors.append(e)
                    scope.cancel()
                    return

        async with anyio.create_task_group() as tg:
            for _ in range(width):
                tg.start_soon(worker, tg.cancel_scope)
        if errors:
            raise errors[0]
        return results

    async def gather(self, aws: Iterable[Awaitable[T]], *, limit: int | None = None) -> builtins.list[T]:
        """Await many awaitables concurrently (see :meth:`map`); results in order."""
        aws = list(aws)
        try:
            return await self.map(_await, aws, limit=limit)
        finally:
            for a in aws:  # close coroutines never started because of an error
                if inspect.iscoroutine(a) and inspect.getcoroutinestate(a) == inspect.CORO_CREATED:
                    a.close()


class _ClosedTransport:
    """What a closed executor's requests meet: the store was let go, and its connections with it."""

    blocking_gets = blocking_puts = False

    def __init__(self, label: str) -> None:
        self.label = label

    def __getattr__(self, name: str) -> Any:
        raise DatasetClosedError(f"{self.label}: the dataset is closed; open it again to read")


def _trace(op: str, key: str, span: tuple[int, int | None] | None, status: str, result: Any, sent: float) -> None:
    """One DEBUG line per request attempt: op, key, byte range, status, bytes received, milliseconds."""
    if not _log.isEnabledFor(logging.DEBUG):
        return
    if isinstance(result, (bytes, bytearray, memoryview)):
        nbytes = len(result)
    elif isinstance(result, list):
        nbytes = sum(len(r) for r in result if isinstance(r, (bytes, bytearray, memoryview)))
    else:
        nbytes = 0
    where = "" if span is None else f" bytes={span[0]}-{'' if span[1] is None else span[1] - 1}"
    _log.debug("%s %s%s status=%s bytes=%d ms=%.1f", op, key, where, status, nbytes,
               (anyio.current_time() - sent) * 1000)


async def _await(a: Awaitable[T]) -> T:
    return await a


async def _acount(chunks: AsyncIterable[Any], counted: list[int]) -> Any:
    async for c in chunks:
        counted[0] += memoryview(c).nbytes
        yield c


def _count(chunks: Iterable[Any], counted: list[int]) -> Any:
    for c in chunks:
        counted[0] += memoryview(c).nbytes
        yield c


def _counting(chunks: Any, counted: list[int]) -> Any:
    if isinstance(chunks, AsyncIterable):
        return _acount(chunks, counted)
    return _count(chunks, counted)

