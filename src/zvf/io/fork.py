"""Fork safety: a forked child starts zvf's process state afresh instead of inheriting what a fork breaks.

``os.fork()`` (multiprocessing's default start on Linux, ``gunicorn --preload``, Celery prefork)
copies only the thread that forks.  obstore runs every request on one tokio runtime per process
(pyo3-async-runtimes'), whose threads stay behind in the parent: in the child every obstore call
then waits forever -- on any store, even one made after the fork, so making stores again is not
enough.  zvf's own state breaks the same way: the blocking facade's event-loop thread, and locks,
limiter tokens and in-flight requests held by tasks that will never run again.

What happens in every forked child (``os.register_at_fork``), cheaply, in the fork itself:

* the state zvf's modules registered with :func:`at_fork` is reset (the facade forgets its portal,
  a new one starts on first use; the process-wide store registries are emptied);
* every live object registered with :func:`track` gets ``after_fork()`` (executors: a fresh
  limiter, no in-flight requests);
* when an obstore runtime was running at the fork, zvf's next request loads a fresh copy of
  obstore's native module (:func:`obstore`, from an in-memory copy of its file: a second copy of a
  library gets its own runtime), and each transport makes its store again with it -- from how zvf
  made it, or for a store the caller built, from the store's own configuration
  (:func:`remake`; a store that cannot be made again is a :class:`~zvf.errors.ForkedProcessError`).

The parent is untouched, and so is the ``obstore`` package: code that calls obstore itself in a
child forked after obstore ran still hangs there, as it does without zvf.
"""

from __future__ import annotations

import os
import sys
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ..errors import ForkedProcessError

__all__ = ["api_of", "at_fork", "obstore", "remake", "track"]

F = TypeVar("F", bound=Callable[[], None])

STORE_CLASSES = ("S3Store", "GCSStore", "AzureStore", "HTTPStore", "LocalStore", "MemoryStore")


class _Forkable(Protocol):
    def after_fork(self) -> None: ...


_hooks: list[Callable[[], None]] = []
_tracked: weakref.WeakSet[_Forkable] = weakref.WeakSet()
_api: Any = None  # the obstore API this process calls (None: not chosen yet)
_made_by: list[Any] = []  # every obstore API loaded in this process, the package first
_api_lock = threading.Lock()
_runtime_at_fork = False  # set just before each fork: an obstore runtime was running
_needs_copy = False  # in a child forked while one ran: the next API chosen is a fresh copy


def at_fork(fn: F) -> F:
    """Run ``fn()`` in every forked child (module state: the facade's portal, registries).  A decorator."""
    _hooks.append(fn)
    return fn


def track(obj: _Forkable) -> None:
    """Call ``obj.after_fork()`` in every forked child while ``obj`` lives (objects holding locks, limiters)."""
    _tracked.add(obj)


def obstore() -> Any:
    """The obstore API zvf calls in this process: the ``obstore`` package, or in a child forked while an
    obstore runtime ran, a fresh copy of its native module (loaded here on first use).  Both offer the
    functions (``get_async``, ``put``...), ``exceptions`` and ``store`` (the store classes)."""
    api = _api
    if api is None:
        with _api_lock:
            api = _api if _api is not None else _choose()
    return api


def _choose() -> Any:
    global _api, _needs_copy
    import obstore as package

    if not _made_by:
        _made_by.append(package)
    _api = _fresh_copy(package) if _needs_copy else _made_by[-1]
    _needs_copy = False
    return _api


def api_of(store: Any) -> Any:
    """The obstore API (of :func:`obstore`'s) whose classes made ``store``; None for a foreign object."""
    import obstore as package

    for api in [package, *_made_by]:
        if any(isinstance(store, getattr(api.store, name)) for name in STORE_CLASSES):
            return api
    return None


