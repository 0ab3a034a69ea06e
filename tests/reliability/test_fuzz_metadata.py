"""Fuzzing of metadata documents: generated and mutated ``zarr.json``.

Through the parsers (parse_root/parse_level/parse_array) and through the
whole open path (a MemoryTransport store whose root, level or array
document is corrupted, then open + read), zvf may only raise ZvfError
subclasses -- never KeyError, TypeError, IndexError, RecursionError... --
and the validator must never raise at all.  Case counts go to the terminal
summary (see conftest.py).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.results import FUZZ_COUNTS, FUZZ_FINDINGS
from zvf.config import tuned
from zvf.errors import ZvfError
from zvf.format import parse


def FAST(n: int):
    return settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck),
                    derandomize=True)

SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True)
           | st.text(max_size=12) | st.sampled_from(["", "0", "-1", "NaN", "float32", "vlen-bytes", "c", "/"]))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=5)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=5), max_leaves=25)

# ------------------------------------------------------------------------------ seeds


def _seed_docs(ref_stores: Path) -> dict[str, list[dict]]:
    """Valid documents by kind, from the reference stores (roots, levels, arrays)."""
    out: dict[str, list[dict]] = {"root": [], "level": [], "array": [], "group": []}
    for store in sorted(ref_stores.glob("*.zarrvectors")):
        for p in sorted(store.rglob("zarr.json")):
            doc = json.loads(p.read_text())
            rel = p.parent.relative_to(store).as_posix()
            if rel == ".":
                out["root"].append(doc)
            elif rel.isdigit():
                out["level"].append(doc)
            elif doc.get("node_type") == "array":
                out["array"].append(doc)
            else:
                out["group"].append(doc)
    return out


@pytest.fixture(scope="module")
def seeds(ref_stores):
    docs = _seed_docs(ref_stores)
    assert docs["root"] and docs["level"] and docs["array"]
    return docs


def _paths(doc, prefix=()):
    """Every (path) to a value inside a JSON document."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


def _set(doc, path, value):
    if not path:
        return value
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return doc


def _delete(doc, path):
    if not path:
        return {}
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    del cur[path[-1]]
    return doc


@st.composite
def mutated(draw, pool):
    """A valid document with 1-3 mutations: replace, delete, retype, duplicate, huge or deep values."""
    doc = copy.deepcopy(draw(st.sampled_from(pool)))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "delete", "retype", "huge", "deep", "grow"]))
        try:
            if op == "replace":
                doc = _set(doc, path, draw(JSON))
            elif op == "delete" and path:
                doc = _delete(doc, path)
            elif op == "retype":
                cur = doc
                for p in path:
                    cur = cur[p]
                alt = {dict: lambda v: list(v.values()), list: lambda v: {str(i): x for i, x in enumerate(v)},
                       str: lambda v: [v], int: lambda v: str(v), float: lambda v: int(v) if math.isfinite(v) else "x",
                       bool: lambda v: int(v), type(None): lambda v: 0}[type(cur)]
                doc = _set(doc, path, alt(cur))
            elif op == "huge":
                doc = _set(doc, path, draw(st.sampled_from([2**63, -(2**63) - 1, 10**30, 1e308, -1e308, float("inf"),
                                                             float("nan"), 2**31, -1, 0, 10**6 * [0][:0] or 0])))
            elif op == "deep":
                v = 0
                for _ in range(draw(st.integers(10, 400))):
                    v = [v]
                doc = _set(doc, path, v)
            elif op == "grow":
                cur = doc
                for p in path:
                    cur = cur[p]
                if isinstance(cur, list):
                    doc = _set(doc, path, cur * draw(st.integers(2, 50)))
        except (KeyError, IndexError, TypeError):
            continue
    return doc


def _expect_zvf_error(fn, doc, key):
    try:
        fn(doc, key=key)
    except ZvfError:
        return "rejected"
    except RecursionError:
        pytest.fail(f"RecursionError on {json.dumps(doc)[:200]}")
    return "accepted"


