"""A query's plan as data: waves of cell requests with estimates, and the same in words.

A wave is a set of requests issued together; each wave waits for the one
before (its keys or ranges depend on what that one returned), so the
waves, each split into batches of the dataset's concurrency, are the round
trips the read needs.  A wave marked not
``exact`` lists the most it may request: ``read()`` drops the chunks the
earlier waves rule out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..io.plan import ByteRange, coalesce


@dataclass(frozen=True)
class PlannedRead:
    """One read of ``key``: ``[start, end)`` (``end=None``: to the end; negative start: suffix)."""

    key: str
    start: int | None
    end: int | None
    what: str
    nbytes: int | None  # estimated bytes (None: unknown before reading)

    @property
    def whole(self) -> bool:
        return self.start is None


@dataclass(frozen=True)
class Wave:
    purpose: str
    reads: tuple[PlannedRead, ...]
    exact: bool = True

    @property
    def keys(self) -> set[str]:
        return {r.key for r in self.reads}


@dataclass(frozen=True)
class QueryPlan:
    """What ``select(...).read()`` would request, wave by wave, with its estimates (``explain()`` in words)."""

    level: int  # the pyramid level read
    level_note: str  # why that level (asked for, or chosen by ``level="auto"``)
    geometry: str | None
    query: str  # the selection, as the user wrote it
    candidate_chunks: int  # chunks the box, categories and id set leave
    waves: tuple[Wave, ...]  # dependent rounds of requests, first to last
    notes: tuple[str, ...]  # decisions of the planner (push-downs, row ranges, limits)
    coalesce_gap: int  # ranges of one key closer than this many bytes merge into one GET
    coalesce_max: int  # ... up to this many bytes per GET
    concurrency: int = 32  # requests in flight at once: a wave of more takes several round trips

    def requests_of(self, wave: Wave) -> int:
        """GETs a wave costs: whole reads one each, ranges coalesced per key as the executor does."""
        whole = {r.key for r in wave.reads if r.start is None or r.start < 0 or r.end is None}
        ranges = [ByteRange(r.key, r.start, r.end) for r in wave.reads
                  if r.start is not None and r.start >= 0 and r.end is not None]
        return len(whole) + len(coalesce(ranges, max_gap=self.coalesce_gap, max_size=self.coalesce_max))

    @property
    def requests(self) -> int:
        """Estimated GETs (the most, when a wave is not exact)."""
        return sum(self.requests_of(w) for w in self.waves)

    @property
    def bytes(self) -> int:
        """Estimated bytes (raw row sizes for cells of unknown size; compressed cells read fewer)."""
        return sum(r.nbytes or 0 for w in self.waves for r in w.reads)

    @property
    def round_trips(self) -> int:
        """Sequential round trips: each wave's requests go ``concurrency`` at a time."""
        return sum(max(1, -(-self.requests_of(w) // self.concurrency)) for w in self.waves)

    @property
    def keys(self) -> list[set[str]]:
        """The keys of each wave, in order."""
        return [w.keys for w in self.waves]

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level, "level_note": self.level_note, "geometry": self.geometry, "query": self.query,
            "candidate_chunks": self.candidate_chunks, "requests": self.requests, "bytes": self.bytes,
            "round_trips": self.round_trips, "notes": list(self.notes),
            "waves": [{"purpose": w.purpose, "exact": w.exact, "requests": self.requests_of(w),
                       "reads": [[r.key, r.start, r.end] for r in w.reads]} for w in self.waves],
        }

    def explain(self) -> str:
        lines = [f"{self.geometry} query on {self.level_note}: {self.query}",
                 (f"  {self.candidate_chunks} candidate chunk(s); about {self.requests} request(s), "
                  f"{self.bytes:,} bytes, {self.round_trips} round trip(s)")]
        for i, w in enumerate(self.waves, 1):
            kinds: dict[str, int] = {}
            for r in w.reads:
                kinds[r.what] = kinds.get(r.what, 0) + 1
            what = ", ".join(f"{n} {k}" for k, n in kinds.items())
            lines.append(f"  wave {i}{'' if w.exact else ' (at most)'}: {w.purpose} -- "
                         f"{self.requests_of(w)} request(s): {what}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)
