from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zvf.errors import InvalidArgumentError
from zvf.io.plan import ByteRange, Request, bridging_gap, choose_fetch, coalesce, fetch_cost, scatter

BLOBS = {"a": bytes(range(256)) * 4, "b": bytes(reversed(range(200))), "c": b""}


def fetch(req: Request) -> bytes | None:
    """Simulate a store: Python slicing of the blob, like the transports promise."""
    blob = BLOBS.get(req.key)
    if blob is None:
        return None
    return blob[req.start:req.end] if req.start >= 0 else blob[req.start:]


def expected(r: ByteRange) -> bytes | None:
    if r.end is not None and r.end == r.start:
        return b""  # empty ranges need no request, so existence is not checked
    blob = BLOBS.get(r.key)
    if blob is None:
        return None
    return blob[r.start:r.end] if r.start >= 0 else blob[r.start:]


def run(ranges, **kw):
    reqs = coalesce(ranges, **kw)
    return reqs, scatter(ranges, reqs, [fetch(q) for q in reqs])


def test_byte_range_validation_and_markers():
    with pytest.raises(InvalidArgumentError, match="'k'"):
        ByteRange("k", 5, 3)
    with pytest.raises(InvalidArgumentError):
        ByteRange("k", -1, 4)
    with pytest.raises(InvalidArgumentError):
        ByteRange.suffix_of("k", 0)
    assert ByteRange.whole("k").is_whole and ByteRange.whole("k").length is None
    s = ByteRange.suffix_of("k", 16)
    assert s.is_suffix and s.length == 16 and s == ByteRange("k", -16, None)
    assert ByteRange("k", 3, 10).length == 7


def test_dedup_and_merge_adjacent_overlapping():
    ranges = [ByteRange("a", 0, 10), ByteRange("a", 0, 10), ByteRange("a", 10, 20),
              ByteRange("a", 15, 30)]
    reqs, out = run(ranges, max_gap=0, max_size=1 << 20)
    assert [(q.start, q.end) for q in reqs] == [(0, 30)]
    assert out == [expected(r) for r in ranges]


def test_gap_limit():
    ranges = [ByteRange("a", 0, 10), ByteRange("a", 20, 30), ByteRange("a", 100, 110)]
    reqs, out = run(ranges, max_gap=10, max_size=1 << 20)
    assert [(q.start, q.end) for q in reqs] == [(0, 30), (100, 110)]
    reqs, _ = run(ranges, max_gap=9, max_size=1 << 20)
    assert len(reqs) == 3
    assert out == [expected(r) for r in ranges]


def test_size_limit_and_oversized_single_range():
    ranges = [ByteRange("a", 0, 100), ByteRange("a", 100, 200), ByteRange("a", 200, 700),
              ByteRange("a", 200, 210), ByteRange("a", 650, 700)]
    reqs, out = run(ranges, max_gap=0, max_size=200)
    # the oversized range is not split; the ranges inside it come for free
    assert [(q.start, q.end) for q in reqs] == [(0, 200), (200, 700)]
    assert len(reqs[1].parts) == 3
    assert out == [expected(r) for r in ranges]


def test_a_run_past_max_size_comes_in_equal_parts():
    """A 20 MB run of 500 kB inner chunks at a 16 MiB limit: two parts of 10 MB fetched at once, not 16 + 4
    (the larger would finish last, alone)."""
    ranges = [ByteRange("k", i * 500_000, (i + 1) * 500_000) for i in range(40)]
    reqs = coalesce(ranges, max_gap=0, max_size=16 << 20)
    assert [(q.start, q.end) for q in reqs] == [(0, 10_000_000), (10_000_000, 20_000_000)]
    reqs = coalesce(ranges, max_gap=0, max_size=7_000_000)  # 3 parts of 7 MB at most, none under 6
    assert len(reqs) == 3 and all(6_000_000 <= q.end - q.start <= 7_000_000 for q in reqs)
    assert sorted(i for q in reqs for i, _ in q.parts) == list(range(40))


def test_keys_never_merge_and_order():
    ranges = [ByteRange("b", 0, 5), ByteRange("a", 5, 10), ByteRange("a", 0, 5)]
    reqs, out = run(ranges, max_gap=1000, max_size=1000)
    assert [(q.key, q.start, q.end) for q in reqs] == [("a", 0, 10), ("b", 0, 5)]
    assert out == [expected(r) for r in ranges]


