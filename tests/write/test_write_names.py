"""One name per concept across the writers; the old keyword names are refused."""

from __future__ import annotations

import numpy as np
import pytest

import zvf
from zvf.errors import InvalidArgumentError, UnknownArgumentError
from zvf.write.quirks import reference_quirks

POS = np.array([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [3.0, 3.0, 3.0], [12.0, 2.0, 2.0]])
FACES = np.array([[0, 1, 2], [1, 2, 3]])


def test_old_keyword_names_are_refused_naming_the_new_ones(tmp_path):
    """``kind=`` (write_graph) and ``vertices=`` (write_mesh) were renamed before 0.1.0; no alias is kept."""
    with pytest.raises(UnknownArgumentError, match=r"'kind'.*geometry_type"):
        zvf.write_graph(tmp_path / "g", POS, [[1, 0], [2, 1], [3, 2]], kind="skeleton", chunk_shape=(10,) * 3)
    with pytest.raises(UnknownArgumentError, match=r"'vertices'.*positions"):
        zvf.write_mesh(tmp_path / "m", faces=FACES, vertices=POS, chunk_shape=(10,) * 3)
    assert not (tmp_path / "g").exists() and not (tmp_path / "m").exists()
    new = zvf.write_graph(tmp_path / "new", POS, [[1, 0], [2, 1], [3, 2]], geometry_type="skeleton",
                          chunk_shape=(10,) * 3)
    assert new.geometry == "skeleton"
    streamed = zvf.write_mesh(tmp_path / "st", [{"vertices": POS, "faces": FACES}], chunk_shape=(10,) * 3)
    assert streamed.vertex_count == 4


def test_reference_quirks_is_scoped_and_refused_with_batches(tmp_path):
    from zvf.write import quirks

    with reference_quirks():
        assert quirks.active()
        with pytest.raises(InvalidArgumentError, match="reference_quirks"):
            zvf.write_mesh(tmp_path / "m", [{"positions": POS, "faces": FACES}], chunk_shape=(10,) * 3)
    assert not quirks.active()
