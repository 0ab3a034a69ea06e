"""The writers' public types: what they take (aliases for type checkers) and what they return."""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from .engine import StoreWriter

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

    def __getitem__(self, name: str) -> Any:
        """``summary["vertex_count"]``: writers used to return plain dicts, and their callers keep working."""
        if name not in {f.name for f in fields(self)}:
            raise KeyError(name)
        return getattr(self, name)