def test_open_ended_absorbs_later_ranges_and_suffix_dedup():
    ranges = [ByteRange("a", 100, None), ByteRange("a", 200, 210), ByteRange("a", 0, 4),
              ByteRange.suffix_of("a", 8), ByteRange.suffix_of("a", 8), ByteRange("a", 300, None)]
    reqs, out = run(ranges, max_gap=0, max_size=1 << 20)
    kinds = sorted((q.start, q.end) for q in reqs)
    assert kinds == [(-8, None), (0, 4), (100, None)]
    assert out == [expected(r) for r in ranges]


def test_whole_object_serves_all_bounded():
    ranges = [ByteRange.whole("b"), ByteRange("b", 5, 9), ByteRange("b", 150, 199)]
    reqs, out = run(ranges, max_gap=0, max_size=10)
    assert len(reqs) == 1 and reqs[0].end is None
    assert out == [expected(r) for r in ranges]


def test_empty_ranges_missing_objects_and_short_objects():
    ranges = [ByteRange("a", 7, 7), ByteRange("zz", 0, 4), ByteRange("b", 190, 260),
              ByteRange.suffix_of("c", 4), ByteRange("b", 300, 310)]
    reqs, out = run(ranges, max_gap=0, max_size=1 << 20)
    assert all(q.key != "a" for q in reqs)  # empty range: no request
    assert out == [b"", None, BLOBS["b"][190:], b"", b""]


def test_argument_checks():
    with pytest.raises(InvalidArgumentError, match="max_gap"):
        coalesce([], max_gap=-1, max_size=10)
    with pytest.raises(InvalidArgumentError, match="max_size"):
        coalesce([], max_gap=0, max_size=-1)
    with pytest.raises(InvalidArgumentError):
        scatter([], [Request("a", 0, 1)], [])
    assert coalesce([], max_gap=0, max_size=0) == []


@st.composite
def range_lists(draw):
    n = draw(st.integers(0, 40))
    out = []
    for _ in range(n):
        key = draw(st.sampled_from(["a", "b", "c", "missing"]))
        kind = draw(st.sampled_from(["bounded"] * 6 + ["open", "suffix", "whole"]))
        if kind == "bounded":
            s = draw(st.integers(0, 1100))
            out.append(ByteRange(key, s, s + draw(st.integers(0, 300))))
        elif kind == "open":
            out.append(ByteRange(key, draw(st.integers(1, 1100)), None))
        elif kind == "suffix":
            out.append(ByteRange.suffix_of(key, draw(st.integers(1, 1200))))
        else:
            out.append(ByteRange.whole(key))
    return out


@settings(max_examples=200, deadline=None)
@given(range_lists(), st.integers(0, 300), st.integers(0, 800))
def test_property_every_range_served_exactly(ranges, max_gap, max_size):
    reqs = coalesce(ranges, max_gap=max_gap, max_size=max_size)
    seen: dict[int, int] = {}
    for q in reqs:
        assert q.parts, "no request without parts"
        for i, off in q.parts:
            seen[i] = seen.get(i, 0) + 1
            r = ranges[i]
            assert r.key == q.key
            if r.end is not None and q.end is not None:
                assert q.start <= r.start and r.end <= q.end and off == r.start - q.start
        if q.end is not None and q.end - q.start > max_size:
            # only a single oversized range (plus ranges inside it) may exceed max_size
            assert any((ranges[i].start, ranges[i].end) == (q.start, q.end) for i, _ in q.parts)
    for i, r in enumerate(ranges):
        empty = r.end is not None and r.end == r.start
        assert seen.get(i, 0) == (0 if empty else 1), (i, r)
    out = scatter(ranges, reqs, [fetch(q) for q in reqs])
    assert out == [expected(r) for r in ranges]
    # no duplicate requests
    assert len({(q.key, q.start, q.end) for q in reqs}) == len(reqs)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 200)), max_size=60),
       st.integers(0, 500), st.integers(1, 3000))
