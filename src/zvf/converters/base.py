"""What every converter shares: the store-side options, the source record, batch writing.

Parser packages and their errors: :mod:`.parsing`; point clouds in file order: :mod:`.source_order`.

A converter module (one per format family) provides

* ``async def to_store(fmt, src, dst, store, **options) -> Converted`` -- read the file ``src``
  (streaming where the format allows) and write the ZVF store ``dst``;
* ``async def from_store(fmt, ds, dst, written, **options) -> Converted`` -- write the file ``dst`` from
  the opened dataset ``ds`` through its iterators, counting what it reads with ``written``
  (:class:`Written`: the progress of the conversion).

``store`` is a :class:`StoreOptions`: how the store is laid out and where it lives.  What a
file format knows and a ZVF store has no field for (LAS scales and offsets, a TRK header, PLY
property order...) is kept under the root attribute ``zvf_source`` so that converting back
restores it exactly.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, TypeVar, cast

import anyio
import numpy as np

from ..config import tuning
from ..errors import InputFileError, InvalidArgumentError, UnknownArgumentError

if TYPE_CHECKING:
    from ..io.options import StorageOptions
    from ..read.selection import Selection

SOURCE_KEY = "zvf_source"
Item = TypeVar("Item")  # what a stream Written counts yields: a Selection or an (index, Selection) pair
AXES = ("x", "y", "z")  # coordinate names in the files that name them (PLY, tables, GraphML)
OBJECT_ID = "object_id"  # the column (table) or vertex property (PLY) naming each row's object


class ConvertProgress(TypedDict):
    """What ``convert(progress=...)`` is called with after each batch: the vertices read so far and of
    all (None when unknown: a file without a count in its header; a store always knows)."""

    done: int
    total: int | None
    unit: str


class Converted(TypedDict):
    """What a converter's ``to_store``/``from_store`` returns: the vertices converted, and the objects,
    faces and edges where the geometry has them."""

    vertices: int
    objects: NotRequired[int]
    faces: NotRequired[int]
    edges: NotRequired[int]


@dataclass
class StoreOptions:
    """The ZVF side of a conversion: where the store lives and how it is laid out."""

    chunk_shape: Any = "auto"
    bin_shape: Any = "auto"  # converted stores get bins: a pyramid coarsens by them (see zvf.write.layout)
    compression: str | None = None
    shard_shape: Any = None
    overwrite: bool = False
    storage_options: StorageOptions | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # told a :class:`ConvertProgress` after each batch read
    progress: Callable[[ConvertProgress], object] | None = None
    # root attributes the conversion publishes with the writer's root (``zvf_source``: :func:`stamp`)
    root_attributes: dict[str, Any] = field(default_factory=dict)

    def writer_kw(self) -> dict[str, Any]:
        """Keyword arguments every zvf writer takes."""
        return {"bin_shape": self.bin_shape, "compression": self.compression, "shard_shape": self.shard_shape,
                "overwrite": self.overwrite, "storage_options": self.storage_options}


STORE_OPTIONS = tuple(f.name for f in fields(StoreOptions) if f.name not in ("extra", "progress", "root_attributes"))


def take_options(fmt: str, options: dict[str, Any], known: dict[str, Any]) -> dict[str, Any]:
    """``known`` (name -> default) filled from ``options``, each value checked against its default's type
    (``batch_*`` at least 1, ``level`` at least 0); an option no converter knows is an error naming the
    closest one it takes (or a store option: ``chunk_shap`` -> ``chunk_shape``)."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        close = difflib.get_close_matches(unknown[0], [*known, *STORE_OPTIONS], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownArgumentError(
            f"{fmt} conversion has no option {', '.join(map(repr, unknown))} (it takes {sorted(known) or 'none'}, "
            f"and the store options {', '.join(STORE_OPTIONS)}){hint}")
    return {**known, **{k: _typed(fmt, k, v, known[k]) for k, v in options.items()}}


def _typed(fmt: str, name: str, value: Any, default: Any) -> Any:
    """``value`` as the type of ``default`` (text from the command line parsed), or a clear error."""
    if default is None or value is None:
        return value
    kind = type(default)
    if kind is bool:
        text = str(value).lower()
        if isinstance(value, (bool, np.bool_)) or text in ("true", "false"):
            return text == "true"
        raise InvalidArgumentError(f"{fmt} option {name} must be true or false, got {value!r}")
    if kind is int:
        try:
            number = int(value) if not isinstance(value, float) or value.is_integer() else None
        except (TypeError, ValueError):
            number = None
        if number is None or isinstance(value, (bool, np.bool_)):
            raise InvalidArgumentError(f"{fmt} option {name} must be a whole number, got {value!r}")
        low = 1 if name.startswith("batch") else 0
        if number < low:
            raise InvalidArgumentError(f"{fmt} option {name} must be >= {low}, got {number}")
        return number
    return value


