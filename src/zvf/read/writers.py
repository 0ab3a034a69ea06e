"""Result files shared by ``zvf export`` and ``zvf query --out``: ``.npz``, ``.csv``, ``.parquet``, ``.json``.

A result is one or two tables (README "Export files"):

* **vertices**, one row per vertex: coordinates (``x, y, z``; ``d0..`` past four
  axes), ``object_id`` when rows have owners, ``vertex_index`` (the row's
  position within its object, so traversal order survives) when rows are
  grouped by object, then attribute channels (``rgb_0, rgb_1, ...``);
* **edges** or **faces** of graphs, skeletons and meshes, one row per link:
  ``v0, v1[, v2...]`` (``vertex_index`` values of its object), ``object_id``,
  then link attributes.  CSV and Parquet put it beside OUT as
  ``OUT.edges.csv`` / ``OUT.faces.parquet``; NPZ as keys ``edges`` /
  ``faces`` (L columns), ``edges_object_ids``, ``edges_attr_<name>``;
* **objects** (a level with object attributes): one row per object,
  ``object_id`` then its attributes (``OUT.objects.csv``; NPZ keys
  ``objects_object_ids``, ``objects_attr_<name>``);
* **groups** (a level with groups): one row per membership, ``group_id``,
  ``object_id`` (-1 for a group without members), then the group's attributes
  (``OUT.groups.csv``; NPZ keys ``groups_group_ids``, ``groups_object_ids``,
  ``groups_attr_<name>``).

NPZ vertex keys are ``positions`` (N, ndim), ``object_ids``, ``vertex_index``
and ``attr_<name>``.  Every file is written under a temporary name in OUT's
directory and renamed into place only when complete, so an interrupted
export never leaves a half-written file that looks like a result.  Only a
regular file at OUT (or at a companion's path) is replaced: a symlink, FIFO,
device or directory there is refused before anything is read.

OUT ``-`` is stdout: CSV, JSON Lines and Parquet stream there batch by batch;
an NPZ (a zip, whose directory comes last) is assembled in a temporary file
and copied out at the end.  A result with a link table goes to stdout as NPZ
only (CSV, JSON and Parquet would need a second stream).  JSON Lines
(``json``) writes one object per vertex row with the CSV's columns.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import stat
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError
from .columns import LINK_TABLES, flat_columns, link_arrays, vertex_arrays
from .npz import NpzBuilder
from .selection import Selection

if TYPE_CHECKING:
    import pyarrow as pa

FORMATS = ("npz", "csv", "parquet", "json")
SUFFIXES = {".npz": "npz", ".csv": "csv", ".parquet": "parquet", ".json": "json", ".jsonl": "json"}
STDOUT = "-"


def format_of(out: str, fmt: str | None, *, flag: str = "the format") -> str:
    """The export format: ``fmt`` or OUT's suffix; checks pyarrow for Parquet before any request.
    ``flag`` names how a caller passes the format (``--format`` on the command line)."""
    if fmt is None:
        if str(out) == STDOUT:
            raise InvalidArgumentError(f"writing to stdout ('-') needs {flag}: one of {', '.join(FORMATS)}")
        fmt = SUFFIXES.get(os.path.splitext(str(out))[1].lower())
        if fmt is None:
            raise InvalidArgumentError(f"cannot tell the format of {str(out)!r}: end it in "
                                       f"{', '.join(SUFFIXES)}, or pass {flag}")
    if fmt not in FORMATS:
        raise InvalidArgumentError(f"format must be one of {FORMATS}, got {fmt!r}")
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise InvalidArgumentError("Parquet export needs pyarrow, which is not installed "
                                   "(pip install 'zvf[parquet]'), or export to .npz / .csv")
    return fmt


def check_out(out: str, fmt: str | None = None, tables: Sequence[str] = ()) -> None:
    """Before any request: OUT's directory exists, and OUT and its companions (``tables``: edges, faces,
    objects, groups) are absent or regular files -- the only things a result replaces; ``-`` (stdout)
    carries companion tables only as NPZ (one file)."""
    out = str(out)
    if out == STDOUT:
        if tables and fmt != "npz":
            raise InvalidArgumentError(f"this result has {' and '.join(tables)} tables besides its vertices: write "
                                       f"it to a file (OUT and OUT.{tables[0]}.{fmt}, ...), or to stdout as "
                                       f"--format npz")
        return
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise InvalidArgumentError(f"output directory {parent!r} of {out!r} does not exist")
    for path in [out] + ([companion(out, t) for t in tables] if fmt != "npz" else []):
        check_replaceable(path)


def check_replaceable(path: str) -> None:
    """``path`` is absent or a regular file: a symlink (``/dev/stdout``), FIFO, device or directory
    there is refused, never replaced by the rename that publishes a result."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    kind = ("a symlink" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")
    raise InvalidArgumentError(f"output {path!r} is {kind}: zvf replaces only regular files "
                               f"(write to '-' for stdout, or pick another name)")


