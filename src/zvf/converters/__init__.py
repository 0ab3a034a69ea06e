"""Conversions between ZVF stores and the files users hold (``zvf.convert``, ``zvf convert``).

One module per format family; :data:`FORMATS` says which module handles a format, the file
suffixes that name it, the extra that installs its library, and which store geometries it
can be written from.  One side of every conversion is a ZVF store (a path or URL); the other
is a local file.  The direction is told by the suffixes, or by ``from_``/``to``.
"""

from __future__ import annotations

import importlib
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError
from .base import StoreOptions

__all__ = ["FORMATS", "Format", "convert", "format_of"]


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
    low = str(path).lower().rstrip("/")
    for fmt in FORMATS.values():
        if low.endswith(fmt.suffixes):
            return fmt.name
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
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    from_: str | None = None,
    to: str | None = None,
    chunk_shape: Any = "auto",
    bin_shape: Any = None,
    compression: str | None = None,
    shard_shape: Any = None,
    overwrite: bool = False,
    storage_options: dict | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Convert a file into a ZVF store, or a ZVF store into a file.

    ``src``/``dst``: a file path on one side (its suffix names the format unless ``from_``/``to``
    does) and a ZVF store (path or URL) on the other.  The store options (``chunk_shape``,
    ``bin_shape``, ``compression``, ``shard_shape``, ``overwrite``, ``storage_options``) apply
    to the store side; other ``options`` are the format's own (see README "Conversions"),
    for example ``level`` when exporting, ``batch_rows`` when streaming a large file in.
    Returns a summary: formats, counts and seconds.
    """
    src, dst = os.fspath(src), os.fspath(dst)
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
                             shard_shape=shard_shape, overwrite=overwrite, storage_options=storage_options)
        local = _local_path(dst)
        made = local is not None and not os.path.exists(local)
        try:
            out = await mod.to_store(fmt.name, src, dst, store, **options)
        except BaseException:
            if made and os.path.isdir(local) and not os.listdir(local):  # the failed write's empty directory
                os.rmdir(local)
            raise
    else:
        from ..read.writers import check_replaceable

        fmt = FORMATS[dst_fmt]
        parent = os.path.dirname(os.path.abspath(dst))
        if not os.path.isdir(parent):
            raise InvalidArgumentError(f"dst {dst!r}: directory {parent!r} does not exist")
        check_replaceable(dst)  # a symlink, FIFO, device or directory there is never replaced
        if os.path.exists(dst) and not overwrite:
            raise InvalidArgumentError(f"dst {dst!r} exists; pass overwrite=True (--overwrite) to replace it")
        mod = importlib.import_module(f".{fmt.module}", __name__)
        from ..read.dataset import AsyncDataset

        ds = await AsyncDataset.open(src, storage_options=storage_options)
        try:
            if ds.geometry_type not in fmt.geometries:
                raise InvalidArgumentError(
                    f"{src}: a {ds.geometry_type} store cannot be written as {fmt.name} "
                    f"(it takes {', '.join(fmt.geometries)} stores)")
            out = await _atomic(mod.from_store, fmt.name, ds, dst, options)
        finally:
            await ds.close()
    return {"from": src_fmt or STORE, "to": dst_fmt or STORE, "src": src, "dst": dst, **out,
            "seconds": time.perf_counter() - t0}


def _local_path(target: str) -> str | None:
    """The local directory of a store target (a path or ``file://`` URL), None for other URLs."""
    if target.startswith("file://"):
        return target[len("file://"):]
    return None if "://" in target else target


async def _atomic(fn, name: str, ds, dst: str, options: dict) -> dict:
    """Write the file under a temporary name and move it into place only when complete."""
    base, ext = os.path.splitext(dst)
    tmp = f"{base}.part-{os.getpid()}{ext}"  # same suffix: some writers (laspy, trx) look at it
    try:
        out = await fn(name, ds, tmp, **options)
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return out
