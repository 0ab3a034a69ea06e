"""Appending objects to a store, safely against crashes and concurrent writers.

An append is a publication (:mod:`zvf.write.publish`): its cells go up under
chunk-key families no kept version uses, then one compare-and-swap of the
root publishes it, then the documents follow.  Until the root is replaced
every reader sees the old store, and readers that opened it keep reading it
afterwards; a SIGKILL anywhere leaves the store reading as before or as after,
plus unreferenced cells the next change or ``zvf gc`` clears.

Point clouds (level 0 only, unsharded) append *incrementally*: only the
chunks the new rows fall in are read, merged (old rows, then new, as one
write of the concatenated input lays them out) and written; the other cells
are copied to the new family server-side, untouched; the object index,
object/group tables, level and root documents are rewritten from their
(small) tables.  Other geometries, sharded or pyramid stores rewrite level 0
(cross-chunk links and shards would need cell-level merges), streaming: the
store's own batches, then the appended one, through the streaming writer.

Every append holds the store's lock (:mod:`zvf.write.lock`, shared with
every writer): a concurrent appender waits, then re-reads the store, so
nothing is lost; the root is replaced with a compare-and-swap on what was
read under the lock.  A store with pyramid levels is rewritten and, by default
(``pyramid="rebuild"``), its levels are built again from the new level 0 with the
factors, chunk scales and link depth they had, under the same lock;
``pyramid="drop"`` leaves level 0 only (rebuild later with ``build_pyramid``).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

import anyio
import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError, ReadOnlyError
from ..format import metadata as md
from ..format.keys import format_chunk_id
from ..format.layout import LevelLayout
from ..io.executor import Executor
from ..io.store import open_store
from ..read import load
from ..read.dataset import DatasetReader
from ..read.points import attribute_layout, read_chunks
from ..write.lock import LEASE, StoreLock
from ..write.points.level import PointExtras, publish_level
from ..write.points.memory import write_points
from ..write.publish import CONSOLIDATED, Publication
from ..write.store_writer import StoreWriter
from . import rechunk
from .carry import carry_root
from .pyramid import build_locked, pyramid_spec, seed_section
from .rechunk import Writer

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ..write.types import Columns, Groups

_SLASH = re.compile(r"^(.*)/c/(\d+(?:/\d+)*)$")
SPATIAL = ("0/vertices/", "0/vertex_fragments/", "0/vertex_attributes/")

Upload = tuple[str, tuple[int, ...], str]
"""A cell of a scratch store to upload: (array path, chunk coords, local file)."""
Copy = tuple[str, str, tuple[int, ...]]
"""An untouched cell copied server-side: (source key, array path, chunk coords)."""
Documents = dict[str, dict[str, Any]]
"""Node path -> zarr.json document."""


class AppendOptions(TypedDict, total=False):
    """The keywords of every ``append_*`` besides its input and ``cast``; all optional.

    * ``attributes``: vertex attributes of the appended rows, the store's names (polylines: per polyline)
    * ``object_ids``: point clouds with object ids (new ids only); graphs and meshes (shifted past the store's)
    * ``object_attributes``, ``groups``, ``group_attributes``: rows of the appended objects and groups
    * ``lock_timeout``: seconds to wait for the store's lock (default 60)
    * ``stale_after``: the lock's lease: a holder without a heartbeat this long is presumed dead (default 30)
    * ``pyramid``: ``"rebuild"`` (default) the store's coarser levels from the new level 0, or ``"drop"`` them
    * ``retention``: seconds the store as it was stays readable for readers that opened it (default: the store's)
    """

    attributes: Mapping[str, ArrayLike | Sequence[ArrayLike]] | None
    object_ids: ArrayLike | None
    object_attributes: Columns | None
    groups: Groups | None
    group_attributes: Columns | None
    lock_timeout: float
    stale_after: float
    pyramid: Literal["rebuild", "drop"]
    retention: float | None


class AppendSummary(TypedDict):
    """What an append returns: the vertices after it and appended, the objects after it, the level-0 cells
    it wrote and those it copied server-side untouched (0 when level 0 was rewritten), and the levels it
    rebuilt (``pyramid="rebuild"`` on a store with levels)."""

    geometry_type: str
    vertex_count: int
    appended: int
    object_count: int
    chunks_rewritten: int
    chunks_copied: int
    pyramid_rebuilt: NotRequired[list[int]]


# ------------------------------------------------------------------ merging inputs
def stored(values: ArrayLike, dtype: np.dtype, what: str, cast: bool) -> np.ndarray:
    """``values`` in the store's ``dtype``: refused (naming ``what``, the dtype and the first offending
    values) when a value would not come back as given -- rounded, wrapped, clipped -- unless ``cast``."""
    given = np.asarray(values)
    if given.dtype == dtype:
        return given
    try:
        with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf/out of range: refused below, not warned
            out = given.astype(dtype)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"{what}: {given.dtype} values cannot be stored as {dtype}: {exc}") from None
    if cast:
        return out
    with np.errstate(invalid="ignore", over="ignore"):
        back = out.astype(given.dtype)
        same = back == given
    if given.dtype.kind in "fc":
        same |= np.isnan(given) & np.isnan(back)
    if not np.all(same):
        bad = given[~same]
        raise InvalidArgumentError(
            f"{what}: the store keeps it as {dtype}, which cannot hold {int((~same).sum())} of the appended values "
            f"exactly (first: {bad[:5].tolist()}); convert them, or pass cast=True to store them cast")
    return out


def _cat_attrs(old: Mapping[str, ArrayLike], new: Mapping[str, ArrayLike] | None, what: str,
               cast: bool) -> dict[str, np.ndarray]:
    new = dict(new or {})
    if set(old) != set(new):
        raise InvalidArgumentError(f"{what}: the store has {sorted(old)}, the append gives {sorted(new)}")
    return {k: np.concatenate([np.asarray(old[k]), stored(new[k], np.asarray(old[k]).dtype, f"{what}[{k!r}]", cast)])
            for k in old}


def _merge_tables(old: Mapping[str, Any], new: Mapping[str, Any], id_shift: int, cast: bool) -> dict[str, Any]:
    """Object attributes, groups (new group ids follow the old ones; members shifted by ``id_shift``)."""
    out: dict[str, Any] = {}
    if "object_attributes" in old or new.get("object_attributes"):
        out["object_attributes"] = _cat_attrs(old.get("object_attributes", {}), new.get("object_attributes"),
                                              "object_attributes", cast)
    groups = dict(old.get("groups", {}))
    base = len(groups)
    for g, members in (new.get("groups") or {}).items():
        groups[base + int(g)] = np.asarray(members, dtype=np.int64) + id_shift
    if groups:
        out["groups"] = groups
    if "group_attributes" in old or new.get("group_attributes"):
        out["group_attributes"] = _cat_attrs(old.get("group_attributes", {}), new.get("group_attributes"),
                                             "group_attributes", cast)
    return out


def _new_batch(writer: str, args: tuple[Any, ...], kw: dict[str, Any], pos_dtype: np.dtype,
               attr_dtypes: dict[str, np.dtype], old_ids: np.ndarray | None, cast: bool) -> tuple[dict[str, Any], int]:
    """The appended input as one batch of the streaming writer (after the store's own batches), and
    the shift of its object ids: polylines and lines continue the count, graphs and meshes start
    above the old top id, point clouds keep the ids given (which must be new).  Positions and
    attributes come in the store's dtypes (see :func:`stored`)."""
    attrs = dict(kw.pop("attributes", None) or {})
    if set(attrs) != set(attr_dtypes):
        raise InvalidArgumentError(f"attributes: the store has {sorted(attr_dtypes)}, the append gives {sorted(attrs)}")
    ragged = writer == "write_polylines"  # a list of per-polyline rows; elsewhere a list is the rows themselves
    attrs = {n: [stored(v, attr_dtypes[n], f"attributes[{n!r}]", cast) for v in a] if ragged and isinstance(a, list)
             else stored(a, attr_dtypes[n], f"attributes[{n!r}]", cast) for n, a in attrs.items()}
    top = int(old_ids.max()) if old_ids is not None and len(old_ids) else -1
    if writer == "write_points":
        batch: dict[str, Any] = {"positions": stored(args[0], pos_dtype, "positions", cast), "attributes": attrs}
        given = kw.pop("object_ids", None)
        if (given is None) != (old_ids is None):
            raise InvalidArgumentError("object_ids: give them exactly when the store has object ids")
        if given is not None:
            given = np.asarray(given, dtype=np.int64).reshape(-1)
            if len(given) and int(given.min()) <= top:
                raise InvalidArgumentError(f"object_ids: appended ids must be new (greater than {top})")
            batch["object_ids"] = given
        return batch, 0
    if writer == "write_polylines":
        return {"polylines": [stored(p, pos_dtype, f"polylines[{i}]", cast) for i, p in enumerate(args[0])],
                "attributes": attrs}, top + 1
    if writer == "write_lines":
        return {"endpoints": stored(args[0], pos_dtype, "endpoints", cast), "attributes": attrs}, top + 1
    pos = stored(args[0], pos_dtype, "positions", cast)
    given = kw.pop("object_ids", None)
    ids = np.asarray(np.zeros(len(pos)) if given is None else given, dtype=np.int64) + (top + 1)
    links = "faces" if writer == "write_mesh" else "edges"
    return {"positions": pos, links: np.asarray(args[1], dtype=np.int64), "object_ids": ids,
            "attributes": attrs}, top + 1


def _attribute_dtypes(level: load.Level) -> dict[str, np.dtype]:
    """The stored dtype of every vertex attribute of ``level``."""
    return {n: attribute_layout(level.arrays[f"vertex_attributes/{n}"])[0] for n in level.named("vertex_attributes")}


def _positions_of(writer: str, args: tuple[Any, ...]) -> np.ndarray:
    if writer == "write_polylines":
        parts = [np.asarray(p, dtype=np.float64) for p in args[0] if len(p)]
        return np.concatenate(parts) if parts else np.zeros((0, 1))
    if writer == "write_lines":
        ep = np.asarray(args[0], dtype=np.float64)
        return ep.reshape(-1, ep.shape[-1])
    return np.asarray(args[0], dtype=np.float64)


# ------------------------------------------------------------------ publishing
def _scratch_files(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
                  for d, _, files in os.walk(root) for f in files)


def _scratch_plan(scratch: str, take: Callable[[str], bool] | None = None,
                  nonempty: Mapping[str, list[str]] | None = None) -> tuple[list[Upload], Documents]:
    """(uploads [(array path, chunk coords, local file)], documents {node path: document}) of a scratch store.

    ``take(rel)`` picks files; ``nonempty[array path]`` overrides an array's ``nonempty_chunks``.
    """
    uploads: list[Upload] = []
    docs: Documents = {}
    for rel in _scratch_files(scratch):
        if rel.startswith(".") or "/." in rel or (take is not None and not take(rel)):
            continue
        m = _SLASH.match(rel)
        if m:
            uploads.append((m.group(1), tuple(int(c) for c in m.group(2).split("/")), os.path.join(scratch, rel)))
            continue
        with open(os.path.join(scratch, rel), "rb") as fh:
            doc = json.loads(fh.read())
        doc.pop(CONSOLIDATED, None)  # the documents change below: a root must not keep stale copies
        path = rel[:-len("/zarr.json")] if rel != "zarr.json" else ""
        if nonempty is not None and path in nonempty:
            doc["attributes"]["nonempty_chunks"] = nonempty[path]
        docs[path] = doc
    return uploads, docs


async def _publish(pub: Publication, uploads: list[Upload], copies: list[Copy], docs: Documents,
                   root: dict[str, Any]) -> None:
    """Cells under the families the publication picks (uploads from scratch, server-side copies of
    untouched cells), then the commit: the root by compare-and-swap, then the documents."""
    ex = pub.ex

    async def up(path: str, coords: tuple[int, ...], file: str) -> None:
        key = (await pub.keys(path, len(coords))).key(path, coords)
        await ex.put(key, await anyio.Path(file).read_bytes())

    async def cp(src: str, path: str, coords: tuple[int, ...]) -> None:
        dst = (await pub.keys(path, len(coords))).key(path, coords)
        await ex.call("copy", dst, lambda: ex.transport.copy(src, dst), put=True)

    await ex.gather([up(*u) for u in uploads] + [cp(*c) for c in copies])
    await pub.commit(docs, root)


def _carried_root(old_root: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """The scratch writer's root with what the store's root carried besides (see :mod:`.carry`)."""
    return carry_root(old_root, root, same_store=True)


async def append(ds: DatasetReader, write: Writer, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> AppendSummary:
    """Append to the store under ``ds`` (opened with mode="a") through the streaming side of ``write`` (the
    writer of the store's geometry) and refresh ``ds``; returns an :class:`AppendSummary`.

    ``kwargs``: :class:`AppendOptions` and ``cast`` (checked here: callers without a type checker pass
    anything).  ``lock_timeout`` (default 60 s) and ``stale_after`` (the lock's lease: default 30 s without a
    heartbeat presumes a holder dead) tune the store lock; ``retention`` (seconds) how long the store as
    it was stays readable for readers that opened it (default: the store's, see zvf.write.publish).
    """

    if ds.context.handle.read_only:
        raise ReadOnlyError(f"{ds.url}: open the dataset with mode='a' to append")
    options = dict(kwargs)
    timeout, stale = options.pop("lock_timeout", 60.0), options.pop("stale_after", LEASE)
    pyramid = options.pop("pyramid", "rebuild")
    retention = options.pop("retention", None)
    cast = options.pop("cast", False)
    if not isinstance(cast, (bool, np.bool_)):
        raise InvalidArgumentError(f"cast must be True or False, got {cast!r}")
    if pyramid not in ("rebuild", "drop"):
        raise InvalidArgumentError(f"pyramid must be 'rebuild' or 'drop', got {pyramid!r}")
    ex = Executor(ds.context.handle)  # the append's own: ``ds`` stays on its version until it is refreshed
    async with StoreLock(ex, ds.url, purpose="append", timeout=timeout, lease=stale) as lock:
        pub = await Publication(ex, lock, retention=retention).begin()
        seed_section(ex, pub.base_docs)  # the version being appended to (the documents on disk may lag it)
        ds_now = type(ds)(ds.context.handle, ex, *(await _load(ex, ds.url)))
        geometry = ds_now.geometry_type
        if geometry is not None and write is not rechunk.WRITERS.get(geometry, write):
            raise InvalidArgumentError(f"{ds.url} holds {geometry}; use append_"
                                       f"{rechunk.WRITERS[geometry].__name__[6:]}")
        opts = await rechunk.store_options(ds_now)
        level = await ds_now.level(0)
        try:
            with tempfile.TemporaryDirectory(prefix="zvf-append-") as scratch:
                if write is write_points and ds_now.levels == [0] and opts["shard_shape"] is None \
                        and level.meta.chunk_dims is None and len(np.asarray(args[0])):
                    summary, uploads, copies, docs = await _incremental_points(ds_now, args[0], options, opts,
                                                                               scratch, bool(cast))
                else:
                    summary, uploads, copies, docs = await _rewrite(ds_now, write, args, options, opts, scratch,
                                                                    bool(cast))
                spec = await pyramid_spec(ds_now) if pyramid == "rebuild" else None
                root = _carried_root(pub.base_doc, docs.pop(""))
                await _publish(pub, uploads, copies, docs, root)
        except BaseException:
            with anyio.CancelScope(shield=True), suppress(Exception):
                await pub.abort()
            raise
        if spec is not None:  # the old levels described the old data: build them again from the new level 0
            ex.clear_caches()
            built = await build_locked(ds.context.handle, ex, lock, **spec, retention=retention)
            summary["pyramid_rebuilt"] = [lv["level"] for lv in built["levels"]]
    await ds.refresh()
    return summary


Prepared = tuple[AppendSummary, list[Upload], list[Copy], Documents]
"""An append written to scratch: its summary, the cells to upload and to copy, the documents to publish."""


async def _rewrite(ds: DatasetReader, write: Writer, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                   opts: dict[str, Any], scratch: str, cast: bool) -> Prepared:
    """Level 0 rewritten whole into ``scratch``: the store's own batches, then the appended one, through
    the streaming writer (memory bounded by a batch; the bytes of one write of the concatenation)."""

    writer = write.__name__
    kwargs = dict(kwargs)
    level = await ds.level(0)
    old_tables = await rechunk.level_tables(ds)
    new_tables = {k: kwargs.pop(k, None) for k in ("object_attributes", "groups", "group_attributes")}
    old_ids = await ds.object_ids() if ds.has_objects(0) else None
    batch, shift = _new_batch(writer, args, kwargs, np.dtype(opts["dtype"]), _attribute_dtypes(level), old_ids, cast)
    if kwargs:
        raise InvalidArgumentError(f"{writer.replace('write', 'append')}: unexpected arguments {sorted(kwargs)}")
    if writer == "write_points":
        old = rechunk.point_batches(ds, batch_chunks=tuning().rewrite_batch_chunks)
    else:
        old = rechunk.object_batches(ds, tuning().rewrite_object_batch)

    async def batches() -> AsyncIterator[dict[str, Any]]:
        async for b in old:
            yield b
        yield batch

    pos = _positions_of(writer, args)
    lo, hi = (np.asarray(b, dtype=np.float64) for b in ds.root.bounds)
    if len(pos):
        lo, hi = np.minimum(lo, pos.min(axis=0)), np.maximum(hi, pos.max(axis=0))
    geometry = ds.geometry_type
    extra = {"geometry_type": geometry} if geometry in ("polyline", "streamline", "graph", "skeleton") else {}
    tables = _merge_tables(old_tables, new_tables, shift, cast)
    wrote = await write(scratch, batches(), **extra, **tables, **opts,
                        bounds=(lo.tolist(), hi.tolist()), overwrite=True)
    uploads, docs = _scratch_plan(scratch)
    summary: AppendSummary = {"geometry_type": geometry or wrote.geometry, "vertex_count": wrote.vertex_count,
                              "appended": len(pos), "object_count": wrote.object_count or 0,
                              "chunks_rewritten": wrote.chunk_count, "chunks_copied": 0}
    return summary, uploads, [], docs


async def _incremental_points(ds: DatasetReader, positions: ArrayLike, kwargs: Mapping[str, Any],
                              opts: dict[str, Any], scratch: str, cast: bool) -> Prepared:
    """Only the chunks the new points fall in are read and rewritten (see the module docstring)."""
    level = await ds.level(0)
    dtype = np.dtype(opts["dtype"])
    pos = stored(positions, dtype, "positions", cast)
    if pos.ndim != 2 or pos.shape[1] != ds.root.ndim:
        raise InvalidArgumentError(f"positions: expected shape (N, {ds.root.ndim}), got {pos.shape}")
    dtypes = _attribute_dtypes(level)
    names = list(dtypes)
    kwargs = dict(kwargs)
    new_attrs = dict(kwargs.pop("attributes", None) or {})
    if set(new_attrs) != set(names):
        raise InvalidArgumentError(f"attributes: the store has {sorted(names)}, the append gives {sorted(new_attrs)}")
    new_attrs = {n: stored(a, dtypes[n], f"attributes[{n!r}]", cast) for n, a in new_attrs.items()}
    has_ids = ds.has_objects(0)
    new_ids = kwargs.pop("object_ids", None)
    if (new_ids is None) == has_ids:
        raise InvalidArgumentError("object_ids: give them exactly when the store has object ids")
    old_tables = await rechunk.level_tables(ds)
    new_tables = {k: kwargs.pop(k, None) for k in ("object_attributes", "groups", "group_attributes")}
    if kwargs:
        raise InvalidArgumentError(f"append_points: unexpected arguments {sorted(kwargs)}")
    old_uniq = table = None
    if has_ids:
        old_uniq, table = await ds.manifests(0)
        new_ids = np.asarray(new_ids, dtype=np.int64).reshape(-1)
        top = int(old_uniq.max()) if len(old_uniq) else -1
        if len(new_ids) != len(pos):
            raise InvalidArgumentError(f"object_ids: {len(new_ids)} ids for {len(pos)} positions")
        if len(new_ids) and int(new_ids.min()) <= top:
            raise InvalidArgumentError(f"object_ids: appended ids must be new (greater than {top})")
    tables = _merge_tables(old_tables, new_tables, 0, cast)

    lo, hi = (np.asarray(b, dtype=np.float64) for b in ds.root.bounds)
    p64 = pos.astype(np.float64)
    lo, hi = np.minimum(lo, p64.min(axis=0)), np.maximum(hi, p64.max(axis=0))
    level_layout = LevelLayout.for_writing(opts["chunk_shape"], opts["bin_shape"], with_ids=has_ids, ndim=ds.root.ndim)
    origin, _ = level_layout.extent(lo, hi)
    touched = np.unique(level_layout.chunk_of(pos), axis=0)
    old_chunks = level.nonempty_chunks
    hit = _member(old_chunks, touched)
    old = await read_chunks(ds.context, level, old_chunks[hit], names)
    sub: dict[str, Any] = {"attributes": {n: np.concatenate([old.attributes[n], new_attrs[n]]) for n in names}}
    if has_ids:
        sub["object_ids"] = np.concatenate([old.object_ids, new_ids])
    cells = os.path.join(scratch, "cells")
    kw = {k: opts[k] for k in ("chunk_shape", "bin_shape", "compression", "dtype", "object_index_layout")}
    await write_points(cells, np.concatenate([old.positions.astype(dtype), pos]), **sub, **kw,
                       bounds=(lo.tolist(), hi.tolist()))
    all_chunks = np.unique(np.concatenate([old_chunks, touched]), axis=0)
    nonempty = [format_chunk_id(c) for c in all_chunks.tolist()]
    arrays = ["vertices", "vertex_fragments"] + [f"vertex_attributes/{n}" for n in names]
    uploads, docs = _scratch_plan(cells, take=lambda rel: rel.startswith(SPATIAL),
                                  nonempty={f"0/{a}": nonempty for a in arrays})
    untouched = old_chunks[~hit]
    copies: list[Copy] = []
    for a in arrays:
        arr = level.arrays[a]
        copies += [(arr.key_of(arr.cell_coords(c)), f"0/{a}", tuple(np.subtract(c, origin).tolist()))
                   for c in untouched.tolist()]

    # object index (old manifests unchanged, new objects' from the scratch cells), tables, level and root
    uniq, manifest = None, None
    if has_ids:
        assert old_uniq is not None and table is not None  # read above, with the store's ids
        fresh = await _open_scratch(cells)
        s_ids, s_table = await fresh.manifests(0)
        mine = np.flatnonzero(s_ids[s_table.object_row] > (old_uniq.max() if len(old_uniq) else -1))
        uniq = np.concatenate([old_uniq, np.unique(new_ids)])
        obj = np.concatenate([table.object_row, np.searchsorted(uniq, s_ids[s_table.object_row[mine]])])
        manifest = (obj, np.concatenate([table.coords, s_table.coords[mine]]),
                    np.concatenate([table.fragment, s_table.fragment[mine]]))
        await fresh.close()
    extras = PointExtras.check(uniq, tables.get("object_attributes"), tables.get("groups"),
                               tables.get("group_attributes"), uniq)
    rest = os.path.join(scratch, "tables")
    handle = open_store(rest, mode="w")
    async with StoreWriter(Executor(handle), overwrite=True, claim=False) as w:  # the scratch directory is ours
        await publish_level(w, ds.url, ndim=ds.root.ndim, shapes=(opts["chunk_shape"], opts["bin_shape"]),
                            bounds=(lo, hi),
                            n=int(level.meta.vertex_count) + len(pos), has_attributes=bool(names), uniq=uniq,
                            manifest=manifest, extras=extras, compression=opts["compression"],
                            object_index_layout=opts["object_index_layout"])
    more, rest_docs = _scratch_plan(rest)
    docs.update(rest_docs)
    summary: AppendSummary = {"geometry_type": "point_cloud", "vertex_count": int(level.meta.vertex_count) + len(pos),
                              "appended": len(pos), "chunks_rewritten": len(touched), "chunks_copied": len(untouched),
                              "object_count": 0 if uniq is None else len(uniq)}
    return summary, uploads + more, copies, docs


def _member(rows: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Which rows of ``rows`` (n, d) int64 are rows of ``table`` (m, d)."""
    if not len(rows) or not len(table):
        return np.zeros(len(rows), bool)
    both = np.concatenate([table, rows])
    _, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    return np.isin(inv[len(table):], inv[:len(table)])


async def _open_scratch(path: str) -> DatasetReader:
    return await DatasetReader.open(path)


async def _load(ex: Executor, url: str) -> tuple[md.RootMeta, load.Level]:
    return await load.load_root(ex, url)