def companion(out: str, table: str) -> str:
    """The file of a link table beside OUT: ``a/b.csv`` -> ``a/b.edges.csv``."""
    root, ext = os.path.splitext(str(out))
    return f"{root}.{table}{ext}"


def link_table(geometry: str | None, *, clip: bool = False) -> str | None:
    """The link table a result of ``geometry`` carries.

    Meshes: faces; graphs and skeletons: edges; polylines only when clipped
    (kept vertices may skip, so consecutive ``vertex_index`` no longer means an
    edge); whole polylines and point clouds: none (``vertex_index`` is the order).
    """
    if geometry == "mesh":
        return "faces"
    if geometry in ("graph", "skeleton") or (clip and geometry in ("polyline", "streamline", "line")):
        return "edges"
    return None


def _cell_format(dtype: np.dtype) -> str:
    if dtype.kind in "iub":
        return "%d"
    return "%.9g" if dtype.itemsize <= 4 else "%.17g"


def _partial(final: str) -> str:
    """A temporary name beside ``final`` (same filesystem, so the rename is atomic)."""
    import uuid  # tempfile, shutil, uuid are imported where used: a cold start's first query never exports

    head, tail = os.path.split(os.path.abspath(final))
    return os.path.join(head, f".{tail}.{uuid.uuid4().hex[:8]}.partial")


class _Out:
    """One result: the vertex table and the optional link table, each opened on its first rows.

    ``write(sel)`` appends a batch; ``close()`` completes every file and
    renames it into place; ``abort()`` removes what was written.
    """

    def __init__(self, path: str, template: Selection, links: str | None = None, tables: Sequence[str] = ()):
        if links not in (None, *LINK_TABLES):
            raise InvalidArgumentError(f"links must be None, 'edges' or 'faces', got {links!r}")
        self.path = str(path)
        self.template = template
        self.links = links
        self.tables = tuple(tables)  # whole tables written once by write_table (objects, groups)
        self.sinks: dict[str, _Sink] = {}
        self.partials: dict[str, str] = {}  # final path -> temporary path

    def files(self) -> list[str]:
        """The files this result is (OUT, then OUT.edges/faces/objects/groups for CSV and Parquet)."""
        return [self.path] + [companion(self.path, t) for t in ((self.links,) if self.links else ()) + self.tables]

    def write_table(self, table: str, arrays: dict[str, np.ndarray]) -> None:
        """One of ``tables`` whole (its file is made even with no rows)."""
        if table not in self.tables or table in self.sinks:
            raise InvalidArgumentError(f"table {table!r} is not one this result writes once ({self.tables})")
        self._open(table, arrays).write(arrays)

    def _tables(self, sel: Selection) -> dict[str, dict[str, np.ndarray]]:
        tables = {"vertices": vertex_arrays(sel)}
        if self.links:
            tables[self.links] = link_arrays(sel, self.links)
        return tables

    def write(self, sel: Selection) -> None:
        for table, arrays in self._tables(sel).items():
            if len(next(iter(arrays.values()))):
                sink = self.sinks.get(table) or self._open(table, arrays)
                sink.write(arrays)

    def close(self) -> None:
        try:
            for table, arrays in self._tables(self.template).items():
                if table not in self.sinks:  # no rows: a file with the columns only
                    self._open(table, arrays)
            self._finish()
        except BaseException:
            self.abort()
            raise
        for final, tmp in self.partials.items():
            if final == STDOUT:  # an NPZ assembled aside: copied out, then removed
                import shutil

                with open(tmp, "rb") as fh:
                    shutil.copyfileobj(fh, sys.stdout.buffer, 1 << 20)
                sys.stdout.buffer.flush()
                os.remove(tmp)
            else:
                check_replaceable(final)  # nothing else took its place meanwhile
                os.replace(tmp, final)
        self.partials = {}

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._release()
        for tmp in self.partials.values():
            with contextlib.suppress(OSError):
                os.remove(tmp)
        self.partials = {}

    def _target(self, table: str) -> str:
        """Where a table's rows go: a temporary file renamed into place at the end, or stdout."""
        if self.path == STDOUT:
            if table != "vertices":
                raise InvalidArgumentError(f"a {table} table cannot go to stdout beside the vertices")
            return STDOUT
        final = self.path if table == "vertices" else companion(self.path, table)
        self.partials[final] = _partial(final)
        return self.partials[final]

    def _open(self, table: str, arrays: dict[str, np.ndarray]) -> _Sink:
        raise NotImplementedError

    def _finish(self) -> None:
        for sink in self.sinks.values():
            sink.close()

    def _release(self) -> None:
        self._finish()


