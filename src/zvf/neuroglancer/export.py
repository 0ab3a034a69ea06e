"""``zvf neuroglancer export``: a store as Neuroglancer precomputed files in a local directory.

One streaming pass over the store (``iter_chunks`` for point clouds,
``iter_objects`` otherwise) appends fixed-size annotation records to spill
files and writes skeletons / meshes object by object, so geometry never sits
in memory; the sharded indexes are then built from memory maps of the spill
(index arrays of ~30 bytes per annotation stay in memory).  Everything goes
to ``OUT.partial-<pid>`` first and is renamed into place at the end, so an
interrupted export leaves no half-written OUT.

Layout under OUT (see docs/NEUROGLANCER.md): ``annotations/`` (POINT for
point clouds, LINE -- one per edge -- for lines, polylines, streamlines,
graphs and skeletons), ``skeletons/`` (skeleton stores), ``mesh/`` (mesh
stores), each of the last two with ``segment_properties/`` (object ids,
attributes and groups).  Positions are float32 after subtracting the
``offset`` (see :mod:`.coords`); the viewer state adds it back.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError, StoreExistsError
from . import annotations as ann
from .coords import check_precision, resolve_offset, shifted
from .objects import (
    MESH_INFO,
    PROPERTIES,
    encode_mesh,
    encode_skeleton,
    mesh_manifest,
    nm_per_unit,
    segment_properties,
    skeleton_attributes,
    skeleton_info,
)
from .sharded import ShardingSpec, choose_spec, compressed_morton, encode_shards

if TYPE_CHECKING:
    from ..read.dataset import DatasetReader
    from ..read.selection import Selection

Progress = Callable[[int, int], object]  # (done, total)

LINE_GEOMETRIES = ("line", "polyline", "streamline", "graph", "skeleton")


def dimensions(ds: DatasetReader, unit: str) -> dict[str, list[Any]]:
    """``{axis: [1, unit]}`` from the store's axis names."""
    return {n: [1, unit] for n in axis_names(ds)}


def point_schema(ndim: int, attributes: dict[str, np.ndarray],
                 relationships: list[str]) -> tuple[ann.Schema, list[str]]:
    """The POINT annotation schema for a chunk's attributes, and the attributes it cannot hold."""
    props, skipped = ann.properties_for(
        {n: (v.dtype, int(np.prod(v.shape[1:], dtype=np.int64))) for n, v in attributes.items()})
    return ann.Schema("POINT", ndim, props, relationships), skipped


def axis_names(ds: DatasetReader) -> list[str]:
    """The store's axis names (x, y, z, w by default)."""
    names = [a.get("name") for a in (ds.root.axes or ()) if isinstance(a, dict)]
    named = [n for n in names if isinstance(n, str) and n]
    if len(names) != ds.ndim or len(named) != len(names):
        return ["x", "y", "z", "w"][:ds.ndim] if ds.ndim <= 4 else [f"d{i}" for i in range(ds.ndim)]
    return named


def skeleton_bytes(sel: Selection, attrs: list[tuple[str, np.dtype, int]], positions: np.ndarray) -> bytes:
    """One object's skeleton file (``positions``: the object's, shifted); an object without edges is a
    skeleton of bare vertices."""
    edges = sel.edges if sel.edges is not None else np.zeros((0, 2), np.int64)
    return encode_skeleton(positions, edges, sel.attributes, attrs)


async def store_segment_properties(ds: DatasetReader, level: int, label: str | None = None) -> dict[str, Any]:
    """The segment properties of a level's objects: ids, object attributes, groups as tags."""
    oids = await ds.object_ids(level=level)
    lvl = await ds.family(level, "object_attributes")
    attributes = {n: await ds.object_attribute(n, level=level) for n in lvl.named("object_attributes")}
    return segment_properties(oids, attributes, await ds.groups(level=level), label)


