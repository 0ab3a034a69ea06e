"""``AsyncDataset``: the reader of ``zvf.read.dataset`` with the appends of ``zvf.lifecycle.append``.

The appends live here, above the lifecycle layer, so that the reader (which the lifecycle
operations open stores with) never imports what changes a store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Unpack

from ..read.dataset import DatasetReader

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ..lifecycle.append import AppendOptions, AppendSummary


class AsyncDataset(DatasetReader):
    """A ZVF store opened for reading (``await zvf.aio.open(target)``) and, with ``mode="a"``, appending."""

    async def append_points(self, positions: ArrayLike, /, *, cast: bool = False,
                            **kwargs: Unpack[AppendOptions]) -> AppendSummary:
        """Append points (``attributes``, ``object_ids``, ``object_attributes``, ``groups``, ...
        as for ``write_points``; the lock and pyramid keywords of :class:`zvf.lifecycle.append.AppendOptions`);
        the store then reads as one write of the concatenated input.

        Every append_* refuses a position or attribute value the store's dtype cannot hold exactly
        (``InvalidArgumentError`` naming it, the dtype and the values) unless ``cast=True``."""
        from ..lifecycle.append import append
        from ..write.points.memory import write_points

        return await append(self, write_points, (positions,), {**kwargs, "cast": cast})

    async def append_polylines(self, polylines: Sequence[ArrayLike], /, *, cast: bool = False,
                               **kwargs: Unpack[AppendOptions]) -> AppendSummary:
        """Append polylines/streamlines; they get the next object ids."""
        from ..lifecycle.append import append
        from ..write.objects.memory import write_polylines

        return await append(self, write_polylines, (polylines,), {**kwargs, "cast": cast})

    async def append_lines(self, endpoints: ArrayLike, /, *, cast: bool = False,
                           **kwargs: Unpack[AppendOptions]) -> AppendSummary:
        """Append line segments (M, 2, ndim); they get the next object ids."""
        from ..lifecycle.append import append
        from ..write.objects.memory import write_lines

        return await append(self, write_lines, (endpoints,), {**kwargs, "cast": cast})

    async def append_graph(self, positions: ArrayLike, edges: ArrayLike, /, *, cast: bool = False,
                           **kwargs: Unpack[AppendOptions]) -> AppendSummary:
        """Append a graph or skeleton; its ``object_ids`` (default 0) are shifted past the store's."""
        from ..lifecycle.append import append
        from ..write.objects.memory import write_graph

        return await append(self, write_graph, (positions, edges), {**kwargs, "cast": cast})

    async def append_mesh(self, vertices: ArrayLike, faces: ArrayLike, /, *, cast: bool = False,
                          **kwargs: Unpack[AppendOptions]) -> AppendSummary:
        """Append a mesh; its ``object_ids`` (default 0) are shifted past the store's."""
        from ..lifecycle.append import append
        from ..write.objects.memory import write_mesh

        return await append(self, write_mesh, (vertices, faces), {**kwargs, "cast": cast})
