"""A dataset pinned to the version of the store it opened.

Writers never change or delete the cells of a version while a reader may still hold it
(:mod:`zvf.write.publish`): a superseded version stays readable until its reclaim is published and its
readers' *lease* has run out.  A reader therefore needs to look at the root only once per lease
(the ``max_reader_lease`` setting of :mod:`zvf.config`, 20 s by default) of reading: after each request it makes
(:meth:`Pin.after_read`, the executor's read hook), if the last look is older than the lease, it fetches
the root again.  Its version still current or still kept: the bytes just read are its version's, and the
lease starts again.  Gone (reclaimed, or the store was replaced another way): ``StaleDatasetError``, never
bytes of another version.

Without a trusted consolidated section (stores 0.9.2 writes) documents load lazily from the store, where a
writer rewrites them right after its commit: every document fetched after opening is checked against the
root at once, and must belong to the current version.  A cell the reader's metadata lists but the store
lacks is looked up the same way (:meth:`Pin.missing`): a stale version, or damage named by its key.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import anyio

from ..errors import FormatError, MissingDataError, StaleDatasetError
from ..format.versions import Record, version_of

if TYPE_CHECKING:
    from ..io.executor import Executor


class Pin:
    """The version one dataset reads: its id, its readers' lease, and when it was last seen kept."""

    def __init__(self, ex: Executor, root_raw: dict[str, Any], *, seen: float, authoritative: bool):
        self.ex = ex
        self.version = version_of(root_raw)
        self.lease = Record.of(root_raw).lease
        self.seen = seen  # time.monotonic() when a root naming this version kept was asked for
        self.authoritative = authoritative  # every document comes from the root's section
        self.stale: str | None = None
        self._checking: anyio.Event | None = None

    @property
    def url(self) -> str:
        return self.ex.handle.url

    async def after_read(self, key: str) -> None:
        """Called after every read request of the dataset's executor completed (the executor's hook)."""
        if key == "zarr.json":
            return
        if self.stale is not None:
            raise StaleDatasetError(self.stale)
        if not self.authoritative and key.endswith("/zarr.json"):
            await self.check(current=True)
        elif time.monotonic() - self.seen >= self.lease:
            await self.check()

    async def check(self, *, current: bool = False) -> None:
        """Look at the root: raise StaleDatasetError unless this version is still readable (with
        ``current``: still the current one, for a document just fetched from the store)."""
        if self._checking is not None and not current:  # one look serves every request waiting for it
            await self._checking.wait()
            if self.stale is not None:
                raise StaleDatasetError(self.stale)
            return
        done = self._checking = anyio.Event() if not current else None
        try:
            sent = time.monotonic()
            raw = await self.ex.call("get", "zarr.json", lambda: self.ex.transport.get("zarr.json"))
            now = self._verdict(raw, current)
            if now is not None:
                self.stale = now
                raise StaleDatasetError(now)
            self.seen = max(self.seen, sent)
        finally:
            if done is not None:
                self._checking = None
                done.set()

    def _verdict(self, raw: bytes | None, current: bool) -> str | None:
        """None while this version is readable, else why not."""
        if raw is None:
            return f"{self.url}: the store changed since it was opened: its root zarr.json is gone"
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise FormatError(f"{self.url}/zarr.json: not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise FormatError(f"{self.url}/zarr.json: not a JSON object")
        record = Record.of(doc)
        if record.version == self.version or (not current and record.readable(self.version)):
            return None
        why = "was replaced" if current and record.readable(self.version) else "is no longer kept"
        return (f"{self.url}: the store changed since it was opened (the version this dataset reads, "
                f"{self.version}, {why}; the store is at {record.version}); ds.refresh() moves to it, "
                "or open with refresh='auto'")

    async def missing(self, key: str, what: str) -> Exception:
        """The error for a cell the metadata says holds data but the store lacks: StaleDatasetError when
        the version is gone (raised), else MissingDataError naming the key (returned, for the caller to raise)."""
        await self.check()
        return MissingDataError(f"{key}: missing, but {what} (the store is damaged: `zvf validate` tells more)")