class _Spill:
    """Annotation records, ids and owners appended to files, read back as memory maps."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.paths = [directory / n for n in ("records.bin", "ids.bin", "objects.bin")]
        self.files = [open(p, "wb") for p in self.paths]  # noqa: SIM115 -- appended to, closed by maps()
        self.schema: ann.Schema | None = None
        self.n = 0

    @property
    def records_schema(self) -> ann.Schema:
        """The schema of the records, set before the first is appended."""
        if self.schema is None:
            raise RuntimeError("the annotation spill has no schema yet")
        return self.schema

    def append(self, records: np.ndarray, ids: np.ndarray, objects: np.ndarray) -> None:
        for fh, arr in zip(self.files, (records, ids.astype("<u8"), objects.astype("<i8"))):
            fh.write(arr.tobytes())
        self.n += len(records)

    def maps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        for fh in self.files:
            fh.close()
        if self.n == 0:
            return np.zeros(0, self.records_schema.dtype), np.zeros(0, "<u8"), np.zeros(0, "<i8")
        records, ids, objects = self.paths
        return (np.memmap(records, dtype=self.records_schema.dtype, mode="r"), np.memmap(ids, dtype="<u8", mode="r"),
                np.memmap(objects, dtype="<i8", mode="r"))


class _BlobSpill:
    """Variable-size values (encoded skeletons) appended to one file with their keys."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fh = open(path, "wb")  # noqa: SIM115 -- appended to, closed by shards()
        self.keys: list[int] = []
        self.sizes: list[int] = []

    def append(self, key: int, value: bytes) -> None:
        self.fh.write(value)
        self.keys.append(key)
        self.sizes.append(len(value))

    def shards(self, hash: str = "murmurhash3_x86_128") -> tuple[ShardingSpec, Iterator[tuple[str, bytes]]]:
        self.fh.close()
        sizes = np.asarray(self.sizes, dtype=np.int64)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        spec = choose_spec(len(sizes), int(sizes.sum()), hash=hash)
        if not len(sizes):
            return spec, iter(())
        mm = np.memmap(self.path, dtype=np.uint8, mode="r") if sizes.sum() else np.zeros(0, np.uint8)
        return spec, encode_shards(spec, np.asarray(self.keys, dtype=np.uint64),
                                   lambda rows: [mm[starts[r]:starts[r] + sizes[r]].tobytes() for r in rows])


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


async def export(ds: DatasetReader, out: str | os.PathLike[str], *, level: int = 0, unit: str = "nm", limit: int = 5000,
                 offset: str | Sequence[float] | None = "auto", label: str | None = None, prefetch: int = 4,
                 progress: Progress | None = None) -> dict[str, Any]:
    """Write ``ds`` (an open AsyncDataset) as Neuroglancer precomputed data under directory ``out``.

    ``limit`` caps the annotations per spatial cell on every level but the
    finest; ``unit`` names the store's coordinate unit (nm, um, mm, ...);
    ``offset`` is subtracted from every position ("auto", "none" or numbers,
    see :func:`.coords.resolve_offset`); ``label`` names the object attribute
    shown beside each object id.  Returns counts, the layer directories and
    what a viewer state needs (bounds, offset, axes, object ids to show).
    """
    out = Path(out)
    if out.exists():
        raise StoreExistsError(f"output {str(out)!r} exists; remove it or pick another OUT")
    if not out.parent.is_dir():
        raise InvalidArgumentError(f"output directory {str(out.parent)!r} does not exist")
    if not isinstance(limit, (int, np.integer)) or limit < 1:
        raise InvalidArgumentError(f"limit must be an integer >= 1, got {limit!r}")
    scale_nm = nm_per_unit(unit)
    geometry = ds.geometry_type
    lo, hi = ds.bounds
    shift = resolve_offset(offset, lo, hi, ds.chunk_shape)
    tmp = out.parent / f"{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        summary = await _export(ds, tmp, geometry=geometry, level=level, unit=unit, scale_nm=scale_nm, limit=int(limit),
                                offset=shift, label=label, prefetch=prefetch, progress=progress)
        shutil.rmtree(tmp / ".spill", ignore_errors=True)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    summary.update(out=str(out), offset=shift.tolist(), bounds=[lo.tolist(), hi.tolist()], axes=axis_names(ds))
    return summary


