"""Stores every Neuroglancer test reads: written by zarr-vectors 0.9.2 (the reference), once per session."""

from __future__ import annotations

import numpy as np
import pytest

BOUNDS = ([0.0] * 3, [100.0] * 3)


@pytest.fixture(scope="session")
def stores(tmp_path_factory):
    """Points (attributes, object ids), streamlines, two skeletons (a radius attribute), three meshes."""
    from zarr_vectors import building as zb

    root = tmp_path_factory.mktemp("ngstores")
    rng = np.random.default_rng(3)
    pos = rng.uniform(0, 100, (600, 3)).astype(np.float32)
    zb.write_points(str(root / "pts.zarrvectors"), pos, chunk_shape=(25.0,) * 3, bounds=BOUNDS,
                    vertex_attributes={"inten": rng.random(600).astype(np.float32),
                                       "cls": rng.integers(0, 5, 600).astype(np.uint8)},
                    object_ids=np.repeat(np.arange(60), 10))
    pls = [(np.cumsum(rng.normal(0, 4, (int(rng.integers(3, 15)), 3)), axis=0) + 50).clip(1, 99).astype(np.float32)
           for _ in range(12)]
    zb.write_polylines(str(root / "sl.zarrvectors"), pls, chunk_shape=(25.0,) * 3, bounds=BOUNDS,
                       geometry_type="streamline")
    trunk = np.c_[np.linspace(8, 92, 8), np.full(8, 30.0), np.full(8, 45.0)]
    branch = np.c_[np.full(3, 44.0), np.linspace(40, 80, 3), np.full(3, 45.0)]
    sk = np.r_[trunk, branch, trunk + [0, 40, 10]].astype(np.float32)  # noqa: RUF005 - numpy addition
    edges = np.array([[i + 1, i] for i in range(7)] + [[8, 3], [9, 8], [10, 9]]
                     + [[12 + i, 11 + i] for i in range(7)])
    zb.write_graph(str(root / "sk.zarrvectors"), sk, edges, chunk_shape=(50.0,) * 3, bounds=BOUNDS,
                   object_ids=np.r_[np.zeros(11, int), np.ones(8, int)], kind="skeleton",
                   vertex_attributes={"radius": np.linspace(0.5, 2, len(sk)).astype(np.float32)})
    tet = np.array([[60, 60, 60], [72, 60, 60], [60, 72, 60], [60, 60, 72]], np.float32)
    faces = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    zb.write_mesh(str(root / "mesh.zarrvectors"), np.r_[tet, tet - 40, tet - [10, 50, 0]],
                  np.r_[faces, faces + 4, faces + 8], chunk_shape=(50.0,) * 3, bounds=BOUNDS,
                  object_ids=np.r_[[0] * 4, [1] * 4, [5] * 4])
    return root
