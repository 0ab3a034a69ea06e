"""``zvf.gc`` / ``zvf gc``: delete what no kept version of a store uses.

Every change publishes a new version and keeps the ones it supersedes for their readers
(:mod:`zvf.write.publish`).  ``gc`` holds the store's lock and:

1. marks versions superseded more than ``retention`` seconds ago as reclaimed (one record-only rewrite of
   the root: the published version does not change) and waits out their readers' lease;
2. rewrites the documents on disk from the root's section when a publication was interrupted after its
   commit (``pending_documents``);
3. deletes every ZVF object no kept version uses: cells in key families no kept version of their array
   uses (reclaimed versions', failed changes'), cells of arrays no version has, documents of nodes the
   published version does not have, and takeover markers of dead lock contenders;
4. drops the reclaimed versions from the record.

It never deletes an object that is not shaped like a ZVF store's own (``notes.txt`` beside a store stays),
nor a distributed job's state.  A kill anywhere leaves a store that reads as before; the next ``gc``
finishes the work.
"""

from __future__ import annotations

from typing import TypedDict

import anyio

from ..errors import InvalidArgumentError
from ..format.versions import Record
from ..io.executor import Executor
from ..io.options import StorageOptions
from ..io.store import Target, open_store
from ..write.lock import TAKEOVER, StoreLock
from ..write.publish import OWN_SLACK, Publication, kept_families, store_garbage


class GcSummary(TypedDict):
    """What ``gc`` returns: the store's URL, how many objects it deleted, the superseded versions it
    reclaimed and those it kept readable, whether it rewrote the documents."""

    url: str
    deleted: int
    reclaimed: list[str]
    kept: list[str]
    documents_rewritten: bool


async def gc(
target: Target, *, retention: float | None = None, storage_options: StorageOptions | None = None,
             lock_timeout: float = 60.0) -> GcSummary:
    """Delete what no kept version of the store at ``target`` uses (see the module docstring).

    ``retention``: seconds a superseded version stays readable (default: what the store records, 300 s
    unless a writer set another); 0 reclaims every superseded version now (their readers get
    StaleDatasetError).  Returns a :class:`GcSummary`: ``deleted`` (objects), ``reclaimed`` and ``kept`` (version
    ids), ``documents_rewritten`` (bool).
    """
    if retention is not None and (isinstance(retention, bool) or not isinstance(retention, (int, float))
                                  or retention < 0):
        raise InvalidArgumentError(f"retention must be a number of seconds >= 0, got {retention!r}")
    handle = open_store(target, mode="a", storage_options=storage_options)
    ex = Executor(handle)
    async with StoreLock(ex, handle.url, purpose="gc", timeout=lock_timeout) as lock:
        pub = await Publication(ex, lock, retention=retention).begin()
        record = pub.record
        if pub.expired:  # tell their readers they are reclaimed, then wait out the lease they may still trust
            await pub.rewrite_record(record)
            await anyio.sleep(max(r.lease for r in pub.expired) + OWN_SLACK)
        reclaimed = [r.version for r in pub.expired]
        rewritten = record.pending_documents
        if rewritten:
            await pub.write_documents(pub.base_docs, everything=True)
        used = kept_families(record, pub.current_families(), drained=reclaimed)
        listed = [k for k, _ in await ex.list("")]
        gone = store_garbage(listed, used, pub.base_docs)
        gone += [k for k in listed if k.startswith(TAKEOVER) and k not in lock.markers]
        if gone:
            await ex.delete(gone)
        kept = [r for r in record.retained if r.version not in reclaimed]
        if reclaimed or pub.dropped or rewritten:
            await pub.rewrite_record(Record(record.version, record.retention, record.lease, kept,
                                            pending_documents=False, recorded=True))
    return {"url": handle.url, "deleted": len(gone), "reclaimed": reclaimed, "kept": [r.version for r in kept],
            "documents_rewritten": bool(rewritten)}
