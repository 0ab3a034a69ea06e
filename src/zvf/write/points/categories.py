"""Attribute-chunked point clouds: 0.9.2's ``chunk_by_attribute`` layout.

A categorical per-vertex attribute becomes a leading chunk axis: cell keys
have rank ndim + 1 (category position, then the spatial chunk), the level
document names the axis (``chunk_dims``, ``chunk_attribute_name``,
``chunk_attribute_values``, values ascending), and the attribute itself is
not stored -- a reader recovers it from the axis.  0.9.2 always gives such
a cloud an object index (every vertex its own object without ids), so the
fragments of a cell are per object and manifests carry the extra coordinate.
A query on one category then reads only that category's cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import InvalidArgumentError
from ...format import builders
from ...format.grid import CellCodes
from ...format.metadata import DEFAULT_AXIS_NAMES
from ..level import ShardShape, shard_tuple
from ..object_index import ZSTD, put_groups, put_object_attributes, put_object_index
from ..partition import Partition, partition
from ..store_writer import StoreWriter
from .level import Manifest, PointExtras


@dataclass(frozen=True)
class CategoryAxis:
    """The leading chunk axis of an attribute-chunked level: its name, values and each row's position."""

    name: str
    values: list[int]  # the categories, ascending
    rows: np.ndarray  # (N,) int64 position of each row's value in ``values``

    @classmethod
    def take(cls, attributes: dict[str, np.ndarray], name: object, n: int) -> CategoryAxis:
        """Split attribute ``name`` off ``attributes`` (it is stored as the axis, not as cells)."""
        if not isinstance(name, str) or name not in attributes:
            raise InvalidArgumentError(
                f"chunk_by_attribute={name!r} must name one of the attributes ({sorted(attributes)})")
        values = attributes.pop(name)
        if values.ndim != 1 or values.dtype.kind not in "biu":
            raise InvalidArgumentError(
                f"chunk_by_attribute={name!r}: attributes[{name!r}] must be (N,) integers or booleans (categories), "
                f"got dtype {values.dtype} shape {values.shape}")
        if n == 0:
            raise InvalidArgumentError(f"chunk_by_attribute={name!r} needs at least one vertex (no categories)")
        uniq, rows = np.unique(values, return_inverse=True)
        return cls(name, uniq.tolist(), rows.reshape(-1).astype(np.int64))

    def partition(self, cells: CellCodes, object_ids: np.ndarray) -> Partition:
        """Rows into (category, spatial chunk) cells, one fragment per object id ascending, input order kept.

        ``cells`` holds chunk numbers (``by_bin=False``); cells ascend in C order of the full
        coordinates, as 0.9.2 writes them.
        """
        spatial = cells.chunk_coords(cells.codes)
        return partition(np.column_stack((self.rows, spatial)), object_ids)

    def grid(self, origin: tuple[int, ...], grid_shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(origin, shape) of the cell arrays: the category axis first, at origin 0."""
        return (0, *origin), (len(self.values), *grid_shape)

    @staticmethod
    def shard(shard_shape: ShardShape, ndim: int) -> tuple[int, ...] | None:
        """Cells per shard with the category axis: ndim + 1 ints as given, else one category per shard
        (``"auto"``: None here, sized over every axis once the grid is known, see ``resolve_shards``)."""
        if shard_shape is None or isinstance(shard_shape, (str, int, np.integer)) or len(shard_shape) != ndim + 1:
            spatial = shard_tuple(shard_shape, ndim)
            return None if spatial is None else (1, *spatial)
        return shard_tuple(shard_shape, ndim + 1)

    async def publish(self, writer: StoreWriter, url: str, *, ndim: int,
                      shapes: tuple[Sequence[float], Sequence[float] | None],
                      bounds: tuple[Sequence[float], Sequence[float]], n: int, has_attributes: bool,
                      uniq: np.ndarray | None, manifest: Manifest | None, extras: PointExtras,
                      compression: str | None, object_index_layout: str) -> None:
        """Object index (rank ndim + 1 coordinates), tables, level and root documents of the level."""
        assert uniq is not None and manifest is not None  # a category axis gives every row an id
        await put_object_index(writer, 0, *manifest, uniq, ndim + 1, compression=compression,
                               layout=object_index_layout)
        await put_object_attributes(writer, 0, extras.object_attributes, ZSTD)
        await put_groups(writer, extras.group_rows, extras.group_attributes, ZSTD)
        present = ["vertices", "vertex_attributes", "object_index"] if has_attributes else ["vertices", "object_index"]
        dims = [self.name, *DEFAULT_AXIS_NAMES[:ndim]]  # the root's axis names
        writer.add_document("0/zarr.json", builders.level_document(
            level=0, vertex_count=n, arrays_present=present, coarsening_method="none", chunk_dims=dims,
            chunk_attribute_name=self.name, chunk_attribute_values=self.values, fragments_tile=True), stage=1)
        writer.add_document("zarr.json", builders.root_document(
            chunk_shape=shapes[0], bounds=bounds, geometry_types=["point_cloud"], name=builders.store_name(url),
            base_bin_shape=shapes[1]), stage=2)
