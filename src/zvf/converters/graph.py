"""GraphML graphs (networkx).

Nodes need numeric ``x``, ``y`` [, ``z``] data; other numeric node data become vertex
attributes and numeric edge data link attributes (GraphML ``boolean``/``int``/``long``/
``float``/``double`` keep their kind: bool, int32, int64, float32, float64).  A node
``object_id`` makes the objects; integer-like node ids are kept as the attribute ``node_id``.
Whether the graph is directed is recorded in ``zvf_source``.  GraphML is one XML document,
read and written whole.

GraphML data are scalars, so zvf writes an attribute of C channels as C keys ``name[0]`` ..
``name[C-1]`` and each object attribute as the node key ``object:name`` on every node of the
object.  The graph key ``zvf_columns`` (a JSON document) records that encoding: for each of
``node``, ``edge`` and ``object`` the written attributes with their channel count (0: scalar)
and numpy dtype, so reading the file back rebuilds the same columns and dtypes; its ``vertex``
entry holds the positions' dtype and, when the store had one, the ``node_id`` attribute's (node
ids are then those values; without it they are zvf's numbering and are not read back as an
attribute).  Files without it are read as plain GraphML.  Object ids are written (node data
``object_id``) unless the store holds one object, 0; an object with no vertices has no node to
carry its id, so such a store is refused.
"""

from __future__ import annotations

import contextlib
import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..errors import InputFileError, InvalidArgumentError
from .base import (
    AXES,
    Converted,
    StoreOptions,
    Written,
    exact_cast,
    object_attributes,
    source_record,
    stamp,
    take_options,
)
from .parsing import need, reading

if TYPE_CHECKING:
    from ..read.dataset import DatasetReader

_TYPES = {"boolean": np.bool_, "int": np.int32, "long": np.int64, "float": np.float32, "double": np.float64}
COLUMNS_KEY = "zvf_columns"  # graph data recording how zvf encoded its columns (module docstring)
OBJECT_PREFIX = "object:"


def _nx() -> Any:
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


def _table(items: list[dict[str, Any]], domain: str, types: dict[tuple[str, str], np.dtype[Any]],
           src: str) -> dict[str, np.ndarray]:
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


def _columns_record(text: Any, src: str) -> dict[str, dict[str, list[Any]]]:
    """The ``zvf_columns`` graph data: {domain: {name: [channels, dtype]}} ({} when absent)."""
    if text is None:
        return {}
    try:
        record = json.loads(text)
        for domain in record.values():
            for channels, dtype in domain.values():
                np.dtype(dtype)
                int(channels)
    except (TypeError, ValueError, AttributeError) as exc:
        raise InputFileError(f"{src}: graph data {COLUMNS_KEY!r} is not zvf's column record ({exc})") from None
    return dict(record)


def _channel(name: str, c: int) -> str:
    return f"{name}[{c}]"


def _decoded(data: dict[str, np.ndarray], record: dict[str, list[Any]], domain: str,
             src: str) -> dict[str, np.ndarray]:
    """``data`` with the channels the record names stacked back into (n, C) columns, cast to their dtypes."""
    out = dict(data)
    for name, (channels, dtype) in record.items():
        keys = [_channel(name, c) for c in range(channels)] if channels else [name]
        absent = [k for k in keys if k not in out]
        if absent:
            raise InputFileError(f"{src}: {COLUMNS_KEY} names the {domain} attribute {name!r}, "
                                 f"but the file has no numeric {domain} key {absent[0]!r}")
        cols = [out.pop(k) for k in keys]
        col = np.stack(cols, axis=1) if channels else cols[0]
        cast = col.astype(dtype)
        if np.array_equal(cast, col, equal_nan=cast.dtype.kind in "fc"):
            col = cast
        out[name] = col
    return out


def _per_object(odata: dict[str, np.ndarray], oids: np.ndarray | None, n: int, src: str) -> dict[str, np.ndarray]:
    """Object attributes written on every node of their object, one row per object id (sorted)."""
    ids = np.zeros(n, np.int64) if oids is None else oids
    uniq, first = np.unique(ids, return_index=True)
    out = {}
    for name, col in odata.items():
        rows = col[first]
        back = rows[np.searchsorted(uniq, ids)]
        same = (back == col) | ((back != back) & (col != col))
        if not same.all():
            bad = int(np.flatnonzero(~same.reshape(n, -1).all(axis=1))[0])
            raise InputFileError(f"{src}: object attribute {name!r} differs between nodes of object "
                                 f"{int(ids[bad])} (node #{bad})")
        out[name] = rows
    return out


