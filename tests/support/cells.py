"""Cells of a local store read back through its array documents: payload by absolute chunk (sharded or
not, any codec), the chunks a level lists, an array's document."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from zvf.format.codecs import CellCodec
from zvf.format.keys import ChunkKeyEncoding
from zvf.format.shard import decode_shard_index, inner_index, shard_coords


def array_meta(root: Path, path: str) -> dict:
    """The ``zarr.json`` of array ``path`` in the local store at ``root``."""
    return json.loads((Path(root) / path / "zarr.json").read_text())


def cell_payload(root: Path, path: str, chunk) -> bytes | None:
    """Payload of the cell of absolute chunk ``chunk`` in spatial array ``path`` (None when absent)."""
    meta = array_meta(root, path)
    codec = CellCodec.from_array_metadata(meta, key=path)
    origin = meta["attributes"].get("chunk_grid_origin", [0] * len(chunk))
    grid = np.asarray(chunk, np.int64) - np.asarray(origin, np.int64)
    keys = ChunkKeyEncoding.from_metadata(meta.get("chunk_key_encoding"))
    if codec.shard is None:
        f = Path(root) / keys.key(path, grid)
        return codec.decode(f.read_bytes()) if f.exists() else None
    f = Path(root) / keys.key(path, shard_coords(grid, codec.shard))
    if not f.exists():
        return None
    blob = f.read_bytes()
    n_inner = int(np.prod(codec.shard))
    offsets, nbytes = decode_shard_index(blob, n_inner, key=path)
    i = int(inner_index(grid, codec.shard))
    if int(offsets[i]) == 2**64 - 1:  # absent inner chunk
        return None
    return codec.decode(blob[int(offsets[i]):int(offsets[i]) + int(nbytes[i])])


def nonempty(root: Path, path: str) -> list[tuple[int, ...]]:
    """The absolute chunks array ``path`` lists as non-empty."""
    return [tuple(int(x) for x in s.split(".")) for s in array_meta(root, path)["attributes"]["nonempty_chunks"]]