class _Shift:
    """Positions shifted by the offset as float32, warning once when float32 loses precision."""

    def __init__(self, offset: np.ndarray, where: str):
        self.offset, self.where, self.warned = offset, where, False

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        if not self.warned and len(positions):
            self.warned = check_precision(positions, self.offset, self.where)
        return shifted(positions, self.offset)


async def _export(ds: DatasetReader, root: Path, *, geometry: str | None, level: int, unit: str, scale_nm: float,
                  limit: int, offset: np.ndarray, label: str | None, prefetch: int,
                  progress: Progress | None) -> dict[str, Any]:
    lvl = await ds.level(level)
    spill = _Spill(root / ".spill" / "annotations")
    shift = _Shift(offset, f"neuroglancer export of {ds.url}")
    summary: dict[str, Any] = {"geometry_type": geometry, "layers": [], "annotations": 0, "skeletons": 0,
                               "meshes": 0, "skipped_attributes": [], "segments": []}
    relationships: list[str] = []
    if geometry == "point_cloud":
        relationships = ["object"] if ds.has_objects(lvl.index) else []
        total = len(lvl.nonempty_chunks)
        stream = ds.iter_chunks(level=level, prefetch=prefetch, batch_chunks=1)  # batch i is nonempty chunk i
        async with stream as batches:
            i = 0
            async for sel in batches:
                if spill.schema is None:
                    spill.schema, summary["skipped_attributes"] = point_schema(ds.ndim, sel.attributes, relationships)
                owners = sel.object_ids if sel.object_ids is not None else np.full(len(sel), -1)
                spill.append(spill.schema.records(shift(sel.positions), sel.attributes), ann.point_ids(i, len(sel)),
                             owners)
                i += 1
                if progress is not None:
                    progress(i, total)
    elif geometry in LINE_GEOMETRIES or geometry == "mesh":
        await _objects(ds, root, spill, geometry=geometry, level=level, scale_nm=scale_nm, shift=shift,
                       prefetch=prefetch, progress=progress, summary=summary)
        relationships = ["object"]
        if geometry in ("skeleton", "mesh"):
            properties = json.dumps(await store_segment_properties(ds, level, label)).encode()
            _write(root / ("skeletons" if geometry == "skeleton" else "mesh") / PROPERTIES / "info", properties)
    else:
        raise InvalidArgumentError(f"cannot export geometry type {geometry!r} to neuroglancer")
    if geometry != "mesh":
        if spill.schema is None:
            spill.schema = ann.Schema("POINT" if geometry == "point_cloud" else "LINE", ds.ndim, [], relationships)
        lo, hi = (np.asarray(b, np.float64) - offset for b in ds.bounds)
        summary["annotations"] = write_annotations(root / "annotations", spill, lower=lo, upper=hi,
                                                   finest=np.asarray(ds.chunk_shape, np.float64), limit=limit,
                                                   dims=dimensions(ds, unit))
        summary["layers"].insert(0, "annotations")
    return summary


