"""Writing a level's object index: manifests, object ids.

Two layouts, both read by zarr-vectors 0.9.2:

* ``"sharded"`` (zvf's default): manifests in shards of up to 65536 rows
  with inner chunks of 64 rows, so a reader fetches one shard index (16 KiB,
  prefetched at open) and then one range of a few KiB per object -- instead
  of downloading every manifest of the level.  64 rows, not fewer: zstd pays
  for each frame's tables, so a whole-index read of 16-row frames spends
  twice as long decompressing.
* ``"reference"``: what 0.9.2 writes, one zstd chunk of up to 16384 rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError
from ..format import builders
from ..format import metadata as md
from ..format.codecs import CellCodec
from ..format.manifest import encode_manifests_packed
from .store_writer import (
    StoreWriter,
    dense_codec,
    dense_codecs_json,
    empty_group,
    write_dense,
    write_vlen_1d,
)

ZSTD = CellCodec.for_writing("zstd")
LAYOUTS = ("sharded", "reference")


def check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise InvalidArgumentError(f"object_index_layout must be one of {LAYOUTS}, got {layout!r}")


def manifests_layout(num_objects: int, layout: str) -> tuple[CellCodec, int]:
    """(codec, rows per stored object) of the manifests array."""
    check_layout(layout)
    if layout == "reference":
        return ZSTD, max(1, min(num_objects, md.MANIFEST_ROW_CHUNK))
    inner, most = tuning().manifest_inner_rows, tuning().manifest_shard_rows
    rows = min(most, max(inner, -(-num_objects // inner) * inner))
    return dataclasses.replace(ZSTD, shard=(rows,), inner_rows=inner), rows


async def put_object_index(writer: StoreWriter, level: int, object_row: np.ndarray, coords: np.ndarray,
                           fragment: np.ndarray, object_ids: np.ndarray, ndim: int, *, compression: str | None,
                           layout: str = "sharded", compact_group: bool = True) -> None:
    """Manifests of ``object_ids`` (sorted, unique) from (object_row, coords, fragment) rows in block order
    (``object_row`` ascending)."""
    n = len(object_ids)
    if n == 0:  # what 0.9.2 leaves: the bare group, no index arrays
        writer.add_document(f"{level}/object_index/zarr.json",
                            builders.group_document({"zv_array": "object_index"}, compact=compact_group), stage=0)
        return
    items = _Manifests(object_row, coords, fragment, n)
    present = np.zeros(n, dtype=bool)
    present[object_row] = True
    codec, rows = manifests_layout(n, layout)
    group_doc = builders.object_index_group_document(n, int(present.sum()), ndim, compact=compact_group)
    writer.add_document(f"{level}/object_index/zarr.json", group_doc, stage=0)
    doc = builders.vlen_1d_array_document(n, codec.codecs_json(), {}, chunk=rows)
    await write_vlen_1d(writer, f"{level}/object_index/manifests", items, rows, codec, doc)
    ids_codec = dense_codec(CellCodec.for_writing(compression))
    await write_dense(writer, f"{level}/object_index/object_ids", object_ids.astype("<i8"), max(n, 1), 0, ids_codec,
                      builders.object_ids_document(n, dense_codecs_json(ids_codec, np.int64)))


class _Manifests:
    """The manifests of objects ``0..n-1``, encoded (packed) only for the rows asked for:
    the writer takes one stored chunk at a time, so a level's manifest bytes are never all held."""

    def __init__(self, object_row: np.ndarray, coords: np.ndarray, fragment: np.ndarray, n: int):
        self.object_row = np.asarray(object_row, dtype=np.int64).reshape(-1)
        self.coords, self.fragment, self.n = np.asarray(coords), np.asarray(fragment), n

    def __len__(self) -> int:
        return self.n

    def packed(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Manifests of objects ``a..b-1`` as one buffer and their byte offsets (see ``write_vlen_1d``)."""
        lo, hi = np.searchsorted(self.object_row, [a, b])
        return encode_manifests_packed(self.object_row[lo:hi] - a, self.coords[lo:hi], self.fragment[lo:hi], b - a)


async def put_object_attributes(writer: StoreWriter, level: int, attributes: dict[str, np.ndarray],
                                codec: CellCodec) -> None:
    """Dense per-object attributes (absent = the dtype's sentinel fill) under ``object_attributes/``."""
    if not attributes:
        return
    empty_group(writer, f"{level}/object_attributes")
    dcodec = dense_codec(codec)
    for name, values in attributes.items():
        doc = builders.object_attribute_document(name, values.dtype, values.shape,
                                                 dense_codecs_json(dcodec, values.dtype))
        await write_dense(writer, f"{level}/object_attributes/{name}", values, md.OBJECT_ATTRIBUTE_ROW_CHUNK,
                          builders.object_attribute_fill(values.dtype), dcodec, doc)


async def put_groups(writer: StoreWriter, group_rows: list[np.ndarray], group_attributes: dict[str, np.ndarray],
                     attribute_codec: CellCodec, *, level: int = 0) -> None:
    """``groups`` (member ids per group, always zstd) and dense ``group_attributes`` of ``level``."""
    if group_rows:
        doc = builders.groups_document(len(group_rows), ZSTD.codecs_json())
        if any(len(r) for r in group_rows):
            await write_vlen_1d(writer, f"{level}/groups", [r.astype("<i8").tobytes() for r in group_rows],
                                len(group_rows), ZSTD, doc)
        else:  # every row empty = all fill: zarr stores no chunk
            writer.add_document(f"{level}/groups/zarr.json", doc, stage=0)
    if group_attributes:
        empty_group(writer, f"{level}/group_attributes")
        gcodec = dense_codec(attribute_codec)
        for name, values in group_attributes.items():
            doc = builders.group_attribute_document(name, values.dtype, values.shape,
                                                    dense_codecs_json(gcodec, values.dtype))
            await write_dense(writer, f"{level}/group_attributes/{name}", values, max(len(values), 1), 0, gcodec, doc)
