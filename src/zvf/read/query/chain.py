"""Composable queries: ``ds.select(...)`` -> an immutable ``AsyncQuery`` and its terminals.

Every narrowing is pushed into the read plan rather than applied after it:

* box and ball pick the candidate chunks (the ball through its bounding
  box), and on binned point clouds the bins, by row span;
* ``objects`` / ``groups`` / object-attribute ``where`` become an id set whose
  manifests name the only chunks (and, for point clouds, the only fragment
  rows) worth reading;
* ``where`` on a vertex attribute reads the candidates' attribute cells first
  and then only the vertex rows that pass (row ranges when the latency x
  bandwidth cost model favours them over whole cells);
* ``limit`` reads point chunks one wave at a time and stops once satisfied.

Per geometry (the README has the table): point clouds return matching
vertices in chunk order (``limit`` counts vertices); polylines/streamlines
return whole objects with at least one matching vertex in ascending id, or
with ``clip=True`` only the matching vertices (``limit`` counts objects);
graphs/skeletons/meshes return matching vertices plus the edges/faces among
them, grouped by object (``limit`` counts objects).  "Matching" means inside
the box and the ball and passing every vertex ``where``, owned by an object
of the id set.

``plan()`` runs the same planning code as ``read()`` and reports the waves of
cell requests; it may read metadata the query needs anyway (level documents,
object index, groups, object attributes) but no cell of a spatial array.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Unpack

import numpy as np
from numpy.typing import NDArray

from ..context import ReadContext
from ..selection import Selection
from .resolve import resolve
from .run import run
from .spec import SelectArgs, Spec

if TYPE_CHECKING:
    from ..batches import Batches
    from .plan import QueryPlan

__all__ = ["AsyncQuery"]


class AsyncQuery:
    """A pending read of one dataset; nothing is fetched until a terminal runs.

    ``select(...)`` returns a narrower query (this one is unchanged).
    Terminals: ``read()``, ``count()``, ``object_ids()``, ``iter()``,
    ``plan()``, ``explain()``.
    """

    __slots__ = ("_rc", "_spec")

    def __init__(self, rc: ReadContext, spec: Spec):
        self._rc = rc
        self._spec = spec

    @classmethod
    def build(cls, rc: ReadContext, **narrowing: Unpack[SelectArgs]) -> AsyncQuery:
        return cls(rc, Spec.build(rc.ndim, **narrowing))

    def select(self, **narrowing: Unpack[SelectArgs]) -> AsyncQuery:
        """This query narrowed further: boxes intersect, id sets intersect, ``where`` terms AND."""
        return AsyncQuery(self._rc, self._spec.and_(Spec.build(self._rc.ndim, **narrowing)))

    @property
    def spec(self) -> Spec:
        return self._spec

    def __repr__(self) -> str:
        return f"AsyncQuery(level={self._spec.level!r}, {self._spec.describe()})"

    # ------------------------------------------------------------- terminals
    async def read(self) -> Selection:
        """The matching data as one Selection (see the module docstring for per-geometry semantics)."""
        return await self._rc.retrying(self._read)

    async def _read(self) -> Selection:
        return await run(self._rc, await resolve(self._rc, self._spec))

    async def count(self) -> int:
        """Number of vertices ``read()`` returns; from metadata and fragment indexes where the
        narrowing allows (unnarrowed level, objects only, boxes covering whole bins)."""
        return await self._rc.retrying(self._count)

    async def _count(self) -> int:
        from .count import count

        return await count(self._rc, self._spec)

    async def object_ids(self) -> NDArray[np.int64]:
        """Sorted ids of the objects the result holds (empty for a cloud without object ids)."""
        return await self._rc.retrying(self._object_ids)

    async def _object_ids(self) -> NDArray[np.int64]:
        from .count import matching_object_ids

        return (await matching_object_ids(self._rc, await resolve(self._rc, self._spec))).astype(np.int64, copy=False)

    def iter(self, *, batch: int | None = None, prefetch: int = 4) -> Batches[Selection]:
        """The result in batches (``async for``), at most ``prefetch`` batches fetched ahead:
        point clouds ``batch`` chunks (default 16) at a time, object geometries ``batch`` objects
        (default 256).  ``limit`` cuts the stream."""
        from .count import iterate

        return iterate(self._rc, self._spec, batch, prefetch)

    async def plan(self) -> QueryPlan:
        """The cell requests ``read()`` would make on a cold cache, in waves, with estimates."""
        from .plan import build_plan  # here: planning in words is for people, not for a cold read

        ctx = await resolve(self._rc, self._spec)
        return await build_plan(self._rc, ctx)

    async def explain(self) -> str:
        """``plan()`` in words."""
        return (await self.plan()).explain()

