"""The validator: walks a store through zvf's executor and reports what is wrong.

One listing of the whole store drives everything: it says which documents
exist (all fetched at once), which cells are really stored (compared with
each array's ``nonempty_chunks``), and which objects belong to no node at
all (leftovers of an interrupted write).  Cells are then read chunk by
chunk, concurrently and bounded by the executor's limiter; only per-chunk
counts (rows, fragments, link rows) are kept, so memory stays flat however
large the store is.

Levels (each includes the ones below it):

1. structure     documents exist and parse as Zarr v3 ZVF nodes; the
                 arrays each geometry needs; claim objects and orphans
2. metadata      field values, dtypes, codecs, chunk grids vs bounds
3. consistency   every cell decodes; fragments, attributes, links,
                 manifests, counts agree with each other and the listing
4. conventions   per-geometry rules (links convention, widths, bins)
5. multi-res     levels nest, counts shrink, ids are preserved,
                 cross-level links land on existing vertices

A store is never "raised": every problem becomes an :class:`Issue`.
"""

from __future__ import annotations

from ..errors import RemoteError
from .consistency import ConsistencyChecks
from .conventions import ConventionChecks
from .metadata import MetadataChecks
from .multires import MultiresChecks
from .report import Report
from .structure import StructureChecks

__all__ = ["Validator"]


class Validator(StructureChecks, MetadataChecks, ConsistencyChecks, ConventionChecks, MultiresChecks):
    """Collects issues about one store; :meth:`run` never raises for store problems."""

    async def run(self) -> Report:
        try:
            if await self._structure():
                if self.max_level >= 2:
                    self._metadata()
                if self.max_level >= 3:
                    await self._consistency()
                if self.max_level >= 4:
                    self._conventions()
                if self.max_level >= 5:
                    self._multires()
        except RemoteError as e:
            self.error(1, getattr(e, "key", "") or ".", f"the store could not be read: {e}")
        except Exception as e:
            self.error(1, ".", f"validation stopped by an internal error: {type(e).__name__}: {e}")
        self._flush_suppressed()
        self.report.checked = dict(self.counts)
        return self.report
