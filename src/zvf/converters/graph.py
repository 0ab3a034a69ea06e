"""GraphML graphs (networkx).

Nodes need numeric ``x``, ``y`` [, ``z``] data; other numeric node data become vertex
attributes and numeric edge data link attributes (GraphML ``boolean``/``int``/``long``/
``float``/``double`` keep their kind: bool, int32, int64, float32, float64).  A node
``object_id`` makes the objects; integer-like node ids are kept as the attribute ``node_id``.
Whether the graph is directed is recorded in ``zvf_source``.  GraphML is one XML document,
read and written whole.
"""

from __future__ import annotations

import contextlib
import xml.etree.ElementTree as ET
from typing import Any

import numpy as np

from ..errors import InputFileError
from .base import StoreOptions, Written, need, reading, source_record, stamp, take_options

AXES = ("x", "y", "z")
_TYPES = {"boolean": np.bool_, "int": np.int32, "long": np.int64, "float": np.float32, "double": np.float64}


def _nx():
    return need("networkx", "graph", "GraphML")


def _key_types(src: str) -> dict[tuple[str, str], np.dtype]:
    """(domain, name) -> dtype from the file's ``<key attr.type=...>`` declarations."""
    out = {}
    for _, el in ET.iterparse(src):
        if el.tag.rsplit("}", 1)[-1] == "key":
            t = _TYPES.get(el.get("attr.type", ""))
            if t is not None:
                out[(el.get("for", "all"), el.get("attr.name", ""))] = np.dtype(t)
        el.clear()
    return out


def _table(items: list[dict], domain: str, types: dict, src: str) -> dict[str, np.ndarray]:
    names = sorted({k for d in items for k in d})
    out = {}
    for name in names:
        dt = types.get((domain, name)) or types.get(("all", name))
        if dt is None:
            continue  # a string property: no ZVF field holds text
        missing = [i for i, d in enumerate(items) if name not in d]
        if missing and dt.kind != "f":
            raise InputFileError(f"{src}: {domain} data {name!r} is missing on some {domain}s "
                                       f"(first: #{missing[0]}); only float data may be missing (NaN)")
        out[name] = np.array([d.get(name, np.nan) for d in items], dtype=dt)
    return out


async def to_store(fmt: str, src: str, dst: str, store: StoreOptions, **options: Any) -> dict:
    take_options(fmt, options, {})
    nx = _nx()
    from ..write.objects import write_graph

    with reading(src, fmt, (ET.ParseError, nx.NetworkXError, ValueError, KeyError)):
        g = nx.read_graphml(src)
        types = _key_types(src)
    nodes = list(g.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    ndata = _table([g.nodes[n] for n in nodes], "node", types, src)
    axes = [a for a in AXES if a in ndata]
    if axes not in (["x", "y"], ["x", "y", "z"]):
        raise InputFileError(f"{src}: nodes need numeric x, y[, z] data; found {sorted(ndata)}")
    pos = np.column_stack([ndata.pop(a).astype(np.float64) for a in axes])
    oids = ndata.pop("object_id", None)
    with contextlib.suppress(ValueError):  # ids that are not integers are not kept
        ndata.setdefault("node_id", np.array([int(n) for n in nodes], dtype=np.int64))
    edges_list = list(g.edges(data=True))
    edges = np.array([(index[u], index[v]) for u, v, _ in edges_list], dtype=np.int64).reshape(-1, 2)
    edata = _table([d for _, _, d in edges_list], "edge", types, src)
    s = await write_graph(dst, pos, edges, chunk_shape=store.chunk_shape, object_ids=oids,
                          attributes=ndata or None, link_attributes=edata or None, dtype="float64",
                          **store.writer_kw())
    await stamp(dst, store, {"format": "graphml", "directed": g.is_directed(), "ndim": len(axes)})
    return {"vertices": s.vertex_count, "edges": len(edges), "objects": s.object_count}


async def from_store(fmt: str, ds, dst: str, written: Written, **options: Any) -> dict:
    opts = take_options(fmt, options, {"level": 0})
    nx = _nx()
    rec = source_record(ds, "graphml")
    level = opts["level"]
    g = nx.DiGraph() if rec.get("directed", False) else nx.Graph()
    base = 0
    several = len(await ds.object_ids(level=level)) > 1
    async for sel in written.each(ds.iter_objects(level=level), level):
        k = len(sel)
        if not k:
            continue
        ids = sel.attributes.get("node_id")
        names = (ids.astype(np.int64) if ids is not None else np.arange(base, base + k)).astype(str).tolist()
        cols = dict(zip(AXES, sel.positions.T.tolist()))
        if several:
            cols["object_id"] = [int(sel.object_ids[0])] * k
        cols.update({n: v.tolist() for n, v in sel.attributes.items() if n != "node_id" and v.ndim == 1})
        keys = list(cols)
        g.add_nodes_from((names[i], {key: cols[key][i] for key in keys}) for i in range(k))
        if sel.edges is not None and len(sel.edges):
            ecols = {n: v.tolist() for n, v in sel.link_attributes.items() if v.ndim == 1}
            g.add_edges_from((names[u], names[v], {n: c[j] for n, c in ecols.items()})
                             for j, (u, v) in enumerate(sel.edges.tolist()))
        base += k
    nx.write_graphml(g, dst)
    return {"vertices": g.number_of_nodes(), "edges": g.number_of_edges()}
