"""The one lock of a store: every change holds it (a new store's write, an overwrite, appends, pyramid
builds, rechunks in place, ``zvf gc``).

The lock is the object ``.zvf-writing`` -- the key a writer claims while it creates a store -- so every
change excludes every other.  Its body is a JSON *holder record* (owner id, purpose, host, pid, when it
was taken, its last heartbeat and its lease).  It is taken with a conditional create (``If-None-Match: *``
on S3, create-exclusive elsewhere): exactly one contender wins, the others wait with backoff up to
``timeout`` seconds.

Liveness is a lease: the holder rewrites its record every ``lease / 3`` seconds (a heartbeat, a
compare-and-swap where the store has one, so it never overwrites a successor).  A holder is dead when its
heartbeat is older than its lease, or when it ran on this host and its process is gone; a dead holder's
lock is *taken over*, never deleted and re-created (two contenders that both saw it dead would then both
proceed).  The takeover is itself a conditional create, of ``.zvf-writing.takeover.<dead owner>``: one
contender per dead lock wins it and only then overwrites the lock with its own record; the others wait.
A contender that wins the marker late (after the winner released it) finds the lock no longer holds the
dead record and backs off.  Markers are removed when their winner releases the lock.

Holders check the lock is still theirs before publishing (:meth:`StoreLock.check`): a holder that stalled
past its lease and was taken over stops instead of publishing.  A record with no lease (a distributed job
holds its claim across processes and days) is never presumed dead.  Documents themselves are replaced with
:func:`replace_document`, an ETag compare-and-swap where the store has one.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from typing import Any

import anyio

from ..errors import ConcurrentModificationError, RemoteError, StoreExistsError
from ..format.metadata import CLAIM_KEY
from ..io.executor import Executor

LOCK_KEY = CLAIM_KEY
TAKEOVER = LOCK_KEY + ".takeover."
#: Seconds without a heartbeat after which a holder is presumed dead (it beats every third of that).
LEASE = 30.0
#: Age after which a holder record that declares no lease (written by an older zvf) is presumed dead.
LEGACY_STALE_AFTER = 3600.0
HOST = socket.gethostname()


def holder_record(body: bytes | None) -> dict[str, Any]:
    """The holder's record; ``{}`` for a body zvf did not write as JSON (an older zvf's creation claim)."""
    if body is None:
        return {}
    try:
        rec = json.loads(body)
        return rec if isinstance(rec, dict) and isinstance(rec.get("time"), (int, float)) else {}
    except (TypeError, ValueError):
        return {}


def _process_gone(pid: object) -> bool:
    """Whether process ``pid`` of this host has ended (a pid we may not signal is alive)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def holder_state(rec: dict[str, Any], now: float | None = None) -> tuple[bool, str]:
    """(dead, why) of a holder record: dead when its heartbeat is older than its lease or, on this host,
    its process is gone.  A record without a lease (a distributed job's claim) is never presumed dead."""
    now = time.time() if now is None else now
    if rec.get("abandoned"):
        return True, "its change failed and was abandoned"
    beat = rec.get("heartbeat", rec.get("time"))
    lease = rec.get("lease", LEGACY_STALE_AFTER) if "heartbeat" in rec or "lease" in rec else LEGACY_STALE_AFTER
    if lease is None:  # a distributed job: its driver may stop and resume it from another process
        return False, "it holds the store across processes (no heartbeat)"
    if rec.get("host") == HOST and rec.get("pid") != os.getpid() and _process_gone(rec.get("pid")):
        return True, f"its process {rec.get('pid')} on this host is gone"
    if not isinstance(beat, (int, float)) or not isinstance(lease, (int, float)):
        return False, "its record has no usable heartbeat"
    age = now - float(beat)
    if age > float(lease):
        return True, f"no heartbeat for {age:.0f} s (its lease is {float(lease):g} s)"
    return False, f"last heartbeat {max(age, 0):.0f} s ago (lease {float(lease):g} s)"


