"""zvf.format.layout: a level's layout from its documents, placement, and closed boxes (pure)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zvf.errors import FormatError
from zvf.format import builders, parse
from zvf.format.grid import inside
from zvf.format.layout import LevelLayout


def _root(geometry="point_cloud", bins=(12.5,) * 3, levels=((0, (12.5,) * 3),)):
    transforms = [builders.level_transform(i, b, bins or (25.0,) * 3) for i, b in levels]
    return parse.parse_root(builders.root_document(
        chunk_shape=[25.0] * 3, bounds=[[0.0] * 3, [100.0] * 3], geometry_types=[geometry], name="t",
        base_bin_shape=bins, transforms=transforms))


def _level(index, **kw):
    parent = None if index == 0 else index - 1
    return parse.parse_level(builders.level_document(level=index, vertex_count=1, arrays_present=["vertices"],
                                                     parent_level=parent, **kw), key=f"{index}/zarr.json")


def test_of_level_reads_the_documents():
    root = _root(levels=((0, (12.5,) * 3), (1, (25.0,) * 3), (2, (50.0,) * 3)))
    zero = LevelLayout.of_level(root, _level(0, fragments_tile=True))
    assert zero.bin_shape == (12.5,) * 3 and zero.bins_per_chunk == (2, 2, 2) and zero.by_bin
    assert zero.fragments_are_bins and zero.chunk_scale == (1, 1, 1)
    # a coarse point level keeps level 0's bins in a chunk twice the root's; its own bin is 50
    two = LevelLayout.of_level(root, _level(2, chunk_shape=[50.0] * 3, fragments_tile=True))
    assert two.chunk_shape == (50.0,) * 3 and two.chunk_scale == (2, 2, 2)
    assert two.bin_shape == (12.5,) * 3 and two.bins_per_chunk == (4, 4, 4)
    assert two.level_bin_shape == (50.0,) * 3 and two.fragments_are_bins
    # an object level: filed by chunk, fragments are not bins
    objects = LevelLayout.of_level(_root("streamline", None, ((0, (25.0,) * 3), (1, (50.0,) * 3))), _level(1))
    assert not objects.by_bin and not objects.fragments_are_bins and objects.bin_shape is None
    assert objects.level_bin_shape == (50.0,) * 3


def test_of_level_refuses_what_does_not_nest():
    root = _root()
    with pytest.raises(FormatError, match=r"1/zarr\.json"):
        LevelLayout.of_level(root, _level(1, chunk_shape=[30.0] * 3))
    bad_bins = parse.parse_level({"attributes": {"zarr_vectors_level": {
        "level": 0, "vertex_count": 1, "arrays_present": ["vertices"], "bin_shape": [10.0] * 3}},
        "zarr_format": 3, "node_type": "group"}, key="0/zarr.json")
    with pytest.raises(FormatError, match="does not divide"):
        LevelLayout.of_level(root, bad_bins)


def test_misfiled_accepts_either_rule_on_a_seam():
    layout = LevelLayout.for_points(0, (3.3,) * 3, (3.3,) * 3, (1.1,) * 3)
    seam = np.array([[3.3, 0.5, 0.5]], np.float64)  # bin 2 (chunk 0) by bin, but 3.3 / 3.3 = 1 by chunk
    assert layout.chunk_of(seam)[0, 0] == 0
    assert not layout.misfiled((0, 0, 0), seam).any() and not layout.misfiled((1, 0, 0), seam).any()
    assert layout.misfiled((2, 0, 0), seam).all()
    assert not layout.misfiled((0, 0, 0), np.array([[np.nan, 0, 0]])).any()  # NaN rows: reported elsewhere


def test_settle_moves_a_centroid_off_the_far_face():
    layout = LevelLayout.for_objects(1, (25.0,) * 3, (25.0,) * 3)
    cent = np.array([[50.0, 10.0, 10.0], [30.0, 10.0, 10.0]], np.float32)
    moved, chunks = layout.settle(cent, np.array([0, 0, 0]), np.array([1, 1, 1]))
    assert chunks.tolist() == [[1, 0, 0], [1, 0, 0]]
    assert moved[0, 0] == np.nextafter(np.float32(50.0), np.float32(0)) and moved[1, 0] == 30.0


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["float32", "float64"]), st.sampled_from([1.1, 12.5, 0.3, 7.0]))
def test_covered_bins_hold_only_rows_inside_and_untouched_ones_none(seed, dtype, edge):
    rng = np.random.default_rng(seed)
    layout = LevelLayout.for_points(0, (edge * 4,) * 3, (edge * 4,) * 3, (edge,) * 3)
    pos = rng.uniform(-10 * edge, 10 * edge, (3000, 3)).astype(dtype)
    pos[:500] = (np.round(pos[:500] / edge) * edge).astype(dtype)  # rows on bin edges
    pos[500:700] = np.nextafter(pos[:200], np.asarray(-np.inf, dtype))  # and just below them
    lo, hi = np.sort(rng.uniform(-10 * edge, 10 * edge, (2, 3)), axis=0)
    if seed % 2:  # faces on bin edges, or through stored rows
        lo, hi = np.floor(lo / edge) * edge, np.ceil(hi / edge) * edge
    else:
        lo, hi = np.minimum(pos[0], pos[1]).astype(np.float64), np.maximum(pos[0], pos[1]).astype(np.float64)
    chunks, flat = layout.bin_of(pos)
    covered = layout.bins_covered(chunks, lo, hi, dtype)[np.arange(len(pos)), flat]
    touched = layout.bins_touching(chunks, lo, hi)[np.arange(len(pos)), flat]
    ins = inside(pos, lo, hi)
    assert ins[covered].all()
    assert not ins[~touched].any()
    clo, chi = layout.chunk_range(lo, hi)
    assert np.all((chunks[ins] >= clo) & (chunks[ins] <= chi))