async def _objects(ds: DatasetReader, root: Path, spill: _Spill, *, geometry: str, level: int, scale_nm: float,
                   shift: _Shift, prefetch: int, progress: Progress | None, summary: dict[str, Any]) -> None:
    """Lines (one per edge), skeletons or meshes, object by object."""
    oids = await ds.object_ids(level=level)
    shown = tuning().neuroglancer_max_segments
    summary["segments"] = np.sort(oids)[:shown].tolist() if geometry in ("skeleton", "mesh") else []
    skel = _BlobSpill(root / ".spill" / "skeletons.bin") if geometry == "skeleton" else None
    attrs: list[tuple[str, np.dtype, int]] | None = None
    if geometry == "mesh":
        _write(root / "mesh" / "info", json.dumps(MESH_INFO).encode())
    stream = ds.iter_objects(oids, level=level, prefetch=prefetch)
    async with stream as objs:
        k = 0
        async for sel in objs:
            oid = int(oids[k])
            k += 1
            if progress is not None:
                progress(k, len(oids))
            if len(sel) == 0:
                continue
            if geometry == "mesh":
                shift(sel.positions)  # the precision check only: encode_mesh shifts and scales in float64
                name, manifest = mesh_manifest(oid)
                _write(root / "mesh" / name, manifest)
                faces = sel.faces if sel.faces is not None else np.zeros((0, 3), np.int64)
                _write(root / "mesh" / f"{oid}.frag", encode_mesh(sel.positions, faces, scale_nm, shift.offset))
                summary["meshes"] += 1
                continue
            if spill.schema is None:
                spill.schema = ann.Schema("LINE", ds.ndim, [], ["object"])
            positions = shift(sel.positions)
            records, ids = ann.line_records(spill.schema, positions, sel.edges, oid)
            spill.append(records, ids, np.full(len(ids), oid))
            if skel is not None:
                if attrs is None:
                    attrs = skeleton_attributes(sel.attributes)
                skel.append(oid, skeleton_bytes(sel, attrs, positions))
                summary["skeletons"] += 1
    if geometry == "mesh":
        summary["layers"].append("mesh")
    if skel is not None:
        spec, shards = skel.shards()
        for name, data in shards:
            _write(root / "skeletons" / name, data)
        _write(root / "skeletons" / "info",
               json.dumps(skeleton_info(attrs or [], scale_nm, spec.to_json())).encode())
        summary["layers"].append("skeletons")


def write_annotations(directory: Path, spill: _Spill, *, lower: np.ndarray, upper: np.ndarray, finest: np.ndarray,
                      limit: int, dims: dict[str, Any]) -> int:
    """``info``, sharded ``by_id``, related-object index and spatial levels from the spill; returns the count."""
    schema = spill.records_schema
    recs, ids, objs = spill.maps()
    n = len(recs)
    upper = np.where(upper > lower, upper, lower + 1.0)  # a flat axis still needs a positive cell size
    size = schema.dtype.itemsize
    # by_id: the record, then the related object (none for a point without an owner)
    spec = choose_spec(n, n * (size + 12))
    rel = bool(schema.relationships)

    def by_id_values(rows: np.ndarray) -> list[bytes]:
        values = []
        block = tuning().neuroglancer_index_block
        for start in range(0, len(rows), block):
            part = rows[start:start + block]
            r = np.asarray(recs[part])
            if not rel:
                blob = r.tobytes()
                values += [blob[i * size:(i + 1) * size] for i in range(len(part))]
                continue
            o = np.asarray(objs[part])
            has = o >= 0
            packed = np.zeros(len(part), dtype=np.dtype([("r", f"V{size}"), ("n", "<u4"), ("o", "<u8")]))
            packed["r"] = r.view(f"V{size}")
            packed["n"] = has
            packed["o"] = np.where(has, o, 0)
            blob, step = packed.tobytes(), packed.dtype.itemsize
            values += [blob[i * step:i * step + (step if h else size + 4)] for i, h in enumerate(has)]
        return values

    for name, data in encode_shards(spec, ids, by_id_values):
        _write(directory / "by_id" / name, data)
    info_rel: list[dict[str, Any]] = []
    if rel:
        owned = np.flatnonzero(np.asarray(objs) >= 0)
        order = owned[np.argsort(np.asarray(objs)[owned], kind="stable")]
        keys, starts = np.unique(np.asarray(objs)[order], return_index=True)
        ends = np.r_[starts[1:], len(order)]
        rspec = choose_spec(len(keys), len(order) * (size + 8))

        def related(rows: np.ndarray) -> list[bytes]:
            return [ann.encode_multiple(np.asarray(recs[order[starts[r]:ends[r]]]), ids[order[starts[r]:ends[r]]])
                    for r in rows]

        for name, data in encode_shards(rspec, keys.astype(np.uint64), related):
            _write(directory / "rel_object" / name, data)
        info_rel = [{"id": "object", "key": "rel_object", "sharding": rspec.to_json()}]
    spatial = _spatial(directory, schema, recs, ids, lower=lower, upper=upper, finest=finest, limit=limit)
    info = schema.info(dimensions=dims, lower=lower, upper=upper, by_id={"key": "by_id", "sharding": spec.to_json()},
                       spatial=spatial, relationships=info_rel)
    _write(directory / "info", json.dumps(info).encode())
    return n


