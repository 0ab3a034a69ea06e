"""One name per concept across the writers; old keyword names still work, with a warning."""

from __future__ import annotations

import numpy as np
import pytest

import zvf
from zvf.errors import InvalidArgumentError
from zvf.write.quirks import reference_quirks

POS = np.array([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [3.0, 3.0, 3.0], [12.0, 2.0, 2.0]])
FACES = np.array([[0, 1, 2], [1, 2, 3]])


def test_graph_kind_is_a_deprecated_geometry_type(tmp_path):
    with pytest.warns(DeprecationWarning, match=r"kind=.*geometry_type="):
        old = zvf.write_graph(tmp_path / "old", POS, [[1, 0], [2, 1], [3, 2]], kind="skeleton", chunk_shape=(10,) * 3)
    new = zvf.write_graph(tmp_path / "new", POS, [[1, 0], [2, 1], [3, 2]], geometry_type="skeleton",
                          chunk_shape=(10,) * 3)
    assert old.geometry == new.geometry == "skeleton"


def test_mesh_vertices_is_a_deprecated_positions(tmp_path):
    with pytest.warns(DeprecationWarning, match="vertices="):
        old = zvf.write_mesh(tmp_path / "old", faces=FACES, vertices=POS, chunk_shape=(10,) * 3)
    new = zvf.write_mesh(tmp_path / "new", positions=POS, faces=FACES, chunk_shape=(10,) * 3)
    assert old.vertex_count == new.vertex_count == 4
    streamed = zvf.write_mesh(tmp_path / "st", [{"vertices": POS, "faces": FACES}], chunk_shape=(10,) * 3)
    assert streamed.vertex_count == 4


def test_both_names_refused(tmp_path):
    with pytest.raises(InvalidArgumentError, match="geometry_type"):
        zvf.write_graph(tmp_path / "g", POS, [[1, 0]], kind="graph", geometry_type="graph", chunk_shape=(10,) * 3)


def test_reference_quirks_is_scoped_and_refused_with_batches(tmp_path):
    from zvf.write import quirks

    with reference_quirks():
        assert quirks.active()
        with pytest.raises(InvalidArgumentError, match="reference_quirks"):
            zvf.write_mesh(tmp_path / "m", [{"positions": POS, "faces": FACES}], chunk_shape=(10,) * 3)
    assert not quirks.active()
