"""Streamlines: TRK and TCK (nibabel), TRX (trx-python).

Positions are RAS+ millimetres (what nibabel and trx hand out), float32 as the files store
them.  Per-point data become vertex attributes, per-streamline data object attributes, TRX
groups ZVF groups (names in the ``zvf_source`` record) and their ``dpg`` data group attributes
(one (1, C) array per group and name in TRX).  The voxel-to-RASMM affine, the volume
dimensions, voxel sizes and order are recorded, so a file written back lands in the same space.
Reading streams: TRK/TCK through nibabel's lazy loading, TRX through its
memory maps, in batches of streamlines handed straight to the streaming polyline writer.
Writing streams TRK/TCK too (nibabel saves a lazy tractogram fed batch by batch); TRX is
assembled whole, as trx-python builds its file from whole arrays.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..config import tuning
from ..errors import InputFileError, InvalidArgumentError
from .base import (
    Converted,
    StoreOptions,
    Written,
    group_attributes,
    object_attributes,
    object_batches,
    source_record,
    stamp,
    take_options,
    vertex_attribute_names,
    write_batches,
)
from .parsing import guarded, need, reading

if TYPE_CHECKING:
    from ..read.dataset import DatasetReader


def _nib() -> Any:
    return need("nibabel", "neuro", "TRK/TCK")


def _trx() -> Any:
    need("trx", "neuro", "TRX")
    import trx.trx_file_memmap as tmm

    return tmm


def _nib_batches(tractogram: Any, batch: int) -> Iterator[dict[str, Any]]:
    """Batches of a (lazy) nibabel tractogram, one streamline at a time from the file.

    A lazy tractogram's items are in the file's space; its pending affine (what its
    ``streamlines`` property applies) takes them to RASMM.
    """
    apply_affine = _nib().affines.apply_affine
    affine = np.asarray(getattr(tractogram, "_affine_to_apply", np.eye(4)))
    identity = np.array_equal(affine, np.eye(4))
    out: dict[str, Any] = {"polylines": [], "attributes": {}, "object_attributes": {}}
    for item in tractogram:
        pts = np.asarray(item.streamline)
        out["polylines"].append(pts if identity else apply_affine(affine, pts).astype(pts.dtype))
        for k, v in item.data_for_points.items():
            out["attributes"].setdefault(k, []).append(np.asarray(v))
        for k, v in item.data_for_streamline.items():
            out["object_attributes"].setdefault(k, []).append(np.asarray(v))
        if len(out["polylines"]) == batch:
            yield _stack(out)
            out = {"polylines": [], "attributes": {}, "object_attributes": {}}
    if out["polylines"]:
        yield _stack(out)


def _stack(out: dict[str, Any]) -> dict[str, Any]:
    out["object_attributes"] = {k: np.stack(v) for k, v in out["object_attributes"].items()}
    return out


def _trx_batches(trx: Any, batch: int) -> Iterator[dict[str, Any]]:
    """Batches of views into the TRX memory maps."""
    seq = trx.streamlines
    offsets = np.asarray(seq._offsets, dtype=np.int64)
    lengths = np.asarray(seq._lengths, dtype=np.int64)
    for lo in range(0, len(offsets), batch):
        hi = min(lo + batch, len(offsets))
        start, stop = int(offsets[lo]), int(offsets[hi - 1] + lengths[hi - 1])
        cuts = offsets[lo + 1:hi] - start
        yield {"polylines": np.split(seq._data[start:stop], cuts),
               "attributes": {k: np.split(np.asarray(v._data[start:stop]), cuts)
                              for k, v in trx.data_per_vertex.items()},
               "object_attributes": {k: np.asarray(v[lo:hi]) for k, v in trx.data_per_streamline.items()}}


def _read_errors(fmt: str) -> tuple[type[BaseException], ...]:
    """What nibabel (TRK/TCK) or trx-python (a zip of arrays) raise on a bad or truncated file."""
    if fmt == "trx":
        import zipfile

        return (zipfile.BadZipFile, ValueError, KeyError, EOFError, OSError)
    from nibabel.streamlines.tractogram_file import DataError, HeaderError

    return (DataError, HeaderError, ValueError, EOFError, IndexError)


def _text(value: Any) -> str:
    return value.decode("ascii", "replace").rstrip("\x00") if isinstance(value, bytes) else str(value)


def _squeeze(arrays: dict[str, Any]) -> dict[str, Any]:
    """One-channel data as (n,) so the store holds plain scalars."""
    return {k: [a.reshape(len(a)) if a.ndim == 2 and a.shape[1] == 1 else a for a in v] if isinstance(v, list)
            else (v.reshape(len(v)) if v.ndim == 2 and v.shape[1] == 1 else v) for k, v in arrays.items()}


def _trx_group_attributes(trx: Any, names: list[str], src: str) -> dict[str, np.ndarray] | None:
    """TRX ``dpg`` (one (1, C) array per group and name) as ZVF group attributes, row g = group ``names[g]``.

    A name some groups lack is NaN there when it is floating point, and refused otherwise (no
    integer value means "absent")."""
    dpg = trx.data_per_group
    keys = sorted({k for name in names for k in dpg.get(name, {})})
    out = {}
    for key in keys:
        rows = [dpg.get(name, {}).get(key) for name in names]
        given = [np.asarray(r) for r in rows if r is not None]
        width = {r.size for r in given}
        if len(width) != 1:
            raise InputFileError(f"{src}: data_per_group {key!r} has {sorted(width)} channels across groups")
        dtype = np.result_type(*given)
        missing = [names[g] for g, r in enumerate(rows) if r is None]
        if missing and dtype.kind != "f":
            raise InputFileError(f"{src}: data_per_group {key!r} is missing for group {missing[0]!r}; "
                                 f"only floating-point group data may be missing (NaN)")
        n = width.pop()
        col = np.stack([np.full(n, np.nan, dtype) if r is None else np.asarray(r, dtype).reshape(n) for r in rows])
        out[key] = col.reshape(len(names)) if n == 1 else col
    return out or None


async def to_store(fmt: str, src: str, dst: str, store: StoreOptions, **options: Any) -> Converted:
    opts = take_options(fmt, options, {"batch": tuning().convert_batch_streamlines})
    from ..write.objects.memory import write_polylines

    groups = None
    group_attrs = None
    trx = None
    batch = int(opts["batch"])
    errors = _read_errors(fmt)
    try:
        if fmt == "trx":
            with reading(src, fmt, errors):
                trx = _trx().load(src)
            record = {"format": "trx", "affine": np.asarray(trx.header["VOXEL_TO_RASMM"]).tolist(),
                      "dimensions": np.asarray(trx.header["DIMENSIONS"]).tolist(), "groups": sorted(trx.groups)}

            def source() -> Iterator[dict[str, Any]]:
                return _trx_batches(trx, batch)
            if trx.groups:
                groups = {g: np.asarray(trx.groups[name], dtype=np.int64) for g, name in enumerate(record["groups"])}
                group_attrs = _trx_group_attributes(trx, record["groups"], src)
        else:
            nib = _nib()
            with reading(src, fmt, errors):
                f = nib.streamlines.load(src, lazy_load=True)  # a lazy tractogram iterates again for each pass
            hdr = f.header
            F = nib.streamlines.Field
            record = {"format": fmt, "affine": np.asarray(hdr.get(F.VOXEL_TO_RASMM, np.eye(4))).tolist()}
            if fmt == "trk":
                record.update(dimensions=np.asarray(hdr[F.DIMENSIONS]).tolist(),
                              voxel_sizes=np.asarray(hdr[F.VOXEL_SIZES]).tolist(),
                              voxel_order=_text(hdr[F.VOXEL_ORDER]))

            def source() -> Iterator[dict[str, Any]]:
                return _nib_batches(f.tractogram, batch)

        def squeezed() -> Iterator[dict[str, Any]]:
            return ({"polylines": b["polylines"], "attributes": _squeeze(b["attributes"]),
                     "object_attributes": _squeeze(b["object_attributes"])} for b in source())

        batches = guarded(squeezed, src, fmt, errors)

        first = next(batches(), None)
        if first is None:
            raise InputFileError(f"{src}: no streamlines")
        stamp(store, record)
        s = await write_batches(dst, batches, store, write_polylines, main="polylines", geometry_type="streamline",
                                groups=groups, group_attributes=group_attrs, dtype=first["polylines"][0].dtype)
    finally:
        if trx is not None:  # the batches are views into its memory maps: close only after the write
            trx.close()
    return {"vertices": s.vertex_count, "objects": s.object_count}


async def from_store(fmt: str, ds: DatasetReader, dst: str, written: Written, **options: Any) -> Converted:
    opts = take_options(fmt, options, {"level": 0})
    level = opts["level"]
    if ds.ndim != 3:
        raise InvalidArgumentError(f"{ds.url}: {fmt.upper()} streamlines are 3-D, the store is {ds.ndim}-D")
    rec = source_record(ds)
    dps = {k: v.reshape(len(v), -1) for k, v in (await object_attributes(ds, level)).items()}
    affine = np.asarray(rec.get("affine", np.eye(4)), dtype=np.float64)
    dims = rec.get("dimensions", [1, 1, 1])
    if fmt == "trx":
        return await _save_trx(ds, dst, level, rec, dps, affine, dims, written)
    return await _save_nibabel(fmt, ds, dst, level, rec, dps, affine, dims, written)


async def _save_nibabel(fmt: str, ds: DatasetReader, dst: str, level: int, rec: dict[str, Any],
                        dps: dict[str, np.ndarray], affine: np.ndarray, dims: list[int],
                        written: Written) -> Converted:
    """TRK/TCK written as the store is read: nibabel saves a lazy tractogram in one pass, so only
    one batch of objects is held at a time (a worker thread pulls the batches from the event loop)."""
    import anyio.from_thread
    import anyio.to_thread

    nib = _nib()

    batches = object_batches(ds, level, written)
    counts: Converted = {"vertices": 0, "objects": 0}
    per_point = fmt == "trk"  # TCK holds positions only
    point_names = await vertex_attribute_names(ds, level) if per_point else []
    # nibabel zips one generator per field; the positions' generator reads the store and leaves each
    # streamline's other fields in these queues, which the other generators take in step.
    queues: dict[str, deque[np.ndarray]] = {k: deque() for k in [*(f"s:{k}" for k in dps if per_point),
                                                    *(f"p:{k}" for k in point_names)]}

    async def next_batch() -> tuple[int, Any] | None:
        try:
            return await batches.__anext__()
        except StopAsyncIteration:
            return None

    def positions() -> Iterator[np.ndarray]:
        while (got := anyio.from_thread.run(next_batch)) is not None:
            lo, sel = got
            bounds = sel.offsets.tolist()
            counts["vertices"] += len(sel.positions)
            counts["objects"] += len(bounds) - 1
            points = {k: v.reshape(len(v), -1) for k, v in sel.attributes.items() if f"p:{k}" in queues}
            for i, (a, b) in enumerate(pairwise(bounds)):
                for k, v in points.items():
                    queues[f"p:{k}"].append(v[a:b])
                for k in dps if per_point else ():
                    queues[f"s:{k}"].append(dps[k][lo + i])
                yield sel.positions[a:b]

    def taker(key: str) -> Callable[[], Iterator[np.ndarray]]:
        def take() -> Iterator[np.ndarray]:
            q = queues[key]
            while True:
                yield q.popleft()
        return take

    tract = nib.streamlines.LazyTractogram(positions, {k: taker(f"s:{k}") for k in dps} if per_point else {},
                                           {k: taker(f"p:{k}") for k in point_names}, affine_to_rasmm=np.eye(4))
    F = nib.streamlines.Field
    header = {F.VOXEL_TO_RASMM: affine}
    if fmt == "trk":
        header.update({F.DIMENSIONS: np.asarray(dims, dtype=np.int16),
                       F.VOXEL_SIZES: np.asarray(rec.get("voxel_sizes", [1, 1, 1]), dtype=np.float32),
                       F.VOXEL_ORDER: rec.get("voxel_order", "RAS")})
    try:
        await anyio.to_thread.run_sync(lambda: nib.streamlines.save(tract, dst, header=header))
    finally:
        await batches.aclose()
    return counts


async def _save_trx(ds: DatasetReader, dst: str, level: int, rec: dict[str, Any], dps: dict[str, np.ndarray],
                    affine: np.ndarray, dims: list[int], written: Written) -> Converted:
    """TRX: trx-python builds its file from whole arrays, so the tractogram is assembled first."""
    streamlines = _nib().streamlines
    lines: list[np.ndarray] = []
    dpp: dict[str, list[np.ndarray]] = {}
    async for _, sel in object_batches(ds, level, written):
        cuts = cast(np.ndarray, sel.offsets)[1:-1]  # set: the Selection is read by objects
        lines += np.split(sel.positions, cuts)
        for k, v in sel.attributes.items():
            dpp.setdefault(k, []).extend(np.split(v.reshape(len(v), -1), cuts))
    empty = [i for i, line in enumerate(lines) if not len(line)]
    if empty:  # nibabel's ArraySequence drops them: every later streamline would take the id before it
        ids = (await ds.object_ids(level=level)).tolist()
        named = [ids[i] if i < len(ids) else i for i in empty[:5]]
        raise InvalidArgumentError(
            f"TRX holds no streamline without vertices (nibabel and trx-python drop them, renumbering the "
            f"streamlines after them); object{'s' if len(empty) > 1 else ''} {named}{' ...' if len(empty) > 5 else ''}"
            f" of {ds.url} ha{'ve' if len(empty) > 1 else 's'} none")
    tract = streamlines.Tractogram(
        streamlines.ArraySequence(lines), data_per_point={k: streamlines.ArraySequence(v) for k, v in dpp.items()},
        data_per_streamline=dps, affine_to_rasmm=np.eye(4))
    tmm = _trx()
    ref = {"NB_VERTICES": 0, "VOXEL_TO_RASMM": affine, "DIMENSIONS": np.asarray(dims, dtype=np.uint16)}
    trx = tmm.TrxFile.from_tractogram(tract, reference=ref, dtype_dict={
        "positions": lines[0].dtype if lines else np.float32, "offsets": np.uint32,
        "dpv": {k: v[0].dtype for k, v in dpp.items()}, "dps": {k: v.dtype for k, v in dps.items()}})
    try:
        names = rec.get("groups") if rec.get("format") == "trx" else None
        gattrs = await group_attributes(ds, level)
        for g, members in enumerate(await ds.groups(level=level)):
            name = names[g] if names and g < len(names) else f"group_{g}"
            trx.groups[name] = np.asarray(members, dtype=np.uint32)
            if gattrs:
                trx.data_per_group[name] = {k: v[g].reshape(1, -1) for k, v in gattrs.items()}
        tmm.save(trx, dst)
    finally:
        trx.close()
    return {"vertices": int(sum(len(x) for x in lines)), "objects": len(lines)}
