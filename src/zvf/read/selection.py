"""What a read returns: rows of vertices with their attributes and owners."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import MissingDependencyError


def _optional(module: str, extra: str, what: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(f"{what} needs {module}, which is not installed: "
                                     f"pip install 'zvf[{extra}]'") from exc


@dataclass(repr=False)  # its own __repr__
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

    def to_arrow(self) -> Any:
        """The vertex table as a ``pyarrow.Table`` (``pip install 'zvf[parquet]'``): the columns of
        ``zvf export`` (``x, y, z``, ``object_id``, ``vertex_index``, attributes), dtypes kept, a
        C-channel attribute as one fixed-size list column.  Edges and faces are not in it (``edges``,
        ``faces``)."""
        from .columns import flat_columns, vertex_arrays

        pa = _optional("pyarrow", "parquet", "Selection.to_arrow")
        columns: dict[str, Any] = {}
        for key, values in vertex_arrays(self).items():
            if key.startswith("attr_") and values.ndim > 1:
                flat = np.ascontiguousarray(values.reshape(len(values), -1))
                columns[key[5:]] = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])
            else:
                columns.update((n, pa.array(np.ascontiguousarray(c))) for n, c in flat_columns({key: values}))
        return pa.table(columns)

    def to_pandas(self) -> Any:
        """The vertex table as a ``pandas.DataFrame`` (``pip install 'zvf[pandas]'``): the columns of
        ``zvf export``, a C-channel attribute as ``name_0 .. name_{C-1}``, dtypes kept."""
        from .columns import flat_columns, vertex_arrays

        pd = _optional("pandas", "pandas", "Selection.to_pandas")
        return pd.DataFrame(dict(flat_columns(vertex_arrays(self))))

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
