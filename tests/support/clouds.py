"""Point clouds shaped like the data the layout chooser meets: clusters in a sparse background, a terrain
surface, an even spread (deterministic, in a 1 km cube)."""

from __future__ import annotations

import numpy as np


def point_clusters(n: int, sigma=(2.0, 20.0), k: int = 30, background: float = 0.05, seed: int = 0) -> np.ndarray:
    """Gaussian clusters (power-law weights) in a 1 km cube, plus an even background."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(100, 900, (k, 3))
    size = np.exp(rng.uniform(np.log(sigma[0]), np.log(sigma[1]), k))
    weight = rng.pareto(1.5, k) + 0.1
    n_bg = int(n * background)
    member = rng.choice(k, n - n_bg, p=weight / weight.sum())
    return np.concatenate([centres[member] + rng.normal(0, 1, (n - n_bg, 3)) * size[member, None],
                           rng.uniform(0, 1000, (n_bg, 3))])


def point_surface(n: int, seed: int = 0) -> np.ndarray:
    """A rolling 1 km x 1 km terrain: points on a 2.5-D surface."""
    rng = np.random.default_rng(seed)
    x, y = rng.uniform(0, 1000, (2, n))
    return np.stack([x, y, 100 + 30 * np.sin(x / 150) * np.cos(y / 200) + rng.normal(0, 0.2, n)], axis=1)


def point_spread(n: int, seed: int = 0) -> np.ndarray:
    """Points spread evenly over a 1 km cube."""
    return np.random.default_rng(seed).uniform(0, 1000, (n, 3))