class _Sink(Protocol):
    """Where one table's rows go, batch by batch."""

    def write(self, arrays: dict[str, np.ndarray]) -> None: ...

    def close(self) -> None: ...


class _Text:
    """A text sink: a file it opens and closes, or stdout (flushed and left open)."""

    def __init__(self, path: str):
        self.stdout = path == STDOUT
        self.fh = (_stdout_text() if self.stdout
                   else open(path, "w", newline="", encoding="utf-8"))  # noqa: SIM115 - closed in close()

    def close(self) -> None:
        if self.stdout:
            self.fh.flush()
            self.fh.detach()  # stdout's buffer stays open
        else:
            self.fh.close()


def _stdout_text() -> io.TextIOWrapper:
    sys.stdout.flush()  # what was printed before goes first
    return io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="", write_through=True)


class _CsvTable(_Text):
    def __init__(self, path: str, arrays: dict[str, np.ndarray]):
        super().__init__(path)
        cols = flat_columns(arrays)
        self.fh.write(",".join(n for n, _ in cols) + "\n")
        self.row_fmt = ",".join(_cell_format(c.dtype) for _, c in cols) + "\n"

    def write(self, arrays: dict[str, np.ndarray]) -> None:
        cols = [c for _, c in flat_columns(arrays)]
        step = tuning().export_text_rows
        for a in range(0, len(cols[0]), step):
            part = [c[a:a + step].tolist() for c in cols]
            self.fh.write((self.row_fmt * len(part[0])) % tuple(v for row in zip(*part) for v in row))


class _JsonTable(_Text):
    """JSON Lines: one object per row, keyed by the CSV's column names."""

    def __init__(self, path: str, arrays: dict[str, np.ndarray]):
        super().__init__(path)

    def write(self, arrays: dict[str, np.ndarray]) -> None:
        cols = flat_columns(arrays)
        names = [n for n, _ in cols]
        step = tuning().export_text_rows
        for a in range(0, len(cols[0][1]), step):
            part = [c[a:a + step].tolist() for _, c in cols]
            self.fh.write("".join(json.dumps(dict(zip(names, row))) + "\n" for row in zip(*part)))


class CsvOut(_Out):
    """CSV: floats as %.9g (float32 round-trips) or %.17g, integers exact; links in ``OUT.edges.csv``."""

    def _open(self, table: str, arrays: dict[str, np.ndarray]) -> _Sink:
        self.sinks[table] = _CsvTable(self._target(table), arrays)
        return self.sinks[table]


class JsonOut(_Out):
    """JSON Lines, the CSV's columns (floats as Python prints them: they round-trip); links in
    ``OUT.edges.json``."""

    def _open(self, table: str, arrays: dict[str, np.ndarray]) -> _Sink:
        self.sinks[table] = _JsonTable(self._target(table), arrays)
        return self.sinks[table]


class _ParquetTable:
    """Batches gathered into row groups of ``ROW_GROUP`` rows (small row groups make slow Parquet)."""

    ROW_GROUP = 1 << 17

    def __init__(self, path: str, arrays: dict[str, np.ndarray]):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.pa = pa
        self.writer = pq.ParquetWriter(sys.stdout.buffer if path == STDOUT else path, self._table(arrays).schema)
        self.pending: list[pa.Table] = []
        self.rows = 0

    def _table(self, arrays: dict[str, np.ndarray]) -> pa.Table:
        return self.pa.table({n: self.pa.array(np.ascontiguousarray(c)) for n, c in flat_columns(arrays)})

    def write(self, arrays: dict[str, np.ndarray]) -> None:
        table = self._table(arrays)
        self.pending.append(table)
        self.rows += table.num_rows
        if self.rows >= self.ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            self.writer.write_table(self.pa.concat_tables(self.pending))
            self.pending, self.rows = [], 0

    def close(self) -> None:
        try:
            self._flush()
        finally:
            self.writer.close()  # a stream it was handed (stdout) stays open


