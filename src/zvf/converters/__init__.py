"""Conversions between ZVF stores and the files users hold (``zvf.convert``, ``zvf convert``).

One module per format family; :data:`FORMATS` says which module handles a format, the file
suffixes that name it, the extra that installs its library, and which store geometries it
can be written from.  One side of every conversion is a ZVF store (a path or URL); the other
is a local file.  The direction is told by the suffixes, or by ``from_``/``to``.
"""

from __future__ import annotations

import glob
import importlib
import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from ..errors import InvalidArgumentError
from ..io.options import StorageOptions
from .base import Converted, ConvertProgress, StoreOptions, Written, stamping

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from ..write.types import Shape

__all__ = ["FORMATS", "ConvertOptions", "ConvertProgress", "ConvertSummary", "Format", "convert", "format_of"]

# "from" is a keyword, so the formats' keys are declared in TypedDict's functional form
_Formats = TypedDict("_Formats", {"from": str, "to": str})


class _Files(TypedDict, total=False):
    files: int  # several source files into one store


class ConvertSummary(_Formats, _Files, Converted):
    """What ``convert`` returns: ``from``/``to`` the formats (``"zvf"`` the store side), ``src``/``dst``
    as given (several source files: ``"N files"``, and ``files`` their count), ``vertices`` converted,
    ``objects``, ``faces``, ``edges`` where the geometry has them, and the ``seconds`` it took."""

    src: str
    dst: str
    seconds: float


class ConvertOptions(TypedDict, total=False):
    """The formats' own options of ``convert`` (checked at run time against the format's: an option
    the format does not take is an error naming the closest one); README "Conversions".

    * ``level``: the store level written into a file (default 0)
    * ``batch_rows``: rows read per batch from LAS, PLY points, CSV and Parquet files
    * ``batch``: streamlines read per batch from TRK, TCK and TRX files
    * ``batch_chunks``: store chunks read per batch into a LAS file (default 4)
    * ``batch_objects``: store objects read per batch into CSV and Parquet files
    * ``keep_order``: into a store, keep each point's input row (attribute ``zvf_source_row``, default
      False); into a file, write the rows in that order (default: when the level has that attribute)
    * ``geometry``: ``"polyline"`` (default) or ``"streamline"`` for a table with an ``object_id`` column
    * ``dtype``: stored position dtype of an OBJ or STL mesh (default float64, STL's float32)
    * ``ascii``: write a PLY or STL file as text (default: PLY as it came, STL binary)
    * ``scale``: LAS coordinate scale of a store not converted from LAS (default 0.001; a LAS source's
      scales and offsets are kept)
    * ``compress``: LAZ rather than LAS (default: by the suffix)
    * ``point_format``: LAS point format 0..10 (default: the source's, else 1/3 or 6/7)
    * ``geo``: write GeoParquet (default: by the suffix, or when the source was GeoParquet)
    """

    level: int
    batch_rows: int
    batch: int
    batch_chunks: int
    batch_objects: int
    keep_order: bool | None
    geometry: str | None
    dtype: DTypeLike
    ascii: bool | None
    scale: float | None
    compress: bool | None
    point_format: int | None
    geo: bool | None


@dataclass(frozen=True)
class Format:
    name: str
    module: str
    suffixes: tuple[str, ...]
    extra: str | None
    geometries: tuple[str, ...]  # store geometries this format can be written from
    reads_to: str  # geometry a file of this format becomes


_POINTS = ("point_cloud",)
_MESH = ("mesh",)
_LINES = ("polyline", "streamline")

FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("las", "las", (".las", ".laz"), "las", _POINTS, "point_cloud"),
    Format("ply", "ply", (".ply",), "ply", _POINTS + _MESH, "point_cloud or mesh"),
    Format("obj", "mesh", (".obj",), None, _MESH, "mesh"),
    Format("stl", "mesh", (".stl",), None, _MESH, "mesh"),
    Format("swc", "swc", (".swc",), None, ("skeleton",), "skeleton"),
    Format("trk", "tracts", (".trk",), "neuro", _LINES, "streamline"),
    Format("tck", "tracts", (".tck",), "neuro", _LINES, "streamline"),
    Format("trx", "tracts", (".trx",), "neuro", _LINES, "streamline"),
    Format("csv", "table", (".csv",), None, _POINTS + _LINES, "point_cloud or polyline"),
    Format("parquet", "table", (".parquet", ".geoparquet"), "parquet", _POINTS + _LINES, "point_cloud or polyline"),
    Format("graphml", "graph", (".graphml",), "graph", ("graph", "skeleton"), "graph"),
)}

STORE = "zvf"
STORE_SUFFIXES = (".zarr", ".zvf", ".zarrvectors", ".zv")
_FILE_SUFFIX = re.compile(r"^\.[a-z][a-z0-9]{0,7}$")  # what names a file format (.xyz, .txt), not a version (.v2 too)


def format_of(path: str, given: str | None = None) -> str | None:
    """The format named by ``given`` or by ``path``'s suffix (None: not a file format, so a store).

    A local path ending in a suffix that is neither a format's nor a store's (``.zarr``, ``.zvf``,
    ``.zarrvectors``, ``.zv``) is refused unless it is an existing store directory: ``out/x.xyz``
    is a misspelt file, not a store to create (``to="zvf"`` / ``--to zvf`` says it is one).
    """
    if given is not None:
        name = given.lower().lstrip(".")
        if name != STORE and name not in FORMATS:
            raise InvalidArgumentError(f"unknown format {given!r}: one of {sorted(FORMATS)} or {STORE!r}")
        return None if name == STORE else name
    named = suffix_format(path)
    if named is not None:
        return named
    low = str(path).lower().rstrip("/")
    ext = os.path.splitext(low.rsplit("/", 1)[-1])[1]
    local = "://" not in low or low.startswith("file://")
    if local and _FILE_SUFFIX.match(ext) and ext not in STORE_SUFFIXES and not os.path.isdir(path):
        suffixes = sorted(s for f in FORMATS.values() for s in f.suffixes)
        raise InvalidArgumentError(
            f"{path!r}: {ext} is not a format zvf converts ({' '.join(suffixes)}) nor a store name "
            f"({' '.join(STORE_SUFFIXES)} or no suffix); name the format with from_/to (--from/--to), "
            f"{STORE!r} for a store")
    return None