async def threaded(items: Iterable[Any]) -> AsyncIterator[Any]:
    """Iterate a blocking iterator (file decoding) in a worker thread, one item at a time."""
    it: Iterator[Any] = iter(items)
    done = object()
    while True:
        item = await anyio.to_thread.run_sync(next, it, done)
        if item is done:
            return
        yield item


async def write_batches(dst: str, batches: Callable[[], Iterable[dict[str, Any]]], store: StoreOptions,
                        write: Any = None, *,
                        main: str = "positions", extent: tuple[Any, Any, int] | None = None,
                        positions: np.ndarray | None = None, total: int | None = None, **kw: Any) -> Any:
    """Stream batches into ``dst`` through a spilling writer (``write_points`` unless ``write`` is given).

    ``batches`` makes a fresh iterator each call.  An ``"auto"`` chunk or bin shape is resolved before
    the write (:mod:`zvf.write.layout`) from ``extent`` (lo, hi, n) when known up front (a file
    header; ``positions``: the points themselves when in memory, sampled for where they are) and the
    ``main`` field holds points; otherwise a first pass over the source measures the ``main`` field
    (an array: then also a sample of the points, which the chooser sizes chunks on where they are; or
    a list of arrays such as polylines: then a sample of them, which the chooser sizes object reads
    and bins on).  Memory stays one batch plus the writer's spill buffer (and the samples).
    ``store.progress`` hears of the vertices read after each batch, out of ``total`` (or the
    extent's count) when known.
    """
    from ..write import layout

    if write is None:
        from ..write.points.memory import write_points as write
    chunk_shape, bin_shape = store.chunk_shape, store.bin_shape
    if isinstance(chunk_shape, str) or isinstance(bin_shape, str):
        layout.check_words(chunk_shape, bin_shape)  # before a pass over the source
        sample = row_bytes = None
        points = None if positions is None or not len(positions) else layout.PointSample.of(positions)
        if extent is None or main != "positions":
            lo_seen, hi_seen, n_seen, sample, points, row_bytes = await anyio.to_thread.run_sync(
                _measure, batches, main)
            extent = (lo_seen, hi_seen, n_seen)
        lo, hi, n = extent
        if n == 0:
            raise InvalidArgumentError(f"{dst}: the source holds no {'points' if main == 'positions' else main}")
        chunk_shape, bin_shape = layout.resolve(chunk_shape, bin_shape, lo, hi, n, points=points, objects=sample,
                                                row_bytes=row_bytes)
    if total is None and extent is not None:
        total = int(extent[2])
    source = batches() if store.progress is None else _reporting(batches(), main, total, store.progress)
    return await write(dst, threaded(source), chunk_shape=chunk_shape, **kw,
                       **{**store.writer_kw(), "bin_shape": bin_shape})


def _reporting(batches: Iterable[dict[str, Any]], main: str, total: int | None,
               progress: Callable[[ConvertProgress], object]) -> Iterator[dict[str, Any]]:
    """``batches``, calling ``progress`` with the vertices read so far after each one."""
    done = 0
    for batch in batches:
        rows = batch[main]
        done += sum(len(r) for r in rows) if isinstance(rows, list) else len(rows)
        progress({"done": done, "total": total, "unit": "vertices"})
        yield batch


def _measure(batches: Callable[[], Iterable[dict[str, Any]]],
             main: str) -> tuple[list[float], list[float], int, Any, Any, int | None]:
    """Bounds, row count, a sample of the objects (when ``main`` is a list of arrays, else None), a sample of
    the points (when it is an array, else None) and the bytes of a row with its attributes, of a batch
    source (one pass, one batch held at a time)."""
    from ..write.layout import ObjectSampler, PointSampler

    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    n = 0
    sampler = ObjectSampler()
    point_sampler = PointSampler()
    row_bytes = None
    for batch in batches():
        rows = batch[main]
        if isinstance(rows, list):
            sampler.add(rows)
        pos = np.concatenate(rows) if isinstance(rows, list) and rows else np.asarray(rows, dtype=np.float64)
        if not len(pos):
            continue
        if not isinstance(rows, list):
            point_sampler.add(pos)
        if row_bytes is None:
            row_bytes = _row_bytes(pos, batch.get("attributes") or {})
        blo, bhi = pos.min(axis=0).astype(np.float64), pos.max(axis=0).astype(np.float64)
        lo = blo if lo is None else np.minimum(lo, blo)
        hi = bhi if hi is None else np.maximum(hi, bhi)
        n += len(pos)
    if lo is None or hi is None:
        return [0.0], [0.0], 0, None, None, None
    return lo.tolist(), hi.tolist(), n, sampler.sample(), point_sampler.sample(), row_bytes


