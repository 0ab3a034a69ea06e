"""CSV and Parquet / GeoParquet tables: one row per vertex.

Columns ``x, y[, z]`` (or a GeoParquet WKB point column) are the positions; an ``object_id``
column makes the rows polylines (rows of one object in file order); columns named
``object.<name>`` are per-object attributes (repeated on each row of the object); every
other numeric column is a vertex attribute.  Parquet keeps dtypes and multi-channel columns
(fixed-size lists); CSV keeps values: a column whose first batch is all integers becomes
int64, the rest float64, and ``name_0 .. name_{C-1}`` columns join into one C-channel
attribute.  Both are streamed by row batches (CSV lines, Parquet row groups) in and out.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

from ..config import tuning
from ..errors import InputFileError, InvalidArgumentError
from .base import (
    AXES,
    OBJECT_ID,
    Converted,
    StoreOptions,
    Written,
    object_attributes,
    object_batches,
    object_offsets,
    source_record,
    stamp,
    take_options,
    write_batches,
)
from .parsing import guarded, need, reading
from .source_order import numbered, point_batches

if TYPE_CHECKING:
    from ..read.dataset import DatasetReader
    from ..read.selection import Selection

OBJECT_PREFIX = "object."
_CHANNEL = re.compile(r"^(.+)_(\d+)$")


def _pyarrow() -> Any:
    need("pyarrow", "parquet", "Parquet")
    import pyarrow.parquet as pq

    return pq


# ----------------------------------------------------------------------------------- reading


DELIMITERS = (",", ";", "\t")
_BAD_VALUE = re.compile(r"could not convert string '(.*)' to (\w+) at row (\d+), column (\d+)")
_RAGGED = re.compile(r"(?:changed from \d+ to|requires \d+ columns but) (\d+) (?:were found )?at row (\d+)")


def csv_header(src: str) -> tuple[list[str], str]:
    """(column names, delimiter) of a CSV's header line.  The delimiter is the commonest of ``,`` ``;``
    and tab on it; names may be quoted (``"x","y"``, as pyarrow writes them)."""
    try:
        with open(src, encoding="utf-8", newline="") as fh:
            line = fh.readline()
    except UnicodeDecodeError:
        raise InputFileError(f"{src}: not a text file (a CSV is UTF-8 text)") from None
    counts = {d: line.count(d) for d in DELIMITERS}
    delimiter = max(counts, key=lambda d: counts[d]) if any(counts.values()) else ","
    names = [n.strip() for n in next(csv.reader([line], delimiter=delimiter), [])]
    if not names or names == [""]:
        raise InputFileError(f"{src}: no header line (column names) found")
    if len(set(names)) != len(names):
        raise InputFileError(f"{src}: the header names a column twice: {names}")
    return names, delimiter


def _csv_batches(src: str, batch_rows: int) -> Iterator[dict[str, np.ndarray]]:
    """Columns of ``batch_rows`` lines at a time.  A column is int64 when every value of the first
    batch is an integer as written (``3``, not ``3.0``), else float64; a value that does not parse
    as its column's type is an error naming its line and column."""
    names, delimiter = csv_header(src)
    dtype: np.dtype | None = None
    with open(src, encoding="utf-8", newline="") as fh:
        fh.readline()
        line_no = 1  # lines read so far (the header)
        while True:
            try:
                lines = list(itertools.islice(fh, batch_rows))
            except UnicodeDecodeError:
                raise InputFileError(f"{src}: not a text file (a CSV is UTF-8 text)") from None
            numbers = [line_no + 1 + i for i, ln in enumerate(lines) if ln.strip()]
            line_no += len(lines)
            lines = [ln for ln in lines if ln.strip()]
            if not lines:
                return
            if dtype is None:
                dtype = _csv_types(src, lines, names, delimiter, numbers)
            table = _csv_parse(src, lines, names, delimiter, dtype, numbers)
            yield {n: np.ascontiguousarray(table[n]) for n in names}


