"""Bad input to the object writers fails before anything is written, naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

import zvf
from zvf.errors import InvalidArgumentError, StoreExistsError

P2 = [np.array([[1.0, 1.0], [60.0, 2.0]]), np.array([[3.0, 3.0]])]  # 2 polylines, 3 vertices
POS = np.array([[1.0, 1.0], [60.0, 2.0], [3.0, 70.0], [80.0, 80.0]], np.float32)
E = np.array([[0, 1], [1, 2], [2, 3]])
ENDS = np.array([[[1, 1], [2, 2]], [[3, 3], [60, 60]]], np.float32)
KW = {"chunk_shape": (50.0, 50.0)}

CASES = {
    # polylines
    "poly-not-sequence": (zvf.write_polylines, (5,), {}, "polylines must be"),
    "poly-empty-list": (zvf.write_polylines, ([],), {}, "polylines is empty"),
    "poly-mixed-ndim": (zvf.write_polylines, ([np.zeros((2, 2)), np.zeros((2, 3))],), {}, "polylines mix"),
    "poly-bad-shape": (zvf.write_polylines, ([np.zeros((2, 2)), np.zeros(3)],), {}, r"polylines\[1\] has shape"),
    "poly-strings": (zvf.write_polylines, ([np.array([["a", "b"]])],), {}, r"polylines\[0\] must be numeric"),
    "poly-nan": (zvf.write_polylines, ([np.array([[1.0, np.nan]])],), {}, "polylines has NaN"),
    "poly-attr-per-polyline-length": (zvf.write_polylines, (P2,), {"attributes": {"a": [np.zeros(2), np.zeros(2)]}},
                                      r"attributes\['a'\]\[1\] has 2 rows but polylines\[1\] has 1"),
    "poly-attr-concat-length": (zvf.write_polylines, (P2,), {"attributes": {"a": np.zeros(4)}},
                                r"attributes\['a'\] has shape \(4,\); expected \(3,\)"),
    "poly-attr-channels-disagree": (zvf.write_polylines, (P2,),
                                    {"attributes": {"a": [np.zeros((2, 2)), np.zeros((1, 3))]}}, "disagree on shape"),
    "poly-attr-unsafe-name": (zvf.write_polylines, (P2,), {"attributes": {"../a": np.zeros(3)}}, "name '../a'"),
    "poly-attr-strings": (zvf.write_polylines, (P2,), {"attributes": {"a": np.array(["x", "y", "z"])}},
                          r"attributes\['a'\] must be numeric"),
    "poly-objattr-length": (zvf.write_polylines, (P2,), {"object_attributes": {"o": np.zeros(3)}},
                            r"object_attributes\['o'\] has shape \(3,\); expected \(2,\)"),
    "poly-objattr-bool": (zvf.write_polylines, (P2,), {"object_attributes": {"b": np.array([True, False])}},
                          r"object_attributes\['b'\]: bool"),
    "poly-objattr-unsafe-name": (zvf.write_polylines, (P2,), {"object_attributes": {"a/b": np.zeros(2)}},
                                 "name 'a/b'"),
    "poly-groups-unknown": (zvf.write_polylines, (P2,), {"groups": {0: [0, 5]}}, r"groups\[0\]"),
    "poly-groups-negative-id": (zvf.write_polylines, (P2,), {"groups": {-1: [0]}}, "group id -1"),
    "poly-group-attr-length": (zvf.write_polylines, (P2,), {"groups": {0: [0], 1: [1]},
                                                           "group_attributes": {"g": np.zeros(3)}},
                               r"group_attributes\['g'\]"),
    "poly-group-attr-without-groups": (zvf.write_polylines, (P2,), {"group_attributes": {"g": np.zeros(0)}},
                                       "group_attributes need groups"),
    "poly-geometry-type": (zvf.write_polylines, (P2,), {"geometry_type": "mesh"}, "geometry_type"),
    "poly-dtype": (zvf.write_polylines, (P2,), {"dtype": "int32"}, "dtype must be a float"),
    "poly-compression": (zvf.write_polylines, (P2,), {"compression": "lz4"}, "compression"),
    "poly-shard-shape": (zvf.write_polylines, (P2,), {"shard_shape": 0}, "shard_shape"),
    "poly-bin-shape": (zvf.write_polylines, (P2,), {"bin_shape": (30.0, 30.0)}, "bin_shape"),
    "poly-chunk-shape": (zvf.write_polylines, (P2,), {"chunk_shape": (0.0, 50.0)}, "chunk_shape"),
    "poly-out-of-bounds": (zvf.write_polylines, (P2,), {"bounds": ([0.0, 0.0], [10.0, 10.0])}, "outside bounds"),
    "poly-layout": (zvf.write_polylines, (P2,), {"object_index_layout": "dense"}, "object_index_layout"),
    # lines
    "lines-shape": (zvf.write_lines, (np.zeros((2, 3, 2)),), {}, r"endpoints must be an \(M, 2, ndim\)"),
    "lines-attr-shape": (zvf.write_lines, (ENDS,), {"attributes": {"t": np.zeros((2, 3))}},
                         r"attributes\['t'\] has shape \(2, 3\)"),
    "lines-objattr-length": (zvf.write_lines, (ENDS,), {"object_attributes": {"o": np.zeros(5)}},
                             r"object_attributes\['o'\]"),
    "lines-nan": (zvf.write_lines, (np.full((1, 2, 2), np.nan),), {}, "endpoints has NaN"),
    # graphs and skeletons
    "graph-positions-shape": (zvf.write_graph, (np.zeros(4), E), {}, r"positions must be an \(N, ndim\)"),
    "graph-edges-shape": (zvf.write_graph, (POS, np.zeros((2, 3), int)), {}, r"edges must be an \(M, 2\)"),
    "graph-edges-float": (zvf.write_graph, (POS, np.array([[0.5, 1.0]])), {}, "edges must hold integer"),
    "graph-edges-past": (zvf.write_graph, (POS, np.array([[0, 1], [1, 2], [3, 4]])), {},
                         r"edges\[2\] = \[3, 4\] indexes outside the 4 positions"),
    "graph-edges-negative": (zvf.write_graph, (POS, np.array([[0, -1]])), {}, r"edges\[0\]"),
    "graph-object-ids-negative": (zvf.write_graph, (POS, E), {"object_ids": [0, 1, -2, 1]}, "object_ids must be >= 0"),
    "graph-object-ids-length": (zvf.write_graph, (POS, E), {"object_ids": [0, 1]}, "object_ids has shape"),
    "graph-object-ids-float": (zvf.write_graph, (POS, E), {"object_ids": [0, 1.5, 2, 3]},
                               "object_ids must be integers"),
    "graph-link-attr-length": (zvf.write_graph, (POS, E), {"link_attributes": {"w": np.zeros(2)}},
                               r"link_attributes\['w'\] has shape \(2,\); expected \(3,\)"),
    "graph-link-attr-unsafe-name": (zvf.write_graph, (POS, E), {"link_attributes": {"..": np.zeros(3)}}, "name '..'"),
    "graph-attr-length": (zvf.write_graph, (POS, E), {"attributes": {"r": np.zeros(5)}}, r"attributes\['r'\]"),
    "graph-objattr-length": (zvf.write_graph, (POS, E), {"object_ids": [0, 0, 7, 7],
                                                        "object_attributes": {"s": np.zeros(4)}},
                             r"object_attributes\['s'\] has shape \(4,\); expected \(2,\)"),
    "graph-groups-unknown": (zvf.write_graph, (POS, E), {"object_ids": [0, 0, 7, 7], "groups": {0: [1]}},
                             r"groups\[0\]"),
    "graph-kind": (zvf.write_graph, (POS, E), {"geometry_type": "tree"}, "geometry_type must be"),
    "skeleton-two-parents": (zvf.write_graph, (POS, np.array([[1, 0], [1, 2]])), {"geometry_type": "skeleton"},
                             "vertex 1 is the child of two edges"),
    "skeleton-cycle": (zvf.write_graph, (POS, np.array([[1, 2], [2, 1], [3, 0]])), {"geometry_type": "skeleton"},
                       "lies on a cycle"),
    "skeleton-self-loop": (zvf.write_graph, (POS, np.array([[1, 1]])), {"geometry_type": "skeleton"},
                           "lies on a cycle"),
    "skeleton-two-roots-one-object": (zvf.write_graph, (POS, np.array([[1, 0], [3, 2]])), {"geometry_type": "skeleton"},
                                      "object 0 holds more than one tree"),
    # meshes
    "mesh-faces-width": (zvf.write_mesh, (POS, np.array([[0, 1]])), {}, "faces must be"),
    "mesh-faces-1d": (zvf.write_mesh, (POS, np.array([0, 1, 2])), {}, "faces must be"),
    "mesh-faces-past": (zvf.write_mesh, (POS, np.array([[0, 1, 2], [1, 2, 9]])), {},
                        r"faces\[1\] = \[1, 2, 9\] indexes outside the 4 vertices"),
    "mesh-faces-float": (zvf.write_mesh, (POS, np.array([[0.0, 1.0, 2.5]])), {}, "faces must hold integer"),
    "mesh-vertices-strings": (zvf.write_mesh, (np.array([["a", "b"]]), np.zeros((0, 3), int)), {},
                              "positions must be numeric"),
    "mesh-objattr-length": (zvf.write_mesh, (POS, np.array([[0, 1, 2]])), {"object_attributes": {"a": np.zeros(2)}},
                            r"object_attributes\['a'\] has shape \(2,\); expected \(1,\)"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_argument_is_refused_before_writing(tmp_path, name):
    fn, args, kw, match = CASES[name]
    target = tmp_path / "s.zarrvectors"
    with pytest.raises(InvalidArgumentError, match=match):
        fn(str(target), *args, **{**KW, **kw})
    assert not target.exists() or not any(target.rglob("*")), "a refused write left files behind"


def test_existing_store_needs_overwrite(tmp_path):
    target = str(tmp_path / "s.zarrvectors")
    zvf.write_polylines(target, P2, **KW)
    with pytest.raises(StoreExistsError):
        zvf.write_polylines(target, P2, **KW)
    s = zvf.write_mesh(target, POS, np.array([[0, 1, 2]]), overwrite=True, **KW)
    assert s.geometry == "mesh"


def test_argument_errors_are_value_errors(tmp_path):
    with pytest.raises(ValueError, match="faces"):
        zvf.write_mesh(str(tmp_path / "m"), POS, np.array([[0, 1, 7]]), **KW)
