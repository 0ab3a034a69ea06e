"""Pure read planning: byte ranges, coalescing, and a fetch cost model.

Object stores charge a round trip per request, so scattered small reads of one
object are merged into fewer larger requests when the bytes wasted in the
gaps cost less than the extra requests.  This module only does the arithmetic;
``executor.py`` runs the resulting requests.  No asyncio/anyio/obstore here.

Range semantics follow Python slicing of the object's bytes:

* ``ByteRange(key, start, end)``  -> ``data[start:end]`` (``0 <= start <= end``)
* ``ByteRange(key, start, None)`` -> ``data[start:]`` (``ByteRange.whole(key)`` when start=0)
* ``ByteRange(key, -n, None)``    -> ``data[-n:]`` (``ByteRange.suffix_of(key, n)``)

A range that runs past the end of the object yields the shorter slice, exactly
like Python slicing; callers that expect an exact length must check it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import InvalidArgumentError

__all__ = [
    "ByteRange",
    "Request",
    "choose_fetch",
    "coalesce",
    "fetch_cost",
    "scatter",
]


@dataclass(frozen=True, slots=True)
class ByteRange:
    """A slice of one object: ``data[start:end]``; see the module docstring."""

    key: str
    start: int = 0
    end: int | None = None

    def __post_init__(self) -> None:
        if self.end is None:
            return
        if self.start < 0 or self.end < self.start:
            raise InvalidArgumentError(
                f"byte range of {self.key!r} needs 0 <= start <= end, "
                f"got start={self.start} end={self.end}"
            )

    @classmethod
    def whole(cls, key: str) -> ByteRange:
        return cls(key, 0, None)

    @classmethod
    def suffix_of(cls, key: str, nbytes: int) -> ByteRange:
        if nbytes <= 0:
            raise InvalidArgumentError(f"suffix of {key!r} needs nbytes > 0, got {nbytes}")
        return cls(key, -nbytes, None)

    @property
    def is_whole(self) -> bool:
        return self.start == 0 and self.end is None

    @property
    def is_suffix(self) -> bool:
        return self.start < 0

    @property
    def length(self) -> int | None:
        """Requested length when known before the fetch (bounded and suffix ranges)."""
        if self.end is not None:
            return self.end - self.start
        return -self.start if self.start < 0 else None


@dataclass(frozen=True, slots=True)
class Request:
    """One GET to issue and the original ranges it serves.

    ``start``/``end`` use the same encoding as :class:`ByteRange` (``end=None``
    for open-ended, negative ``start`` for a suffix).  ``parts`` lists
    ``(original index, offset within this request's payload)``; the slice
    length comes from the original range.  For a suffix request every part is
    an identical suffix, so its offset is 0.
    """

    key: str
    start: int
    end: int | None
    parts: tuple[tuple[int, int], ...] = field(default=())

    @property
    def length(self) -> int | None:
        if self.end is not None:
            return self.end - self.start
        return -self.start if self.start < 0 else None


def bridging_gap(ranges: Sequence[ByteRange], max_gap: int, fraction: float) -> int:
    """The widest hole, at most ``max_gap``, that :func:`coalesce` may read through while the holes it bridges
    add at most ``fraction`` of the bounded ``ranges``' own bytes (narrowest first): a read narrowed to save
    bytes keeps most of what it saved, and still merges what lies close."""
    union: list[tuple[str, int, int]] = []  # the ranges' union, per key in order
    for key, start, end in sorted((r.key, r.start, r.end) for r in ranges if r.end is not None and r.end > r.start):
        if union and union[-1][0] == key and start <= union[-1][2]:
            union[-1] = (key, union[-1][1], max(union[-1][2], end))
        else:
            union.append((key, start, end))
    holes = sorted(b[1] - a[2] for a, b in itertools.pairwise(union) if a[0] == b[0])
    spare = fraction * sum(e - s for _, s, e in union)
    gap = 0
    for hole in holes:
        if hole > max_gap or hole > spare:
            break
        spare -= hole
        gap = hole
    return gap if gap < (holes[-1] if holes else 0) else max_gap


def _runs_within_gap(bounded: list[tuple[int, int, int]], max_gap: int) -> list[list[tuple[int, int, int]]]:
    """Sorted ``(start, end, index)`` ranges in runs whose holes are at most ``max_gap`` bytes."""
    runs: list[list[tuple[int, int, int]]] = []
    end = 0
    for r in bounded:
        if runs and r[0] - end <= max_gap:
            runs[-1].append(r)
            end = max(end, r[1])
        else:
            runs.append([r])
            end = r[1]
    return runs


def _even_parts(run: list[tuple[int, int, int]], max_size: int) -> list[int]:
    """Where requests for a run of ranges start (indexes into ``run``, the first omitted): as few as spans
    within ``max_size`` allow (the greedy cut), then moved to the range starts nearest equal shares of the
    run, when those parts stay within ``max_size`` too (parts fetched at once then finish together)."""
    ends = list(itertools.accumulate((e for _, e, _ in run), max))  # the furthest end up to each range
    greedy: list[int] = []
    start = run[0][0]
    for j in range(1, len(run)):
        if ends[j] > ends[j - 1] and ends[j] - start > max_size:  # not inside the part so far, and too far
            greedy.append(j)
            start = run[j][0]
    if not greedy:
        return greedy
    cuts = [j for j in range(1, len(run)) if run[j][0] >= ends[j - 1]]  # starts no earlier range reaches past
    starts = [run[j][0] for j in cuts]
    share = (ends[-1] - run[0][0]) / (len(greedy) + 1)
    even: list[int] = []
    low = 0  # the first cut still free
    for k in range(1, len(greedy) + 1):
        aim = run[0][0] + k * share
        at = bisect.bisect_left(starts, aim, lo=low)
        near = [c for c in (at - 1, at) if low <= c < len(cuts)]
        if not near:
            return greedy
        c = min(near, key=lambda c: abs(starts[c] - aim))
        even.append(cuts[c])
        low = c + 1
    bounds = [0, *even, len(run)]
    if all(ends[b - 1] - run[a][0] <= max_size or b - a == 1 for a, b in itertools.pairwise(bounds)):
        return even
    return greedy


def coalesce(ranges: Sequence[ByteRange], *, max_gap: int, max_size: int) -> list[Request]:
    """Plan the GETs that serve ``ranges``.

    Per key: identical ranges share one slot; bounded ranges are sorted and
    merged while the hole between them is at most ``max_gap`` bytes
    (overlapping and adjacent ranges have no hole); a run of them spanning more
    than ``max_size`` bytes is cut into requests of about equal spans within
    ``max_size`` (parts fetched at once finish together).  A single range larger than ``max_size`` is never
    split, and ranges inside it join its request.  An open-ended range (``data[s:]``) also serves every bounded range
    starting at or after ``s`` — those bytes come anyway.  Identical suffixes
    are deduplicated.  Empty bounded ranges need no request and appear in no
    request's parts (:func:`scatter` gives them ``b""``).

    Requests come out ordered by key, then start.
    """
    if max_gap < 0:
        raise InvalidArgumentError(f"max_gap must be >= 0, got {max_gap}")
    if max_size < 0:
        raise InvalidArgumentError(f"max_size must be >= 0, got {max_size}")

    by_key: dict[str, list[int]] = {}
    for i, r in enumerate(ranges):
        by_key.setdefault(r.key, []).append(i)

    out: list[Request] = []
    for key in sorted(by_key):
        idx = by_key[key]
        bounded: list[tuple[int, int, int]] = []  # (start, end, index)
        open_: list[tuple[int, int]] = []  # (start, index)
        suffix: dict[int, list[int]] = {}  # nbytes -> indices
        for i in idx:
            r = ranges[i]
            if r.end is not None:
                if r.end > r.start:
                    bounded.append((r.start, r.end, i))
            elif r.start < 0:
                suffix.setdefault(-r.start, []).append(i)
            else:
                open_.append((r.start, i))

        reqs: list[Request] = []
        if open_:
            o_start = min(s for s, _ in open_)
            parts = [(i, s - o_start) for s, i in open_]
            rest = []
            for s, e, i in bounded:
                if s >= o_start:
                    parts.append((i, s - o_start))
                else:
                    rest.append((s, e, i))
            bounded = rest
            parts.sort(key=lambda p: (p[1], p[0]))
            open_req = Request(key, o_start, None, tuple(parts))
        else:
            open_req = None

        # longest first among equal starts, so contained ranges ride along for free
        bounded.sort(key=lambda t: (t[0], -t[1], t[2]))
        for run in _runs_within_gap(bounded, max_gap):
            for a, b in itertools.pairwise([0, *_even_parts(run, max_size), len(run)]):
                first = run[a][0]
                reqs.append(Request(key, first, max(e for _, e, _ in run[a:b]),
                                    tuple((i, s - first) for s, _, i in run[a:b])))
        if open_req is not None:
            reqs.append(open_req)
        for n in sorted(suffix):
            reqs.append(Request(key, -n, None, tuple((i, 0) for i in suffix[n])))
        out.extend(reqs)
    return out


def scatter(
    ranges: Sequence[ByteRange],
    requests: Sequence[Request],
    payloads: Sequence[bytes | None],
) -> list[bytes | None]:
    """Slice each request's payload back into the original ranges.

    ``payloads[j]`` is the data fetched for ``requests[j]`` (``None`` when the
    object is missing).  Returns one entry per original range: its bytes, or
    ``None`` when its object is missing.  Empty ranges yield ``b""``.
    """
    if len(payloads) != len(requests):
        raise InvalidArgumentError(
            f"scatter needs one payload per request, got {len(payloads)} for {len(requests)}"
        )
    out: list[bytes | None] = [b""] * len(ranges)
    for req, data in zip(requests, payloads):
        for i, off in req.parts:
            if data is None:
                out[i] = None
                continue
            r = ranges[i]
            if r.end is not None:
                out[i] = data[off : off + (r.end - r.start)]
            elif r.start < 0:
                out[i] = data[r.start :]
            else:
                out[i] = data[off:] if off else data
    return out


def fetch_cost(
    nbytes: int,
    nrequests: int,
    *,
    latency_s: float,
    bandwidth_Bps: float,
    round_trips: int = 1,
    concurrency: int = 32,
) -> float:
    """Estimated seconds to fetch ``nbytes`` in ``nrequests`` parallel requests.

    ``round_trips`` counts dependent steps (e.g. read a shard index, then its
    chunks = 2); requests beyond ``concurrency`` queue up as extra waves.
    """
    if nrequests <= 0:
        return 0.0
    waves = math.ceil(nrequests / max(1, concurrency))
    rounds = max(0, round_trips - 1) + waves  # earlier steps are one request each
    return rounds * latency_s + nbytes / max(bandwidth_Bps, 1.0)


def choose_fetch(
    whole_size: int | None,
    needed_spans: Sequence[tuple[int, int]],
    latency_s: float,
    bandwidth_Bps: float,
    *,
    ranged_round_trips: int = 1,
    whole_round_trips: int = 1,
    concurrency: int = 32,
    max_gap: int | None = None,
    max_size: int | None = None,
) -> str:
    """Return ``"whole"`` or ``"ranges"``: the cheaper way to get ``needed_spans``.

    ``needed_spans`` are ``(start, end)`` byte spans of one object.  They are
    coalesced (with ``max_gap``/``max_size``, defaulting to the break-even gap
    ``latency * bandwidth``) before being priced, so the comparison is against
    the requests that would really be sent.  ``ranged_round_trips=2`` prices
    "read an index first, then the spans" against one whole-object GET.
    Unknown ``whole_size`` always means ranges.
    """
    if whole_size is None:
        return "ranges"
    spans = [(int(s), int(e)) for s, e in needed_spans if e > s]
    if not spans:
        return "ranges"
    if max_gap is None:
        max_gap = int(latency_s * bandwidth_Bps)
    if max_size is None:
        max_size = max(whole_size, 1)
    reqs = coalesce(
        [ByteRange("_", s, e) for s, e in spans], max_gap=max_gap, max_size=max_size
    )
    ranged_bytes = sum(r.end - r.start for r in reqs if r.end is not None)  # all bounded
    c_ranges = fetch_cost(
        ranged_bytes,
        len(reqs),
        latency_s=latency_s,
        bandwidth_Bps=bandwidth_Bps,
        round_trips=ranged_round_trips,
        concurrency=concurrency,
    )
    c_whole = fetch_cost(
        whole_size,
        1,
        latency_s=latency_s,
        bandwidth_Bps=bandwidth_Bps,
        round_trips=whole_round_trips,
    )
    return "whole" if c_whole <= c_ranges else "ranges"
