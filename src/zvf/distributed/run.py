"""What the Dask entry points share: the optional import, the store spec, running a list of tasks."""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from ..errors import InvalidArgumentError, MissingDependencyError

if TYPE_CHECKING:
    from ..io.options import StorageOptions

P = ParamSpec("P")
T = TypeVar("T")

Progress = Callable[[dict[str, Any]], object]
"""A Dask entry point's ``progress``: called with ``stage``, ``done``, ``total`` (and the stage's own keys)
as each task finishes."""


def need_dask() -> Any:
    """``dask`` itself, or a clear error naming the extra that brings it."""
    try:
        import dask
    except ImportError as exc:
        raise MissingDependencyError("zvf.dask needs dask and distributed: pip install 'zvf[dask]'") from exc
    return dask


def spec_of(target: Any, storage_options: StorageOptions | None) -> tuple[str, StorageOptions | None]:
    """The store spec tasks receive: a URL or absolute path, and plain storage options.

    Workers open the store themselves, so a live store object (or a
    process-local ``memory://`` store) cannot be shipped to them.
    """
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str) or not target:
        raise InvalidArgumentError(f"target: the Dask engine needs a store URL or path (workers open it "
                                   f"themselves), got {type(target).__name__}")
    scheme = target.split("://", 1)[0].lower() if "://" in target else ""
    if scheme == "memory":
        raise InvalidArgumentError(f"target {target!r}: a memory:// store lives in one process; Dask workers "
                                   "need a path or an object-store URL")
    if not scheme:
        target = os.path.abspath(target)  # workers may run elsewhere in the file system
    if storage_options is not None and not isinstance(storage_options, dict):
        storage_options = dict(storage_options)
    return target, storage_options


def default_client(client: Any = None) -> Any:
    """The ``distributed`` client to run on: the one given, else the current one, else None (local scheduler)."""
    if client is not None:
        return client
    try:
        from distributed import default_client as current
    except ImportError:
        return None
    try:
        return current()  # type: ignore[no-untyped-call]  # distributed's functions are unannotated
    except ValueError:  # no client started
        return None


class _ContextPool(concurrent.futures.ThreadPoolExecutor):
    """A thread pool whose tasks run in the context of the code that submitted them (the caller's
    ``zvf.config.tuned()`` settings hold in Dask's local threads, as they do in the caller)."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> concurrent.futures.Future[T]:
        context = contextvars.copy_context()

        def run() -> T:
            return context.run(fn, *args, **kwargs)

        return super().submit(run)


def compute(tasks: list[Any], *, client: Any = None, progress: Progress | None = None,
            stage: str = "tasks", note: Callable[[Any], dict[str, Any]] | None = None) -> list[Any]:
    """Results of ``tasks`` (dask delayed objects), in order, reporting each as it finishes.

    ``note(result)`` adds keys of its own to the progress dict of each
    finished task.  On a ``distributed`` cluster a task lost with its worker
    is rerun by the scheduler on another worker; zvf tasks are idempotent,
    so that is safe.  When a task fails, the call returns (raises) only once
    every other task has ended.
    """
    dask = need_dask()
    if not tasks:
        return []
    client = default_client(client)
    total = len(tasks)

    def report(done: int, result: Any) -> None:
        if progress is not None:
            progress({"stage": stage, "done": done, "total": total, **(note(result) if note else {})})

    if client is None:  # Dask's local scheduler; a pool of our own, left only when every started task ended
        with _ContextPool(os.cpu_count() or 1, thread_name_prefix="zvf-dask") as pool, \
                dask.config.set(pool=pool):
            out = list(dask.compute(*tasks))
        for done, result in enumerate(out, 1):
            report(done, result)
        return out
    from distributed import as_completed, wait

    futures = client.compute(tasks)
    try:
        if progress is None:
            gathered: list[Any] = client.gather(futures)
            return gathered
        slot = {id(f): i for i, f in enumerate(futures)}
        out = [None] * total
        completed = as_completed(futures, with_results=True)  # type: ignore[no-untyped-call]  # unannotated
        for done, (future, result) in enumerate(completed, 1):
            out[slot[id(future)]] = result
            report(done, result)
        return out
    except Exception:
        # A task failed: let the others run out before raising, so none writes under the job prefix
        # after this call returns (a resumed job's commit would leave its files behind), and what
        # they finish is kept for the resume.
        wait(futures)  # type: ignore[no-untyped-call]  # distributed's functions are unannotated
        raise


@contextlib.contextmanager
def client_for(workers: int | None, scheduler: str | None) -> Iterator[Any]:
    """A ``distributed`` client: on the scheduler at ``scheduler``, or a local cluster of ``workers`` processes."""
    need_dask()
    from distributed import Client, LocalCluster

    if scheduler:
        with Client(scheduler) as client:  # type: ignore[no-untyped-call]  # distributed's API is unannotated
            yield client
        return
    if not isinstance(workers, int) or workers < 1:
        raise InvalidArgumentError(f"workers must be an integer >= 1, got {workers!r}")
    with LocalCluster(n_workers=workers, processes=True,  # type: ignore[no-untyped-call]  # unannotated
                      threads_per_worker=1, dashboard_address=None, host="127.0.0.1") as cluster, \
            Client(cluster) as client:  # type: ignore[no-untyped-call]  # distributed's API is unannotated

        yield client
