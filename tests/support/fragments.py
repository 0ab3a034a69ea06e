"""Per-chunk fragment counts of a written store and ``fragment_attributes=`` tables sized to them."""

from __future__ import annotations

import numpy as np

from tests.support.cells import cell_payload, nonempty
from zvf.format.fragments import decode_fragment_index


def fragment_counts(root) -> dict[tuple[int, ...], int]:
    """Fragments of each chunk of a local store's level 0, by chunk."""
    return {c: len(decode_fragment_index(cell_payload(root, "0/vertex_fragments", c)).counts)
            for c in nonempty(root, "0/vertex_fragments")}


def fragment_table(counts: dict, seed: int = 0) -> dict:
    """A scalar float32, a 2-channel int16 and an (F, 1) uint8 attribute; one chunk left out of two."""
    rng = np.random.default_rng(seed)
    chunks = sorted(counts)
    return {
        "weight": {c: rng.random(counts[c]).astype(np.float32) for c in chunks},
        "pair": {c: rng.integers(-99, 99, (counts[c], 2)).astype(np.int16) for c in chunks[::2]},
        "one": {c: rng.integers(0, 9, (counts[c], 1)).astype(np.uint8) for c in chunks[1::2] or chunks},
    }
