"""The writers' public types: what they take (aliases for type checkers) and what they return."""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypedDict

if TYPE_CHECKING:
    import os

    import numpy as np
    from numpy.typing import ArrayLike, DTypeLike

    from ..io.options import StorageOptions
    from .store_writer import StoreWriter

Shape: TypeAlias = "Sequence[float] | Literal['auto']"
"""A chunk or bin shape: one edge per axis, or ``"auto"`` where the writer derives it from the data."""
Bounds: TypeAlias = "tuple[ArrayLike, ArrayLike]"
"""Declared extent ``(lo, hi)``; default: the data's."""
Columns: TypeAlias = "Mapping[str, ArrayLike]"
"""Named rows: ``{name: (N,) or (N, C)}``."""
Groups: TypeAlias = "Mapping[int, ArrayLike] | Sequence[ArrayLike]"
"""Member object ids per group: ``{group id: ids}`` or a list of id lists."""
PointBatch: TypeAlias = "ArrayLike | Mapping[str, Any]"
"""One batch of a streamed point cloud: positions, or ``{"positions", "attributes", "object_ids"}``."""
PointBatches: TypeAlias = "Iterable[PointBatch] | AsyncIterable[PointBatch]"
ObjectBatches: TypeAlias = "Iterable[Any] | AsyncIterable[Any]"
"""Batches of a streamed object write: see each writer (a sequence of polylines, an endpoints array, or a dict)."""
FragmentColumns: TypeAlias = "Mapping[str, Mapping[tuple[int, ...], ArrayLike]]"
"""Per-fragment rows: ``{name: {chunk coords: (F_c,) or (F_c, C)}}``."""
SpillDir: TypeAlias = "str | os.PathLike[str] | None"
"""Where a streamed write keeps its temporary files (None: the system temp dir)."""


class WriteOptions(TypedDict, total=False):
    """The keywords every writer takes besides its input and ``chunk_shape``; all optional.

    Spelled out at the call (``write_mesh(..., dtype="float32", overwrite=True)``) or
    passed as one dict (``write_mesh(..., **opts)``); type checkers see each name.

    * ``bin_shape``: bins inside each chunk (default None: one bin per chunk, none for objects)
    * ``bounds``: declared extent ``(lo, hi)`` (default None: the data's)
    * ``object_attributes``, ``groups``, ``group_attributes``: object and group tables (default None)
    * ``compression``: ``"zstd"``, ``"blosc"``... (default None: uncompressed cells)
    * ``shard_shape``: chunks per shard, one int or one per axis, or ``"auto"`` (the whole grid up to a
      size, see :func:`zvf.write.level.auto_shard_shape`; default: ``"auto"`` with ``chunk_shape="auto"``
      outside the reference layout, else None: unsharded)
    * ``dtype``: stored position dtype, float16/32/64 (default None: the input's own float
      dtype, integers as float32; pass ``"float32"`` for zarr-vectors 0.9.2's bytes from float64)
    * ``overwrite``: replace a store already at the target (default False)
    * ``object_index_layout``: ``"sharded"`` (default: zvf's layout -- manifests sharded, object levels'
      fragment indexes sharded about 64 chunks to a shard, consolidated metadata) or ``"reference"``
      (0.9.2's bytes)
    * ``storage_options``: store and client settings, see :class:`zvf.StorageOptions` (default None)
    """

    bin_shape: Shape | None
    bounds: Bounds | None
    object_attributes: Columns | None
    groups: Groups | None
    group_attributes: Columns | None
    compression: str | None
    shard_shape: int | Sequence[int] | Literal["auto"] | None
    dtype: DTypeLike
    overwrite: bool
    object_index_layout: str
    storage_options: StorageOptions | None


class ObjectWriteOptions(WriteOptions, total=False):
    """:class:`WriteOptions` and what only the object writers take.

    * ``fragment_attributes``: per-fragment rows (:data:`FragmentColumns`, default None)
    """

    fragment_attributes: FragmentColumns | None


@dataclass(frozen=True)
class WriteConfig:
    """:class:`WriteOptions` checked once (``inputs.write_config``): what the writers' internals take."""

    chunk_shape: Any
    bin_shape: Any = None
    bounds: Any = None
    object_attributes: Any = None
    groups: Any = None
    group_attributes: Any = None
    compression: Any = None
    shard_shape: Any = None
    dtype: np.dtype | None = None  # None: the input's own float dtype
    overwrite: bool = False
    object_index_layout: str = "sharded"
    storage_options: Any = None

    @property
    def consolidate(self) -> bool:
        """The root carries every document, except in 0.9.2's reference layout (its bytes)."""
        return self.object_index_layout != "reference"


@dataclass(frozen=True)
class WriteSummary:
    """A published store: where, what it holds, and what writing it cost.

    Counts that do not apply to the geometry are ``None`` (links of a point
    cloud, bins of an object store).  ``cells_written``/``bytes_written``
    count the data blobs uploaded (metadata documents excluded);
    ``requests`` is the executor's ``Stats`` snapshot (``puts`` and
    ``bytes_put`` include documents and retried uploads).
    """

    url: str
    geometry: str
    vertex_count: int
    object_count: int
    chunk_count: int
    group_count: int
    cells_written: int
    bytes_written: int
    requests: dict[str, int]
    fragment_count: int | None = None
    link_count: int | None = None
    stored_link_count: int | None = None
    cross_chunk_link_count: int | None = None
    bins_per_chunk: list[int] | None = None

    @classmethod
    def of(cls, writer: StoreWriter, geometry: str, **counts: Any) -> WriteSummary:
        """The summary of ``writer``'s finished write, with the writer's own counts."""
        return cls(url=writer.ex.handle.url, geometry=geometry, cells_written=writer.cells_written,
                   bytes_written=writer.bytes_written, requests=writer.ex.stats.snapshot(), **counts)