def _csv_parse(src: str, lines: list[str], names: list[str], delimiter: str, dtype: np.dtype[Any],
               numbers: list[int]) -> np.ndarray:
    """``lines`` parsed as ``dtype`` (numpy's errors told as the file's line and column)."""
    try:
        return np.loadtxt(lines, delimiter=delimiter, dtype=dtype, quotechar='"', ndmin=1, comments=None)
    except ValueError as exc:
        text = str(exc)
        if m := _RAGGED.search(text):
            row = int(m.group(2)) - 1
            raise InputFileError(f"{src}: line {numbers[min(row, len(numbers) - 1)]} has {m.group(1)} fields, "
                                 f"the header names {len(names)} ({delimiter!r}-separated)") from None
        if m := _BAD_VALUE.search(text):
            row, col = int(m.group(3)), int(m.group(4)) - 1
            name = names[col] if 0 <= col < len(names) else f"#{col + 1}"
            want = "an integer (as its first rows)" if m.group(2).startswith("int") else "a number"
            raise InputFileError(f"{src}: line {numbers[min(row, len(numbers) - 1)]}, column {name!r}: "
                                 f"{m.group(1)!r} is not {want}; only numeric columns convert") from None
        raise InputFileError(f"{src}: {text}") from None


def _csv_types(src: str, lines: list[str], names: list[str], delimiter: str, numbers: list[int]) -> np.dtype:
    """The columns' dtypes from the first batch: int64 where every value parses as an integer."""
    floats = _csv_parse(src, lines, names, delimiter, np.dtype([(n, np.float64) for n in names]), numbers)
    types = []
    for i, n in enumerate(names):
        col = floats[n]
        integral = bool(np.all(np.isfinite(col)) and np.all(col == np.round(col)))
        if integral:
            try:
                np.loadtxt(lines, delimiter=delimiter, dtype=np.int64, quotechar='"', usecols=i, comments=None)
            except ValueError:
                integral = False
        types.append((n, np.int64 if integral else np.float64))
    return np.dtype(types)


def _join_channels(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """CSV ``name_0 .. name_{C-1}`` columns as one (n, C) column."""
    out: dict[str, Any] = {}
    groups: dict[str, dict[int, np.ndarray]] = {}
    for name, col in cols.items():
        m = _CHANNEL.match(name)
        if m and name not in AXES:
            groups.setdefault(m.group(1), {})[int(m.group(2))] = col
        else:
            out[name] = col
    for base, parts in groups.items():
        if sorted(parts) == list(range(len(parts))) and len(parts) > 1 and base not in out:
            out[base] = np.column_stack([parts[i] for i in range(len(parts))])
        else:
            out.update({f"{base}_{i}": c for i, c in parts.items()})
    return out


def _parquet_batches(src: str, batch_rows: int) -> Iterator[dict[str, np.ndarray]]:
    pq = _pyarrow()
    pf = pq.ParquetFile(src)
    geo = _geo_column(pf.schema_arrow.metadata)
    for rb in pf.iter_batches(batch_size=batch_rows):
        cols: dict[str, np.ndarray] = {}
        for name, arr in zip(rb.schema.names, rb.columns):
            if name == geo:
                cols.update(zip(AXES, _wkb_points(arr, src).T))
            else:
                cols[name] = _column(arr, name, src)
        yield cols


def _geo_column(meta: dict[bytes, bytes] | None) -> str | None:
    if not meta or b"geo" not in meta:
        return None
    return str(json.loads(meta[b"geo"]).get("primary_column", "geometry"))


def _column(arr: Any, name: str, src: str) -> np.ndarray:
    import pyarrow as pa

    if pa.types.is_fixed_size_list(arr.type):
        flat = arr.flatten().to_numpy(zero_copy_only=False)
        return np.asarray(flat).reshape(len(arr), arr.type.list_size)
    if not (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_boolean(arr.type)):
        raise InvalidArgumentError(f"{src}: column {name!r} has type {arr.type}; only numeric columns convert")
    return np.asarray(arr.to_numpy(zero_copy_only=False))


def _wkb_points(arr: Any, src: str) -> np.ndarray:
    """WKB POINT / POINT Z values (ISO or EWKB, either byte order) as (n, ndim) float64."""
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)
    sizes = np.diff(offsets)
    if len(arr) == 0:
        return np.zeros((0, 3))
    size = int(sizes[0])
    if np.any(sizes != size) or size not in (21, 29) or arr.null_count:
        raise InvalidArgumentError(f"{src}: the geometry column must hold non-null 2-D or 3-D WKB points")
    rows = data[offsets[0]:offsets[0] + size * len(arr)].reshape(len(arr), size)
    little = rows[:, 0] == 1
    ndim = (size - 5) // 8
    out = np.empty((len(arr), ndim))
    coords = np.ascontiguousarray(rows[:, 5:])
    out[little] = coords[little].view("<f8")
    out[~little] = coords[~little].view(">f8")
    return out