async def convert(
    src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    dst: str | os.PathLike[str],
    *,
    from_: str | None = None,
    to: str | None = None,
    chunk_shape: Shape = "auto",
    bin_shape: Shape | None = "auto",
    compression: str | None = None,
    shard_shape: int | Sequence[int] | None = None,
    overwrite: bool = False,
    storage_options: StorageOptions | None = None,
    progress: Callable[[ConvertProgress], object] | None = None,
    **options: Unpack[ConvertOptions],
) -> ConvertSummary:
    """Convert a file into a ZVF store, or a ZVF store into a file.

    ``src``/``dst``: a file path on one side (its suffix names the format unless ``from_``/``to``
    does) and a ZVF store (path or URL) on the other.  ``src`` may also be several files of one
    format (a list, a glob pattern such as ``"neurons/*.swc"``, or a directory of them), converted
    into one store with their objects numbered in file order (SWC).  The store options (``chunk_shape``,
    ``bin_shape``, ``compression``, ``shard_shape``, ``overwrite``, ``storage_options``) apply
    to the store side; other ``options`` are the format's own (:class:`ConvertOptions`, README
    "Conversions"), for example ``level`` when exporting, ``batch_rows`` when streaming a large file in,
    ``keep_order=True`` to write a point file back in its row order.  ``progress`` hears of the
    vertices read so far (:class:`ConvertProgress`: ``done``, ``total`` when known -- always from a
    store --, ``unit``).  Returns a :class:`ConvertSummary`: formats, counts and seconds.
    """
    files = source_files(src, from_)
    if files is not None:
        return await _convert_files(files, os.fspath(dst), from_, to,
                                    StoreOptions(chunk_shape=chunk_shape, bin_shape=bin_shape, compression=compression,
                                                 shard_shape=shard_shape, overwrite=overwrite,
                                                 storage_options=storage_options, progress=progress), options)
    src, dst = os.fspath(src), os.fspath(dst)  # type: ignore[arg-type]  # one path (source_files took lists)
    src_fmt, dst_fmt = format_of(src, from_), format_of(dst, to)
    if (src_fmt is None) == (dst_fmt is None):
        which = "both are files" if src_fmt else "neither names a file format"
        raise InvalidArgumentError(
            f"convert needs one file and one ZVF store ({src!r} -> {dst!r}: {which}); "
            f"name the format with from_/to (--from/--to), one of {sorted(FORMATS)}")
    t0 = time.perf_counter()
    if src_fmt is not None:
        if not os.path.exists(src):
            raise InvalidArgumentError(f"src {src!r}: no such file")
        fmt = FORMATS[src_fmt]
        mod = importlib.import_module(f".{fmt.module}", __name__)
        store = StoreOptions(chunk_shape=chunk_shape, bin_shape=bin_shape, compression=compression,
                             shard_shape=shard_shape, overwrite=overwrite, storage_options=storage_options,
                             progress=progress)
        out = await _into_store(dst, store, mod.to_store(fmt.name, src, dst, store, **options))
    elif dst_fmt is not None:  # always, by the check above: exactly one side names a file format
        from ..read.writers import check_replaceable

        fmt = FORMATS[dst_fmt]
        parent = os.path.dirname(os.path.abspath(dst))
        if not os.path.isdir(parent):
            raise InvalidArgumentError(f"dst {dst!r}: directory {parent!r} does not exist")
        check_replaceable(dst)  # a symlink, FIFO, device or directory there is never replaced
        if os.path.exists(dst) and not overwrite:
            raise InvalidArgumentError(f"dst {dst!r} exists; pass overwrite=True (--overwrite) to replace it")
        mod = importlib.import_module(f".{fmt.module}", __name__)
        from ..read.dataset import DatasetReader

        ds = await DatasetReader.open(src, storage_options=storage_options)
        try:
            if ds.geometry_type not in fmt.geometries:
                raise InvalidArgumentError(
                    f"{src}: a {ds.geometry_type} store cannot be written as {fmt.name} "
                    f"(it takes {', '.join(fmt.geometries)} stores)")
            out = await _atomic(mod.from_store, fmt.name, ds, dst, Written(ds, progress), options)
        finally:
            await ds.close()
    return _summary(src_fmt or STORE, dst_fmt or STORE, src, dst, out, t0)


def suffix_format(path: str) -> str | None:
    """The format ``path``'s suffix names, if any."""
    low = str(path).lower().rstrip("/")
    return next((f.name for f in FORMATS.values() if low.endswith(f.suffixes)), None)


_GLOB = re.compile(r"[*?\[]")


def source_files(src: Any, from_: str | None) -> list[str] | None:
    """The files of a several-file source: a list of paths, a glob pattern (``neurons/*.swc``), or a local
    directory holding no store (its files of the format: ``from_``'s, or the one suffix they share), in
    name order.  None: ``src`` is one file or a store."""
    if isinstance(src, (list, tuple)):
        files = [os.fspath(f) for f in src]
        if not files:
            raise InvalidArgumentError("src: an empty list of files")
        return files
    src = os.fspath(src)
    if _GLOB.search(src) and not os.path.exists(src):
        files = sorted(glob.glob(src))
        if not files:
            raise InvalidArgumentError(f"src {src!r}: the pattern matches no file")
        return files
    if not os.path.isdir(src) or os.path.exists(os.path.join(src, "zarr.json")):
        return None
    names = sorted(n for n in os.listdir(src) if not n.startswith(".") and os.path.isfile(os.path.join(src, n)))
    if from_ is not None:
        wanted = [n for n in names if suffix_format(n) == format_of(src, from_)]
    else:
        kinds = {kind for n in names if (kind := suffix_format(n)) is not None}
        if len(kinds) > 1:
            raise InvalidArgumentError(f"src {src!r}: a directory of {', '.join(sorted(kinds))} files; name the "
                                       f"format of the ones to convert with from_ (--from)")
        wanted = [n for n in names if suffix_format(n) in kinds]
    if not wanted:
        return None  # not a directory of files to convert: opened as a store, which says what it is
    return [os.path.join(src, n) for n in wanted]


