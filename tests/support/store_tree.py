"""A store's files as comparable content, for byte-identity tests."""

from __future__ import annotations

import hashlib
import json
import os

from zvf.format.versions import RECORD


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
