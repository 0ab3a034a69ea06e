"""Writing a level's object index: manifests, object ids.

Two layouts, both read by zarr-vectors 0.9.2:

* ``"sharded"`` (zvf's default): manifests in shards of up to 65536 rows
  with inner chunks of 16 rows, so a reader fetches one shard index (small,
  prefetched at open) and then one ~1 KiB range per object -- instead of
  downloading every manifest of the level.
* ``"reference"``: what 0.9.2 writes, one zstd chunk of up to 16384 rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import InvalidArgumentError
from ..format import metadata as md
from ..format.codecs import CellCodec
from ..format.manifest import encode_manifests
from .engine import StoreWriter, dense_codec, dense_codecs_json, write_dense, write_vlen_1d

ZSTD = CellCodec.for_writing("zstd")
INNER_ROWS = 16
SHARD_ROWS = 65536
LAYOUTS = ("sharded", "reference")


def manifests_layout(num_objects: int, layout: str) -> tuple[CellCodec, int]:
    """(codec, rows per stored object) of the manifests array."""
    if layout not in LAYOUTS:
        raise InvalidArgumentError(f"object_index_layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "reference":
        return ZSTD, max(1, min(num_objects, md.MANIFEST_ROW_CHUNK))
    rows = min(SHARD_ROWS, max(INNER_ROWS, -(-num_objects // INNER_ROWS) * INNER_ROWS))
    return dataclasses.replace(ZSTD, shard=(rows,), inner_rows=INNER_ROWS), rows


async def put_object_index(writer: StoreWriter, level: int, object_row: np.ndarray, coords: np.ndarray,
                           fragment: np.ndarray, object_ids: np.ndarray, ndim: int, *, compression,
                           layout: str = "sharded", compact_group: bool = True) -> None:
    """Manifests of ``object_ids`` (sorted, unique) from (object_row, coords, fragment) rows in block order."""
    n = len(object_ids)
    items = encode_manifests(object_row, coords, fragment, n)
    codec, rows = manifests_layout(n, layout)
    writer.add_document(f"{level}/object_index/zarr.json",
                        md.object_index_group_document(n, n, ndim, compact=compact_group), stage=0)
    doc = md.vlen_1d_array_document(n, codec.codecs_json(), {}, chunk=rows)
    await write_vlen_1d(writer, f"{level}/object_index/manifests", items, rows, codec, doc)
    ids_codec = dense_codec(CellCodec.for_writing(compression))
    await write_dense(writer, f"{level}/object_index/object_ids", object_ids.astype("<i8"), max(n, 1), 0, ids_codec,
                      md.object_ids_document(n, dense_codecs_json(ids_codec, np.int64)))
