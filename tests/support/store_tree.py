"""A local store's files as comparable content (whole, hashed, or the version its root publishes), for
byte-identity tests, and a private copy of a store."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from zvf.format.keys import DEFAULT_ENCODING, ChunkKeyEncoding
from zvf.format.versions import RECORD, family_of, family_of_key


def tree(root) -> dict[str, str]:
    """Every file of a store: relative path -> content hash (the root's version record aside: it names the
    version and when it was published, different for every publication)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                data = fh.read()
            if os.path.relpath(p, root) == "zarr.json":
                doc = json.loads(data)
                doc.get("attributes", {}).pop(RECORD, None)
                data = json.dumps(doc, sort_keys=True).encode()
            out[os.path.relpath(p, root)] = hashlib.sha256(data).hexdigest()
    return out


def store_files(root) -> dict[str, bytes]:
    """Every file of a local store, by key relative to its root."""
    root = Path(root)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_same_files(a, b) -> None:
    """The local stores at ``a`` and ``b`` hold the same files, byte for byte."""
    fa, fb = store_files(a), store_files(b)
    assert fa.keys() == fb.keys(), sorted(set(fa) ^ set(fb))[:6]
    differ = [k for k in fa if fa[k] != fb[k]]
    assert not differ, differ[:6]


def copy_store(src: Path, dst: Path) -> Path:
    """A copy of the store at ``src`` made at ``dst`` (for tests that edit a store)."""
    shutil.copytree(src, dst)
    return dst


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