async def _convert_files(files: list[str], dst: str, from_: str | None, to: str | None, store: StoreOptions,
                         options: ConvertOptions) -> ConvertSummary:
    """Several files of one format into one store (``to_store_many``: objects numbered in file order)."""
    kinds = {format_of(f, from_) for f in files}
    if len(kinds) != 1 or None in kinds:
        raise InvalidArgumentError(f"several source files need one file format, got {sorted(map(str, kinds))}; "
                                   f"name it with from_ (--from)")
    name = kinds.pop()
    if format_of(dst, to) is not None:
        raise InvalidArgumentError(f"dst {dst!r}: several files convert into one ZVF store, not into a file")
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise InvalidArgumentError(f"src {missing[0]!r}: no such file")
    assert name is not None
    mod = importlib.import_module(f".{FORMATS[name].module}", __name__)
    many = getattr(mod, "to_store_many", None)
    if many is None and len(files) > 1:
        able = sorted(n for n, f in FORMATS.items()
                      if hasattr(importlib.import_module(f".{f.module}", __name__), "to_store_many"))
        raise InvalidArgumentError(f"{len(files)} {name} files into one store: zvf converts several files of "
                                   f"{', '.join(able)} (convert one {name} file at a time, or append)")
    t0 = time.perf_counter()
    out = await _into_store(dst, store, many(name, files, dst, store, **options) if many
                            else mod.to_store(name, files[0], dst, store, **options))
    return _summary(name, STORE, f"{len(files)} files" if len(files) > 1 else files[0], dst, out, t0, files=len(files))


def _summary(src_fmt: str, dst_fmt: str, src: str, dst: str, out: Converted, t0: float,
             files: int | None = None) -> ConvertSummary:
    """The summary of a conversion started at ``t0`` whose converter returned ``out``."""
    several: _Files = {} if files is None else {"files": files}
    return {"from": src_fmt, "to": dst_fmt, "src": src, "dst": dst, **several, **out,
            "seconds": time.perf_counter() - t0}


async def _into_store(dst: str, store: StoreOptions, write: Awaitable[Converted]) -> Converted:
    """Await a conversion into the store ``dst``, its writer publishing what it stamps (:func:`.base.stamp`);
    if it fails, the empty local directory it made goes."""
    local = _local_path(dst)
    made = local is not None and not os.path.exists(local)
    try:
        with stamping(dst, store):
            return await write
    except BaseException:
        if made and local is not None and os.path.isdir(local) and not os.listdir(local):
            os.rmdir(local)
        raise


def _local_path(target: str) -> str | None:
    """The local directory of a store target (a path or ``file://`` URL), None for other URLs."""
    if target.startswith("file://"):
        return target[len("file://"):]
    return None if "://" in target else target


async def _atomic(fn: Callable[..., Awaitable[Converted]], name: str, ds: Any, dst: str, written: Written,
                  options: ConvertOptions) -> Converted:
    """Write the file under a temporary name and move it into place only when complete."""
    base, ext = os.path.splitext(dst)
    tmp = f"{base}.part-{os.getpid()}{ext}"  # same suffix: some writers (laspy, trx) look at it
    try:
        out = await fn(name, ds, tmp, written, **options)
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return out
