"""Randomized differential test against zarr-vectors 0.9.2, in both directions.

Direction A: 0.9.2 writes each case of ``tests/support/differential_cases.py``; zvf reads it
and must give the numpy truth computed from the inputs -- full reads, closed
boxes (degenerate, outside, on seams) with the per-geometry semantics of the
README, every object, object attributes and groups.
Direction B: zvf writes the same inputs; zarr-vectors 0.9.2 (``select().read()``,
``objects[i]``, ``building.read_*``), plain ``zarr.open_group`` and 0.9.2's
``validate(level=3)`` read them back to the inputs.

``ZVF_DIFF_CASES`` sets the number of cases (default 120).  Known zvf gaps are
``xfail(strict=True)`` through ``known_failure``: when one is fixed its tests
XPASS, which fails the run, and the predicate's entry goes.  The last test
prints and asserts the tally (every case run; every failure a known one) and
writes the counts by geometry to ``<pytest basetemp>/parity_differential.json``.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter

import numpy as np
import pytest

import zvf
from tests.support.differential_cases import SEQUENTIAL, Case, conn_coords, inside, make_cases
from tests.support.reference_bytes import unwrap_cell
from tests.support.rows import assert_rows_equal, rows

N_CASES = int(os.environ.get("ZVF_DIFF_CASES", "120"))
CASES = make_cases(N_CASES)
ASPECTS = {"A": ("full", "boxes", "objects"), "B": ("ref_read", "zarr", "validate")}
GEOMETRY_NAME = {"points": "point_cloud"}

_stores: dict = {}  # (direction, seed) -> path, or the exception the write raised
_outcomes: dict = {}  # (direction, aspect, seed) -> "passed" | "failed"
_ref_quirks: Counter = Counter()  # (geometry, read) -> times 0.9.2 misread zvf's store as it misreads its own


# ---------------------------------------------------------------- known zvf gaps


def known_failure(case: Case, direction: str, aspect: str) -> str | None:
    """Why this (case, direction, aspect) fails today because of zvf, or None.

    Each entry names one gap of issue 8; remove it when the gap is fixed
    (its tests then XPASS and fail the run until it is gone).
    """
    return None


def _params():
    out = []
    for d, aspects in ASPECTS.items():
        for aspect in aspects:
            for c in CASES:
                reason = known_failure(c, d, aspect)
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                out.append(pytest.param(d, aspect, c, id=f"{d}-{aspect}-{c.name}", marks=marks))
    return out


# ---------------------------------------------------------------- helpers


def same_rows(actual: list, expected: list, what: str) -> None:
    """Equal multisets of rows of the columns given (any number of rows, zero included)."""
    na, ne = len(actual[0]), len(expected[0])
    assert na == ne, f"{what}: {na} rows, expected {ne}"
    if ne:
        assert_rows_equal(rows(*actual), rows(*expected), what)


def same_conn(pos_a, conn_a, pos_e, conn_e, what: str) -> None:
    """Same edges/faces as rows of endpoint coordinates."""
    a, e = conn_coords(pos_a, conn_a), conn_coords(pos_e, conn_e)
    same_rows([a], [e], what)


def _values(a) -> np.ndarray:
    """Rows as (n, C) float64: a one-channel (n, 1) attribute compares equal to (n,)."""
    a = np.asarray(a)
    return a.reshape(len(a), int(np.prod(a.shape[1:]))).astype(np.float64)


def _store(direction: str, case: Case, tmp_path_factory):
    key = (direction, case.seed)
    if key not in _stores:
        path = tmp_path_factory.mktemp(f"{direction}{case.seed}") / f"{case.geometry}.zarrvectors"
        try:
            (case.ref_write if direction == "A" else case.zvf_write)(path)
            _stores[key] = path
        except Exception as exc:
            _stores[key] = exc
    got = _stores[key]
    if isinstance(got, Exception):
        raise got
    return got


def _vertex_truth(case: Case, mask=None):
    """[positions, attribute columns...] of the input rows (all, or ``mask``)."""
    m = slice(None) if mask is None else mask
    return [case.pos[m]] + [case.attrs[k][m] for k in sorted(case.attrs)]


def _selection_cols(sel) -> list:
    return [sel.positions] + [sel.attributes[k] for k in sorted(sel.attributes)]


# ---------------------------------------------------------------- direction A: zvf reads 0.9.2 stores


def check_full(ds, case: Case) -> None:
    assert ds.geometry_type == GEOMETRY_NAME.get(case.geometry, case.geometry)
    sel = ds.read_all()
    assert sel.positions.dtype == np.dtype(case.dtype), f"positions dtype {sel.positions.dtype}, wrote {case.dtype}"
    assert sorted(sel.attributes) == sorted(case.attrs)
    for k, v in case.attrs.items():
        assert sel.attributes[k].dtype == v.dtype, f"attribute {k!r}: dtype {sel.attributes[k].dtype}, wrote {v.dtype}"
    cols, expect = _selection_cols(sel), _vertex_truth(case)
    if case.oid is not None:
        assert sel.object_ids is not None, "object ids missing from read_all()"
        cols, expect = [*cols, sel.object_ids], [*expect, case.oid]
    same_rows([_values(c) for c in cols], [_values(c) for c in expect], "read_all (positions, attributes, ids)")
    assert ds.object_ids().tolist() == case.object_ids.tolist()


def check_boxes(ds, case: Case) -> None:
    for i, (lo, hi) in enumerate(case.boxes):
        what = f"box {i} {lo.tolist()}..{hi.tolist()}"
        m = inside(case.pos, lo, hi)
        if case.geometry == "points":
            sel = ds.query((lo, hi))
            cols, expect = _selection_cols(sel), _vertex_truth(case, m)
            if case.oid is not None:
                cols, expect = [*cols, sel.object_ids], [*expect, case.oid[m]]
            same_rows([_values(c) for c in cols], [_values(c) for c in expect], what)
        elif case.geometry in SEQUENTIAL:
            clipped = ds.query((lo, hi), clip=True)
            same_rows([_values(c) for c in _selection_cols(clipped)],
                      [_values(c) for c in _vertex_truth(case, m)], f"{what} clip=True vertices")
            both = m[case.conn].all(axis=1) if len(case.conn) else np.zeros(0, bool)
            same_conn(clipped.positions, clipped.edges, case.pos, case.conn[both], f"{what} clip=True edges")
            whole = ds.query((lo, hi), clip=False)
            hit = np.unique(case.oid[m])
            got = [] if whole.objects is None else np.asarray(whole.objects).tolist()
            assert got == hit.tolist(), f"{what} clip=False objects {got}, expected {hit.tolist()}"
            for j, o in enumerate(hit):
                seg = whole.positions[whole.offsets[j]:whole.offsets[j + 1]]
                assert np.array_equal(seg, case.pos[case.oid == o]), f"{what} clip=False object {o} vertices"
        else:
            sel = ds.query((lo, hi))
            cols, expect = [sel.positions], [case.pos[m]]
            if sel.object_ids is not None:
                cols, expect = [*cols, sel.object_ids], [*expect, case.oid[m]]
            same_rows([_values(c) for c in cols], [_values(c) for c in expect], f"{what} vertices")
            among = m[case.conn].all(axis=1) if len(case.conn) else np.zeros(0, bool)
            got = sel.faces if case.geometry == "mesh" else sel.edges
            same_conn(sel.positions, got, case.pos, case.conn[among], f"{what} edges/faces among the vertices inside")


def check_objects(ds, case: Case) -> None:
    ids = case.object_ids
    assert ds.object_ids().tolist() == ids.tolist()
    for o in ids.tolist():
        sel = ds.read_object(o)
        mine = case.oid == o
        what = f"object {o}"
        if case.geometry in SEQUENTIAL:
            assert np.array_equal(sel.positions, case.pos[mine]), f"{what}: vertices in traversal order"
            for k, v in case.attrs.items():
                assert np.array_equal(_values(sel.attributes[k]), _values(v[mine])), f"{what}: attribute {k!r}"
            n = int(mine.sum())
            edges = np.zeros((0, 2)) if sel.edges is None else np.asarray(sel.edges)
            expect = np.stack([np.arange(n - 1), np.arange(1, n)], axis=1) if n > 1 else np.zeros((0, 2))
            assert np.array_equal(edges.reshape(-1, 2), expect.reshape(-1, 2)), f"{what}: consecutive edges"
        elif case.geometry != "points":
            same_rows([_values(c) for c in _selection_cols(sel)], [_values(c) for c in _vertex_truth(case, mine)],
                      f"{what}: vertices and attributes")
            own = mine[case.conn].all(axis=1) if len(case.conn) else np.zeros(0, bool)
            got = sel.faces if case.geometry == "mesh" else sel.edges
            same_conn(sel.positions, got, case.pos, case.conn[own], f"{what}: edges/faces")
        else:
            same_rows([_values(c) for c in _selection_cols(sel)], [_values(c) for c in _vertex_truth(case, mine)],
                      f"{what}: vertices and attributes")
    for k, v in case.obj_attrs.items():
        got = ds.object_attribute(k)
        assert np.array_equal(_values(got), _values(v)), f"object attribute {k!r}"
    groups = ds.groups()
    assert [g.tolist() for g in groups] == [sorted(case.groups[g]) for g in sorted(case.groups)], "groups"
    for k, v in case.group_attrs.items():
        assert np.array_equal(_values(ds.group_attribute(k)), _values(v)), f"group attribute {k!r}"


# ---------------------------------------------------------------- direction B: 0.9.2 and zarr read zvf stores


def _ref_outcome(fn, path):
    """What a 0.9.2 read gives on one store: ("ok", value) or ("error", exception type)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "ok", fn(str(path))
    except Exception as exc:
        return "error", type(exc).__name__