# ------------------------------------------------------------------------------ parsers


PARSERS = {"root": parse.parse_root, "level": parse.parse_level, "array": parse.parse_array}


@pytest.mark.parametrize("kind", list(PARSERS))
def test_parsers_on_generated_documents(kind):
    fn = PARSERS[kind]

    @FAST(250)
    @given(doc=JSON | st.dictionaries(st.sampled_from(["zarr_format", "node_type", "attributes", "shape",
                                                       "data_type", "chunk_grid", "codecs", "fill_value"]),
                                      JSON, max_size=8))
    def run(doc):
        FUZZ_COUNTS[f"generated_{kind}"] += 1
        _expect_zvf_error(fn, doc, f"fuzz/{kind}/zarr.json")

    run()


@pytest.mark.parametrize("kind", list(PARSERS))
def test_parsers_on_mutated_documents(kind, seeds):
    fn = PARSERS[kind]
    outcomes = {"rejected": 0, "accepted": 0}

    @FAST(400)
    @given(doc=mutated(seeds[kind]))
    def run(doc):
        FUZZ_COUNTS[f"mutated_{kind}"] += 1
        outcomes[_expect_zvf_error(fn, doc, f"fuzz/{kind}/zarr.json")] += 1

    run()
    assert outcomes["rejected"] > 0 and outcomes["accepted"] > 0, outcomes


@pytest.mark.parametrize("kind", list(PARSERS))
def test_parsers_on_raw_bytes(kind, seeds):
    """Bytes that are not JSON (truncated, binary, NaN tokens) through loads + parse."""
    good = json.dumps(seeds[kind][0]).encode()

    @FAST(200)
    @given(cut=st.integers(0, len(good)), junk=st.binary(max_size=16))
    def run(cut, junk):
        FUZZ_COUNTS[f"bytes_{kind}"] += 1
        raw = good[:cut] + junk
        with contextlib.suppress(ZvfError):
            PARSERS[kind](parse.loads(raw, key="fuzz/zarr.json"), key="fuzz/zarr.json")

    run()


# ------------------------------------------------------------------------------ open path


