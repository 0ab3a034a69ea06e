"""PLY point clouds and meshes (plyfile), ASCII or binary.

The ``vertex`` element's ``x, y, z`` are the positions (their dtype kept); every other vertex
property is a vertex attribute with its dtype.  A ``face`` element makes a mesh (all faces the
same length; 3..8 corners).  Property order, list types, format and comments go to the
``zvf_source`` record so a file converted back has the same header.  plyfile reads binary
files through a memory map and writes whole elements, so both directions hold the file's
arrays once in memory.

A mesh of several objects (or of one object whose id is not 0, or with object attributes) is
written with a vertex property ``object_id`` and an ``object`` element: one row per object,
its ``object_id`` and each object attribute as a property.  A file holding both is read back
as those objects and attributes.  PLY properties are scalars: attributes of several channels,
and integers PLY cannot hold exactly, are refused naming the attribute.  PLY has no 64-bit
integers, bool or float16: such an attribute is written in the nearest PLY type with a comment
``zvf dtype <element> <property> <dtype>``, and reading the file back restores that dtype.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..config import tuning
from ..errors import InputFileError, InvalidArgumentError
from .base import (
    AXES,
    OBJECT_ID,
    Converted,
    StoreOptions,
    Written,
    exact_cast,
    object_attributes,
    source_record,
    stamp,
    take_options,
    write_batches,
)
from .parsing import need, reading
from .source_order import numbered, point_batches

if TYPE_CHECKING:
    from ..read.dataset import DatasetReader
    from ..read.selection import Selection

FACE_LISTS = ("vertex_indices", "vertex_index")
# PLY has no 64-bit integers: what a store's dtype becomes in a PLY property
_PLY_CAST = {"int64": "i4", "uint64": "u4", "bool": "u1", "float16": "f4"}
DTYPE_COMMENT = "zvf dtype"


def _plyfile() -> Any:
    return need("plyfile", "ply", "PLY")


def _faces(ply: Any, src: str) -> tuple[np.ndarray | None, dict[str, Any]]:
    if "face" not in ply:
        return None, {}
    el = ply["face"]
    name = next((p.name for p in el.properties if p.name in FACE_LISTS), None)
    if name is None:
        raise InputFileError(f"{src}: face element has no vertex_indices list")
    prop = next(p for p in el.properties if p.name == name)
    lists = el.data[name]
    if len(lists) == 0:
        return np.zeros((0, 3), np.int64), {}
    lens = np.fromiter((len(f) for f in lists), dtype=np.int64, count=len(lists))
    if np.any(lens != lens[0]):
        raise InputFileError(f"{src}: faces have {sorted(set(lens.tolist()))} corners; "
                                   f"a ZVF mesh needs one face size (triangulate first)")
    info = {"face_list": name, "face_count_dtype": prop.len_dtype, "face_index_dtype": prop.val_dtype,
            "dropped_face_properties": [p.name for p in el.properties if p.name != name]}
    return np.stack(lists).astype(np.int64), info


async def to_store(fmt: str, src: str, dst: str, store: StoreOptions, **options: Any) -> Converted:
    opts = take_options(fmt, options, {"batch_rows": tuning().convert_batch_rows, "keep_order": False})
    plyfile = _plyfile()
    with reading(src, fmt, (plyfile.PlyParseError, ValueError, EOFError, IndexError)):
        ply = plyfile.PlyData.read(src)
    if "vertex" not in ply:
        raise InputFileError(f"{src}: no vertex element")
    v = ply["vertex"].data
    axes = [a for a in AXES if a in v.dtype.names]
    if axes not in (["x", "y"], ["x", "y", "z"]):
        raise InputFileError(f"{src}: vertex element needs x, y[, z] properties, has {v.dtype.names}")
    props = [(p.name, p.val_dtype) for p in ply["vertex"].properties]
    names = [n for n, _ in props if n not in axes]
    pos = np.column_stack([v[a] for a in axes])
    comments, stored = _stored_dtypes(list(ply.comments), src)
    attrs = {n: _restored(np.ascontiguousarray(v[n]), stored.get(("vertex", n)), src, n) for n in names}
    faces, finfo = _faces(ply, src)
    oids, oattrs = _objects(ply, attrs, src) if faces is not None else (None, None)
    if oattrs:
        oattrs = {n: _restored(a, stored.get(("object", n)), src, n) for n, a in oattrs.items()}
    record = {"format": "ply", "text": bool(ply.text), "byte_order": ply.byte_order, "comments": comments,
              "obj_info": list(ply.obj_info), "vertex_properties": props, **finfo}
    stamp(store, record)
    if faces is None:
        rows = int(opts["batch_rows"])

        def batches() -> Iterator[dict[str, Any]]:
            for i in range(0, len(pos), rows):
                yield {"positions": pos[i:i + rows], "attributes": {k: a[i:i + rows] for k, a in attrs.items()}}

        extent = (pos.min(axis=0).tolist(), pos.max(axis=0).tolist(), len(pos)) if len(pos) else None
        s = await write_batches(dst, numbered(batches) if opts["keep_order"] else batches, store, extent=extent,
                                positions=pos, dtype=pos.dtype)
        out: Converted = {"vertices": s.vertex_count}
    else:
        if opts["keep_order"]:
            raise InvalidArgumentError(f"{src}: keep_order applies to point clouds (a mesh's faces name its "
                                       f"vertices in the file's order anyway)")
        from ..write.objects.memory import write_mesh

        s = await write_mesh(dst, pos, faces, chunk_shape=store.chunk_shape, attributes=attrs or None,
                             object_ids=oids, object_attributes=oattrs, dtype=pos.dtype, **store.writer_kw())
        out = {"vertices": s.vertex_count, "faces": len(faces)}
    return out


async def from_store(fmt: str, ds: DatasetReader, dst: str, written: Written, **options: Any) -> Converted:
    opts = take_options(fmt, options, {"level": 0, "ascii": None, "keep_order": None})
    plyfile = _plyfile()
    rec = source_record(ds, "ply")
    level = opts["level"]
    faces = None
    oids = None
    objects = None
    narrowed: list[str] = []  # "zvf dtype" comments of the attributes PLY holds in another type
    if ds.geometry_type == "mesh":
        await written.start(level)
        ids = await ds.object_ids(level=level)
        sel = await ds.read_objects(ids, level=level, combined=True)
        written.add(len(sel))
        faces = sel.faces
        oattrs = await object_attributes(ds, level)
        if len(ids) > 1 or oattrs or (len(ids) and ids[0] != 0):
            if OBJECT_ID in sel.attributes:
                raise InvalidArgumentError(f"{ds.url}: the vertex attribute {OBJECT_ID!r} has the name PLY's "
                                           f"object ids are written under; rename it to convert the mesh to PLY")
            objects_of = cast(np.ndarray, sel.objects)  # a combined read of objects names them
            offsets = cast(np.ndarray, sel.offsets)  # likewise its object boundaries
            sizes = np.diff(offsets)
            if (sizes == 0).any():
                raise InvalidArgumentError(f"{ds.url}: object {int(objects_of[np.argmax(sizes == 0)])} has no "
                                           f"vertices; a PLY mesh names its objects through their vertices")
            oids = np.repeat(objects_of, sizes)
            objects = _element({OBJECT_ID: objects_of, **oattrs}, [], {}, ds.url, "object", narrowed)
    else:
        sel = _concat([s async for s in await point_batches(ds, level, opts["keep_order"], written)], ds.ndim)
    axes = list(AXES[:ds.ndim])
    cols = dict(zip(axes, sel.positions.T))
    cols.update(sel.attributes)
    if oids is not None:
        cols[OBJECT_ID] = oids
    vert = _element(cols, [n for n, _ in rec.get("vertex_properties", [])], dict(rec.get("vertex_properties", [])),
                    ds.url, "vertex", narrowed)
    elements = [plyfile.PlyElement.describe(vert, "vertex")]
    if objects is not None:
        elements.append(plyfile.PlyElement.describe(objects, "object"))
    if faces is not None:
        name = rec.get("face_list", "vertex_indices")
        idx_dt = rec.get("face_index_dtype", "i4")
        fa = np.empty(len(faces), dtype=[(name, idx_dt, (faces.shape[1],))])
        fa[name] = faces
        elements.append(plyfile.PlyElement.describe(
            fa, "face", len_types={name: rec.get("face_count_dtype", "u1")}, val_types={name: idx_dt}))
    text = rec.get("text", False) if opts["ascii"] is None else bool(opts["ascii"])
    plyfile.PlyData(elements, text=text, byte_order=rec.get("byte_order", "<") if not text else "=",
                    comments=[*rec.get("comments", []), *narrowed], obj_info=rec.get("obj_info", [])).write(dst)
    counts: Converted = {"vertices": len(vert)}
    if faces is not None:
        counts["faces"] = len(faces)
    return counts


def _element(cols: dict[str, np.ndarray], order: list[str], given: dict[str, str], url: str,
             what: str, narrowed: list[str]) -> np.ndarray:
    """The rows of a PLY element holding ``cols`` (the names in ``order`` first), each column in the
    PLY type ``given`` for it or the nearest one PLY has; refuses a column PLY cannot hold exactly.
    A column held in a type other than its own gets a ``zvf dtype`` comment in ``narrowed``."""
    names = [n for n in order if n in cols] + [n for n in cols if n not in order]
    dtype = []
    for n in names:
        col = cols[n]
        if col.ndim != 1:
            raise InvalidArgumentError(
                f"{url}: {what} attribute {n!r} has {col.shape[1]} channels; PLY properties are scalar")
        dtype.append((n, given.get(n, _PLY_CAST.get(col.dtype.name, col.dtype.str))))
    rows = np.empty(len(next(iter(cols.values()))) if cols else 0, dtype=dtype)
    for n in names:
        rows[n] = cols[n]
        if cols[n].dtype.kind in "iub" and not np.array_equal(rows[n], cols[n]):
            raise InvalidArgumentError(f"{url}: {what} attribute {n!r} holds values PLY's {rows[n].dtype} "
                                       f"property cannot (PLY has no 64-bit integers)")
        if rows[n].dtype != cols[n].dtype and n != OBJECT_ID:
            narrowed.append(f"{DTYPE_COMMENT} {what} {n} {cols[n].dtype.name}")
    return rows


def _stored_dtypes(comments: list[str], src: str) -> tuple[list[str], dict[tuple[str, str], np.dtype[Any]]]:
    """(the file's other comments, the store dtype of each (element, property) a ``zvf dtype``
    comment names)."""
    kept: list[str] = []
    stored: dict[tuple[str, str], np.dtype[Any]] = {}
    for c in comments:
        parts = c.split()
        if parts[:2] != DTYPE_COMMENT.split():
            kept.append(c)
            continue
        if len(parts) != 5 or parts[4] not in _PLY_CAST:
            raise InputFileError(f"{src}: comment {c!r} is not '{DTYPE_COMMENT} <element> <property> <dtype>' "
                                 f"with dtype one of {sorted(_PLY_CAST)}")
        stored[(parts[2], parts[3])] = np.dtype(parts[4])
    return kept, stored


def _restored(col: np.ndarray, dtype: np.dtype[Any] | None, src: str, name: str) -> np.ndarray:
    """``col`` in the dtype its ``zvf dtype`` comment names (unchanged without one); refuses values
    that dtype does not hold exactly (a file edited after zvf wrote it)."""
    return col if dtype is None else exact_cast(col, dtype, src, f"property {name!r}")


def _objects(ply: Any, attrs: dict[str, np.ndarray], src: str) -> tuple[np.ndarray | None, dict[str, Any] | None]:
    """(object id per vertex, object attributes by sorted id) of a mesh written with an ``object``
    element (module docstring); the vertex ``object_id`` is taken out of ``attrs``.  (None, None)
    for other files."""
    if "object" not in ply or OBJECT_ID not in attrs:
        return None, None
    table = ply["object"].data
    if OBJECT_ID not in (table.dtype.names or ()):
        return None, None
    ids = np.asarray(table[OBJECT_ID]).astype(np.int64)
    oids = attrs.pop(OBJECT_ID).astype(np.int64)
    order = np.argsort(ids, kind="stable")
    if len(np.unique(ids)) != len(ids) or not np.array_equal(ids[order], np.unique(oids)):
        raise InputFileError(f"{src}: the object element's {OBJECT_ID}s ({len(ids)}) are not the distinct "
                             f"vertex {OBJECT_ID}s ({len(np.unique(oids))})")
    oattrs = {n: np.ascontiguousarray(table[n][order]) for n in table.dtype.names if n != OBJECT_ID}
    return oids, oattrs or None


def _concat(parts: list[Selection], ndim: int) -> Selection:
    """One Selection from chunk batches (PLY is written whole)."""
    from ..read.selection import Selection

    if not parts:
        return Selection(np.zeros((0, ndim)))
    return Selection(np.concatenate([p.positions for p in parts]),
                     {k: np.concatenate([p.attributes[k] for p in parts]) for k in parts[0].attributes})