def remake(store: Any) -> Any:
    """``store`` made again by this process's obstore API from its own configuration (a store the
    caller built, in a forked child).  A memory store is copied, as the fork copied its parent's."""
    made_by = api_of(store)
    if made_by is None:
        raise ForkedProcessError(f"cannot make a {type(store).__name__} again after os.fork(): not an obstore store")
    name = next(n for n in STORE_CLASSES if isinstance(store, getattr(made_by.store, n)))
    api = obstore()
    cls: Any = getattr(api.store, name)
    try:
        if name == "MemoryStore":
            copy = cls()
            for batch in made_by.list(store):  # memory needs no runtime: the old API still reads it
                for meta in batch:
                    api.put(copy, meta["path"], made_by.get(store, meta["path"]).bytes())
            return copy
        if name == "HTTPStore":  # its pickled form drops the client options (allow_http...)
            return cls.from_url(store.url, client_options=store.client_options, retry_config=store.retry_config)
        args, kwargs = store.__getnewargs_ex__()
        return cls(*args, **kwargs)
    except Exception as e:
        raise ForkedProcessError(
            f"cannot make the {name} this dataset uses again after os.fork(): {type(e).__name__}; open the "
            f"dataset in the child, or start workers with the 'spawn' or 'forkserver' method") from None


def _fresh_copy(package: Any) -> Any:
    """obstore's API from a new copy of its native module: its own statics, so its own tokio runtime."""
    import importlib.machinery
    import importlib.util
    import shutil
    import tempfile

    source = package._obstore.__file__
    saved = {k: m for k, m in sys.modules.items() if k == "obstore" or k.startswith("obstore.")}
    fd = -1
    try:
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create("zvf-obstore", os.MFD_CLOEXEC)
            with open(source, "rb") as src, open(fd, "wb", closefd=False) as dst:
                shutil.copyfileobj(src, dst)
            path = f"/proc/self/fd/{fd}"
        else:  # no memfd: a temporary file, gone once loaded
            with open(source, "rb") as src, tempfile.NamedTemporaryFile(suffix=".so", delete=False) as tmp:
                shutil.copyfileobj(src, tmp)
            path = tmp.name
        loader = importlib.machinery.ExtensionFileLoader("obstore._obstore", path)
        spec = importlib.util.spec_from_file_location("obstore._obstore", path, loader=loader)
        if spec is None:
            raise ImportError(path)
        native = importlib.util.module_from_spec(spec)
        loader.exec_module(native)
    except Exception as e:
        raise ForkedProcessError(
            f"obstore cannot run in this forked process (its runtime stayed in the parent) and a fresh copy of it "
            f"could not be loaded ({type(e).__name__}: {e}); start workers with the 'spawn' or 'forkserver' "
            f"method, or fork before using zvf") from None
    finally:
        if fd >= 0:
            os.close(fd)  # the loaded library keeps its mapping
        elif "path" in locals():
            os.unlink(path)
        for k in [k for k in sys.modules if (k == "obstore" or k.startswith("obstore.")) and k not in saved]:
            del sys.modules[k]
        sys.modules.update(saved)  # loading registered the copy's submodules: the package keeps its own
    api: Any = types.ModuleType("obstore", "obstore functions from a fresh copy of its native module (forked child)")
    for name in native.__all__:
        setattr(api, name, getattr(native, name))
    api.store = types.ModuleType("obstore.store")
    for name in STORE_CLASSES:  # Python subclasses, as the package's: weak references work on them
        setattr(api.store, name, type(name, (getattr(native._store, name),), {"__module__": "obstore.store"}))
    _made_by.append(api)
    return api


def _tokio_running() -> bool:
    """Whether a tokio runtime's threads run in this process (Linux: their names; elsewhere: obstore loaded)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return "obstore._obstore" in sys.modules
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().startswith("tokio-"):  # tokio-rt-worker, tokio-runtime-worker
                    return True
        except OSError:
            continue
    return False


def _before_fork() -> None:
    global _runtime_at_fork
    _runtime_at_fork = _tokio_running()


def _after_fork_in_child() -> None:
    global _api, _api_lock, _needs_copy
    _api_lock = threading.Lock()
    if _runtime_at_fork:
        _api, _needs_copy = None, True  # chosen again (a fresh copy) on first use
    for hook in _hooks:
        hook()
    for obj in list(_tracked):
        obj.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