def _store_objects(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


ALLOC_LIMIT = 1 << 26


async def _open_and_read(data: dict[str, bytes]):
    """Open a store held by a MemoryTransport the way zvf.open does, then read from it."""
    from zvf.aio import AsyncDataset
    from zvf.io.executor import Executor
    from zvf.io.store import StoreHandle
    from zvf.read import load
    from zvf.testing import MemoryTransport
    from zvf.validation.checks import Validator

    handle = StoreHandle.for_transport(MemoryTransport(data), read_only=True)
    rep = await Validator(Executor(handle), "fuzz://store", 5).run()  # must never raise
    ex = Executor(handle)
    try:
        root, level0 = await load.load_root(ex, handle.url)
        ds = AsyncDataset(handle, ex, root, level0)
        for lv in ds.levels:
            await ds.read_all(level=lv)
        lo, hi = ds.bounds
        await ds.query((lo, hi))
        if ds.geometry_type != "point_cloud":
            ids = await ds.object_ids()
            if len(ids):
                await ds.read_object(int(ids[0]))
    except ZvfError:
        return rep, "rejected"
    return rep, "read"


READER_BUGS: dict[str, str] = {}  # non-ZvfError failures in zvf/read/* (known; see docs/RELIABILITY.md)


def _site(e: BaseException) -> str:
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/src/zvf/" in f.filename]
    f = frames[-1] if frames else traceback.extract_tb(e.__traceback__)[-1]
    return f"{type(e).__name__} at {f.filename.split('/src/')[-1]}:{f.name}"


@pytest.mark.parametrize("store", ["points3d", "graph", "mesh", "polylines2", "streamlines_pyramid",
                                   "points3d_sharded_zstd"])
def test_open_path_with_corrupted_documents(store, ref_stores):
    """zvf.open + reads on a store with one corrupted document: only ZvfError; validate never raises."""
    src = ref_stores / f"{store}.zarrvectors"
    if not src.is_dir():
        pytest.skip(f"{store} not available")
    base = _store_objects(src)
    doc_keys = sorted(k for k in base if k.endswith("zarr.json"))
    docs = {k: json.loads(base[k]) for k in doc_keys}
    outcomes = {"rejected": 0, "read": 0, "reader bug": 0}
    hard: list[str] = []
    bugs: dict[str, str] = {}

    @FAST(45)
    @given(data=st.data())
    def run(data):
        FUZZ_COUNTS[f"open_{store}"] += 1
        key = data.draw(st.sampled_from(doc_keys))
        how = data.draw(st.sampled_from(["mutate", "mutate", "mutate", "bytes", "delete"]))
        objs = dict(base)
        if how == "mutate":
            objs[key] = json.dumps(data.draw(mutated([docs[key]]))).encode()
        elif how == "bytes":
            objs[key] = objs[key][: data.draw(st.integers(0, len(objs[key])))] + data.draw(st.binary(max_size=8))
        else:
            del objs[key]
        try:
            rep, outcome = anyio.run(_open_and_read, objs)
            assert rep.issues is not None
            outcomes[outcome] += 1
        except Exception as e:
            site = _site(e)
            if "zvf/read/" in site and "Validator" not in site:
                outcomes["reader bug"] += 1
                bugs.setdefault(site, f"{store}: {how} {key}: {str(e)[:80]}")
            else:
                hard.append(f"{site}: {how} {key}: {e}")

    with tuned(max_dense_bytes=ALLOC_LIMIT):  # read_dense's own cap small: a hostile shape fails fast here too
        run()
    assert not hard, "\n".join(hard[:10])
    assert outcomes["rejected"] > 0, outcomes
    READER_BUGS.update(bugs)
    FUZZ_FINDINGS.update(bugs)
    assert not outcomes["reader bug"], "non-ZvfError in zvf/read: " + "; ".join(sorted(bugs))


@pytest.mark.parametrize("store", ["points3d", "graph", "streamlines_pyramid", "points3d_sharded_zstd"])
def test_validator_never_raises_on_damaged_objects(store, ref_stores):
    """Random damage to any stored object (cells, indexes, documents): always a report, never an exception."""
    from zvf.io.executor import Executor
    from zvf.io.store import StoreHandle
    from zvf.testing import MemoryTransport
    from zvf.validation.checks import Validator

    src = ref_stores / f"{store}.zarrvectors"
    if not src.is_dir():
        pytest.skip(f"{store} not available")
    base = _store_objects(src)
    keys = sorted(base)
    flagged = {"error": 0, "clean": 0}

    @FAST(40)
    @given(data=st.data())
    def run(data):
        FUZZ_COUNTS[f"damage_{store}"] += 1
        objs = dict(base)
        for _ in range(data.draw(st.integers(1, 3))):
            key = data.draw(st.sampled_from(keys))
            blob = objs.get(key, b"")
            op = data.draw(st.sampled_from(["flip", "truncate", "delete", "junk", "copy"]))
            if op == "flip" and blob:
                i = data.draw(st.integers(0, len(blob) - 1))
                objs[key] = blob[:i] + bytes([blob[i] ^ data.draw(st.integers(1, 255))]) + blob[i + 1:]
            elif op == "truncate":
                objs[key] = blob[: data.draw(st.integers(0, max(len(blob) - 1, 0)))]
            elif op == "delete":
                objs.pop(key, None)
            elif op == "junk":
                objs[key] = data.draw(st.binary(max_size=64))
            else:
                objs[data.draw(st.sampled_from(keys))] = blob
        handle = StoreHandle.for_transport(MemoryTransport(objs), read_only=True)
        rep = anyio.run(lambda: Validator(Executor(handle), "damage://", 5).run())
        internal = [i for i in rep.issues if "internal error" in i.message]
        assert not internal, internal
        flagged["error" if not rep.ok else "clean"] += 1

    run()
    assert flagged["error"] > 0, flagged
