"""Object reads of graphs whose edges span many chunks: link cells are planned up front.

A read fetches only the cross-chunk link cells whose rows can land in the
chunks it holds (every endpoint for graphs), each once, and later reads of
the same dataset reuse the decoded cells.  Request counts are asserted from
the transport's log, results against the inputs and zarr-vectors 0.9.2.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import zvf
from zvf.aio import AsyncDataset
from zvf.io.executor import Executor
from zvf.io.store import StoreHandle
from zvf.read import load
from zvf.read.links import level_links
from zvf.testing import MemoryTransport

CHUNK = 10.0
N_OBJ = 12


def _graph(seed: int, skeleton: bool):
    """Nodes anywhere in a 6x6x6 chunk grid; edges join random nodes of one object (long edges)."""
    rng = np.random.default_rng(seed)
    n = 300
    pos = rng.uniform(0, 60, (n, 3)).astype(np.float32)
    oid = rng.integers(0, N_OBJ, n)
    parts = []
    for o in range(N_OBJ):
        m = np.flatnonzero(oid == o)
        if skeleton:  # a tree: each node's parent is a random earlier node of its object
            parts.append(np.stack([m[1:], m[rng.integers(0, np.arange(1, len(m)))]], axis=1))
        else:
            parts.append(rng.choice(m, (30, 2)))
    edges = np.concatenate(parts)
    edges = np.unique(edges[edges[:, 0] != edges[:, 1]], axis=0)
    return pos, oid, edges


@pytest.fixture(scope="module", params=["graph", "skeleton"])
def store(request, tmp_path_factory):
    kind = request.param
    pos, oid, edges = _graph(7, kind == "skeleton")
    path = tmp_path_factory.mktemp(kind) / f"{kind}.zarrvectors"
    zvf.write_graph(str(path), pos, edges, chunk_shape=(CHUNK,) * 3, object_ids=oid, geometry_type=kind,
                    bounds=([0.0] * 3, [60.0] * 3))
    return kind, path, pos, oid, edges


def _unlist_links(data: dict[str, bytes]) -> None:
    """Drop ``nonempty_chunks`` from every link array (and the root's consolidated copy of it)."""
    root = json.loads(data["zarr.json"])
    section = root.get("consolidated_metadata", {}).get("metadata", {})
    for key in [k for k in data if k.startswith("0/links/0/") and k.endswith("/zarr.json")]:
        doc = json.loads(data[key])
        doc["attributes"].pop("nonempty_chunks", None)
        data[key] = json.dumps(doc).encode()
        if key[:-len("/zarr.json")] in section:
            section[key[:-len("/zarr.json")]] = doc
    data["zarr.json"] = json.dumps(root).encode()


async def _open(path: Path, unlisted: bool = False) -> tuple[AsyncDataset, MemoryTransport]:
    data = {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    if unlisted:
        _unlist_links(data)
    tr = MemoryTransport(data)
    handle = StoreHandle.for_transport(tr, concurrency=32, read_only=True)
    ex = Executor(handle)
    root, level0 = await load.load_root(ex, handle.url)
    return AsyncDataset(handle, ex, root, level0), tr


def _listed_cells(path: Path) -> list[tuple[str, tuple, tuple]]:
    """(array, source chunk, chunk at the offset) of every listed link cell (intra: the same chunk twice)."""
    out = []
    for doc in sorted((path / "0" / "links" / "0").glob("*/zarr.json")):
        attrs = json.loads(doc.read_text())["attributes"]
        (off,) = attrs["offsets"]
        for name in attrs.get("nonempty_chunks", []):
            src = tuple(int(x) for x in name.split("."))
            out.append((doc.parent.name, src, tuple(a + b for a, b in zip(src, off))))
    return out


def _pairs(positions: np.ndarray, edges: np.ndarray) -> list[tuple]:
    return sorted(tuple(positions[e].reshape(-1).tolist()) for e in edges)


async def test_object_reads_fetch_each_needed_link_cell_once(store):
    kind, path, pos, oid, _ = store
    ds, tr = await _open(path)
    chunk_sets = [set(map(tuple, np.floor(pos[oid == o] / CHUNK).astype(int).tolist())) for o in range(N_OBJ)]
    cells = _listed_cells(path)
    if kind == "graph":  # a cell counts when both its chunks are held
        need = {(a, s) for a, s, t in cells for cs in chunk_sets if s in cs and t in cs}
    else:  # a skeleton row whose parent lies outside still replaces the implicit parent: one end held
        need = {(a, s) for a, s, t in cells for cs in chunk_sets if s in cs or t in cs}
    used_to = sum(s in cs for _, s, _ in cells for cs in chunk_sets)  # every cell sourced in a held chunk, per call
    await ds.read_objects([])  # open the index and the link documents outside the count
    n_log, r0 = len(tr.log), ds.stats.requests
    for o in range(N_OBJ):
        await ds.read_object(o)
    got = [e.key for e in tr.log[n_log:] if e.op == "get"]
    link_gets = [k for k in got if "/links/" in k]
    vert_gets = [k for k in got if "/vertices/" in k]
    assert len(link_gets) == len(set(link_gets)) == len(need)  # each needed link cell, once across the calls
    assert len(vert_gets) == sum(len(cs) for cs in chunk_sets)  # vertices: once per object and chunk
    touched = 2 * sum(len(cs) for cs in chunk_sets) + len(need)  # vertices + fragments + link cells
    requests = ds.stats.requests - r0
    assert requests <= touched + 4 * N_OBJ, (requests, touched)
    if kind == "graph":
        assert len(need) * 2 < used_to, (len(need), used_to)
    # a second pass reuses every decoded link cell
    n_log = len(tr.log)
    for o in range(N_OBJ):
        await ds.read_object(o)
    assert not [e for e in tr.log[n_log:] if "/links/" in e.key]


async def test_results_match_inputs_and_one_batched_read(store):
    _, path, pos, oid, edges = store
    ds, _ = await _open(path)
    one_by_one = [await ds.read_object(o) for o in range(N_OBJ)]
    fresh, _ = await _open(path)
    batched = await fresh.read_objects(list(range(N_OBJ)))
    for o, (a, b) in enumerate(zip(one_by_one, batched)):
        assert np.array_equal(a.positions, b.positions) and np.array_equal(a.edges, b.edges)
        want = edges[oid[edges[:, 0]] == o]
        assert sorted(map(tuple, a.positions.tolist())) == sorted(map(tuple, pos[oid == o].tolist()))
        assert _pairs(a.positions, a.edges) == _pairs(pos, want)


async def test_link_arrays_without_their_cell_list(store):
    """Arrays that list no cells are tried where their rows could land, absent cells remembered too."""
    _, path, _, _, _ = store
    listed, _ = await _open(path)
    ds, tr = await _open(path, unlisted=True)
    assert len((await level_links(ds.context, 0)).cells) == 0  # nothing listed: planned per read
    a, b = await listed.read_object(4), await ds.read_object(4)
    assert len(a.edges) and np.array_equal(a.positions, b.positions) and np.array_equal(a.edges, b.edges)
    n_log = len(tr.log)
    await ds.read_object(4)
    assert not [e for e in tr.log[n_log:] if "/links/" in e.key]


def test_graph_edges_match_reference_reader(store):
    """0.9.2's read_graph reads graphs and skeletons alike: both kinds are compared."""
    _, path, pos, oid, _ = store
    ref_graphs = pytest.importorskip("zarr_vectors.types.graphs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ref_graphs.read_graph(str(path))
    owner = {tuple(p): int(o) for p, o in zip(pos.tolist(), oid.tolist())}
    ref_owner = np.asarray([owner[tuple(p)] for p in np.asarray(ref["positions"]).tolist()])
    ref_edges = np.asarray(ref["edges"])
    with zvf.open(str(path)) as ds:
        for o in (0, 5, N_OBJ - 1):
            sel = ds.read_object(o)
            mine = ref_edges[ref_owner[ref_edges[:, 0]] == o]
            assert _pairs(sel.positions, sel.edges) == _pairs(np.asarray(ref["positions"]), mine)
