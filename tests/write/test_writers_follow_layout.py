"""The writers file every vertex where the level's layout (``zvf.format.layout.LevelLayout``) says.

For random stores written by each writer (points with and without ids, in memory and streamed; polylines
and graphs), every vertex stored in chunk ``c`` has ``LevelLayout.chunk_of == c`` under the level's own
rule (not merely either rule, as the validator accepts), and every point of a point cloud without ids lies
in the bin its fragment stands for.  A guard also checks no writer places rows itself (every placement
call goes through a LevelLayout).
"""

from __future__ import annotations

import pathlib
import re
import tempfile

import anyio
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zvf.aio as aio
from zvf.read.points import read_chunks

WRITE = pathlib.Path(__file__).resolve().parents[2] / "src" / "zvf" / "write"


#: (n, chunk edge, bins per chunk edge, lowest coordinate, span, writer, dtype, seed)
cases = st.tuples(st.integers(1, 400), st.sampled_from([10.0, 12.5, 3.3, 7.3]), st.sampled_from([None, 1, 2, 3]),
                  st.sampled_from([0.0, -30.0, -7.1]), st.sampled_from([6.6, 40.0, 100.0]),
                  st.sampled_from(["points", "points_ids", "points_stream", "polylines", "graph"]),
                  st.sampled_from(["float32", "float64"]), st.integers(0, 2**16))


async def _write(url: str, case) -> None:
    n, chunk, per_chunk, lo, span, writer, dtype, seed = case
    rng = np.random.default_rng(seed)
    pos = rng.uniform(lo, lo + span, (n, 3)).astype(dtype)
    if rng.random() < 0.5:  # rows on chunk and bin seams
        edge = chunk / (per_chunk or 1)
        pos[: n // 2] = (np.round(pos[: n // 2] / edge) * edge).astype(dtype)
    shapes = {"chunk_shape": (chunk,) * 3, "bin_shape": None if per_chunk is None else (chunk / per_chunk,) * 3}
    if writer == "points":
        await aio.write_points(url, pos, **shapes)
    elif writer == "points_ids":
        await aio.write_points(url, pos, object_ids=rng.integers(0, 20, n), **shapes)
    elif writer == "points_stream":
        await aio.write_points(url, [pos[: n // 3], pos[n // 3:]], **shapes)
    elif writer == "polylines":
        cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, 5), replace=False)) if n > 1 else []
        await aio.write_polylines(url, np.split(pos, cuts), **shapes)
    else:
        edges = rng.integers(0, n, (n, 2))
        await aio.write_graph(url, pos, edges, **shapes)


async def _check(url: str) -> int:
    checked = 0
    async with await aio.open(url) as ds:
        level = await ds.level(0)
        layout = level.layout
        for chunk in level.nonempty_chunks:
            sel = await read_chunks(ds.context, level, chunk[None, :], [])
            pos = sel.positions
            filed = layout.chunk_of(pos)
            assert np.all(filed == layout.spatial(chunk[None, :])), (chunk, pos[np.any(filed != chunk, axis=1)])
            if layout.fragments_are_bins and layout.bin_shape is not None:
                bin_chunks, bins = layout.bin_of(pos)
                assert np.all(bin_chunks == chunk) and np.all(np.diff(bins) >= 0), "rows stored bin after bin"
            checked += len(pos)
    return checked


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases)
def test_every_vertex_lies_where_the_layout_files_it(case):
    with tempfile.TemporaryDirectory() as tmp:
        url = f"{tmp}/s.zarr"

        async def run() -> int:
            await _write(url, case)
            return await _check(url)

        assert anyio.run(run) > 0


def test_writers_place_rows_through_the_layout_only():
    """No writer builds its own Grid or floor-divides positions by a shape: placement is the layout's."""
    own = re.compile(r"Grid\.create|Grid\(|\.chunk_of\(.*by_bin|cell_codes\(.*by_bin|np\.floor\(\s*pos")
    offenders = [f"{p.name}:{i}" for p in sorted(WRITE.glob("*.py")) if p.name != "layout.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1) if own.search(line)]
    assert offenders == []
