"""Helpers of the lifecycle tests."""

from __future__ import annotations

import json
import os
from pathlib import Path

from zvf.format.keys import DEFAULT_ENCODING, ChunkKeyEncoding
from zvf.format.versions import family_of, family_of_key


def current_files(root) -> dict[str, bytes]:
    """Every object of the version a local store's root publishes, by key as a fresh write names it: the
    documents of its consolidated section, and each array's cells in the family its document declares,
    renamed to the default "/" family (cells of other families belong to kept or collected versions)."""
    root = Path(root)
    doc = json.loads((root / "zarr.json").read_text())
    section = doc["consolidated_metadata"]["metadata"]
    out = {f"{p}/zarr.json": (root / p / "zarr.json").read_bytes() for p in section}
    out["zarr.json"] = (root / "zarr.json").read_bytes()
    for path, node in section.items():
        if node.get("node_type") != "array":
            continue
        enc = ChunkKeyEncoding.from_metadata(node)
        ndim = len(node["shape"])
        mine = family_of(enc, ndim)
        base = root / path
        for d, _, files in os.walk(base):
            for f in files:
                rel = os.path.relpath(os.path.join(d, f), base).replace(os.sep, "/")
                if rel == "zarr.json" or family_of_key(rel) != mine:
                    continue
                out[f"{path}/{DEFAULT_ENCODING.suffix(enc.parse(rel, ndim))}"] = (base / rel).read_bytes()
    return out