def test_property_bounded_requests_within_max_size(spans, max_gap, max_size):
    ranges = [ByteRange("k", s, s + n) for s, n in spans]
    reqs = coalesce(ranges, max_gap=max_gap, max_size=max_size)
    for q in reqs:
        if q.end - q.start > max_size:  # a lone oversized range and ranges inside it
            assert any((ranges[i].start, ranges[i].end) == (q.start, q.end) for i, _ in q.parts)
    # merging is maximal between neighbours: consecutive requests could not have merged
    for p, q in itertools.pairwise(reqs):
        assert q.end > p.end and (q.start - p.end > max_gap or q.end - p.start > max_size)


def test_coalesce_many_ranges():
    ranges = [ByteRange(f"k{i % 10}", (i * 7919) % 10_000_000, (i * 7919) % 10_000_000 + 100)
              for i in range(100_000)]
    reqs = coalesce(ranges, max_gap=4096, max_size=1 << 20)
    assert sum(len(q.parts) for q in reqs) == len(ranges)


def test_bridging_gap_examples():
    r = [ByteRange("a", 0, 100), ByteRange("a", 110, 210), ByteRange("a", 300, 400), ByteRange("b", 500, 600)]
    assert bridging_gap(r, 1000, 0.05) == 10  # 10 of 15 spare bytes; the 90-byte hole is past it
    assert bridging_gap(r, 1000, 0.0) == 0
    assert bridging_gap(r, 1000, 1.0) == 1000  # every hole within budget: the handle's gap stands
    assert bridging_gap(r, 50, 1.0) == 10  # never past the handle's gap
    assert bridging_gap([ByteRange("a", 0, 10)], 64, 0.25) == 64  # no holes


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 200)), min_size=1, max_size=60),
       st.integers(1, 3000), st.floats(0, 2))
def test_property_bridged_holes_stay_within_their_fraction(spans, max_gap, fraction):
    """Coalesced with the gap it gives, the requests fetch at most ``fraction`` more than the ranges' own
    bytes (ties at the chosen hole aside: holes of one size are bridged together)."""
    ranges = [ByteRange("k", s, s + n) for s, n in spans]
    gap = bridging_gap(ranges, max_gap, fraction)
    assert 0 <= gap <= max_gap
    own = coalesce(ranges, max_gap=0, max_size=1 << 30)
    got = coalesce(ranges, max_gap=gap, max_size=1 << 30)
    own_bytes = sum(q.end - q.start for q in own)
    holes = sorted({b.start - a.end for a, b in itertools.pairwise(own)})
    tie = holes.count(gap) and sum(b.start - a.end for a, b in itertools.pairwise(own) if b.start - a.end == gap)
    assert sum(q.end - q.start for q in got) <= own_bytes * (1 + fraction) + tie + 1e-6


def test_cost_model():
    lat, bw = 0.03, 100e6
    # two spans of a small object: coalesced into one request of fewer bytes than whole
    assert choose_fetch(200_000, [(0, 10), (100_000, 100_010)], lat, bw) == "ranges"
    # ...unless they cannot be merged and must queue (concurrency 1): one whole GET wins
    spans = [(0, 10), (100_000, 100_010)]
    assert choose_fetch(200_000, spans, lat, bw, max_gap=0, concurrency=1) == "whole"
    # one small span of a huge object: ranged
    assert choose_fetch(500_000_000, [(1000, 2000)], lat, bw) == "ranges"
    # index-then-data (2 round trips) vs one whole GET of a 1 MB shard: whole wins
    assert choose_fetch(1_000_000, [(0, 1000)], lat, bw, ranged_round_trips=2) == "whole"
    # ...but not for a 100 MB shard
    assert choose_fetch(100_000_000, [(0, 1000)], lat, bw, ranged_round_trips=2) == "ranges"
    assert choose_fetch(None, [(0, 10)], lat, bw) == "ranges"
    assert choose_fetch(10, [], lat, bw) == "ranges"
    # many requests queue into waves
    assert fetch_cost(0, 64, latency_s=1.0, bandwidth_Bps=1, concurrency=32) == 2.0
    assert fetch_cost(100, 1, latency_s=0.0, bandwidth_Bps=100) == 1.0
    assert fetch_cost(0, 1, latency_s=1.0, bandwidth_Bps=1, round_trips=3) == 3.0
