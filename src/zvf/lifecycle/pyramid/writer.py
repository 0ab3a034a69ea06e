"""The store writer of a pyramid build: cells of new levels, then one publication of the levels and root.

The store is only changed where readers do not look until the end: new levels and link families go up
first, the root document (which lists the levels) is replaced last, with a compare-and-swap on the root
read under the store's lock (:mod:`zvf.write.lock`, shared with every writer).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ...io.executor import Executor
from ...read import load
from ...write.publish import Publication
from ...write.store_writer import StoreWriter


class PyramidWriter(StoreWriter):
    """A StoreWriter adding levels to a published store through a publication (the caller holds the lock):
    cells first, the root by compare-and-swap, then the documents (:mod:`zvf.write.publish`).

    Without a publication it is a block task's cells-only writer (``taken``: the families kept versions use).
    """

    def __init__(self, executor: Executor, publication: Publication | None = None, *,
                 taken: Mapping[str, Iterable[str]] | None = None, max_inflight_bytes: int):
        # no claim: the caller holds the store's lock (a block task's, the build's)
        super().__init__(executor, publication=publication, taken=taken, max_inflight_bytes=max_inflight_bytes,
                         claim=False)
        self.new_root: dict[str, Any] | None = None
        self.documents: dict[str, dict[str, Any]] = {}  # every document this build writes (the section names them)

    def committing(self) -> Publication:
        """The publication this build commits through (a block task's writer has none and never commits)."""
        if self.publication is None:
            raise RuntimeError("a block task's writer has no publication to commit through")
        return self.publication

    def add_document(self, key: str, doc: dict[str, Any], *, stage: int) -> None:
        super().add_document(key, doc, stage=stage)
        self.documents[key] = doc

    def nodes(self) -> dict[str, dict[str, Any]]:
        """Every node document of the new version: the base's and this build's (as published)."""
        built = {k[:-len("/zarr.json")]: d for k, d in self.documents.items()}
        pub = self.committing()
        return {**pub.base_docs, **pub.patched(built)}

    async def flush(self) -> None:
        """Wait for every queued cell; the documents written so far become what this build's own reads see
        (from memory: nothing is on disk before the root names it)."""
        await self.drain()
        if self.publication is not None:
            for key, doc in self.documents.items():  # arrays block tasks elsewhere wrote: the family they chose
                if doc.get("node_type") == "array":
                    self.publication.family(key[:-len("/zarr.json")], len(doc.get("shape") or ()))
            seed_section(self.ex, self.nodes())

    def level_doc(self, level: int) -> dict[str, Any]:
        return self.documents[f"{level}/zarr.json"]

    async def _publish(self) -> None:
        await self.flush()
        if self.new_root is not None:
            await self.committing().commit(self.nodes(), self.new_root)


def seed_section(ex: Executor, nodes: dict[str, dict[str, Any]]) -> None:
    """Let this executor's loads answer documents and listings from ``nodes`` (the version being built)."""
    ex.put_cached(load.SECTION, "zarr.json", nodes, nbytes=len(json.dumps(nodes)))
