"""``zvf.validate`` / ``zvf.aio.validate``: check a ZVF store against the format, level by level.

::

    report = await zvf.aio.validate("s3://bucket/store.zarrvectors", level=3)
    if not report.ok:
        for issue in report.errors:
            print(issue)          # "ERROR   L3 0/vertex_fragments/c/0/0/1: ..."

Levels 1-5 are structure, metadata, consistency, conventions and
multi-resolution coherence (see :mod:`zvf.validation.checks`).  Every read goes
through zvf's executor (bounded concurrency, retries); zarr-python is not
used.  A broken store never raises: its problems are the report.  Only
invalid arguments (a bad ``level``, an unknown scheme or storage option)
raise :class:`~zvf.errors.InvalidArgumentError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .report import ERROR, LEVEL_NAMES, WARNING, Issue, Report

if TYPE_CHECKING:
    from ..io.options import StorageOptions
    from ..io.store import Target

__all__ = ["ERROR", "LEVEL_NAMES", "WARNING", "Issue", "Report", "validate"]


async def validate(target: Target, *, level: int = 3, storage_options: StorageOptions | None = None) -> Report:
    """Validate the store at ``target`` up to ``level`` (1..5); returns a :class:`Report`."""
    from ..errors import InvalidArgumentError, StoreNotFoundError
    from ..io.executor import Executor
    from ..io.store import open_store
    from .checks import Validator

    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= 5:
        raise InvalidArgumentError(f"level must be an integer from 1 to 5, got {level!r}")
    try:
        handle = open_store(target, mode="r", storage_options=storage_options)
    except StoreNotFoundError as e:
        report = Report(str(target), level)
        report.issues.append(Issue(ERROR, 1, "zarr.json", f"zarr.json: no store: {e}"))
        return report
    ex = Executor(handle)
    return await Validator(ex, handle.url, level).run()