class StoreLock:
    """``async with StoreLock(ex, url, purpose=...)``: hold the store's lock for one change, its record
    kept fresh by a heartbeat task while held.

    ``lease`` (seconds) is how long the record may go without a heartbeat before contenders presume this
    holder dead; None holds it without a heartbeat, never presumed dead (a distributed job's claim).
    """

    def __init__(self, ex: Executor, url: str, *, purpose: str, timeout: float = 60.0,
                 lease: float | None = LEASE) -> None:
        self.ex, self.url, self.purpose = ex, url, purpose
        self.timeout = float(timeout)
        self.lease = None if lease is None else float(lease)
        self.owner = uuid.uuid4().hex
        self.taken = time.time()
        self.body = self._record()
        self.markers: list[str] = []
        self.lost: str | None = None  # why the lock is no longer ours (seen by the heartbeat)
        self._beats: anyio.abc.TaskGroup | None = None

    def _record(self) -> bytes:
        return json.dumps({"owner": self.owner, "purpose": self.purpose, "host": HOST, "pid": os.getpid(),
                           "time": self.taken, "heartbeat": time.time(), "lease": self.lease}).encode()

    async def __aenter__(self) -> StoreLock:
        await self.acquire()
        await self.start_heartbeat()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_heartbeat()
        with anyio.CancelScope(shield=True):
            await self.release()

    async def start_heartbeat(self) -> None:
        """Keep the record fresh from a task of its own until :meth:`stop_heartbeat` (same task, nested as
        any other context: a holder that enters more scopes after this leaves them before stopping)."""
        if self.lease is None or self.lease <= 0 or self._beats is not None:
            return  # no lease, or one so short every contender may take over at once: nothing to keep fresh
        self._beats = anyio.create_task_group()
        await self._beats.__aenter__()
        self._beats.start_soon(self._heartbeat, self.lease)

    async def stop_heartbeat(self) -> None:
        if self._beats is not None:
            beats, self._beats = self._beats, None
            beats.cancel_scope.cancel()
            await beats.__aexit__(None, None, None)

    async def abandon(self) -> None:
        """Leave the lock in place marked abandoned (a failed first write: its claim tells readers the store
        is unfinished), so the next writer takes it over at once instead of waiting out the lease.  Stop
        the heartbeat first."""
        rec = json.loads(self.body)
        rec["abandoned"] = True
        body = json.dumps(rec).encode()
        try:
            await replace_document(self.ex, LOCK_KEY, body, *(await _tag_if_ours(self.ex, self.body)), self.url,
                                   what="this lock's holder")
            self.body = body
        except (ConcurrentModificationError, RemoteError):
            pass  # not ours any more, or the store fails: the lease runs out all the same

    async def acquire(self, *, create_only: bool = False) -> None:
        """Take the lock, waiting up to ``timeout`` (taking over a dead holder's); with ``create_only``
        fail at once with StoreExistsError when anyone holds it."""
        deadline = time.monotonic() + self.timeout
        delay = 0.05
        while True:
            self.taken = time.time()
            self.body = self._record()
            try:
                await self.ex.put(LOCK_KEY, self.body, mode="create")
                return
            except StoreExistsError:
                if create_only:
                    raise
            held = await self.ex.get(LOCK_KEY)
            rec = holder_record(held)
            dead = bool(rec) and holder_state(rec)[0]
            if held is not None and dead and await self._take_over(held, str(rec.get("owner"))):
                return
            if time.monotonic() >= deadline:
                raise ConcurrentModificationError(f"{self.url}/{LOCK_KEY}: {describe_holder(rec)}; waited "
                                                  f"{self.timeout:g} s. {TAKEOVER_HINT}")
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _take_over(self, stale: bytes, stale_owner: str) -> bool:
        """One winner per dead lock: the conditional create of its takeover marker decides."""
        marker = TAKEOVER + stale_owner
        try:
            await self.ex.put(marker, self.body, mode="create")
        except StoreExistsError:
            if not await self._take_marker(marker):
                return False  # another contender is taking it over
        if await self.ex.get(LOCK_KEY) != stale:  # released or taken over since we looked
            await self.ex.delete([marker])
            return False
        await self.ex.put(LOCK_KEY, self.body)
        self.markers.append(marker)
        return True

    async def _take_marker(self, marker: str) -> bool:
        """A takeover marker whose contender died before it took the lock over is taken over in turn (a
        compare-and-swap on its record), so a contender killed mid-takeover never blocks the store."""
        body, tag = await read_document(self.ex, marker)
        rec = holder_record(body)
        if body is None or not rec or not holder_state(rec)[0]:
            return False
        try:
            await replace_document(self.ex, marker, self.body, body, tag, self.url, what="another contender")
        except ConcurrentModificationError:
            return False
        return True

    async def _heartbeat(self, lease: float) -> None:
        """Refresh the record every third of the lease; stop (and remember why) once it is not ours."""
        while True:
            await anyio.sleep(lease / 3)
            try:
                await self.beat()
            except ConcurrentModificationError as e:
                self.lost = str(e)
                return
            except RemoteError:
                continue  # a store hiccup: the next beat tries again (the lease allows two misses)

    async def beat(self) -> None:
        """Rewrite our record with a fresh heartbeat, only if the lock still holds our last one."""
        body = self._record()
        await replace_document(self.ex, LOCK_KEY, body, *(await _tag_if_ours(self.ex, self.body)), self.url,
                               what="this lock's holder")
        self.body = body

    async def check(self) -> None:
        """Raise unless the lock still holds our record (a holder that stalled may have been taken over)."""
        if self.lost is not None or await self.ex.get(LOCK_KEY) != self.body:
            raise ConcurrentModificationError(
                f"{self.url}/{LOCK_KEY}: this {self.purpose} no longer holds the lock (taken over as a dead "
                "holder's: its heartbeat stalled past its lease); nothing was published")

    async def release(self) -> None:
        if await self.ex.get(LOCK_KEY) == self.body:
            await self.ex.delete([LOCK_KEY])
        if self.markers:
            await self.ex.delete(self.markers)
            self.markers = []