def _same_outcome(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "error":
        return a[1] == b[1]
    (da, ra), (db, rb) = a[1], b[1]
    return da == db and ra.shape == rb.shape and np.array_equal(ra, rb)


def ref_agrees(what: str, fn, path, ref_path, case: Case, truth) -> None:
    """0.9.2's read ``fn`` of zvf's store gives the truth, or exactly what it gives on its own
    store of the same inputs (0.9.2's own misreads are not zvf's to fix; they are counted).

    ``fn(path) -> (dtype name, sorted rows)``; ``truth`` the same pair from the inputs.
    """
    got = _ref_outcome(fn, path)
    if got[0] == "ok" and got[1][0] == truth[0] and np.array_equal(got[1][1], truth[1]):
        return
    own = _ref_outcome(fn, ref_path)
    if _same_outcome(got, own):
        _ref_quirks[(case.geometry, what)] += 1
        return
    detail = got[1] if got[0] == "error" else f"dtype {got[1][0]}, {len(got[1][1])} rows"
    raise AssertionError(f"0.9.2 {what} on zvf's store: {detail}; inputs give dtype {truth[0]}, "
                         f"{len(truth[1])} rows; on its own store: {own[0]}")


def _sorted(a, ndim) -> tuple:
    a = np.asarray(a).reshape(-1, ndim)
    return str(a.dtype), (rows(a) if len(a) else np.zeros((0, ndim)))


def check_ref_read(path, case: Case, ref_path) -> None:
    import zarr_vectors as zv
    from zarr_vectors import building

    d = case.ndim
    opened: dict = {}

    def level(p):
        if p not in opened:
            opened[p] = zv.open(p).level(0)
        return opened[p]

    ref_agrees("level(0).read() positions", lambda p: _sorted(level(p).read().positions, d), path, ref_path,
               case, _sorted(case.pos, d))
    if case.geometry in ("graph", "mesh"):
        def conn(p):
            res = level(p).read()
            c = res.faces if case.geometry == "mesh" else res.edges
            return "conn", _rows_or_empty(conn_coords(np.asarray(res.positions).reshape(-1, d), c))
        ref_agrees("read() edges/faces", conn, path, ref_path, case,
                   ("conn", _rows_or_empty(conn_coords(case.pos, case.conn))))
    if case.geometry == "points":
        for i, (lo, hi) in enumerate(case.boxes):
            ref_agrees(f"select(bbox) box {i}",
                       lambda p, lo=lo, hi=hi: _sorted(
                           level(p).select(bbox=(lo.tolist(), hi.tolist())).read().positions, d),
                       path, ref_path, case, _sorted(case.pos[inside(case.pos, lo, hi)], d))
    if case.geometry in SEQUENTIAL:
        for o in case.object_ids.tolist():
            ref_agrees(f"objects[{o}]",
                       lambda p, o=o: ("obj", np.asarray(level(p).objects[o].positions).reshape(-1, d)),
                       path, ref_path, case, ("obj", case.pos[case.oid == o]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lvl = building.get_resolution_level(building.open_store(str(path)), 0)
        for k, v in case.obj_attrs.items():
            got = building.read_object_attributes(lvl, k)
            assert np.array_equal(_values(got), _values(v)), f"0.9.2 object attribute {k!r}"
        if case.groups:
            got = [sorted(int(x) for x in m) for m in building.read_all_groupings(lvl)]
            assert got == [sorted(case.groups[g]) for g in sorted(case.groups)], "0.9.2 groupings"
        for k, v in case.group_attrs.items():
            got = building.read_groupings_attributes(lvl, k)
            assert np.array_equal(_values(got), _values(v)), f"0.9.2 group attribute {k!r}"


def _rows_or_empty(a: np.ndarray) -> np.ndarray:
    return rows(a) if len(a) else a


def check_zarr(path, case: Case) -> None:
    """Plain zarr-python: every vertices cell and its attribute cells decode to the input rows."""
    import zarr

    g = zarr.open_group(str(path), mode="r")
    level = g["0"]
    verts = level["vertices"]
    meta = dict(verts.attrs)
    origin = np.asarray(meta.get("chunk_grid_origin", [0] * case.ndim), np.int64)
    chunks = [tuple(int(x) for x in s.split(".")) for s in meta.get("nonempty_chunks", [])]
    names = sorted(case.attrs)
    attr_arrays = {k: level[f"vertex_attributes/{k}"] for k in names}
    cols: list[list] = [[] for _ in range(1 + len(names))]
    for c in chunks:
        idx = tuple(np.asarray(c) - origin)
        p = np.frombuffer(unwrap_cell(verts[idx]), dtype=meta["dtype"]).reshape(-1, case.ndim)
        cols[0].append(p)
        for j, k in enumerate(names):
            arr = attr_arrays[k]
            a = np.frombuffer(unwrap_cell(arr[idx]), dtype=arr.attrs["dtype"])
            cols[j + 1].append(a.reshape(len(p), -1))
    assert meta["dtype"] == case.dtype, f"vertices dtype {meta['dtype']}, wrote {case.dtype}"
    got = [np.concatenate(c) if c else np.zeros((0, 1)) for c in cols]
    same_rows([_values(c) for c in got], [_values(c) for c in _vertex_truth(case)], "zarr: vertices + attributes")
    if len(case.object_ids):  # 0.9.2 writes no manifests array when there is no object
        man = level["object_index/manifests"]
        assert man.shape[0] == len(case.object_ids), "zarr: one manifest row per object"


def check_validate(path, case: Case) -> None:
    from zarr_vectors.validate import validate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = validate(str(path), level=3)
    assert result.ok, str(result)[:1500]


CHECKS = {"full": check_full, "boxes": check_boxes, "objects": check_objects,
          "ref_read": check_ref_read, "zarr": check_zarr, "validate": check_validate}


# ---------------------------------------------------------------- the tests


@pytest.mark.parametrize(("direction", "aspect", "case"), _params())
def test_differential(direction, aspect, case, tmp_path_factory):
    key = (direction, aspect, case.seed)
    _outcomes[key] = "failed"
    path = _store(direction, case, tmp_path_factory)
    if direction == "A":
        with zvf.open(str(path)) as ds:
            CHECKS[aspect](ds, case)
    elif aspect == "ref_read":
        check_ref_read(path, case, _store("A", case, tmp_path_factory))
    else:
        CHECKS[aspect](path, case)
    _outcomes[key] = "passed"


@pytest.fixture(scope="module", autouse=True)
def differential_summary(request, tmp_path_factory):
    """After the cases of this module that ran (all, some, or one): every failure is a known one, counts
    printed and written out.  A fixture, not a test: a test would skip when run alone or on another worker."""
    yield
    if _outcomes:
        _summarise(request, tmp_path_factory)


def _summarise(request, tmp_path_factory) -> None:
    by_seed = {c.seed: c for c in CASES}
    tally: dict = {}
    unexpected, unfixed = [], []
    for (d, aspect, seed), outcome in _outcomes.items():
        c = by_seed[seed]
        known = known_failure(c, d, aspect)
        t = tally.setdefault(d, {}).setdefault(c.geometry, Counter())
        t["checks"] += 1
        t[outcome if not (known and outcome == "failed") else "known_failure"] += 1
        if outcome == "failed" and not known:
            unexpected.append((d, aspect, c.name))
        if outcome == "passed" and known:
            unfixed.append((d, aspect, c.name))
    cases = {d: {g: {"cases": 0, "cases_passed": 0} for g in sorted({c.geometry for c in CASES})} for d in ASPECTS}
    for d, aspects in ASPECTS.items():
        for c in CASES:
            res = [_outcomes.get((d, a, c.seed)) for a in aspects]
            if None in res:
                continue
            per = cases[d][c.geometry]
            per["cases"] += 1
            if all(r == "passed" for r in res):
                per["cases_passed"] += 1
            elif all(r == "passed" or known_failure(c, d, a) for r, a in zip(res, aspects)):
                per["cases_known_gap"] = per.get("cases_known_gap", 0) + 1
    report = {"n_cases": N_CASES, "cases": cases,
              "reference_misreads_matched": {f"{g}: {w}": n for (g, w), n in sorted(_ref_quirks.items())},
              "checks": {d: {g: dict(t) for g, t in per.items()} for d, per in tally.items()}}
    out = tmp_path_factory.getbasetemp() / "parity_differential.json"
    out.write_text(json.dumps(report, indent=1))
    tw = request.config.pluginmanager.get_plugin("terminalreporter")
    for d in ASPECTS:
        run = sum(v["cases"] for v in cases[d].values())
        ok = sum(v["cases_passed"] for v in cases[d].values())
        known = sum(v.get("cases_known_gap", 0) for v in cases[d].values())
        line = (f"differential {d}: {run} cases run, {ok} passed every check, {known} hit a known zvf gap; "
                + ", ".join(f"{g} {v['cases_passed']}/{v['cases']}" for g, v in cases[d].items()))
        (tw.write_line if tw is not None else print)(line)
    if tw is not None:
        tw.write_line(f"differential counts: {out}")
    assert not unexpected, f"failures that no known gap explains: {unexpected[:10]}"
    assert not unfixed, f"known gaps that passed (remove them from known_failure): {unfixed[:10]}"
    for d in ASPECTS:
        run = sum(v["cases"] for v in cases[d].values())
        accounted = sum(v["cases_passed"] + v.get("cases_known_gap", 0) for v in cases[d].values())
        assert run == accounted, f"direction {d}: {run} cases run, {accounted} passed or known"
