"""Blocking facade over ``zvf.aio``: the same names and signatures, results returned directly.

Every call runs on one long-lived event loop in a background thread (an
anyio blocking portal).  That makes the facade safe to call from code that
already runs a loop -- a notebook cell, an async test, a web handler -- where
``asyncio.run`` would refuse, and it keeps one dataset's connections and
caches on one loop for its whole life.

A blocking call is the coroutine's lifetime: if the caller is interrupted
(Ctrl-C) while it waits, the coroutine is cancelled on the loop and the call
returns only once it has stopped, so an interrupted write uploads nothing
more and never publishes its root.  A deadline (``with zvf.timeout(seconds):``)
ends the calls made under it the same way, with ``CallTimeoutError``.

After ``os.fork()`` the child forgets the parent's loop thread (it did not
survive the fork) and starts its own on first use; see ``zvf.io.fork``.

The twins are made by typed wrappers (``_blocking``, ``_method``, ...), so
type checkers see each async signature with its blocking return type.
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import inspect
import math
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, Self, TypeVar, Unpack, cast, overload

from ..config import in_effect, tuning
from ..errors import CallTimeoutError, InvalidArgumentError
from ..io import fork
from ..read.context import RootFacts
from ..read.query import AsyncQuery, SelectArgs
from . import aio
from .dataset import AsyncDataset

if TYPE_CHECKING:
    from anyio.from_thread import BlockingPortal

    from ..read.batches import Batches

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
A = TypeVar("A")
A_co = TypeVar("A_co", covariant=True)

_lock = threading.Lock()
_portal: BlockingPortal | None = None
_portal_cm: AbstractContextManager[BlockingPortal] | None = None


def _loop_portal() -> BlockingPortal:
    """The facade's portal, started on first use and stopped at interpreter exit."""
    global _portal, _portal_cm
    with _lock:
        if _portal is None:
            from anyio.from_thread import start_blocking_portal

            _portal_cm = start_blocking_portal(backend="asyncio")
            _portal = _portal_cm.__enter__()
            atexit.register(_shutdown)
        return _portal


def _shutdown() -> None:
    global _portal, _portal_cm
    if _portal_cm is not None:
        cm, _portal_cm, _portal = _portal_cm, None, None
        cm.__exit__(None, None, None)


_abandoned: list[object] = []


@fork.at_fork
def _forget_portal() -> None:
    """In a forked child: the portal's thread stayed in the parent; the next call starts a new one.  The old
    portal is kept, never finalized: its cleanup would wait for that thread forever."""
    global _lock, _portal, _portal_cm
    _abandoned.append((_portal, _portal_cm))
    _lock, _portal, _portal_cm = threading.Lock(), None, None


_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("zvf_deadline", default=math.inf)


@contextmanager
def timeout(seconds: float) -> Iterator[None]:
    """Bound the blocking calls made in the block: whichever is still running ``seconds`` after the block
    began is cancelled (as Ctrl-C would: it stops before anything more is sent, a write never publishes)
    and raises ``zvf.errors.CallTimeoutError``, a ``TimeoutError``.  Nested blocks keep the nearer deadline.

    ``with zvf.timeout(2.0): sel = ds.query(box)``

    Cancelling waits for requests already sent, up to a few seconds, so the call returns at most that
    much past its deadline.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise InvalidArgumentError(f"timeout must be a number of seconds >= 0, got {seconds!r}")
    token = _deadline.set(min(_deadline.get(), time.monotonic() + float(seconds)))
    try:
        yield
    finally:
        _deadline.reset(token)


def _call(fn: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run ``await fn(*args, **kwargs)`` on the facade's loop and return its result.

    Whatever interrupts the wait (KeyboardInterrupt, SystemExit from a signal
    handler, the deadline of a ``timeout`` block) cancels the coroutine and waits
    until it has stopped before it propagates: nothing keeps running behind the
    caller's back.
    """
    deadline = _deadline.get()
    if deadline <= time.monotonic():
        raise CallTimeoutError(f"{_name(fn)} was not started: its zvf.timeout() deadline had passed")
    stopped = threading.Event()
    settings = tuning()  # the loop's thread has its own context: the caller's zvf.config.tuned() goes along

    async def run() -> R:
        try:
            with in_effect(settings):
                return await fn(*args, **kwargs)
        finally:
            stopped.set()

    future = None
    try:
        with _sigint_deferred():  # an interrupt while the task is handed over would leave it running unseen
            future = _loop_portal().start_task_soon(run)
        if not _wait(stopped, deadline):
            raise CallTimeoutError(f"{_name(fn)} did not finish within its zvf.timeout(); it was cancelled")
        return future.result()
    except BaseException:
        if future is not None and future.cancel():  # False once the coroutine has finished on its own
            while True:
                try:
                    _wait(stopped)
                    break
                except KeyboardInterrupt:  # a second Ctrl-C does not abandon the coroutine
                    continue
        raise


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold back SIGINT for the block (main thread only), then deliver it to the previous handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            signal.raise_signal(signal.SIGINT)


