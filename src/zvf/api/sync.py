"""Blocking facade over ``zvf.aio``: the same names and signatures, results returned directly.

Every call runs on one long-lived event loop in a background thread (an
anyio blocking portal).  That makes the facade safe to call from code that
already runs a loop -- a notebook cell, an async test, a web handler -- where
``asyncio.run`` would refuse, and it keeps one dataset's connections and
caches on one loop for its whole life.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import threading
from typing import Any

from . import aio

_lock = threading.Lock()
_portal = None
_portal_cm = None


def _call(fn, *args, **kwargs) -> Any:
    """Run ``await fn(*args, **kwargs)`` on the facade's loop and return its result."""
    global _portal, _portal_cm
    if _portal is None:
        with _lock:
            if _portal is None:
                from anyio.from_thread import start_blocking_portal

                _portal_cm = start_blocking_portal(backend="asyncio")
                _portal = _portal_cm.__enter__()
                atexit.register(_shutdown)
    return _portal.call(lambda: fn(*args, **kwargs))


def _shutdown() -> None:
    global _portal, _portal_cm
    if _portal_cm is not None:
        cm, _portal_cm, _portal = _portal_cm, None, None
        cm.__exit__(None, None, None)


def _blocking(afn):
    """A blocking twin of coroutine function ``afn`` (same name, docs and signature)."""

    @functools.wraps(afn)
    def run(*args, **kwargs):
        return _call(afn, *args, **kwargs)

    return run


def _method(name: str):
    """A blocking twin of ``AsyncDataset.<name>`` bound through ``self._inner``."""
    afn = getattr(aio.AsyncDataset, name)

    @functools.wraps(afn)
    def run(self, *args, **kwargs):
        return _call(afn, self._inner, *args, **kwargs)

    return run


def _iterate(stream):
    """A blocking iterator over async iterable ``stream``: each step awaited on the facade's loop."""
    agen = stream.__aiter__()
    try:
        while True:
            try:
                yield _call(agen.__anext__)
            except StopAsyncIteration:
                return
    finally:
        _call(agen.aclose)


def _iter_method(name: str):
    """A blocking iterator twin of ``AsyncDataset.<name>`` (which returns an async iterable)."""
    fn = getattr(aio.AsyncDataset, name)

    @functools.wraps(fn)
    def run(self, *args, **kwargs):
        return _iterate(fn(self._inner, *args, **kwargs))

    return run


def _property(name: str):
    return property(lambda self: getattr(self._inner, name), doc=getattr(aio.AsyncDataset, name).__doc__)


class Dataset:
    """A ZVF store opened through the blocking facade; see ``zvf.aio.AsyncDataset``."""

    def __init__(self, inner: aio.AsyncDataset):
        self._inner = inner

    def __repr__(self) -> str:
        return repr(self._inner).replace("AsyncDataset", "Dataset", 1)

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def aio(self) -> aio.AsyncDataset:
        """The async dataset underneath, bound to the facade's event loop."""
        return self._inner

    levels = _property("levels")
    bounds = _property("bounds")
    ndim = _property("ndim")
    geometry_type = _property("geometry_type")
    chunk_shape = _property("chunk_shape")
    stats = _property("stats")

    info = _method("info")
    query = _method("query")
    read_all = _method("read_all")
    object_ids = _method("object_ids")
    object_attribute = _method("object_attribute")
    read_object = _method("read_object")
    read_objects = _method("read_objects")
    group = _method("group")
    groups = _method("groups")
    group_attribute = _method("group_attribute")
    close = _method("close")
    iter_chunks = _iter_method("iter_chunks")
    iter_objects = _iter_method("iter_objects")


@functools.wraps(aio.open)
def open(*args, **kwargs) -> Dataset:  # noqa: A001 - mirrors zvf.aio.open
    return Dataset(_call(aio.open, *args, **kwargs))


open.__signature__ = inspect.signature(aio.open).replace(return_annotation=Dataset)


validate = _blocking(aio.validate)


def __getattr__(name: str):
    """Blocking writers, made on first use (importing them costs a reader's cold start)."""
    if name in aio._WRITERS:
        fn = _blocking(getattr(aio, name))
        globals()[name] = fn
        return fn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