def position_columns(names: list[str], src: str) -> list[str]:
    """The columns holding x, y[, z] (any case: ``X,Y,Z`` too), checked from the header alone: y must be
    there (``x,z`` is not a 2-D cloud whose y is z), and no axis named twice (``x`` and ``X``)."""
    found: dict[str, str] = {}
    for name in names:
        axis = name.lower()
        if axis in AXES:
            if axis in found:
                raise InputFileError(f"{src}: columns {found[axis]!r} and {name!r} both name axis {axis}")
            found[axis] = name
    if "x" not in found or "y" not in found:
        raise InputFileError(f"{src}: needs position columns x, y[, z] (any case) or a GeoParquet geometry; "
                             f"its columns are {names}")
    return [found[a] for a in AXES if a in found]


def _split(cols: dict[str, np.ndarray],
           axes: list[str]) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray | None, dict[str, np.ndarray]]:
    pos = np.column_stack([np.asarray(cols[a], dtype=np.float64) for a in axes])
    oid = cols.get(OBJECT_ID)
    rest = {k: v for k, v in cols.items() if k not in axes and k != OBJECT_ID}
    obj = {k[len(OBJECT_PREFIX):]: v for k, v in rest.items() if k.startswith(OBJECT_PREFIX)}
    attrs = {k: v for k, v in rest.items() if not k.startswith(OBJECT_PREFIX)}
    return pos, attrs, oid, obj


# what pyarrow raises on a file that is not Parquet or ends early (ArrowInvalid is a ValueError, ArrowIOError
# an OSError)
_PARQUET_ERRORS = (ValueError, OSError)


async def to_store(fmt: str, src: str, dst: str, store: StoreOptions, **options: Any) -> Converted:
    opts = take_options(fmt, options, {"batch_rows": tuning().convert_batch_rows, "geometry": None,
                                       "keep_order": False})
    rows = int(opts["batch_rows"])
    geo = None
    if fmt == "csv":
        names = csv_header(src)[0]
        axes = position_columns(names, src)  # before any row is read

        def tables() -> Iterator[dict[str, np.ndarray]]:
            return (_join_channels(c) for c in _csv_batches(src, rows))
    else:
        pq = _pyarrow()
        with reading(src, fmt, _PARQUET_ERRORS):
            schema = pq.ParquetFile(src).schema_arrow
        names = list(schema.names)
        geo = _geo_column(schema.metadata)
        if geo not in names:
            geo = None
        axes = [] if geo else position_columns(names, src)
        tables = guarded(lambda: _parquet_batches(src, rows), src, fmt, _PARQUET_ERRORS)

    first = next(tables(), None)
    if first is None:
        raise InputFileError(f"{src}: no rows")
    axes = axes or [a for a in AXES if a in first]  # GeoParquet: its points' axes
    if OBJECT_ID not in first:
        def batches() -> Iterator[dict[str, Any]]:
            for cols in tables():
                pos, attrs, _, obj = _split(cols, axes)
                if obj:
                    raise InputFileError(f"{src}: {OBJECT_PREFIX}* columns need an {OBJECT_ID} column")
                yield {"positions": pos, "attributes": attrs}

        total = await anyio.to_thread.run_sync(_row_count, fmt, src) if store.progress else None
        if geo is not None:  # GeoParquet comes back as GeoParquet
            stamp(store, {"format": fmt, "geometry_column": geo})
        s = await write_batches(dst, numbered(batches) if opts["keep_order"] else batches, store, dtype="float64",
                                total=total)
        return {"vertices": s.vertex_count}
    if opts["keep_order"]:
        raise InvalidArgumentError(f"{src}: keep_order applies to point clouds; the rows of each {OBJECT_ID} "
                                   f"keep their order anyway")
    from ..write.objects.memory import write_polylines

    if geo is not None:
        stamp(store, {"format": fmt, "geometry_column": geo})
    s = await write_batches(dst, lambda: _polyline_batches(tables(), axes), store, write_polylines,
                            main="polylines", geometry_type=opts["geometry"] or "polyline", dtype="float64")
    return {"vertices": s.vertex_count, "objects": s.object_count}


