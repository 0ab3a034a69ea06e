"""The one lock of a store: every change after its first write (appends, pyramid builds) holds it.

The lock is the object ``.zvf-writing`` -- the key a writer claims while it
creates a store -- so creating, appending and building a pyramid all exclude
each other.  Its body is JSON naming the holder (owner id, purpose, host, pid,
time).  It is taken with a conditional create (``If-None-Match: *`` on S3,
create-exclusive elsewhere): exactly one contender wins, the others wait with
backoff up to ``timeout`` seconds.

A lock older than ``stale_after`` seconds is taken as left by a dead holder
and is *taken over*, never deleted and re-created (two contenders that both
saw the stale lock would then both proceed).  The takeover is itself a
conditional create, of ``.zvf-writing.takeover.<stale owner>``: one contender
per stale lock wins it and only then overwrites the lock with its own body;
the others wait.  A contender that wins the marker late (after the winner
released it) finds the lock no longer holds the stale body and backs off.
Markers are removed when their winner releases the lock.

Holders check the lock is still theirs before publishing (``check``): a holder
slower than ``stale_after`` that was taken over stops instead of publishing.
Documents themselves are replaced with :func:`replace_document`, an ETag
compare-and-swap where the store has one.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

import anyio

from ..errors import ConcurrentModificationError, RemoteError, StoreExistsError
from ..write.engine import CLAIM_KEY

LOCK_KEY = CLAIM_KEY
TAKEOVER = LOCK_KEY + ".takeover."
STALE_AFTER = 3600.0  # seconds after which a lock's holder is presumed dead and the lock may be taken over


def holder_record(body: bytes | None) -> dict:
    """The holder's record; ``{}`` for a body zvf did not write as JSON (a store creation's claim)."""
    try:
        rec = json.loads(body)
        return rec if isinstance(rec, dict) and isinstance(rec.get("time"), (int, float)) else {}
    except (TypeError, ValueError):
        return {}


class StoreLock:
    """``async with StoreLock(ex, url, purpose=...)``: hold the store's lock for one change."""

    def __init__(self, ex, url: str, *, purpose: str, timeout: float = 60.0, stale_after: float = STALE_AFTER):
        self.ex, self.url, self.purpose = ex, url, purpose
        self.timeout, self.stale_after = float(timeout), float(stale_after)
        self.owner = uuid.uuid4().hex
        self.body = json.dumps({"owner": self.owner, "purpose": purpose, "host": socket.gethostname(),
                                "pid": os.getpid(), "time": time.time()}).encode()
        self.markers: list[str] = []

    async def __aenter__(self) -> StoreLock:
        await self.acquire()
        return self

    async def __aexit__(self, *exc) -> None:
        with anyio.CancelScope(shield=True):
            await self.release()

    async def acquire(self) -> None:
        deadline = time.monotonic() + self.timeout
        delay = 0.05
        while True:
            try:
                await self.ex.put(LOCK_KEY, self.body, mode="create")
                return
            except StoreExistsError:
                pass
            held = await self.ex.get(LOCK_KEY)
            rec = holder_record(held)
            if held is not None and rec and time.time() - rec["time"] > self.stale_after \
                    and await self._take_over(held, str(rec.get("owner"))):
                return
            if time.monotonic() >= deadline:
                since = time.ctime(rec["time"]) if rec else "an unknown time"
                what = rec.get("purpose", "a writer") if rec else "a writer"
                raise ConcurrentModificationError(
                    f"{self.url}/{LOCK_KEY}: held by {what} (pid {rec.get('pid', '?')} on {rec.get('host', '?')}) "
                    f"since {since}; waited {self.timeout:g} s. If nothing is running, it is taken over after "
                    f"stale_after seconds, or delete {LOCK_KEY} (and {TAKEOVER}* markers) by hand")
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _take_over(self, stale: bytes, stale_owner: str) -> bool:
        """One winner per stale lock: the conditional create of its takeover marker decides."""
        marker = TAKEOVER + stale_owner
        try:
            await self.ex.put(marker, self.body, mode="create")
        except StoreExistsError:
            return False  # another contender is taking it over
        if await self.ex.get(LOCK_KEY) != stale:  # released or taken over since we looked
            await self.ex.delete([marker])
            return False
        await self.ex.put(LOCK_KEY, self.body)
        self.markers.append(marker)
        return True

    async def check(self) -> None:
        """Raise unless the lock still holds our body (a slow holder may have been taken over)."""
        if await self.ex.get(LOCK_KEY) != self.body:
            raise ConcurrentModificationError(
                f"{self.url}/{LOCK_KEY}: this {self.purpose} no longer holds the lock (taken over as stale "
                f"after {self.stale_after:g} s); nothing was published")

    async def release(self) -> None:
        if await self.ex.get(LOCK_KEY) == self.body:
            await self.ex.delete([LOCK_KEY])
        if self.markers:
            await self.ex.delete(self.markers)
            self.markers = []


async def read_document(ex, key: str) -> tuple[bytes | None, dict | None]:
    """A document and its compare-and-swap tag (None where the store has none: local files)."""
    got = await ex.call("get", key, lambda: ex.transport.get_tagged(key))
    return (None, None) if got is None else got


async def replace_document(ex, key: str, data: bytes, before: bytes, tag: dict | None, url: str) -> None:
    """Replace ``key`` only if it still holds ``before``: an ETag conditional put where the store has
    one, else (obstore's LocalStore) a re-read and compare under the lock, then the put."""
    if tag is None:
        if await ex.get(key) != before:
            raise ConcurrentModificationError(f"{url}/{key}: changed by a writer that ignored {LOCK_KEY}")
        await ex.put(key, data)
        return
    try:
        await ex.call("put", key, lambda: ex.transport.put(key, data, mode=tag), retry_ambiguous=False, put=True)
    except ConcurrentModificationError:
        raise ConcurrentModificationError(
            f"{url}/{key}: changed by a writer that ignored {LOCK_KEY} (conditional put refused)") from None
    except RemoteError:
        if await ex.get(key) != data:  # an ambiguous failure that had in fact succeeded is a success
            raise
    finally:
        ex.invalidate(key)
