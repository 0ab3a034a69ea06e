"""Random walks shaped like streamlines, for the layout chooser's object-read tests."""

from __future__ import annotations

import numpy as np


def streamline_walks(n: int, k: int, seed: int = 0) -> list[np.ndarray]:
    """Persistent random walks of ``k`` 0.5-unit steps from a 100-unit cube (streamline-like)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        d = rng.normal(size=3)
        steps = d / np.linalg.norm(d) + 0.3 * rng.normal(size=(k, 3))
        out.append(rng.uniform(0, 100, 3) + np.cumsum(0.5 * steps / np.linalg.norm(steps, axis=1)[:, None], axis=0))
    return out