def _row_count(fmt: str, src: str) -> int:
    """Rows of a table, for a progress line: Parquet's metadata says; a CSV's lines are counted (8 MB reads)."""
    if fmt == "parquet":
        return int(_pyarrow().ParquetFile(src).metadata.num_rows)
    lines = 0
    with open(src, "rb") as fh:
        while block := fh.read(8 << 20):
            lines += block.count(b"\n")
    return max(0, lines - 1)


def _polyline_batches(tables: Iterator[dict[str, Any]], axes: list[str]) -> Iterator[dict[str, Any]]:
    """Rows grouped by ``object_id`` (file order within an object), objects in id order.

    Ids are read whole first (one int64 per row); rows are then gathered object by object.
    """
    pos_parts, attr_parts, oid_parts, obj_parts = [], [], [], []
    for cols in tables:
        pos, attrs, oid, obj = _split(cols, axes)
        pos_parts.append(pos)
        attr_parts.append(attrs)
        oid_parts.append(np.asarray(oid, dtype=np.int64))
        obj_parts.append(obj)
    oid = np.concatenate(oid_parts)
    order = np.argsort(oid, kind="stable")
    ids, starts, counts = np.unique(oid[order], return_index=True, return_counts=True)
    pos = np.concatenate(pos_parts)[order]
    attrs = {k: np.concatenate([a[k] for a in attr_parts])[order] for k in attr_parts[0]}
    obj = {k: np.concatenate([o[k] for o in obj_parts])[order][starts] for k in obj_parts[0]}
    if not np.array_equal(ids, np.arange(len(ids))):
        obj[OBJECT_ID] = ids  # keep the file's ids; ZVF numbers polylines 0..P-1
    cuts = np.cumsum(counts)[:-1]
    yield {"polylines": np.split(pos, cuts), "attributes": {k: np.split(v, cuts) for k, v in attrs.items()},
           "object_attributes": obj}


# ----------------------------------------------------------------------------------- writing


def _names(ndim: int) -> list[str]:
    return list(AXES[:ndim]) if ndim <= 3 else [f"d{i}" for i in range(ndim)]


