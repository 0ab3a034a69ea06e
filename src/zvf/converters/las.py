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

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import tuning
from ..errors import InputFileError, InvalidArgumentError
from .base import Converted, StoreOptions, Written, source_record, stamp, take_options, write_batches
from .parsing import guarded, need, reading
from .source_order import numbered, point_batches

if TYPE_CHECKING:
    from ..read.dataset import DatasetReader

COORDS = ("X", "Y", "Z")


def _laspy() -> Any:
    return need("laspy", "las", "LAS/LAZ")


def _record(header: Any) -> dict[str, Any]:
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


# what laspy and lazrs raise on a file that is not LAS/LAZ or ends early
_READ_ERRORS = (ValueError, RuntimeError, EOFError, IndexError)


async def to_store(fmt: str, src: str, dst: str, store: StoreOptions, **options: Any) -> Converted:
    opts = take_options(fmt, options, {"batch_rows": tuning().convert_batch_rows, "keep_order": False})
    laspy = _laspy()
    errors = (laspy.errors.LaspyException, *_READ_ERRORS)
    with reading(src, fmt, errors), laspy.open(src) as reader:
        header = reader.header
        record = _record(header)
        standard = [d.name for d in header.point_format.dimensions if d.is_standard and d.name not in COORDS]
        extra = [d.name for d in header.point_format.extra_dimensions]
        count = int(header.point_count)
        extent = (header.mins.tolist(), header.maxs.tolist(), count)
    if count == 0:
        raise InputFileError(f"{src}: its header says it holds no points")

    def batches() -> Iterator[dict[str, Any]]:
        n = 0
        with laspy.open(src) as rd:
            for pts in rd.chunk_iterator(int(opts["batch_rows"])):
                attrs = {n: np.asarray(pts[n]) for n in standard}
                attrs.update({n: np.asarray(pts.array[n]) for n in extra})  # raw: unscaled extra bytes
                n += len(pts)
                yield {"positions": np.column_stack([np.asarray(pts.x), np.asarray(pts.y), np.asarray(pts.z)]),
                       "attributes": attrs}
        if n != count:  # a file cut at a record boundary reads without error: fewer points than announced
            raise InputFileError(f"{src}: holds {n:,} points, its header says {count:,} (a truncated file?)")

    source = guarded(batches, src, fmt, errors)
    stamp(store, record)
    summary = await write_batches(dst, numbered(source) if opts["keep_order"] else source, store, extent=extent,
                                  dtype="float64")
    return {"vertices": summary.vertex_count}


def _header(laspy: Any, rec: dict[str, Any], sample: dict[str, np.ndarray], lo: np.ndarray, scale: float | None,
            point_format: int | None = None) -> Any:
    """The LAS header to write: the recorded one (``point_format`` overriding its format), or one made
    for the store's attributes: a ``classification`` takes point format 6/7 (LAS 1.4: classes 0..255;
    formats 0-5 hold 0..31)."""
    if rec:
        pf = rec["point_format"] if point_format is None else point_format
        version = rec["version"] if pf == rec["point_format"] else ("1.4" if pf >= 6 else rec["version"])
        header = laspy.LasHeader(point_format=pf, version=version)
        for eb in rec["extra_bytes"]:
            dt = np.dtype((eb["dtype"], tuple(eb["shape"]))) if eb["shape"] else np.dtype(eb["dtype"])
            header.add_extra_dim(laspy.ExtraBytesParams(name=eb["name"], type=dt, description=eb["description"]))
        header.scales = np.asarray(rec["scales"])
        header.offsets = np.asarray(rec["offsets"])
        header.system_identifier = rec.get("system_identifier", "")
        header.generating_software = rec.get("generating_software", "")
        return header
    rgb = {"red", "green", "blue"} <= set(sample)
    pf = point_format if point_format is not None else (7 if rgb else 6) if "classification" in sample else \
        (3 if rgb else 1)
    header = laspy.LasHeader(point_format=pf, version="1.4" if pf >= 6 else "1.2")
    standard = set(header.point_format.dimension_names)
    for name, values in sample.items():
        if name not in standard:
            dt = np.dtype((values.dtype, values.shape[1:])) if values.ndim > 1 else values.dtype
            header.add_extra_dim(laspy.ExtraBytesParams(name=name, type=dt))
    s = 0.001 if scale is None else float(scale)
    header.scales = np.array([s, s, s])
    header.offsets = np.floor(lo)
    return header


async def from_store(fmt: str, ds: DatasetReader, dst: str, written: Written, **options: Any) -> Converted:
    opts = take_options(fmt, options, {"level": 0, "scale": None, "compress": None, "batch_chunks": 4,
                                       "point_format": None, "keep_order": None})
    point_format = None if opts["point_format"] is None else int(opts["point_format"])
    if point_format is not None and not 0 <= point_format <= 10:
        raise InvalidArgumentError(f"point_format must be a LAS point format 0..10, got {opts['point_format']!r}")
    laspy = _laspy()
    if ds.ndim != 3:
        raise InvalidArgumentError(f"{ds.url}: LAS holds 3-D points, the store is {ds.ndim}-D")
    compress = dst.lower().endswith(".laz") if opts["compress"] is None else bool(opts["compress"])
    n, writer = 0, None
    header: Any = None  # a laspy.LasHeader from the first batch on
    try:
        async for sel in await point_batches(ds, opts["level"], opts["keep_order"], written, int(opts["batch_chunks"])):
            if writer is None:
                header = _header(laspy, source_record(ds, "las"), sel.attributes, ds.bounds[0], opts["scale"],
                                 point_format)
                writer = laspy.open(dst, mode="w", header=header, do_compress=compress)
                extra = {d.name for d in header.point_format.extra_dimensions}
                standard = set(header.point_format.dimension_names) - extra - set(COORDS)
            rec = laspy.ScaleAwarePointRecord.zeros(len(sel), header=header)
            rec.x, rec.y, rec.z = (sel.positions[:, i] for i in range(3))
            for name, values in sel.attributes.items():
                if name in extra:
                    rec.array[name] = values  # raw, as read in
                elif name in standard:
                    try:
                        rec[name] = values  # bit fields go through laspy's sub-field views
                    except OverflowError as exc:  # e.g. a class above 31 in point formats 0-5
                        raise InvalidArgumentError(
                            f"{ds.url}: attribute {name!r} does not fit LAS point format "
                            f"{header.point_format.id} ({exc}); pick one that holds it, e.g. point_format=6 "
                            f"(--set point_format=6)") from None
            writer.write_points(rec)
            n += len(sel)
        if writer is None:  # an empty store: a valid file with no points
            header = _header(laspy, source_record(ds, "las"), {}, ds.bounds[0], opts["scale"], point_format)
            writer = laspy.open(dst, mode="w", header=header, do_compress=compress)
    finally:
        if writer is not None:
            writer.close()
    return {"vertices": n}
