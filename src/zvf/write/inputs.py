"""Checking what callers hand to writers, before anything is uploaded.

Every problem is reported with the argument's name (and the attribute's),
so a bad call fails fast and leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..errors import InvalidArgumentError, UnknownArgumentError
from ..format.grid import extremes
from .object_index import check_layout
from .types import WriteConfig

if TYPE_CHECKING:
    from .types import Bounds, Columns, Groups, Shape

F = TypeVar("F", bound=Callable[..., Any])

# Names become path segments: keep them to one safe segment.
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")


# Names that are valid segments but collide with a node's own metadata document.
RESERVED_NAMES = frozenset({"zarr.json", ".zgroup", ".zarray", ".zattrs"})


def check_name(name: object, what: str) -> str:
    """An attribute or array name that cannot escape its folder or collide with keys."""
    if isinstance(name, str) and name in RESERVED_NAMES:
        raise InvalidArgumentError(f"{what} name {name!r} is not allowed: it is a Zarr metadata key")
    if not isinstance(name, str) or not _NAME.match(name) or name in (".", "..") or ".." in name:
        raise InvalidArgumentError(
            f"{what} name {name!r} is not allowed: use letters, digits, '_', '-', '.' (no '/', no '..')"
        )
    return name


#: Position dtypes a store may hold (the vertices ``dtype`` attribute).
POSITION_DTYPES = ("float16", "float32", "float64")


def checked_dtype(dtype: DTypeLike | None) -> np.dtype | None:
    """``dtype=`` as a numpy float dtype a store may hold, or None (keep the input's)."""
    return None if dtype is None else _float_dtype(dtype)


def _float_dtype(dtype: DTypeLike) -> np.dtype:
    try:
        out = np.dtype(dtype)
    except TypeError as exc:
        raise InvalidArgumentError(f"dtype {dtype!r} is not a numpy dtype") from exc
    if out.name not in POSITION_DTYPES:
        raise InvalidArgumentError(f"dtype must be a float type (float16, float32, float64), got {dtype!r}")
    return out


def position_dtype(given: np.dtype, dtype: DTypeLike | None) -> np.dtype:
    """The stored dtype: ``dtype`` when given, else the input's own float dtype.

    Integer inputs are stored as float32, 0.9.2's default;
    float64 is never narrowed silently (error 0.03 at 1e6 in float32).
    """
    if dtype is None:
        return given if given.name in POSITION_DTYPES else np.dtype(np.float32)
    return _float_dtype(dtype)


def batch_dtype(given: np.dtype, fixed: np.dtype | None, explicit: bool, what: str) -> np.dtype | None:
    """The dtype a streamed batch is stored in (None: its own, for the first batch).

    Without ``dtype=`` the first batch with rows fixes it and later batches are
    cast to it; a later float batch that the cast would narrow (float64 after
    float32) is refused rather than silently rounded: the rows already spilled
    cannot be widened.
    """
    if explicit or fixed is None:
        return fixed
    if given.kind == "f" and not np.can_cast(given, fixed, "safe"):
        raise InvalidArgumentError(
            f"{what} is {given} but the first batch fixed the stored dtype to {fixed}: pass dtype='{given}' to "
            f"keep every batch's precision, or dtype='{fixed}' to narrow")
    return fixed


#: What every writer's ``**options`` take (:class:`.types.WriteOptions`).
WRITE_OPTIONS = frozenset(f.name for f in dataclasses.fields(WriteConfig)) - {"chunk_shape"}
#: What the object writers' ``**options`` take (:class:`.types.ObjectWriteOptions`).
OBJECT_OPTIONS = WRITE_OPTIONS | {"fragment_attributes"}
#: What a writer given batches also takes through its ``**options``: the spilling writers' budgets.
STREAM_OPTIONS = frozenset({"spill_dir", "spill_bytes", "upload_bytes"})
#: What the in-process object writers (arrays or batches) take through their ``**options``.
OBJECT_WRITER_OPTIONS = OBJECT_OPTIONS | STREAM_OPTIONS


def check_keywords(given: Iterable[str], known: Iterable[str]) -> None:
    """An UnknownArgumentError (a TypeError too) for the first name of ``given`` not in ``known``, naming
    the closest one it takes."""
    known = frozenset(known)
    unknown = sorted(set(given) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownArgumentError(f"unexpected keyword argument {unknown[0]!r}{hint} (it takes: "
                                   f"{', '.join(sorted(known))})")


def keywords_first(options: Iterable[str]) -> Callable[[F], F]:
    """A writer whose keywords are checked before it runs: one that neither it nor its ``**options``
    (``options``: the names those take) takes is an UnknownArgumentError naming it and the closest name.
    Python alone would report ``chunk_shap=`` as a *missing* ``chunk_shape``, as ``**options`` takes any name."""

    def wrap(fn: F) -> F:
        params = inspect.signature(fn).parameters.values()
        known = frozenset(options) | {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def checked_async(*args: Any, **kwargs: Any) -> Any:
                check_keywords(kwargs, known)
                return await fn(*args, **kwargs)

            return cast(F, checked_async)

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            check_keywords(kwargs, known)
            return fn(*args, **kwargs)

        return cast(F, checked)

    return wrap


def streamed_config(chunk_shape: Shape, options: Mapping[str, Any], spill_bytes: int) -> WriteConfig:
    """:func:`write_config` for a write from batches: ``"auto"`` shapes need the whole input's extent
    and count up front, so they are refused here, before any batch is read."""
    cfg = write_config(chunk_shape, options)
    if isinstance(chunk_shape, str) or isinstance(cfg.bin_shape, str):
        raise InvalidArgumentError("chunk_shape/bin_shape 'auto' needs the whole input: give numbers with batches "
                                   "(or let zvf.rechunk choose a layout afterwards)")
    if spill_bytes < 1:
        raise InvalidArgumentError(f"spill_bytes must be >= 1, got {spill_bytes}")
    return cfg


def write_config(chunk_shape: Shape, options: Mapping[str, Any]) -> WriteConfig:
    """A writer's common keywords (:class:`.types.WriteOptions`) checked once, naming the bad one."""
    check_keywords(options, WRITE_OPTIONS)
    check_layout(options.get("object_index_layout", "sharded"))
    overwrite = options.get("overwrite", False)
    if not isinstance(overwrite, (bool, np.bool_)):
        raise InvalidArgumentError(f"overwrite must be True or False, got {overwrite!r}")
    checked: dict[str, Any] = {**options, "dtype": checked_dtype(options.get("dtype")), "overwrite": bool(overwrite)}
    chosen = isinstance(chunk_shape, str) and checked.get("object_index_layout") != "reference"
    if chosen and "shard_shape" not in options:
        checked["shard_shape"] = "auto"  # a layout zvf chooses shards where it pays (shard_shape=None: never)
    return WriteConfig(chunk_shape=chunk_shape, **checked)


def as_numeric(values: ArrayLike, name: str) -> np.ndarray:
    """``np.asarray(values)``, a ragged or odd input refused with its argument's name."""
    try:
        return np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"{name} must be an (N, ndim) numeric array") from exc


def positions_array(positions: ArrayLike, dtype: DTypeLike | None, name: str = "positions") -> np.ndarray:
    """(N, ndim) positions in the stored dtype (see :func:`position_dtype`; ``dtype`` None keeps it)."""
    arr = as_numeric(positions, name)
    if arr.ndim != 2 or arr.shape[1] < 1:
        raise InvalidArgumentError(f"{name} must be an (N, ndim) array, got shape {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise InvalidArgumentError(f"{name} must be numeric, got dtype {arr.dtype}")
    out = arr.astype(position_dtype(arr.dtype, dtype), copy=False)
    if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
        raise InvalidArgumentError(f"{name} has NaN or infinite coordinates")
    return out


def row_attributes(attributes: Columns | None, n: int, what: str = "attributes") -> dict[str, np.ndarray]:
    """Per-row arrays of length ``n``: (n,) or (n, C), numeric."""
    out: dict[str, np.ndarray] = {}
    for name, values in (attributes or {}).items():
        check_name(name, what[:-1] if what.endswith("s") else what)
        arr = np.asarray(values)
        if arr.dtype.kind not in "biuf":
            raise InvalidArgumentError(f"{what}[{name!r}] must be numeric, got dtype {arr.dtype}")
        if arr.ndim not in (1, 2) or arr.shape[0] != n:
            raise InvalidArgumentError(f"{what}[{name!r}] has shape {arr.shape}; expected ({n},) or ({n}, C)")
        out[name] = np.ascontiguousarray(arr)
    return out


def as_int64(arr: np.ndarray, name: str, what: str = "integers", verb: str = "be") -> np.ndarray:
    """Integers, or floats that hold whole numbers, as int64; anything else names ``name``."""
    if arr.dtype.kind not in "iu" and not (
        arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr))
    ):
        raise InvalidArgumentError(f"{name} must {verb} {what}, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def integer_ids(values: ArrayLike, n: int, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise InvalidArgumentError(f"{name} has shape {arr.shape}; expected ({n},)")
    return as_int64(arr, name)


def bounds_for(positions: np.ndarray, bounds: Bounds | None, ndim: int) -> tuple[list[float], list[float]]:
    """Declared bounds (as given) or the data's extent; every position must lie inside."""
    if bounds is None:
        if positions.shape[0] == 0:
            raise InvalidArgumentError("bounds are required when there are no positions")
        lo, hi = (e.astype(np.float64).tolist() for e in extremes(positions))
        return lo, hi
    try:
        lo, hi = ([v.item() if hasattr(v, "item") else v for v in np.asarray(b).reshape(-1)] for b in bounds)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"bounds must be (lo, hi), got {bounds!r}") from exc
    if len(lo) != ndim or len(hi) != ndim:
        raise InvalidArgumentError(f"bounds must have {ndim} values per corner, got {bounds!r}")
    if any(not np.isfinite(v) for v in lo + hi) or any(a > b for a, b in zip(lo, hi)):
        raise InvalidArgumentError(f"bounds must be finite with lo <= hi, got {bounds!r}")
    pmin, pmax = extremes(positions) if positions.shape[0] else (np.asarray(lo), np.asarray(hi))
    if np.any(pmin < np.asarray(lo)) or np.any(pmax > np.asarray(hi)):  # only then find the rows
        out = np.any((positions < np.asarray(lo)) | (positions > np.asarray(hi)), axis=1)
        if out.any():
            i = int(np.flatnonzero(out)[0])
            raise InvalidArgumentError(
                f"positions: {int(out.sum())} rows lie outside bounds {bounds!r} (first: row {i} = "
                f"{positions[i].tolist()})"
            )
    return list(lo), list(hi)


def groups_table(groups: Groups | None, object_ids: np.ndarray | None, name: str = "groups") -> list[np.ndarray]:
    """``{gid: [object ids]}`` or a sequence of id lists -> rows 0..G-1 (missing gids empty)."""
    if groups is None:
        return []
    if isinstance(groups, dict):
        for g in groups:
            if not isinstance(g, (int, np.integer)) or g < 0:
                raise InvalidArgumentError(f"{name}: group id {g!r} must be a non-negative integer")
        n = max((int(g) for g in groups), default=-1) + 1
        rows = [np.zeros(0, np.int64)] * n
        for g, members in groups.items():
            rows[int(g)] = np.asarray(members, dtype=np.int64).reshape(-1)
    else:
        rows = [np.asarray(m, dtype=np.int64).reshape(-1) for m in groups]
    if object_ids is not None and rows:
        sizes = np.array([len(r) for r in rows])
        unknown = ~np.isin(np.concatenate(rows), object_ids)
        if unknown.any():
            g = int(np.searchsorted(np.cumsum(sizes), np.flatnonzero(unknown)[0], side="right"))
            raise InvalidArgumentError(f"{name}[{g}] names object ids the data does not have")
    return rows
