"""The publication protocol: how every change to an existing store becomes visible at one instant.

Every writer that changes a published store -- an overwrite, an append, a pyramid build, a rechunk in
place, a distributed commit -- goes through one :class:`Publication`, under the store's lock
(:mod:`zvf.write.lock`):

1. **Begin.**  Read the root (with its compare-and-swap tag) and its version record
   (:mod:`zvf.format.versions`).  Versions superseded more than ``retention`` ago start *draining*; if
   some array the new version will write has no free chunk-key family left, the oldest kept version is
   reclaimed early (its readers get ``StaleDatasetError``): its reclaim is published first and the
   writer waits out its readers' lease before touching its cells.
2. **Cells.**  Every array the new version writes goes under a family no kept version of that array
   uses (:meth:`Publication.keys`); leftovers in that family (a drained version's, a dead writer's) are
   deleted first.  Readers of every kept version find their cells untouched.
3. **Commit.**  ONE compare-and-swap of the root: the new root carries every document in its
   consolidated section and the new version record.  This is the single commit point: before it every
   reader opens the old version, after it the new one.
4. **Documents.**  The documents on disk are rewritten from the section (zvf readers never read them on a
   recorded store; zarr-python and 0.9.2 do), then a second root write clears ``pending_documents``.  A kill
   in between leaves the flag: the next publication rewrites every document.

A kill anywhere leaves a store that reads as before (until 3.) or as after (from 3.); what it leaves
behind -- cells in families no version uses, documents lagging the root, a dead lock -- is reclaimed by
the next publication or :func:`zvf.gc`.  See docs/RELIABILITY.md for the guarantees and their limits.
"""

from __future__ import annotations

import contextlib
import copy
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import anyio

from ..errors import (
    ConcurrentModificationError,
    ForeignDataError,
    FormatError,
    InvalidArgumentError,
    NotZvfStoreError,
    StoreExistsError,
    StoreNotFoundError,
)
from ..format import builders, parse
from ..format.keys import DEFAULT_ENCODING, ChunkKeyEncoding
from ..format.versions import (
    RECORD,
    Record,
    Retained,
    array_families,
    encoding_of,
    families_for,
    family_of_key,
    is_store_key,
    lease_for,
)
from ..io.executor import Executor
from .lock import LOCK_KEY, TAKEOVER, StoreLock, read_document, replace_document

#: Seconds added to a reader lease before cells of a version another (maybe dead) writer began to reclaim
#: are reused or deleted: covers clock skew between writer hosts and a slow compare-and-swap.
FOREIGN_SLACK = 60.0
#: Seconds added to a reader lease by the writer that reclaims a version itself (its own clock).
OWN_SLACK = 0.5
CONSOLIDATED = "consolidated_metadata"
#: Keys zvf writes beside a store's own (its lock, takeover markers, distributed jobs' state).
CONTROL_PREFIXES = (LOCK_KEY, ".zvf-jobs/")


def is_control_key(key: str) -> bool:
    return key.startswith(CONTROL_PREFIXES) or key.startswith(TAKEOVER)


