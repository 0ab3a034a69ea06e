"""plan() predicts read()'s cell requests (same keys, same waves); count() reads no vertex cells when it need not."""

from __future__ import annotations

import numpy as np
import pytest

import zvf
from tests.support.recorder import record

CELLS = ("/vertices/", "/vertex_fragments/", "/vertex_attributes/", "/links/")


def cell_waves(rec):
    waves = [{k for k in w if any(c in k for c in CELLS)} for w in rec.waves()]
    return [w for w in waves if w]


CASES = [
    ("points", {"bbox": ([-30, -20, -10], [10, 20, 30])}),
    ("points", {"bbox": ([-30, -20, -10], [10, 20, 30]), "where": {"cls": [1, 2]}}),
    ("points", {"near": ([0, 0, 0], 20.0), "where": {"rgb[2]": (0, 60)}}),
    ("points", {}),
    ("points_ids", {"objects": [3, 4, 9]}),
    ("points_ids", {"groups": [1], "bbox": ([-40] * 3, [0] * 3)}),
    ("points_ids", {"near": ([5, 5, 5], 15.0), "where": {"inten": (0.2, 0.4)}}),
    ("streamlines", {"objects": [0, 5, 7]}),
    ("streamlines", {"near": ([0, 0, 0], 12.0)}),
    ("streamlines", {"bbox": ([-20] * 3, [0] * 3), "where": {"fa": (0.2, 0.5)}, "clip": True}),
    ("graph", {"bbox": ([-30] * 3, [10] * 3)}),
    ("graph", {"objects": [1], "where": {"val": (0.1, 0.6)}}),
    ("mesh", {"near": ([0, 0, 17], 20.0)}),
]


@pytest.mark.parametrize("name,kw", CASES)
def test_plan_predicts_cold_read(stores, name, kw):
    with zvf.open(stores[name].path, storage_options={"concurrency": 4096}) as ds:  # one wave = one batch
        q = ds.select(**kw)
        plan = q.plan()  # reads metadata it needs (object index, links documents), no cells
        rec = record(ds, latency=0.04)
        q.read()
        got = cell_waves(rec)
        want = [{k for k in w.keys if any(c in k for c in CELLS)} for w in plan.waves]
        assert len(got) <= len(want), (got, want)
        for i, (g, w) in enumerate(zip(got, want)):
            if plan.waves[i].exact:
                assert g == w, f"wave {i}: read {sorted(g - w)} more, {sorted(w - g)} fewer than planned"
            else:
                assert g <= w, f"wave {i}: read {sorted(g - w)} beyond the plan"
        if all(w.exact for w in plan.waves):
            assert len(got) == len(want)
            assert len([k for k in rec.requested() if any(c in k for c in CELLS)]) == plan.requests
        assert plan.round_trips == len(plan.waves)
        warm = q.plan()  # the plan follows the cache: cached fragment indexes need no request
        assert q.explain() == warm.explain() and f"{warm.round_trips} round trip" in warm.explain()


def test_plan_as_data(stores):
    with zvf.open(stores["points"].path) as ds:
        plan = ds.select(bbox=([-30] * 3, [30] * 3), where={"cls": 3}).plan()
        d = plan.to_dict()
        assert len(d["waves"]) == 2 and d["round_trips"] >= 2 and d["requests"] == plan.requests > 0
        assert d["waves"][0]["purpose"].startswith("where") and d["bytes"] > 0
        assert all(k.startswith("0/vertex_attributes/cls/") for k, _, _ in d["waves"][0]["reads"])


def _no_vertex_cells(rec):
    return not [k for k in rec.requested() if "/vertices/" in k or "/vertex_attributes/" in k]


def test_count_unnarrowed_reads_nothing(stores):
    for name in ("points", "points_ids", "streamlines", "graph", "mesh"):
        with zvf.open(stores[name].path) as ds:
            rec = record(ds)
            before = ds.stats.requests
            n = ds.select().count()
            assert n == len(stores[name].pos)
            assert ds.stats.requests == before and not rec.log


def test_count_whole_bin_box_reads_only_fragment_indexes(stores):
    st = stores["points"]
    with zvf.open(st.path) as ds:
        rec = record(ds)
        before = ds.stats.requests
        def below(x):
            return float(np.nextafter(np.float32(x), np.float32(-np.inf)))
        for lo, hi in (([-25.0] * 3, [below(25.0)] * 3), ([-12.5, 0.0, -50.0], [below(37.5), below(12.5), 50.0])):
            n = ds.select(bbox=(lo, hi)).count()
            truth = int(((st.pos >= lo) & (st.pos <= hi)).all(1).sum())
            assert n == truth
        assert _no_vertex_cells(rec)
        assert ds.stats.requests - before == len(rec.log) == len({k for k in rec.requested()})  # fragment indexes, once
        rec.clear()
        assert ds.select(bbox=([-20.0] * 3, [20.0] * 3)).count() == int(
            ((st.pos >= -20) & (st.pos <= 20)).all(1).sum())  # bins cut by the box: vertices decide


def test_count_objects_reads_only_fragment_indexes(stores):
    for name, ids in (("points_ids", [2, 3, 11]), ("streamlines", [1, 4, 20])):
        st = stores[name]
        with zvf.open(st.path) as ds:
            rec = record(ds)
            assert ds.select(objects=ids).count() == int(sum((st.oid == i).sum() for i in ids))
            assert _no_vertex_cells(rec)
