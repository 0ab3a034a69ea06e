"""Every Zarr array of the reference stores read with plain struct/numcodecs code (independent of zvf's
own decoders): metadata, stored objects and decoded vlen items, for the format tests."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tests.support.vlen_cells import unframe


@dataclass
class RefArray:
    store: str  # store directory name
    path: str  # array path inside the store, e.g. "0/vertices"
    meta: dict
    objects: dict = field(default_factory=dict)  # relative key -> stored bytes
    cells: dict = field(default_factory=dict)  # chunk coords -> list[bytes] items (vlen arrays)
    shard_inner: dict = field(default_factory=dict)  # chunk coords -> stored inner-chunk bytes
    store_dir: Path | None = None  # the store's directory

    @property
    def attrs(self) -> dict:
        return self.meta.get("attributes", {})

    @property
    def ndim(self) -> int:
        return len(self.meta["shape"])

    @property
    def name(self) -> str:
        return f"{self.store}/{self.path}"


def _load_array(store: Path, zjson: Path) -> RefArray:
    import numcodecs.blosc
    import numcodecs.zstd

    meta = json.loads(zjson.read_text())
    arr = RefArray(store.name, str(zjson.parent.relative_to(store)), meta, store_dir=store)
    codecs = meta["codecs"]
    shard = None
    if codecs[0]["name"] == "sharding_indexed":
        shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
        codecs = codecs[0]["configuration"]["codecs"]
    names = [c["name"] for c in codecs]

    def items(b: bytes):
        if "zstd" in names:
            b = numcodecs.zstd.decompress(b)
        if "blosc" in names:
            b = numcodecs.blosc.decompress(b)
        return unframe(b) if names[0] == "vlen-bytes" else [b]

    base = zjson.parent / "c"
    if not base.exists():
        return arr
    for p in sorted(base.rglob("*")):
        if not p.is_file():
            continue
        rel = str(p.relative_to(zjson.parent))
        raw = p.read_bytes()
        arr.objects[rel] = raw
        coords = tuple(int(x) for x in rel.split("/")[1:])
        if shard is None:
            arr.cells[coords] = items(raw)
            continue
        n = int(np.prod(shard))
        idx = raw[len(raw) - (16 * n + 4) :]
        for i in range(n):
            o, ln = struct.unpack_from("<QQ", idx, 16 * i)
            if o == 2**64 - 1:
                continue
            inner = np.unravel_index(i, shard)
            cc = tuple(int(c) * s + int(j) for c, s, j in zip(coords, shard, inner))
            arr.shard_inner[cc] = raw[o : o + ln]
            arr.cells[cc] = items(raw[o : o + ln])
    return arr


_CACHE: dict[Path, list[RefArray]] = {}


def load_ref_arrays(ref: Path) -> list[RefArray]:
    """Every array of every ``*.zarrvectors`` store under ``ref`` (cached per directory)."""
    if ref not in _CACHE:
        out = []
        for store in sorted(ref.glob("*.zarrvectors")):
            for zj in sorted(store.rglob("zarr.json")):
                if json.loads(zj.read_text()).get("node_type") == "array":
                    out.append(_load_array(store, zj))
        _CACHE[ref] = out
    return _CACHE[ref]


def ref_by_kind(arrays: list[RefArray], zv_array: str) -> list[RefArray]:
    return [a for a in arrays if a.attrs.get("zv_array") == zv_array]


def vertex_rows(arrays: list[RefArray], store: str, level: str, coords) -> int | None:
    """Rows in the vertices cell of ``store/level`` at ``coords`` (None if absent)."""
    for a in arrays:
        if a.store == store and a.path == f"{level}/vertices":
            items = a.cells.get(tuple(coords))
            if items is None:
                return None
            dt = np.dtype(a.attrs.get("dtype", "float32"))
            root = json.loads((a.store_dir / "zarr.json").read_text())["attributes"]["zarr_vectors"]
            ndim = len(root["chunk_shape"])
            return len(items[0]) // (dt.itemsize * ndim)
    return None