TAKEOVER_HINT = ("A holder that stops its heartbeat is taken over once its lease runs out; a lock held "
                 f"across processes (a distributed job) must be removed by hand: delete {LOCK_KEY} "
                 f"(and {TAKEOVER}* markers) once nothing runs")


def describe_holder(rec: dict[str, Any]) -> str:
    """``held by <purpose> (owner, pid on host) since <time>, <live or dead: why>`` for messages."""
    if not rec:
        return "held by a writer that left no holder record (an older zvf's creation claim)"
    dead, why = holder_state(rec)
    return (f"held by {rec.get('purpose', 'a writer')} (owner {rec.get('owner', '?')}, pid {rec.get('pid', '?')} "
            f"on {rec.get('host', '?')}) since {time.ctime(float(rec['time']))}; "
            f"{'dead' if dead else 'live'}: {why}")


async def _tag_if_ours(ex: Executor, body: bytes) -> tuple[bytes, dict[str, str] | None]:
    got, tag = await read_document(ex, LOCK_KEY)
    if got != body:
        raise ConcurrentModificationError(f"{ex.handle.url}/{LOCK_KEY}: taken over by another holder")
    return got, tag


async def read_document(ex: Executor, key: str) -> tuple[bytes | None, dict[str, str] | None]:
    """A document and its compare-and-swap tag (None where the store has none: local files)."""
    got = await ex.call("get", key, lambda: ex.transport.get_tagged(key))
    return (None, None) if got is None else got


async def replace_document(ex: Executor, key: str, data: bytes, before: bytes, tag: dict[str, str] | None,
                           url: str, *,
                           what: str = f"a writer that ignored {LOCK_KEY}") -> None:
    """Replace ``key`` only if it still holds ``before``: an ETag conditional put where the store has
    one, else (obstore's LocalStore) a re-read and compare under the lock, then the put."""
    if tag is None:
        if await ex.get(key) != before:
            raise ConcurrentModificationError(f"{url}/{key}: changed by {what}")
        await ex.put(key, data)
        return
    try:
        await ex.call("put", key, lambda: ex.transport.put(key, data, mode=tag), retry_ambiguous=False, put=True)
    except ConcurrentModificationError:
        raise ConcurrentModificationError(f"{url}/{key}: changed by {what} (conditional put refused)") from None
    except RemoteError:
        if await ex.get(key) != data:  # an ambiguous failure that had in fact succeeded is a success
            raise
    finally:
        ex.invalidate(key)
