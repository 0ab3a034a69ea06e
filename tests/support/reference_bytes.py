"""Bytes as zarr-vectors 0.9.2 and plain zarr-python see them: a root without zvf's consolidated section,
one vlen cell as zarr-python returns it."""

from __future__ import annotations

import json

import numpy as np


def without_section(files: dict[str, bytes]) -> dict[str, bytes]:
    """``files`` with the root as 0.9.2 writes it.

    zvf's default writes add only zarr-python's ``consolidated_metadata`` to the root
    (every document, so an open takes one wave); checked here to hold exactly the
    store's documents.
    """
    from zvf.format.builders import dumps

    doc = json.loads(files["zarr.json"])
    section = doc.pop("consolidated_metadata")["metadata"]
    docs = {k[:-len("/zarr.json")]: json.loads(v) for k, v in files.items() if k.endswith("/zarr.json")}
    assert section == docs
    return {**files, "zarr.json": dumps(doc)}


def unwrap_cell(value) -> bytes:
    """The bytes plain zarr-python returns for one vlen-bytes cell (nested 0-d object arrays)."""
    while isinstance(value, np.ndarray) and value.dtype == object:
        value = value[()]
    if isinstance(value, np.ndarray):
        return value.tobytes()  # an |S<n> array keeps trailing NUL bytes, np.bytes_ would drop them
    return bytes(value)