class ParquetOut(_Out):
    """Parquet (pyarrow), the CSV's columns with their dtypes; links in ``OUT.edges.parquet``."""

    def _open(self, table: str, arrays: dict[str, np.ndarray]) -> _Sink:
        self.sinks[table] = _ParquetTable(self._target(table), arrays)
        return self.sinks[table]


class NpzOut(_Out):
    """One ``.npz`` holding both tables, written column by column by :class:`~zvf.read.npz.NpzBuilder`
    (memory: one batch).  ``rows``, the vertex table's row count when the caller knows it, lets every
    vertex column go straight to its place in the file; without it (and for link tables) columns pass
    through temporary files."""

    def __init__(self, path: str, template: Selection, links: str | None = None, rows: int | None = None,
                 tables: Sequence[str] = ()):
        super().__init__(path, template, links, tables)
        self.rows = rows
        self.zip: NpzBuilder | None = None

    def files(self) -> list[str]:
        return [self.path]

    def _target(self, table: str) -> str:
        if self.path != STDOUT:
            return super()._target(table)
        import tempfile

        fd, tmp = tempfile.mkstemp(prefix="zvf-", suffix=".npz.partial")  # a zip needs seeking: built aside
        os.close(fd)
        self.partials[STDOUT] = tmp
        return tmp

    def _open(self, table: str, arrays: dict[str, np.ndarray]) -> _Sink:
        if self.zip is None:
            self.zip = NpzBuilder(self._target("vertices"))
        for k, v in arrays.items():
            self.zip.add(k, v.dtype, v.shape[1:], self.rows if table == "vertices" else None)
        self.sinks[table] = _NpzTable(self)
        return self.sinks[table]

    def _append(self, arrays: dict[str, np.ndarray]) -> None:
        assert self.zip is not None
        for k, v in arrays.items():
            self.zip.append(k, v)

    def _finish(self) -> None:
        assert self.zip is not None
        self.zip.finish()
        self._release()

    def _release(self) -> None:
        if self.zip is not None:
            self.zip.close()


class _NpzTable:
    """A table's view of the shared NPZ columns."""

    def __init__(self, out: NpzOut):
        self.out = out

    def write(self, arrays: dict[str, np.ndarray]) -> None:
        self.out._append(arrays)

    def close(self) -> None:
        """Nothing of its own to close: :meth:`NpzOut._finish` finishes the shared file."""


def write_whole_table(path: str, fmt: str, arrays: dict[str, np.ndarray]) -> str:
    """One whole table alone in its file (a Dask export's ``objects``/``groups``), keyed and laid out as
    in a result; written aside and renamed into place.  Returns ``path``."""
    check_replaceable(path)
    tmp = _partial(path)
    try:
        if fmt == "npz":
            with open(tmp, "wb") as fh:
                # numpy's stub types **kwds as arrays but also has allow_pickle: bool, which **arrays may fill
                np.savez(fh, **arrays)  # type: ignore[arg-type]
        else:
            sinks: dict[str, Callable[[str, dict[str, np.ndarray]], _Sink]] = {
                "csv": _CsvTable, "json": _JsonTable, "parquet": _ParquetTable}
            sink = sinks[fmt](tmp, arrays)
            sink.write(arrays)
            sink.close()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return path


WRITERS: dict[str, type[_Out]] = {"csv": CsvOut, "npz": NpzOut, "parquet": ParquetOut, "json": JsonOut}


def open_writer(out: str, fmt: str, template: Selection, links: str | None = None, rows: int | None = None,
                tables: Sequence[str] = ()) -> _Out:
    """The writer of ``fmt`` for OUT (``template``: a batch, possibly empty, giving dtypes and shapes;
    ``rows``: the vertex rows to come, when known: an .npz is then written in place; ``tables``: the
    whole tables to come through ``write_table``)."""
    if fmt == "npz":
        return NpzOut(str(out), template, links, rows=rows, tables=tables)
    return WRITERS[fmt](str(out), template, links, tables)