def _row_bytes(positions: np.ndarray, attributes: dict[str, Any]) -> int:
    """Bytes of one vertex row with its attributes (per-vertex arrays, or lists of them per object)."""
    total = positions.dtype.itemsize * positions.shape[-1]
    for values in attributes.values():
        arr = values[0] if isinstance(values, list) and values else values
        arr = np.asarray(arr)
        total += arr.dtype.itemsize * int(np.prod(arr.shape[1:]))
    return int(total)


def exact_cast(col: np.ndarray, dtype: np.dtype[Any], src: str, what: str) -> np.ndarray:
    """``col`` in the store dtype a file recorded for it; refuses values that dtype does not hold exactly
    (a file edited after zvf wrote it)."""
    out = col.astype(dtype)
    if not np.array_equal(out, col):
        raise InputFileError(f"{src}: {what} holds values its recorded dtype {dtype.name} cannot")
    return out


def stamp(store: StoreOptions, record: dict[str, Any]) -> None:
    """Keep ``record`` (what the source format knows) under the root attribute ``zvf_source`` of the store
    the conversion writes: called before its writer, which publishes it in its one root write
    (:func:`stamping`), so no store is ever published without it."""
    store.root_attributes[SOURCE_KEY] = _jsonable(record)


@contextlib.contextmanager
def stamping(dst: str, store: StoreOptions) -> Iterator[None]:
    """Writers of ``dst`` started inside publish the root attributes :func:`stamp` gave ``store``."""
    from ..io.store import open_store
    from ..write.publish import shaping_root

    def shape(root: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(root)
        out.setdefault("attributes", {}).update(copy.deepcopy(store.root_attributes))
        return out

    with shaping_root(open_store(dst, mode="a", storage_options=store.storage_options).url, shape):
        yield


def source_record(ds: Any, fmt: str | None = None) -> dict[str, Any]:
    """The ``zvf_source`` record of an opened dataset ({} when absent or from another format)."""
    rec = ds.root.raw.get("attributes", {}).get(SOURCE_KEY) or {}
    if fmt is not None and rec.get("format") != fmt:
        return {}
    return rec


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return value


class Written:
    """How much of a store level a conversion into a file has read, told to ``progress`` (``done``,
    ``total``: the level's vertex count, known from the store; ``unit``) batch by batch."""

    def __init__(self, ds: Any, progress: Callable[[ConvertProgress], object] | None = None):
        self.ds = ds
        self.progress = progress
        self.done = 0
        self.total: int | None = None

    async def start(self, level: int) -> None:
        """Take the total from ``level`` (before its first batch)."""
        if self.progress is not None:
            self.total = int((await self.ds.level(level)).meta.vertex_count)
            self.add(0)

    def add(self, rows: int) -> None:
        self.done += rows
        if self.progress is not None:
            self.progress({"done": self.done, "total": self.total, "unit": "vertices"})

    async def each(self, batches: AsyncIterable[Item], level: int) -> AsyncGenerator[Item, None]:
        """``batches`` of ``level`` (Selections, or (index, Selection) pairs), each counted as it is read."""
        await self.start(level)
        async for item in batches:
            self.add(len(cast("Selection", item[1] if isinstance(item, tuple) else item)))
            yield item


async def object_batches(ds: Any, level: int, written: Written,
                         step: int | None = None) -> AsyncGenerator[tuple[int, Selection], None]:
    """(index of the first object, one combined Selection) for every ``step`` objects (default: the
    ``convert_object_batch`` setting) in id order
    (:func:`zvf.read.sweep.object_batches`: each cell read about once where the level fits its cache),
    counted by ``written``."""
    from ..read.sweep import object_batches as batches

    lo = 0
    step = tuning().convert_object_batch if step is None else step
    async for sel in written.each(batches(ds, level=level, batch=step), level):
        yield lo, sel
        lo += len(object_offsets(sel)) - 1


def object_offsets(sel: Selection) -> np.ndarray:
    """``sel.offsets``, which every Selection read by objects has (rows grouped by object)."""
    return cast(np.ndarray, sel.offsets)


async def object_attribute_names(ds: Any, level: int = 0) -> list[str]:
    lvl = await ds.family(level, "object_attributes")
    return list(lvl.named("object_attributes"))


async def vertex_attribute_names(ds: Any, level: int = 0) -> list[str]:
    return list((await ds.level(level)).named("vertex_attributes"))


async def object_attributes(ds: Any, level: int = 0) -> dict[str, np.ndarray]:
    """Every object attribute of a level, (O,) or (O, C), rows in ``ds.object_ids`` order."""
    return {name: await ds.object_attribute(name, level=level) for name in await object_attribute_names(ds, level)}


async def group_attributes(ds: Any, level: int = 0) -> dict[str, np.ndarray]:
    """Every group attribute of a level, (G,) or (G, C), row g = group g."""
    lvl = await ds.family(level, "group_attributes")
    return {name: await ds.group_attribute(name, level=level) for name in lvl.named("group_attributes")}