def section_nodes(root_doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The node documents of a root's consolidated section ({} without one)."""
    cm = root_doc.get(CONSOLIDATED)
    nodes = cm.get("metadata") if isinstance(cm, dict) else None
    return {k: v for k, v in nodes.items() if isinstance(v, dict)} if isinstance(nodes, dict) else {}


async def discover_documents(ex: Executor) -> dict[str, dict[str, Any]]:
    """Every node document of a store without a consolidated section, found by listing (node path -> doc)."""
    keys = [k for k, _ in await ex.list("") if k.endswith("/zarr.json") and is_store_key(k)]
    raws = await ex.gather([ex.get(k) for k in keys])
    out: dict[str, dict[str, Any]] = {}
    for k, raw in zip(keys, raws):
        if raw is None:
            continue
        try:
            out[k[:-len("/zarr.json")]] = parse.loads(raw, key=k)
        except FormatError:
            continue  # an unreadable document belongs to no version anyone reads
    return out


def kept_families(record: Record, current: Mapping[str, str], *, drained: Iterable[str] = ()) -> dict[str, set[str]]:
    """Array path -> families in use by the current version and every kept version except ``drained``."""
    used: dict[str, set[str]] = {p: {f} for p, f in current.items()}
    skip = set(drained)
    for r in record.retained:
        if r.version in skip:
            continue
        for p, f in r.families.items():
            used.setdefault(p, set()).add(f)
    return used


def drained(r: Retained, now: float) -> bool:
    """A version whose reclaim was published long enough ago that no reader trusts it any more."""
    return r.draining is not None and now - r.draining >= r.lease + FOREIGN_SLACK


def store_garbage(keys: Iterable[str], used: Mapping[str, set[str]], documents: Iterable[str]) -> list[str]:
    """Which of ``keys`` (a listing) no kept version uses: cells of ZVF arrays in families no kept version
    of that array uses, ZVF-shaped cells of no known array, and documents of nodes the current version
    does not have.  Foreign keys and zvf's control keys are never garbage."""
    arrays = sorted(used, key=len, reverse=True)
    docs = {"zarr.json"} | {f"{p}/zarr.json" for p in documents}
    out = []
    for k in keys:
        if is_control_key(k) or not is_store_key(k) or k in docs:
            continue
        if k.endswith("zarr.json"):
            out.append(k)  # a node no current document names (its version is gone or never published)
            continue
        owner = next((p for p in arrays if k.startswith(p + "/")), None)
        if owner is None:
            out.append(k)
            continue
        fam = family_of_key(k[len(owner) + 1:])
        if fam is not None and fam not in used[owner]:
            out.append(k)
    return out


class Publication:
    """One change to a published store, under its lock (see the module docstring).

    ``retention``: seconds the version this publication supersedes stays readable (None: as the store
    records).  ``expect``: the version id the change was computed from; the publication refuses to begin
    (ConcurrentModificationError) if the store moved on since.
    """

    def __init__(self, ex: Executor, lock: StoreLock, *, retention: float | None = None, expect: str | None = None):
        if retention is not None and (isinstance(retention, bool) or not isinstance(retention, (int, float))
                                      or not retention >= 0):
            raise InvalidArgumentError(f"retention must be a number of seconds >= 0, got {retention!r}")
        self.ex, self.lock = ex, lock
        self.retention = retention
        self.expect = expect
        self.base_bytes: bytes = b""
        self.base_tag: dict[str, str] | None = None
        self.base_doc: dict[str, Any] = {}
        self.base_docs: dict[str, dict[str, Any]] = {}  # node path -> document of the version being superseded
        self.record = Record("")
        self.chosen: dict[str, str] = {}  # array path -> family this publication writes it under
        self._used: dict[str, set[str]] = {}
        self._cleaning: dict[str, anyio.Event] = {}
        self._cleared: list[str] = []  # prefixes :meth:`clear_garbage` cleared: their free families are clean
        self.committed = False

    @property
    def url(self) -> str:
        return self.ex.handle.url

    @property
    def base_version(self) -> str:
        return self.record.version

    # ------------------------------------------------------------------ 1. begin
    async def begin(self) -> Publication:
        raw, tag = await read_document(self.ex, "zarr.json")
        if raw is None:
            raise StoreNotFoundError(f"{self.url}: no store here (no zarr.json)")
        doc = parse.loads(raw, key="zarr.json")
        attrs = doc.get("attributes")
        if doc.get("node_type") != "group" or not isinstance(attrs, dict) or "zarr_vectors" not in attrs:
            raise NotZvfStoreError(f"{self.url}/zarr.json: not the root of a ZVF store")
        self.base_bytes, self.base_tag, self.base_doc = raw, tag, doc
        self.record = Record.of(doc)
        if self.expect is not None and self.record.version != self.expect:
            raise ConcurrentModificationError(f"{self.url}: the store changed since it was read (version "
                                              f"{self.expect} was replaced by {self.record.version}); run again")
        self.base_docs = section_nodes(doc) or await discover_documents(self.ex)
        if self.retention is None:
            self.retention = self.record.retention
        now = time.time()
        kept = []
        self.expired: list[Retained] = []  # marked reclaimed now (superseded more than ``retention`` ago)
        self.dropped: list[Retained] = []  # reclaimed long enough ago: forgotten (their cells are garbage)
        for r in self.record.retained:
            if drained(r, now):
                self.dropped.append(r)
                continue
            if r.draining is None and now - r.superseded >= self.retention:
                r.draining = now  # expired: published with this change, reused or deleted a lease later
                self.expired.append(r)
            kept.append(r)
        self.record.retained = kept
        await self._reserve()
        return self

    def current_families(self) -> dict[str, str]:
        """Array path -> family of the version being superseded."""
        return array_families(self.base_docs)

    async def _reserve(self) -> None:
        """Reclaim the oldest kept versions until every known array has a free family; publish the
        reclaim and wait out its readers' lease before any of their cells is touched."""
        current = self.current_families()
        ndims = {p: len(d.get("shape") or ()) for p, d in self.base_docs.items() if d.get("node_type") == "array"}
        reclaimed: list[Retained] = []
        while True:
            used = kept_families(self.record, current, drained=[r.version for r in reclaimed])
            short = [p for p, fams in used.items() if not set(families_for(ndims.get(p, 1))) - fams]
            if not short:
                break
            holders = [r for r in self.record.retained if r not in reclaimed and any(p in r.families for p in short)]
            if not holders:
                raise FormatError(f"{self.url}/zarr.json: array {short[0]} has no free chunk-key family, and no "
                                  "kept version holds one (a damaged version record)")
            victim = min(holders, key=lambda r: r.superseded)
            reclaimed.append(victim)
        if reclaimed:
            now = time.time()
            for r in reclaimed:
                if r.draining is None:
                    r.draining = now
            await self.rewrite_record(self.record)
            wait = max(r.lease for r in reclaimed) + OWN_SLACK
            await anyio.sleep(wait)  # every reader of them has looked at the root since, or stopped
        self._used = kept_families(self.record, current, drained=[r.version for r in reclaimed])

    async def rewrite_record(self, record: Record) -> None:
        """Replace the root (compare-and-swap on what this publication last saw) with the same root carrying
        ``record``: the version it publishes does not change (reclaims, documents no longer pending)."""
        new = copy.deepcopy(self.base_doc)
        new.setdefault("attributes", {})[RECORD] = record.to_json()
        data = builders.dumps(new)
        await self.lock.check()
        await replace_document(self.ex, "zarr.json", data, self.base_bytes, self.base_tag, self.url)
        got, self.base_tag = await read_document(self.ex, "zarr.json")
        if got != data:
            raise ConcurrentModificationError(f"{self.url}/zarr.json: changed by a writer that ignored {LOCK_KEY}")
        self.base_bytes = got
        self.base_doc = new

    # ------------------------------------------------------------------ 2. cells
    def family(self, path: str, ndim: int) -> str:
        """The family array ``path`` is written under in the new version (chosen once, deterministically:
        the first one no kept version of it uses)."""
        code = self.chosen.get(path)
        if code is None:
            free = [f for f in families_for(ndim) if f not in self._used.get(path, ())]
            if not free:
                raise FormatError(f"{self.url}: array {path} has no free chunk-key family (every one is used "
                                  "by a kept version)")
            code = self.chosen[path] = free[0]
        return code

    async def keys(self, path: str, ndim: int) -> ChunkKeyEncoding:
        """The key encoding of array ``path``'s new cells, its family cleared of leftovers first."""
        code = self.family(path, ndim)
        event = self._cleaning.get(path)
        if event is None and any(path.startswith(p) for p in self._cleared):
            event = self._cleaning[path] = anyio.Event()
            event.set()
        elif event is None:
            event = self._cleaning[path] = anyio.Event()
            try:
                listed = [k for k, _ in await self.ex.list(path + "/")]
                stale = [k for k in listed if family_of_key(k[len(path) + 1:]) == code]
                if stale:
                    await self.ex.delete(stale)
            except BaseException:
                del self._cleaning[path]
                event.set()
                raise
            event.set()
        else:
            await event.wait()
        return encoding_of(code)

    def taken(self, prefix: str = "") -> dict[str, list[str]]:
        """Array path -> families kept versions use, for paths under ``prefix``: what a cells-only writer in
        another process needs to choose the same families as :meth:`family` (:func:`family_from`)."""
        return {p: sorted(f) for p, f in self._used.items() if p.startswith(prefix)}

    async def clear_garbage(self, prefix: str) -> int:
        """Delete what no kept version uses under ``prefix`` (a dead writer's cells, drained versions'):
        before cells-only writers elsewhere write there (they cannot clear families themselves)."""
        listed = [k for k, _ in await self.ex.list(prefix)]
        used = {p: set(f) for p, f in self._used.items()}
        for p, f in self.chosen.items():  # what this publication wrote so far
            used.setdefault(p, set()).add(f)
        gone = store_garbage(listed, used, self.base_docs)
        if gone:
            await self.ex.delete(gone)
        self._cleared.append(prefix)
        return len(gone)

    def patched(self, docs: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """``docs`` with the encoding of the family each array this publication wrote is under."""
        out: dict[str, dict[str, Any]] = {}
        for path, doc in docs.items():
            if doc.get("node_type") == "array" and path in self.chosen:
                doc = {**doc, "chunk_key_encoding": encoding_of(self.chosen[path]).to_json()}
            out[path] = doc
        return out

    # ------------------------------------------------------------------ 3. commit, 4. documents
    async def commit(self, docs: Mapping[str, dict[str, Any]], root: dict[str, Any]) -> dict[str, Any]:
        """Publish the new version: ``docs`` is every node document of it (path -> document, the root
        excluded), ``root`` its root document.  Arrays this publication wrote get the encoding of their
        family; an array carried unchanged from the base keeps its own.  Returns the root published."""
        for path, doc in docs.items():
            if doc.get("node_type") == "array" and path not in self.chosen and self.base_docs.get(path) != doc:
                await self.keys(path, len(doc.get("shape") or ()))  # an array with no cells needs a clean family too
        docs = self.patched(docs)  # an array carried from the base unchanged keeps its own (its cells are kept)
        now = time.time()
        assert self.retention is not None, "begin() set it"
        retention = float(self.retention)
        superseded = Retained(self.record.version, now, self.record.lease, self.current_families())
        kept = [superseded] + [r for r in self.record.retained if r.version != superseded.version]
        record = Record(uuid.uuid4().hex, retention, lease_for(retention), kept, pending_documents=True, recorded=True)
        new_root = copy.deepcopy(root)
        new_root.pop(CONSOLIDATED, None)
        new_root.setdefault("attributes", {})[RECORD] = record.to_json()
        new_root[CONSOLIDATED] = builders.consolidated_metadata(docs)
        data = builders.dumps(new_root)
        await self.lock.check()
        await replace_document(self.ex, "zarr.json", data, self.base_bytes, self.base_tag, self.url)
        self.committed = True
        await self.write_documents(docs, everything=self.record.pending_documents or not section_nodes(self.base_doc))
        record.pending_documents = False
        new_root["attributes"][RECORD] = record.to_json()
        before, tag = await read_document(self.ex, "zarr.json")
        if before == data:  # a writer that ignored the lock changed it since: leave the flag, it is true
            await replace_document(self.ex, "zarr.json", builders.dumps(new_root), before, tag, self.url)
        return new_root

    async def write_documents(self, docs: Mapping[str, dict[str, Any]], *, everything: bool) -> None:
        """The documents on disk made to match ``docs`` (node path -> document): those that changed since
        the base version (``everything``: all), arrays and groups first, then level groups (0.9.2 finds
        levels by listing); then documents of nodes the new version no longer has go."""
        changed = [p for p, d in docs.items() if everything or self.base_docs.get(p) != d]
        for stage in ([p for p in changed if "/" in p], [p for p in changed if "/" not in p]):
            await self.ex.gather([self.ex.put(f"{p}/zarr.json", builders.dumps(docs[p])) for p in stage])
        gone = [f"{p}/zarr.json" for p in self.base_docs if p not in docs]
        if gone:
            await self.ex.delete(gone)

    async def abort(self) -> None:
        """Before the commit: delete the cells this publication wrote (no version uses their families)."""
        if self.committed:
            return
        with anyio.CancelScope(shield=True):
            for path, code in self.chosen.items():
                if path not in self._cleaning:
                    continue
                listed = [k for k, _ in await self.ex.list(path + "/")]
                mine = [k for k in listed if family_of_key(k[len(path) + 1:]) == code]
                if mine:
                    await self.ex.delete(mine)


def family_from(taken: Mapping[str, Iterable[str]], path: str, ndim: int) -> ChunkKeyEncoding:
    """:meth:`Publication.family` in a process that has only :meth:`Publication.taken` (a distributed
    task writing cells): the first family no kept version of ``path`` uses."""
    used = set(taken.get(path, ()))
    free = [f for f in families_for(ndim) if f not in used]
    return encoding_of(free[0]) if free else DEFAULT_ENCODING


_HELD: ContextVar[tuple[StoreLock, str | None, float | None] | None] = ContextVar("zvf_held_lock", default=None)


@contextlib.contextmanager
def holding(lock: StoreLock, expect: str | None = None, retention: float | None = None) -> Iterator[None]:
    """Writers started inside (on ``lock``'s store) publish under ``lock``, which the caller holds, from
    version ``expect`` (and keep the version they supersede ``retention`` seconds): a change that reads the
    store before it writes it (a rechunk in place) keeps every other writer out from its first read to its
    commit."""
    token = _HELD.set((lock, expect, retention))
    try:
        yield
    finally:
        _HELD.reset(token)


def held_lock(url: str) -> tuple[StoreLock, str | None, float | None] | None:
    """The lock :func:`holding` provides for the store at ``url`` (and the version it expects), if any."""
    held = _HELD.get()
    return held if held is not None and held[0].url == url else None


#: A root document -> the root published instead (:func:`shaping_root`).
RootShape = Callable[[dict[str, Any]], dict[str, Any]]
_SHAPING: ContextVar[tuple[str, RootShape] | None] = ContextVar("zvf_root_shaping", default=None)


@contextlib.contextmanager
def shaping_root(url: str, shape: RootShape) -> Iterator[None]:
    """Writers started inside publish, on the store at ``url``, ``shape(root)`` instead of the root they
    built: what a caller adds to a writer's root (a converter's ``zvf_source``, what a rechunk carries
    from its source) is in the one root write that publishes, never in a second one after it."""
    token = _SHAPING.set((url, shape))
    try:
        yield
    finally:
        _SHAPING.reset(token)


def shaped_root(url: str, root: dict[str, Any]) -> dict[str, Any]:
    """``root`` as :func:`shaping_root` has it published on the store at ``url`` (itself elsewhere)."""
    shaping = _SHAPING.get()
    return shaping[1](root) if shaping is not None and shaping[0] == url else root


async def clear_unfinished(ex: Executor, overwrite: bool) -> None:
    """Make a location without a root ready for a store's first write (its lock held).

    Objects of an unfinished store (ZVF-shaped keys, zvf's control keys) are deleted with ``overwrite``,
    refused without (StoreExistsError).  With ``overwrite``, any other object makes it refuse
    (ForeignDataError naming it) and delete nothing: overwrite replaces ZVF stores only.
    """
    url = ex.handle.url
    listed = [k for k, _ in await ex.list("")]
    ours = [k for k in listed if is_store_key(k) or (is_control_key(k) and k != LOCK_KEY)]
    if not overwrite:
        if ours:
            raise StoreExistsError(f"{url}: holds {len(ours)} object(s) of an unfinished store (e.g. {ours[0]!r}); "
                                   "pass overwrite=True to replace it")
        return
    foreign = [k for k in listed if not is_store_key(k) and not is_control_key(k)]
    if foreign:
        raise ForeignDataError(
            f"{url}: {foreign[0]!r} belongs to no ZVF store ({len(foreign)} such object(s) here); overwrite=True "
            "replaces a ZVF store only and deleted nothing: write to an empty location or remove them yourself")
    if ours:
        await ex.delete(ours)
