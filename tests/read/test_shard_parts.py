"""A level read whole from a shard whose index the open already holds: the inner chunks come as ranges,
in parts of about equal size within the handle's ``coalesce_max`` fetched at once (one connection alone
does not fill the link), not as one GET of the shard -- and the answer is the same."""

from __future__ import annotations

import numpy as np

import zvf
from zvf.config import tuned


def test_a_whole_shard_comes_in_equal_parts(tmp_path):
    rng = np.random.default_rng(8)
    pos = rng.uniform(0, 100, (60_000, 3)).astype(np.float32)
    url = str(tmp_path / "s")
    zvf.write_points(url, pos, attributes={"v": np.arange(len(pos), dtype=np.int32)}, chunk_shape=[25.0] * 3,
                     compression="zstd", shard_shape="auto")
    shard = (tmp_path / "s/0/vertices/c/0/0/0").stat().st_size  # the one shard of the vertices
    counts = {}
    for parts, limit in [(1, 1 << 40), (3, int(shard / 2.5))]:
        with tuned(local_coalesce_max=limit), zvf.open(url) as ds:
            before = ds.stats.requests
            got = ds.read_all()
            counts[parts] = ds.stats.requests - before
        assert len(got) == len(pos)
        np.testing.assert_array_equal(got.positions, pos[got.attributes["v"]])
    assert counts[3] == counts[1] + 2, counts  # the vertex shard in three requests instead of one
