"""LAS/LAZ point clouds (laspy; LAZ through lazrs).

Into a store: the file is read with laspy's chunk iterator and streamed through the spilling
point writer, so memory stays bounded whatever the file size.  Positions are the scaled
coordinates as float64; every other standard dimension and every extra-bytes dimension becomes
a vertex attribute with its own dtype (bit fields as uint8, extra bytes raw, unscaled).  The
header's version, point format, scales, offsets and extra-bytes definitions go to the
``zvf_source`` record, so converting back re-quantizes to the very same integer X/Y/Z.

Out of a store: chunk by chunk through ``ds.iter_chunks``; a store from another source gets
the smallest point format holding its attributes (others become extra bytes) and ``scale``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from .base import BATCH_ROWS, StoreOptions, need, source_record, stamp, take_options, write_batches

COORDS = ("X", "Y", "Z")


def _laspy():
    return need("laspy", "las", "LAS/LAZ")


def _record(header) -> dict:
    pf = header.point_format
    return {
        "format": "las",
        "version": str(header.version),
        "point_format": int(pf.id),
        "scales": [float(v) for v in header.scales],
        "offsets": [float(v) for v in header.offsets],
        "extra_bytes": [{"name": d.name, "dtype": d.dtype.base.str, "shape": list(d.dtype.shape),
                         "description": d.description or ""} for d in pf.extra_dimensions],
        "system_identifier": header.system_identifier,
        "generating_software": header.generating_software,
    }


async def to_store(fmt: str, src: str, dst: str, store: StoreOptions, **options: Any) -> dict:
    opts = take_options(fmt, options, {"batch_rows": BATCH_ROWS})
    laspy = _laspy()
    with laspy.open(src) as reader:
        header = reader.header
        record = _record(header)
        standard = [d.name for d in header.point_format.dimensions if d.is_standard and d.name not in COORDS]
        extra = [d.name for d in header.point_format.extra_dimensions]
        extent = (header.mins.tolist(), header.maxs.tolist(), int(header.point_count))

    def batches():
        with laspy.open(src) as rd:
            for pts in rd.chunk_iterator(int(opts["batch_rows"])):
                attrs = {n: np.asarray(pts[n]) for n in standard}
                attrs.update({n: np.asarray(pts.array[n]) for n in extra})  # raw: unscaled extra bytes
                yield {"positions": np.column_stack([np.asarray(pts.x), np.asarray(pts.y), np.asarray(pts.z)]),
                       "attributes": attrs}

    summary = await write_batches(dst, batches, store, extent=extent, dtype="float64")
    await stamp(dst, store, record)
    return {"vertices": summary.vertex_count}


def _header(laspy, rec: dict, sample: dict[str, np.ndarray], lo: np.ndarray, scale: float | None):
    """The LAS header to write: the recorded one, or one made for the store's attributes."""
    if rec:
        header = laspy.LasHeader(point_format=rec["point_format"], version=rec["version"])
        for eb in rec["extra_bytes"]:
            dt = np.dtype((eb["dtype"], tuple(eb["shape"]))) if eb["shape"] else np.dtype(eb["dtype"])
            header.add_extra_dim(laspy.ExtraBytesParams(name=eb["name"], type=dt, description=eb["description"]))
        header.scales = np.asarray(rec["scales"])
        header.offsets = np.asarray(rec["offsets"])
        header.system_identifier = rec.get("system_identifier", "")
        header.generating_software = rec.get("generating_software", "")
        return header
    pf = 3 if {"red", "green", "blue"} <= set(sample) else 1
    header = laspy.LasHeader(point_format=pf, version="1.2")
    standard = set(header.point_format.dimension_names)
    for name, values in sample.items():
        if name not in standard:
            dt = np.dtype((values.dtype, values.shape[1:])) if values.ndim > 1 else values.dtype
            header.add_extra_dim(laspy.ExtraBytesParams(name=name, type=dt))
    s = 0.001 if scale is None else float(scale)
    header.scales = np.array([s, s, s])
    header.offsets = np.floor(lo)
    return header


async def from_store(fmt: str, ds, dst: str, **options: Any) -> dict:
    opts = take_options(fmt, options, {"level": 0, "scale": None, "compress": None, "batch_chunks": 4})
    laspy = _laspy()
    if ds.ndim != 3:
        raise InvalidArgumentError(f"{ds.url}: LAS holds 3-D points, the store is {ds.ndim}-D")
    compress = dst.lower().endswith(".laz") if opts["compress"] is None else bool(opts["compress"])
    n, writer, header = 0, None, None
    try:
        async for sel in ds.iter_chunks(level=opts["level"], batch_chunks=int(opts["batch_chunks"]), prefetch=2):
            if writer is None:
                header = _header(laspy, source_record(ds, "las"), sel.attributes, ds.bounds[0], opts["scale"])
                writer = laspy.open(dst, mode="w", header=header, do_compress=compress)
                extra = {d.name for d in header.point_format.extra_dimensions}
                standard = set(header.point_format.dimension_names) - extra - set(COORDS)
            rec = laspy.ScaleAwarePointRecord.zeros(len(sel), header=header)
            rec.x, rec.y, rec.z = (sel.positions[:, i] for i in range(3))
            for name, values in sel.attributes.items():
                if name in extra:
                    rec.array[name] = values  # raw, as read in
                elif name in standard:
                    rec[name] = values  # bit fields go through laspy's sub-field views
            writer.write_points(rec)
            n += len(sel)
        if writer is None:  # an empty store: a valid file with no points
            header = _header(laspy, source_record(ds, "las"), {}, ds.bounds[0], opts["scale"])
            writer = laspy.open(dst, mode="w", header=header, do_compress=compress)
    finally:
        if writer is not None:
            writer.close()
    return {"vertices": n}