def _wait(event: threading.Event, deadline: float = math.inf) -> bool:
    """Wait in short slices until ``event`` is set (True) or ``deadline`` (``time.monotonic``) passes (False):
    a signal that another thread (obstore's, the loop's) received is acted on by the main thread only when
    its wait returns, so an untimed wait could miss Ctrl-C."""
    while not event.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            return False
    return True


def _name(fn: Callable[..., Any]) -> str:
    """How a timeout names the call: ``read_all``, ``write_points``..."""
    return getattr(fn, "__name__", None) or type(fn).__name__


def _blocking(afn: Callable[P, Awaitable[R]]) -> Callable[P, R]:
    """The blocking twin of coroutine function ``afn`` (same name, docs and signature)."""

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return _call(afn, *args, **kwargs)

    functools.update_wrapper(run, afn)
    return run


def _opening(afn: Callable[P, Awaitable[AsyncDataset]]) -> Callable[P, Dataset]:
    """The blocking twin of a coroutine function that opens an ``AsyncDataset``: it returns a ``Dataset``."""

    def run(*args: P.args, **kwargs: P.kwargs) -> Dataset:
        return Dataset(_call(afn, *args, **kwargs))

    functools.update_wrapper(run, afn)
    run.__signature__ = inspect.signature(afn).replace(return_annotation=Dataset)  # type: ignore[attr-defined]
    return run


class _Twin(Protocol[A_co]):
    """A blocking object over the async one it wraps (``Dataset`` over ``AsyncDataset``, ``Query`` over
    ``AsyncQuery``)."""

    @property
    def _inner(self) -> A_co: ...


def _method(afn: Callable[Concatenate[A, P], Awaitable[R]]) -> Callable[Concatenate[_Twin[A], P], R]:
    """The blocking twin of async method ``<Async class>.<name>``, run on ``self.aio``."""

    def run(self: _Twin[A], /, *args: P.args, **kwargs: P.kwargs) -> R:
        return _call(afn, self._inner, *args, **kwargs)

    functools.update_wrapper(run, afn)
    return run


