"""Dense numeric arrays (object ids, object and group attributes): read whole.

These arrays are small next to the spatial ones and are read in full: all
chunks in flight together, missing chunks filled with the fill value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import tuning
from ..errors import FormatError, InvalidArgumentError

if TYPE_CHECKING:
    from ..io.executor import Executor
    from .cells import CellArray
    from .context import ReadContext

_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64"}


def _fill(value: object, dtype: np.dtype[Any]) -> object:
    if isinstance(value, str):  # "NaN", "Infinity", "-Infinity" as zarr writes them
        return float(value.replace("Infinity", "inf"))
    return 0 if value is None else value


async def read_dense(executor: Executor, arr: CellArray) -> np.ndarray:
    """The whole array ``arr`` (a ``CellArray`` of a dense array) as one numpy array."""
    meta = arr.meta
    key = f"{arr.path}/zarr.json"
    if meta.raw.get("data_type") not in _DTYPES:
        raise FormatError(f"{key}: data_type {meta.raw.get('data_type')!r} is not a supported numeric type")
    endian = "<" if arr.codec.endian == "little" else ">"
    dtype = np.dtype(meta.raw["data_type"]).newbyteorder(endian)
    shape = tuple(int(s) for s in meta.shape)
    chunk = tuple(int(c) for c in meta.chunk_shape)
    if len(shape) != len(chunk) or len(shape) not in (1, 2) or chunk[0] < 1 or chunk[1:] != shape[1:]:
        raise FormatError(f"{key}: dense array of shape {shape} with chunks {chunk} is not supported")
    nbytes = int(np.prod(chunk)) * dtype.itemsize
    total = int(np.prod(shape)) * dtype.itemsize
    limit = tuning().max_dense_bytes  # dense arrays are per-object or per-group tables: larger ones are refused
    if total > limit or nbytes > limit:  # before the (untrusted) shape names any request
        raise FormatError(f"{key}: shape {shape} / chunks {chunk} exceed the {limit >> 20} MiB "
                          "dense-array limit (zvf.config setting max_dense_bytes)")
    n_chunks = -(-shape[0] // chunk[0]) if shape[0] else 0
    grid = [(c,) + (0,) * (len(shape) - 1) for c in range(n_chunks)]
    raws = await executor.gather([executor.get(arr.key_of(g)) for g in grid])
    out = np.full(shape, _fill(meta.raw.get("fill_value"), dtype), dtype=dtype.newbyteorder("="))
    for g, raw in zip(grid, raws):
        if raw is None:
            continue
        data = arr.codec.decode(raw, key=arr.key_of(g), max_size=nbytes)
        if len(data) != nbytes:
            raise FormatError(f"{arr.key_of(g)}: chunk holds {len(data)} bytes, expected {nbytes}")
        lo = g[0] * chunk[0]
        hi = min(lo + chunk[0], shape[0])
        out[lo:hi] = np.frombuffer(data, dtype=dtype).reshape(chunk)[: hi - lo]
    return out


async def dense_attribute(rc: ReadContext, family: str, name: str, level: int) -> np.ndarray:
    """``<family>/<name>`` of a level (object or group attributes), read whole."""
    lvl = await rc.family(level, family)
    arr = lvl.array(f"{family}/{name}")
    if arr is None:
        raise InvalidArgumentError(f"{family[:-1].replace('_', ' ')} {name!r} not in level {level} "
                                   f"(it has {lvl.named(family)})")
    return await read_dense(rc.ex, arr)


async def read_groups(rc: ReadContext, level: int) -> list[np.ndarray]:
    """Every group's member object ids (int64 items of the vlen ``groups`` array), by group id."""
    lvl = await rc.family(level, "groups")
    arr = lvl.array("groups")
    if arr is None:
        return []
    n = int(arr.meta.shape[0])
    per_cell = int(arr.meta.chunk_shape[0])
    cells = await rc.ex.gather([arr.items((c,)) for c in range(-(-n // per_cell) if n else 0)])
    out: list[np.ndarray] = []
    for c, items in enumerate(cells):
        want = min(per_cell, n - c * per_cell)
        rows = list(items)[:want] if items is not None else [b""] * want
        for i, row in enumerate(rows):
            if len(row) % 8:
                raise FormatError(f"{arr.path}: group {c * per_cell + i} is {len(row)} bytes, not int64 ids")
            out.append(np.frombuffer(bytes(row), dtype="<i8").astype(np.int64))
    return out