def _rows(sel: Selection, oid: np.ndarray | None, obj: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    cols = dict(zip(_names(sel.positions.shape[1]), sel.positions.T))
    if oid is not None:
        cols[OBJECT_ID] = oid
    cols.update(sel.attributes)
    cols.update({OBJECT_PREFIX + k: v for k, v in obj.items()})
    return cols


class _CsvOut:
    def __init__(self, path: str):
        self.fh = open(path, "w", encoding="utf-8")  # noqa: SIM115 -- held across write() calls, closed by close()
        self.header = False

    def write(self, cols: dict[str, np.ndarray]) -> None:
        flat: list[tuple[str, np.ndarray]] = []
        for name, v in cols.items():
            v = v.reshape(len(v), -1)
            flat += [(name, v[:, 0])] if v.shape[1] == 1 and np.ndim(cols[name]) == 1 else \
                [(f"{name}_{i}", v[:, i]) for i in range(v.shape[1])]
        if not self.header:
            self.fh.write(",".join(n for n, _ in flat) + "\n")
            self.header = True
        fmts = ["%d" if c.dtype.kind in "iub" else ("%.9g" if c.dtype.itemsize <= 4 else "%.17g") for _, c in flat]
        table = np.empty((len(flat[0][1]), len(flat)), dtype=object)
        for i, (_, c) in enumerate(flat):
            table[:, i] = c.astype(np.int64) if c.dtype.kind == "b" else c
        np.savetxt(self.fh, table, delimiter=",", fmt=fmts)

    def close(self) -> None:
        self.fh.close()


class _ParquetOut:
    def __init__(self, path: str, geo: bool, ndim: int, column: str = "geometry"):
        self.pq = _pyarrow()
        self.path, self.geo, self.ndim, self.column = path, geo, ndim, column
        self.writer: Any = None  # a pyarrow.parquet.ParquetWriter once the first batch names the schema

    def write(self, cols: dict[str, np.ndarray]) -> None:
        import pyarrow as pa

        arrays, names = [], []
        if self.geo:
            axes = _names(self.ndim)
            arrays.append(_wkb_array(np.column_stack([cols.pop(a) for a in axes])))
            names.append(self.column)
        for name, v in cols.items():
            if v.ndim == 2:
                arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), v.shape[1]))
            else:
                arrays.append(pa.array(v))
            names.append(name)
        table = pa.Table.from_arrays(arrays, names=names)
        if self.writer is None:
            schema = table.schema
            if self.geo:
                gtype = "Point Z" if self.ndim == 3 else "Point"
                meta = {"version": "1.1.0", "primary_column": self.column,
                        "columns": {self.column: {"encoding": "WKB", "geometry_types": [gtype]}}}
                schema = schema.with_metadata({b"geo": json.dumps(meta).encode()})
            self.writer = self.pq.ParquetWriter(self.path, schema)
        self.writer.write_table(table.cast(self.writer.schema))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _wkb_array(pos: np.ndarray) -> Any:
    """Little-endian ISO WKB points, built as one buffer."""
    import pyarrow as pa

    n, ndim = pos.shape
    size = 5 + 8 * ndim
    buf = np.zeros((n, size), dtype=np.uint8)
    buf[:, 0] = 1
    buf[:, 1:5] = np.frombuffer(np.uint32(1001 if ndim == 3 else 1).tobytes(), np.uint8)
    buf[:, 5:] = np.ascontiguousarray(pos, dtype="<f8").view(np.uint8).reshape(n, 8 * ndim)
    offsets = np.arange(n + 1, dtype=np.int32) * size
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(buf)])


async def from_store(fmt: str, ds: DatasetReader, dst: str, written: Written, **options: Any) -> Converted:
    opts = take_options(fmt, options, {"level": 0, "geo": None, "batch_objects": tuning().convert_object_batch,
                                       "keep_order": None})
    level = opts["level"]
    if fmt == "csv":
        out: Any = _CsvOut(dst)
    else:
        rec = source_record(ds)  # a GeoParquet source comes back as GeoParquet, its geometry column named so
        column = rec.get("geometry_column") if rec.get("format") == "parquet" else None
        geo = (dst.lower().endswith(".geoparquet") or column is not None) if opts["geo"] is None else bool(opts["geo"])
        if geo and ds.ndim not in (2, 3):
            raise InvalidArgumentError(f"{ds.url}: GeoParquet points are 2-D or 3-D, the store is {ds.ndim}-D")
        out = _ParquetOut(dst, geo, ds.ndim, column or "geometry")
    n = objects = 0
    try:
        if ds.geometry_type == "point_cloud":
            async for sel in await point_batches(ds, level, opts["keep_order"], written):
                if len(sel):
                    out.write(_rows(sel, None, {}))
                    n += len(sel)
        else:
            obj = await object_attributes(ds, level)
            src_ids = obj.pop(OBJECT_ID, None)
            if src_ids is None:
                src_ids = await ds.object_ids(level=level)
            elif src_ids.ndim != 1 or src_ids.dtype.kind not in "iu" or len(np.unique(src_ids)) != len(src_ids):
                raise InvalidArgumentError(  # the file's object_id column would merge or misname objects
                    f"{ds.url}: object attribute {OBJECT_ID!r} (the ids a table's {OBJECT_ID} column gets) must be "
                    f"distinct integers, one per object; rename it to convert the store to a table")
            async for lo, sel in object_batches(ds, level, written, int(opts["batch_objects"])):
                lens = np.diff(object_offsets(sel))
                rows = np.repeat(np.arange(lo, lo + len(lens)), lens)
                out.write(_rows(sel, np.asarray(src_ids)[rows].astype(np.int64), {k: v[rows] for k, v in obj.items()}))
                n += len(sel)
                objects += len(lens)
    finally:
        out.close()
    counts: Converted = {"vertices": n}
    if objects:
        counts["objects"] = objects
    return counts