async def to_store(fmt: str, src: str, dst: str, store: StoreOptions, **options: Any) -> Converted:
    take_options(fmt, options, {})
    nx = _nx()
    from ..write.objects.memory import write_graph

    with reading(src, fmt, (ET.ParseError, nx.NetworkXError, ValueError, KeyError)):
        g = nx.read_graphml(src)
        types = _key_types(src)
    nodes = list(g.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    ndata = _table([g.nodes[n] for n in nodes], "node", types, src)
    axes = [a for a in AXES if a in ndata]
    if axes not in (["x", "y"], ["x", "y", "z"]):
        raise InputFileError(f"{src}: nodes need numeric x, y[, z] data; found {sorted(ndata)}")
    columns = _columns_record(g.graph.get(COLUMNS_KEY), src)
    vertex = columns.get("vertex", {})
    pos_dtype = np.dtype(vertex["positions"][1]) if "positions" in vertex else np.dtype(np.float64)
    pos = exact_cast(np.column_stack([ndata.pop(a).astype(np.float64) for a in axes]), pos_dtype, src,
                     "node positions")
    oids = ndata.pop("object_id", None)
    edges_list = list(g.edges(data=True))
    edata = _decoded(_table([d for _, _, d in edges_list], "edge", types, src), columns.get("edge", {}), "edge", src)
    odata = _decoded({n[len(OBJECT_PREFIX):]: ndata.pop(n) for n in list(ndata) if n.startswith(OBJECT_PREFIX)},
                     columns.get("object", {}), "object", src)
    ndata = _decoded(ndata, columns.get("node", {}), "node", src)
    object_attrs = _per_object(odata, oids, len(pos), src) if odata else None
    if "node_id" in vertex:
        ndata["node_id"] = _decoded({"node_id": np.array([int(n) for n in nodes], np.int64)},
                                    {"node_id": vertex["node_id"]}, "node", src)["node_id"]
    elif not vertex:  # a file zvf did not write: integer node ids are kept
        with contextlib.suppress(ValueError):  # ids that are not integers are not kept
            ndata.setdefault("node_id", np.array([int(n) for n in nodes], dtype=np.int64))
    edges = np.array([(index[u], index[v]) for u, v, _ in edges_list], dtype=np.int64).reshape(-1, 2)
    stamp(store, {"format": "graphml", "directed": g.is_directed(), "ndim": len(axes)})
    s = await write_graph(dst, pos, edges, chunk_shape=store.chunk_shape, object_ids=oids,
                          attributes=ndata or None, link_attributes=edata or None, object_attributes=object_attrs,
                          dtype=pos.dtype, **store.writer_kw())
    return {"vertices": s.vertex_count, "edges": len(edges), "objects": s.object_count}


async def from_store(fmt: str, ds: DatasetReader, dst: str, written: Written, **options: Any) -> Converted:
    opts = take_options(fmt, options, {"level": 0})
    nx = _nx()
    rec = source_record(ds, "graphml")
    level = opts["level"]
    g = nx.DiGraph() if rec.get("directed", False) else nx.Graph()
    base = 0
    object_ids = await ds.object_ids(level=level)
    several = len(object_ids) > 1 or (len(object_ids) == 1 and int(object_ids[0]) != 0)
    oattrs = await object_attributes(ds, level)
    columns: dict[str, dict[str, list[Any]]] = {"node": {}, "edge": {}, "object": {}, "vertex": {}}
    row = -1  # the object's row in the object attributes
    async for sel in written.each(ds.iter_objects(level=level), level):
        row += 1
        k = len(sel)
        if not k:
            raise InvalidArgumentError(f"{ds.url}: object {int(object_ids[row])} has no vertices, so GraphML "
                                       f"(object ids and attributes on nodes) cannot hold it")
        columns["vertex"]["positions"] = [sel.positions.shape[1], sel.positions.dtype.str]
        ids = sel.attributes.get("node_id")
        if ids is not None:
            columns["vertex"]["node_id"] = [0, ids.dtype.str]
        names = (ids.astype(np.int64) if ids is not None else np.arange(base, base + k)).astype(str).tolist()
        cols = dict(zip(AXES, sel.positions.T.tolist()))
        if several:
            cols["object_id"] = [int(cast(np.ndarray, sel.object_ids)[0])] * k  # set by iter_objects
        cols.update(_encoded({n: v for n, v in sel.attributes.items() if n != "node_id"}, columns["node"], ""))
        cols.update(_encoded({n: np.repeat(v[row:row + 1], k, axis=0) for n, v in oattrs.items()},
                             columns["object"], OBJECT_PREFIX))
        keys = list(cols)
        g.add_nodes_from((names[i], {key: cols[key][i] for key in keys}) for i in range(k))
        if sel.edges is not None and len(sel.edges):
            ecols = _encoded(sel.link_attributes, columns["edge"], "")
            g.add_edges_from((names[u], names[v], {n: c[j] for n, c in ecols.items()})
                             for j, (u, v) in enumerate(sel.edges.tolist()))
        base += k
    g.graph[COLUMNS_KEY] = json.dumps({d: c for d, c in columns.items() if c})
    nx.write_graphml(g, dst)
    return {"vertices": g.number_of_nodes(), "edges": g.number_of_edges()}


def _encoded(attrs: dict[str, np.ndarray], record: dict[str, list[Any]], prefix: str) -> dict[str, list[Any]]:
    """GraphML data columns of ``attrs``: a C-channel attribute as C keys ``name[c]`` (``prefix``
    before every key), each recorded in ``record`` with its channel count and dtype."""
    out = {}
    for name, v in attrs.items():
        record[name] = [0 if v.ndim == 1 else int(v.shape[1]), v.dtype.str]
        if v.ndim == 1:
            out[prefix + name] = v.tolist()
        else:
            out.update({prefix + _channel(name, c): v[:, c].tolist() for c in range(v.shape[1])})
    return out