def _spatial(directory: Path, schema: ann.Schema, recs: np.ndarray, ids: np.ndarray, *, lower: np.ndarray,
             upper: np.ndarray, finest: np.ndarray, limit: int) -> list[dict[str, Any]]:
    """Spatial levels, coarse to fine, each a uniform sample (fixed by annotation id) of what coarser
    levels left, at most ``limit`` per cell except on the finest level, which takes the rest."""
    n = len(recs)
    levels = ann.spatial_levels(lower, upper, finest)
    out: list[dict[str, Any]] = []
    q_prev = 0.0

    def blocks(q: float) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        block = tuning().neuroglancer_index_block
        for start in range(0, n, block):
            rows = np.arange(start, min(n, start + block))
            u = ann.uniform(np.asarray(ids[rows]))
            keep = u >= q
            lo, hi = schema.bbox(np.asarray(recs[rows[keep]]))
            yield rows[keep], u[keep], lo, hi

    for li, (grid, chunk) in enumerate(levels):
        last = li == len(levels) - 1
        ncells = int(np.prod(grid))
        counts = np.zeros(ncells, dtype=np.int64)
        for _rows, _, lo, hi in blocks(q_prev):
            _, cells = ann.expand_cells(*ann.cell_ranges(lo, hi, lower, chunk, grid))
            counts += np.bincount(ann.flat_cells(cells, grid), minlength=ncells)
        most = int(counts.max()) if n else 0
        p = 1.0 if last or most <= limit else limit / most
        q = 1.0 if p >= 1.0 else q_prev + p * (1.0 - q_prev)
        flat_l, rows_l, u_l = [], [], []
        for rows, u, lo, hi in blocks(q_prev):
            pick = u < q
            a, b = ann.cell_ranges(lo[pick], hi[pick], lower, chunk, grid)
            sub, cells = ann.expand_cells(a, b)
            flat_l.append(ann.flat_cells(cells, grid))
            rows_l.append(rows[pick][sub])
            u_l.append(u[pick][sub])
        flat = np.concatenate(flat_l) if flat_l else np.zeros(0, np.int64)
        rows = np.concatenate(rows_l) if rows_l else np.zeros(0, np.int64)
        u = np.concatenate(u_l) if u_l else np.zeros(0)
        order = np.lexsort((u, flat))  # cells in order, annotations randomly ordered within a cell
        flat, rows = flat[order], rows[order]
        cells, starts, per = np.unique(flat, return_index=True, return_counts=True)
        keys = compressed_morton(ann.unflat_cells(cells, grid), grid)
        spec = choose_spec(len(keys), len(rows) * schema.dtype.itemsize, hash="identity")

        def values(part: np.ndarray, rows: np.ndarray = rows, starts: np.ndarray = starts,
                   per: np.ndarray = per) -> list[bytes]:
            return [ann.encode_multiple(np.asarray(recs[rows[starts[c]:starts[c] + per[c]]]),
                                        ids[rows[starts[c]:starts[c] + per[c]]]) for c in part]

        for name, data in encode_shards(spec, keys, values):
            _write(directory / f"spatial{li}" / name, data)
        out.append({"key": f"spatial{li}", "grid_shape": [int(g) for g in grid],
                    "chunk_size": [float(c) for c in chunk], "limit": max(1, int(per.max()) if len(per) else 1),
                    "sharding": spec.to_json()})
        q_prev = q
        if q >= 1.0:
            break
    return out
