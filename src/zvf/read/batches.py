"""Batch streams: what a bulk read returns (``iter_chunks``, ``iter_objects``, ``select(...).iter()``).

A :class:`BatchStream` is an async iterable whose batches are fetched ahead
by a producer task -- at most ``prefetch`` batches requested or ready but not
yet handed to the consumer, so memory stays bounded however big the store
is -- and yielded in job order.  The producer runs as its own task (not in a
task group held open across ``yield``), so a consumer may stop early from
any task; ``async with`` stops the prefetching at once::

    async for sel in ds.iter_chunks():            # runs to the end
        ...
    async with ds.iter_chunks() as batches:       # may break early
        async for sel in batches:
            ...

What the batches hold is the caller's: :mod:`zvf.read.bulk` streams a level's
chunks, :mod:`zvf.read.sweep` its objects, :mod:`zvf.read.query.count` a query's result.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import anyio
import numpy as np

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream


class _Slot:
    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Batches(Protocol[T_co]):
    """What a bulk read returns: batches for ``async for``, once; ``async with`` or ``aclose()`` stops it early."""

    def __aiter__(self) -> AsyncIterator[T_co]: ...

    async def __aenter__(self) -> AsyncIterator[T_co]: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def aclose(self) -> None: ...


class BatchStream(Generic[T]):
    """Batches of a bulk read, fetched ahead by a producer task; iterate once.

    ``setup()`` (awaited on first use) returns the jobs; ``fetch(job)``
    returns one batch.  With ``flatten`` each batch is a list whose items
    are yielded one by one.
    """

    def __init__(self, setup: Callable[[], Awaitable[list[Any]]], fetch: Callable[[Any], Awaitable[Any]], *,
                 prefetch: int, flatten: bool = False):
        if not isinstance(prefetch, (int, np.integer)) or prefetch < 1:
            raise InvalidArgumentError(f"prefetch must be an integer >= 1, got {prefetch!r}")
        self._setup = setup
        self._fetch = fetch
        self.prefetch = int(prefetch)
        self._flatten = flatten
        self._gen: AsyncGenerator[T] | None = None
        self.jobs_total: int | None = None  # known once iteration has started
        self.jobs_done = 0

    def __aiter__(self) -> AsyncIterator[T]:
        if self._gen is None:
            self._gen = self._iterate()
        return self._gen

    async def __aenter__(self) -> AsyncIterator[T]:
        return self.__aiter__()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop prefetching and wait until no request of this stream is in flight."""
        if self._gen is not None:
            await self._gen.aclose()

    async def _iterate(self) -> AsyncGenerator[T]:
        jobs = await self._setup()
        self.jobs_total = len(jobs)
        send, recv = anyio.create_memory_object_stream[_Slot](max_buffer_size=self.prefetch)
        window = anyio.Semaphore(self.prefetch)
        # Its own task: a task group entered here would stay open across ``yield`` and bind
        # the consumer's task to its cancel scope.
        producer = asyncio.get_running_loop().create_task(self._produce(jobs, send, window))
        try:
            async with recv:
                async for slot in recv:
                    await slot.done.wait()
                    window.release()
                    if slot.error is not None:
                        raise slot.error
                    self.jobs_done += 1
                    value, slot.value = slot.value, None
                    if self._flatten:
                        for item in value:
                            yield item
                    else:
                        yield value
        finally:
            producer.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait({producer})

    async def _produce(self, jobs: list[Any], send: MemoryObjectSendStream[_Slot], window: anyio.Semaphore) -> None:
        async def run(job: Any, slot: _Slot) -> None:
            try:
                slot.value = await self._fetch(job)
            except Exception as exc:  # handed to the consumer in order
                slot.error = exc
            finally:
                slot.done.set()

        try:
            async with send, anyio.create_task_group() as tg:
                for job in jobs:
                    await window.acquire()
                    slot = _Slot()
                    tg.start_soon(run, job, slot)
                    await send.send(slot)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the consumer went away