def _iter_method(
    fn: Callable[Concatenate[A, P], Batches[T]],
) -> Callable[Concatenate[_Twin[A], P], Iterator[T]]:
    """The blocking iterator twin of ``<Async class>.<name>`` (which returns a batch stream)."""

    def run(self: _Twin[A], /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return _iterate(fn(self._inner, *args, **kwargs))

    functools.update_wrapper(run, fn)
    return run


def _iterate(stream: Batches[T]) -> Iterator[T]:
    """Each step of ``stream`` awaited on the facade's loop; leaving the loop early (break, Ctrl-C)
    stops its prefetching."""
    items = stream.__aiter__()
    try:
        while True:
            try:
                yield _call(items.__anext__)
            except StopAsyncIteration:
                return
    finally:
        token = _deadline.set(math.inf)  # closing the stream is cleanup: no deadline cuts it short
        try:
            _call(stream.aclose)
        finally:
            _deadline.reset(token)


class Query:
    """The blocking twin of ``zvf.aio.AsyncQuery``: immutable, ``select`` narrows, terminals block."""

    def __init__(self, inner: AsyncQuery):
        self._inner = inner

    def __repr__(self) -> str:
        return repr(self._inner).replace("AsyncQuery", "Query", 1)

    @property
    def aio(self) -> AsyncQuery:
        return self._inner

    def select(self, **narrowing: Unpack[SelectArgs]) -> Query:
        """This query narrowed further: boxes intersect, id sets intersect, ``where`` terms AND."""
        return Query(self._inner.select(**narrowing))

    iter = _iter_method(AsyncQuery.iter)
    read = _method(AsyncQuery.read)
    count = _method(AsyncQuery.count)
    object_ids = _method(AsyncQuery.object_ids)
    plan = _method(AsyncQuery.plan)
    explain = _method(AsyncQuery.explain)


class _Forwarded(Generic[T]):
    """A read-only property of ``Dataset``: the same property of the ``AsyncDataset`` underneath
    (type and docstring too), as ``_method`` is for methods."""

    def __init__(self, prop: Callable[[AsyncDataset], T]) -> None:
        self.__doc__ = prop.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Self: ...
    @overload
    def __get__(self, obj: Dataset, owner: type | None = None) -> T: ...
    def __get__(self, obj: Dataset | None, owner: type | None = None) -> T | Self:
        return self if obj is None else cast(T, getattr(obj._inner, self.name))

    def __set__(self, obj: Dataset, value: object) -> None:
        raise AttributeError(f"Dataset.{self.name} is read-only")  # as a property's


class Dataset(RootFacts):
    """A ZVF store opened through the blocking facade; see ``zvf.aio.AsyncDataset``.

    ``with zvf.open(...) as ds:`` closes it; a closed dataset refuses reads
    (DatasetClosedError).
    """

    def __init__(self, inner: AsyncDataset):
        self._inner = inner

    def __repr__(self) -> str:
        return repr(self._inner).replace("AsyncDataset", "Dataset", 1)

    def _repr_html_(self) -> str:
        return self._inner._repr_html_()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def aio(self) -> AsyncDataset:
        """The async dataset underneath, bound to the facade's event loop."""
        return self._inner

    root = _Forwarded(AsyncDataset.root)
    url = _Forwarded(AsyncDataset.url)
    levels = _Forwarded(AsyncDataset.levels)
    stats = _Forwarded(AsyncDataset.stats)
    version = _Forwarded(AsyncDataset.version)
    info = _method(AsyncDataset.info)
    query = _method(AsyncDataset.query)
    read_all = _method(AsyncDataset.read_all)
    object_ids = _method(AsyncDataset.object_ids)
    object_attribute = _method(AsyncDataset.object_attribute)
    fragment_attribute = _method(AsyncDataset.fragment_attribute)
    read_object = _method(AsyncDataset.read_object)
    read_objects = _method(AsyncDataset.read_objects)
    group = _method(AsyncDataset.group)
    groups = _method(AsyncDataset.groups)
    group_attribute = _method(AsyncDataset.group_attribute)
    close = _method(AsyncDataset.close)
    refresh = _method(AsyncDataset.refresh)
    iter_chunks = _iter_method(AsyncDataset.iter_chunks)
    iter_objects = _iter_method(AsyncDataset.iter_objects)
    append_points = _method(AsyncDataset.append_points)
    append_polylines = _method(AsyncDataset.append_polylines)
    append_lines = _method(AsyncDataset.append_lines)
    append_graph = _method(AsyncDataset.append_graph)
    append_mesh = _method(AsyncDataset.append_mesh)

    def select(self, **narrowing: Unpack[SelectArgs]) -> Query:
        """A lazy, immutable query: nothing is read until a terminal (``read``, ``count``, ``object_ids``,
        ``iter``, ``plan``, ``explain``) runs; ``select`` narrows it further.  The keywords are
        ``zvf.SelectArgs``; see ``zvf.aio.AsyncDataset.select``."""
        return Query(self._inner.select(**narrowing))


open = _opening(aio.open)

if TYPE_CHECKING:  # made on first use at run time (importing writers or the validator costs a reader's cold start)
    validate = _blocking(aio.validate)
    write_points = _blocking(aio.write_points)
    write_polylines = _blocking(aio.write_polylines)
    write_lines = _blocking(aio.write_lines)
    write_graph = _blocking(aio.write_graph)
    write_mesh = _blocking(aio.write_mesh)
    build_pyramid = _blocking(aio.build_pyramid)
    rechunk = _blocking(aio.rechunk)
    convert = _blocking(aio.convert)
    gc = _blocking(aio.gc)


def __getattr__(name: str) -> Any:
    """Blocking writers and validate, made on first use."""
    if name in aio._LAZY:
        fn = _blocking(getattr(aio, name))
        globals()[name] = fn
        return fn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
