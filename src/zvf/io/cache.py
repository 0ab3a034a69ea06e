"""Shared work and kept results of one executor: single flight, and byte-budget caches read through it.

Single flight: concurrent callers of the same work (an identical read, the decode of one object index)
run it once; later callers await the first one's result or error.  If the first caller is cancelled, a
waiter takes over and runs it itself, so one caller's cancellation never leaks into another.

Caches: byte-budget LRUs per namespace ("meta", "shard_index", "fragment_index", "manifest", ...) holding
any object with an explicit size.  :meth:`Caches.cached` and :meth:`Caches.cached_many` compute what is
missing once for all concurrent callers -- 64 box queries on a freshly opened store decode its object
index once, not 64 times.  Missing objects are not cached; the executor's own puts and deletes
invalidate the entries of their key.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

import anyio

from ..config import tuning
from ..errors import InvalidArgumentError
from .stats import Stats

__all__ = ["ByteLRU", "Caches", "SingleFlight", "default_cache_bytes"]

T = TypeVar("T")



def default_cache_bytes() -> dict[str, int]:
    """Byte budget of each cache namespace in effect (:mod:`zvf.config`; other namespaces: ``other_cache_bytes``)."""
    t = tuning()
    return {"meta": t.meta_cache_bytes, "shard_index": t.shard_index_cache_bytes,
            "fragment_index": t.fragment_index_cache_bytes, "manifest": t.manifest_cache_bytes,
            "shard": t.shard_cache_bytes, "cell": t.cell_cache_bytes}


class ByteLRU:
    """LRU map bounded by the total ``nbytes`` of its values."""

    def __init__(self, budget: int) -> None:
        self.budget = int(budget)
        self.nbytes = 0
        self._d: OrderedDict[Any, tuple[Any, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: Any) -> bool:
        return key in self._d

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._d))

    def get(self, key: Any, default: Any = None) -> Any:
        hit = self._d.get(key)
        if hit is None:
            return default
        self._d.move_to_end(key)
        return hit[0]

    def put(self, key: Any, value: Any, nbytes: int) -> None:
        self.pop(key)
        if nbytes > self.budget:
            return
        self._d[key] = (value, nbytes)
        self.nbytes += nbytes
        while self.nbytes > self.budget:
            _, (_, n) = self._d.popitem(last=False)
            self.nbytes -= n

    def pop(self, key: Any) -> None:
        hit = self._d.pop(key, None)
        if hit is not None:
            self.nbytes -= hit[1]

    def keys(self) -> list[Any]:
        return list(self._d)

    def clear(self) -> None:
        self._d.clear()
        self.nbytes = 0


def _sizeof(value: Any) -> int:
    n = getattr(value, "nbytes", None)
    if isinstance(n, int):
        return n
    try:
        return len(value)
    except TypeError:
        raise InvalidArgumentError(
            f"cannot size a {type(value).__name__} for the cache; pass nbytes="
        ) from None


class _Flight:
    """One run in flight.  Its event is made only when a second caller waits (making one per cell of a whole-level
    read cost more than the read's bookkeeping), and a caller of a finished run does not wait at all."""

    __slots__ = ("_event", "done", "error", "ok", "result")

    def __init__(self) -> None:
        self._event: anyio.Event | None = None
        self.done = False
        self.ok = False
        self.result: Any = None
        self.error: BaseException | None = None

    async def wait(self) -> None:
        if self.done:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()

    def finish(self) -> None:
        self.done = True
        if self._event is not None:
            self._event.set()


class SingleFlight:
    """Work in flight by key: concurrent callers with the same key share one run (``stats.inflight_shared``
    counts the callers who joined one)."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.flights: dict[tuple[Any, ...], _Flight] = {}

    def after_fork(self) -> None:
        """In a forked child: nothing in flight (the parent's tasks would be waited for forever)."""
        self.flights = {}

    async def run(self, fkey: tuple[Any, ...], fn: Callable[[], Awaitable[T]]) -> T:
        """``await fn()``, run once for concurrent callers with the same ``fkey``: later ones await the first
        one's result (or error); when the first is cancelled, one of them runs ``fn`` itself."""
        while True:
            flight = self.flights.get(fkey)
            if flight is None:
                flight = self.flights[fkey] = _Flight()
                try:
                    result = await fn()
                except Exception as e:
                    flight.error = e
                    raise
                else:
                    flight.ok = True
                    flight.result = result
                    return result
                finally:  # cancellation leaves ok=False, error=None: waiters take over
                    if self.flights.get(fkey) is flight:
                        del self.flights[fkey]
                    flight.finish()
            self.stats.inflight_shared += 1
            await flight.wait()
            if flight.ok:
                return cast(T, flight.result)
            if flight.error is not None:
                raise flight.error
            # the owner was cancelled: loop and (maybe) become the owner

    async def run_many(self, fkeys: Sequence[tuple[Any, ...]],
                       compute: Callable[[list[tuple[Any, ...]]], Awaitable[Sequence[Any]]]) -> list[Any]:
        """:meth:`run` for many keys: those no other task is running are computed in one ``compute(fkeys)``
        call; the others are awaited."""
        out: list[Any] = [None] * len(fkeys)
        todo = list(range(len(fkeys)))
        while todo:
            owned: dict[tuple[Any, ...], _Flight] = {}
            waits = []
            for j in todo:
                fkey = fkeys[j]
                flight = self.flights.get(fkey)
                if flight is None:
                    flight = owned[fkey] = self.flights[fkey] = _Flight()
                elif fkey not in owned:
                    self.stats.inflight_shared += 1
                waits.append((j, flight))
            if owned:
                await self._fill(owned, compute)
            todo = []
            for j, flight in waits:
                await flight.wait()
                if flight.ok:
                    out[j] = flight.result
                elif flight.error is not None:
                    raise flight.error
                else:  # its owner was cancelled: compute it ourselves
                    todo.append(j)
        return out

    async def _fill(self, owned: dict[tuple[Any, ...], _Flight],
                    compute: Callable[[list[tuple[Any, ...]]], Awaitable[Sequence[Any]]]) -> None:
        """Compute the values of the flights this task owns and wake their waiters."""
        try:
            values = await compute(list(owned))
            for flight, value in zip(owned.values(), values):
                flight.ok, flight.result = True, value
        except Exception as e:
            for flight in owned.values():
                flight.error = e
            raise
        finally:  # cancellation leaves ok=False, error=None: waiters take over
            for fkey, flight in owned.items():
                if self.flights.get(fkey) is flight:
                    del self.flights[fkey]
                flight.finish()


class Caches:
    """Byte-budget LRUs by namespace (``stats`` counts hits and misses), filled through ``flights``."""

    def __init__(self, budgets: Mapping[str, int], stats: Stats, flights: SingleFlight) -> None:
        self.lrus: dict[str, ByteLRU] = {ns: ByteLRU(b) for ns, b in budgets.items()}
        self.stats = stats
        self.flights = flights

    def __getitem__(self, namespace: str) -> ByteLRU:
        """The LRU of ``namespace`` (made with ``other_cache_bytes`` on first use)."""
        c = self.lrus.get(namespace)
        if c is None:
            c = self.lrus[namespace] = ByteLRU(tuning().other_cache_bytes)
        return c

    def get(self, namespace: str, key: Any) -> Any:
        """Cached value or None; counts a hit or a miss."""
        v = self[namespace].get(key)
        if v is None:
            self.stats.cache_misses += 1
        else:
            self.stats.cache_hits += 1
        return v

    def put(self, namespace: str, key: Any, value: Any, nbytes: int | None = None) -> None:
        """Cache any object; its cost is ``nbytes`` (default: ``value.nbytes`` or ``len``)."""
        if value is None:
            return
        self[namespace].put(key, value, _sizeof(value) if nbytes is None else int(nbytes))

    async def cached(self, namespace: str, key: Any, compute: Callable[[], Awaitable[T]],
                     nbytes: Callable[[T], int] | None = None) -> T:
        """The value cached under ``key``, else ``await compute()`` cached there (costing ``nbytes(value)``,
        default its size) -- computed once for all concurrent callers, so a decode is shared as well as
        the fetch before it."""
        hit = self.get(namespace, key)
        if hit is not None:
            return cast(T, hit)

        async def fill() -> T:
            value = await compute()
            self.put(namespace, key, value, None if nbytes is None else nbytes(value))
            return value

        return await self.flights.run(("cached", namespace, key), fill)

    async def cached_many(self, namespace: str, keys: Sequence[Any],
                          compute: Callable[[list[Any]], Awaitable[Sequence[T]]],
                          nbytes: Callable[[T], int] | None = None) -> list[T]:
        """:meth:`cached` for many keys: those neither cached nor being computed by another task are computed
        in one ``compute(missing_keys)`` call (one batched fetch); the others are awaited."""
        out: list[Any] = [self.get(namespace, k) for k in keys]
        todo = [j for j, v in enumerate(out) if v is None]
        if not todo:
            return out

        async def fill(fkeys: list[tuple[Any, ...]]) -> Sequence[T]:
            values = await compute([fkey[2] for fkey in fkeys])
            for fkey, value in zip(fkeys, values):
                self.put(namespace, fkey[2], value, None if nbytes is None else nbytes(value))
            return values

        got = await self.flights.run_many([("cached", namespace, keys[j]) for j in todo], fill)
        for j, value in zip(todo, got):
            out[j] = value
        return out

    def invalidate(self, key: str) -> None:
        """Forget cached entries for object ``key`` (plain key or ("...", key, ...) tuples)."""
        for c in self.lrus.values():
            if not len(c):
                continue
            for ck in list(c):
                if ck == key or (isinstance(ck, tuple) and len(ck) > 1 and ck[1] == key):
                    c.pop(ck)

    def clear(self) -> None:
        for c in self.lrus.values():
            c.clear()
