"""zvf.dask.build_pyramid on a real two-process cluster: the store equals the serial build's, byte for byte."""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pytest

pytest.importorskip("distributed")
import cloudpickle

import zvf
import zvf.dask as zd
from tests.support.store_tree import tree
from zvf.errors import InvalidArgumentError

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import the tests package

CHUNK, BIN = (25.0, 25.0, 25.0), (12.5, 12.5, 12.5)


def twins(tmp_path, write) -> tuple[str, str]:
    """The same level 0 twice (copied, so the level-0 bytes are equal too)."""
    a, b = str(tmp_path / "serial"), str(tmp_path / "dask")
    write(a)
    shutil.copytree(a, b)
    return a, b


def points(path: str) -> None:
    rng = np.random.default_rng(0)
    pos = rng.uniform(0, 100, (4000, 3)).astype(np.float32)
    zvf.write_points(path, pos, chunk_shape=CHUNK, bin_shape=BIN, attributes={"w": rng.random(4000).astype(np.float32)},
                     compression="zstd")


def streamlines(path: str) -> None:
    rng = np.random.default_rng(1)
    lines = [np.clip(np.cumsum(rng.normal(0, 6, (int(rng.integers(3, 30)), 3)), axis=0) + 50, 1, 99)
             .astype(np.float32) for _ in range(60)]
    zvf.write_polylines(path, lines, geometry_type="streamline", chunk_shape=CHUNK, bin_shape=BIN,
                        attributes={"fa": [rng.random(len(x)).astype(np.float32) for x in lines]},
                        object_attributes={"length": np.arange(60, dtype=np.float32)})


@pytest.mark.parametrize("write,factors,scales,storage,depth", [
    (points, [(2, 1), (2, 2), (2, 1)], [1, 2, 1], "explicit", -1),
    (streamlines, [(2, 1), (2, 2)], None, "explicit", 1),
    (streamlines, [(2, 1.5), (2, 1)], [2, 1], "implicit", 2),
])
def test_same_bytes_as_the_serial_build(client, tmp_path, write, factors, scales, storage, depth):
    a, b = twins(tmp_path, write)
    kw = dict(chunk_scale_factors=scales, cross_level_storage=storage, cross_level_depth=depth, seed=3)
    s = zvf.build_pyramid(a, factors, **kw)
    seen: list[dict] = []
    d = zd.build_pyramid(b, factors, blocks_per_task=2, client=client, progress=seen.append, **kw)
    assert tree(a) == tree(b)
    assert [lv["vertex_count"] for lv in s["levels"]] == [lv["vertex_count"] for lv in d["levels"]]
    assert d["root"] == s["root"]
    assert {p["level"] for p in seen} == set(range(1, len(factors) + 1))
    last = seen[-1]
    assert last["blocks"] == last["total_blocks"] and last["done"] == last["total"] and last["vertices"] > 0
    assert zvf.validate(b, level=3).ok


class KillOnce:
    """A block mapper hook that kills the worker process of its first call (a machine lost mid-build)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __call__(self) -> None:
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)


def test_killed_worker_still_gives_the_identical_store(client, tmp_path):
    a, b = twins(tmp_path, streamlines)
    zvf.build_pyramid(a, [(2, 1)])
    marker = str(tmp_path / "killed")
    zd.build_pyramid(b, [(2, 1)], blocks_per_task=1, client=client, _before_task=KillOnce(marker))
    assert os.path.exists(marker)
    assert tree(a) == tree(b)


def test_local_scheduler_and_errors(tmp_path):
    a, b = twins(tmp_path, points)
    zvf.build_pyramid(a, [(2, 1)])
    zd.build_pyramid(b, [(2, 1)], client=None)  # no distributed client: dask's local scheduler
    assert tree(a) == tree(b)
    with pytest.raises(InvalidArgumentError, match="memory://"):
        zd.build_pyramid("memory://x", [(2, 1)])
    with pytest.raises(InvalidArgumentError, match="blocks_per_task"):
        zd.build_pyramid(b, [(2, 1)], blocks_per_task=0)
    with pytest.raises(InvalidArgumentError, match="already has levels"):
        zd.build_pyramid(b, [(2, 1)])


def test_cli_pyramid_on_a_scheduler(client, tmp_path, capsys):
    from zvf.cli.main import main

    a, b = twins(tmp_path, streamlines)
    zvf.build_pyramid(a, [(2, 1), (2, 2)], cross_level_depth=2)
    assert main(["pyramid", b, "--factor", "2:1", "--factor", "2:2", "--depth", "2", "--scheduler",
                 client.scheduler.address, "-q"]) == 0
    assert "level 2:" in capsys.readouterr().out
    assert tree(a) == tree(b)
