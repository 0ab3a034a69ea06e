"""``fragment_attributes/<name>``: one row per fragment of a chunk, written only on request.

The caller gives ``{name: {chunk coords: (F_c,) or (F_c, C) array}}`` with the
rows of each chunk aligned with the fragments the writer makes there (what
``ds.fragment_attribute(name, objects=...)`` hands back per manifest block), as
zarr-vectors 0.9.2's ``fragment_attributes=`` takes them: for objects one
fragment per (object, chunk) in the chunk's object order; for point clouds
without ids one per bin of the chunk (empty bins included), in bin order.  Its bytes: a spatial
array per name under the level's codec, each cell the raw little-endian rows
cast to the first array's dtype; chunks the caller leaves out get no cell.
Unlike 0.9.2, a chunk that holds no fragments, or a row count that does not
match, is refused with the attribute and chunk named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidArgumentError
from ..format import builders
from ..format import metadata as md
from . import inputs
from .store_writer import empty_group

if TYPE_CHECKING:
    from .level import LevelWriter
    from .partition import Partition
    from .store_writer import StoreWriter
    from .types import FragmentColumns

FAMILY = "fragment_attributes"


class FragmentAttributes:
    """Checked per-chunk fragment rows, uploaded chunk by chunk as the writer makes fragments."""

    def __init__(self, given: FragmentColumns | None, ndim: int):
        self.tables: dict[str, dict[tuple[int, ...], np.ndarray]] = {}
        self.docs: dict[str, dict[str, Any]] = {}
        self._unused: set[tuple[str, tuple[int, ...]]] = set()
        if given is None:
            return
        if not isinstance(given, Mapping):
            raise InvalidArgumentError(
                f"fragment_attributes must be {{name: {{chunk coords: rows}}}}, got {type(given).__name__}")
        for name, per_chunk in given.items():
            inputs.check_name(name, "fragment attribute")
            what = f"fragment_attributes[{name!r}]"
            if not isinstance(per_chunk, Mapping) or not per_chunk:
                raise InvalidArgumentError(f"{what} must be a non-empty {{chunk coords: rows}} mapping")
            table: dict[tuple[int, ...], np.ndarray] = {}
            dtype: np.dtype | None = None
            tail: tuple[int, ...] = ()
            for key, rows in per_chunk.items():
                chunk = _chunk_key(key, ndim, what)
                arr = np.asarray(rows)
                at = f"{what}[{chunk}]"
                if arr.dtype.kind not in "biuf" or arr.ndim not in (1, 2):
                    raise InvalidArgumentError(f"{at} must be a numeric (F,) or (F, C) array, got {arr.dtype} "
                                               f"shape {arr.shape}")
                if dtype is None:
                    dtype, tail = arr.dtype, arr.shape[1:]
                    if dtype.name not in md.NUMERIC_DTYPES:
                        raise InvalidArgumentError(f"{at}: dtype {dtype} is not supported "
                                                   f"(use one of {sorted(md.NUMERIC_DTYPES)})")
                elif arr.shape[1:] != tail:
                    raise InvalidArgumentError(f"{at} has rows of shape {arr.shape[1:]}; the first chunk's are {tail}")
                table[chunk] = np.ascontiguousarray(arr.astype(dtype.newbyteorder("<"), copy=False))
                self._unused.add((name, chunk))
            self.tables[name] = table
            assert dtype is not None  # per_chunk is not empty
            # the same labels as 0.9.2 gives vertex attributes
            doc = builders.vertex_attribute_attributes(name, dtype, tail)
            doc["zv_array"] = "fragment_attribute"
            self.docs[name] = doc

    def __bool__(self) -> bool:
        return bool(self.tables)

    async def put(self, level: LevelWriter, chunk: Iterable[int], n_fragments: int) -> None:
        """Upload the rows of absolute ``chunk``, which holds ``n_fragments`` fragments."""
        key = tuple(int(c) for c in chunk)
        for name, table in self.tables.items():
            rows = table.get(key)
            if rows is None:
                continue
            if len(rows) != n_fragments:
                raise InvalidArgumentError(f"fragment_attributes[{name!r}][{key}] has {len(rows)} rows but chunk "
                                           f"{key} has {n_fragments} fragments")
            self._unused.discard((name, key))
            await level.array(f"{FAMILY}/{name}", self.docs[name]).add(level.writer, key, rows.tobytes())

    async def put_partition(self, level: LevelWriter, part: Partition) -> None:
        """Upload the rows of every chunk of ``part`` (a :class:`.partition.Partition`), whose fragments
        it counts per chunk."""
        if self:
            counts = np.bincount(part.frag_chunk, minlength=len(part.chunks))
            for chunk, f in zip(part.chunks.tolist(), counts.tolist()):
                await self.put(level, chunk, f)

    def written_elsewhere(self, chunks: np.ndarray) -> None:
        """Rows of ``chunks`` (absolute coords) go up in other processes (distributed cell tasks): only rows
        of other chunks are left for :meth:`finish` to refuse."""
        have = {tuple(c) for c in np.asarray(chunks, np.int64).tolist()}
        self._unused = {(name, key) for name, key in self._unused if key not in have}

    def refuse_unused(self) -> None:
        """Rows given for a chunk without fragments are an error, not silently dropped."""
        if self._unused:
            name, key = min(self._unused)
            raise InvalidArgumentError(f"fragment_attributes[{name!r}][{key}]: chunk {key} holds no fragments")

    def finish(self, writer: StoreWriter, arrays_present: list[str]) -> None:
        """Refuse rows for chunks without fragments; queue the family group and name it in ``arrays_present``."""
        self.refuse_unused()
        if self.tables:
            empty_group(writer, f"0/{FAMILY}")
            arrays_present.append(FAMILY)


def _chunk_key(key: Iterable[Any], ndim: int, what: str) -> tuple[int, ...]:
    try:
        out = tuple(int(c) for c in key)
        ok = len(out) == ndim and all(float(c) == o for c, o in zip(key, out))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InvalidArgumentError(f"{what}: key {key!r} must be a tuple of {ndim} integer chunk coordinates")
    return out
