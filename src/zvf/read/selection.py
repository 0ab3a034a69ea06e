"""What a read returns: rows of vertices with their attributes and owners."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Selection:
    """Vertices read from a store, row-aligned with their attributes.

    ``object_ids`` names each row's object (None when the store has none).
    Object geometries add connectivity as local row indices: ``edges``
    (graphs, skeletons as (child, parent), polylines as consecutive pairs),
    ``faces`` (meshes) and ``offsets`` (object ``i`` owns rows
    ``offsets[i]:offsets[i+1]`` when rows are grouped by object).
    ``link_attributes`` holds the store's link attributes, row k belonging
    to ``edges[k]`` (``faces[k]``); edges a store keeps implicitly (skeleton
    chains) have NaN, or 0 for integer attributes.
    """

    positions: np.ndarray
    attributes: dict[str, np.ndarray] = field(default_factory=dict)
    object_ids: np.ndarray | None = None
    edges: np.ndarray | None = None
    faces: np.ndarray | None = None
    offsets: np.ndarray | None = None
    objects: np.ndarray | None = None  # object id of each offsets segment
    link_attributes: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    def __repr__(self) -> str:
        extra = [f"{len(self)} vertices", f"attributes={sorted(self.attributes)}"]
        extra += [f"{len(v)} {name}" for name, v in (("objects", self.objects), ("edges", self.edges),
                                                     ("faces", self.faces)) if v is not None]
        if self.link_attributes:
            extra.append(f"link_attributes={sorted(self.link_attributes)}")
        return f"Selection({', '.join(extra)})"


@dataclass
class FragmentRows:
    """Per-fragment attribute rows: row k belongs to fragment ``fragments[k]`` of chunk ``chunks[k]``
    (``object_ids[k]`` names the object whose manifest referenced it, when read per object)."""

    chunks: np.ndarray
    fragments: np.ndarray
    values: np.ndarray
    object_ids: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.fragments.shape[0])
