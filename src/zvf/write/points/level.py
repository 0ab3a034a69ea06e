"""What a point-cloud level writes after its cells (object index, per-object and per-group
tables, level and root documents): shared by the in-memory, streamed and distributed point writers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, cast

import numpy as np
from numpy.typing import ArrayLike

from ...errors import InvalidArgumentError
from .. import inputs
from ..fragment_attributes import FragmentAttributes
from ..object_index import ZSTD, put_groups, put_object_attributes, put_object_index
from ..store_writer import StoreWriter, add_level0_documents

if TYPE_CHECKING:
    from ..types import Columns, Groups

Manifest: TypeAlias = "tuple[np.ndarray, np.ndarray, np.ndarray]"
"""(object row, chunk coords, fragment) per block of a level's object index."""


@dataclass
class PointExtras:
    """Per-object and per-group data of a point cloud, checked before anything is written."""

    object_attributes: dict[str, np.ndarray]
    group_rows: list[np.ndarray]
    group_attributes: dict[str, np.ndarray]

    @classmethod
    def check(cls, uniq: np.ndarray | None, object_attributes: Columns | None, groups: Groups | None,
              group_attributes: Columns | None, known_ids: np.ndarray | None) -> PointExtras:
        """``known_ids``: ids group members must belong to (None when every vertex is its own object)."""
        if object_attributes and uniq is None:
            raise InvalidArgumentError("object_attributes need object_ids")
        group_rows = inputs.groups_table(groups, known_ids)
        if group_attributes and not group_rows:
            raise InvalidArgumentError("group_attributes need groups")
        return cls(inputs.row_attributes(object_attributes, 0 if uniq is None else len(uniq), "object_attributes"),
                   group_rows, inputs.row_attributes(group_attributes, len(group_rows), "group_attributes"))


def manifest_rows(frag_chunk: np.ndarray, frag_keys: np.ndarray, chunks: np.ndarray, uniq: np.ndarray) -> Manifest:
    """(object row, chunk coords, fragment) per block, objects in id order, chunks ascending.

    ``frag_chunk`` (grouped by chunk) indexes ``chunks``; ``frag_keys`` holds each
    fragment's object id.
    """
    local_frag = np.arange(len(frag_chunk)) - np.searchsorted(frag_chunk, frag_chunk)
    obj_row = np.searchsorted(uniq, frag_keys)
    order = np.lexsort((frag_chunk, obj_row))
    return obj_row[order], chunks[frag_chunk[order]], local_frag[order]


async def publish_level(writer: StoreWriter, url: str, *, ndim: int,
                        shapes: tuple[Sequence[float], Sequence[float] | None],
                        bounds: tuple[ArrayLike, ArrayLike], n: int, has_attributes: bool,
                        uniq: np.ndarray | None, manifest: Manifest | None, extras: PointExtras,
                        compression: str | None, object_index_layout: str,
                        fragment_attributes: FragmentAttributes | None = None) -> None:
    """Everything of a point cloud after its cells: object index, per-object/group data, level, root.

    ``shapes``: (chunk_shape, bin_shape) as the caller gave them -- 0.9.2 records ints as ints.
    """
    arrays_present = ["vertices"] + (["vertex_attributes"] if has_attributes else [])
    if fragment_attributes is not None:
        fragment_attributes.finish(writer, arrays_present)
    if uniq is not None:
        assert manifest is not None  # every writer with ids builds one
        arrays_present.append("object_index")
        await put_object_index(writer, 0, *manifest, uniq, ndim, compression=compression,
                               layout=object_index_layout)
    # 0.9.2's write_points compresses per-object and per-group tables with zstd whatever the cells use.
    await put_object_attributes(writer, 0, extras.object_attributes, ZSTD)
    await put_groups(writer, extras.group_rows, extras.group_attributes, ZSTD)
    add_level0_documents(writer, url, geometry="point_cloud", n=n, arrays_present=arrays_present,
                         chunk_shape=shapes[0], bin_shape=shapes[1],
                         # the corners as given (numpy rows): the root spells them in their own dtype, as 0.9.2 does
                         bounds=cast("Sequence[Sequence[float]]", bounds))
