"""Appends never change a value silently: a position or attribute value the store's dtype cannot hold
exactly is refused (naming it, the dtype and the values), or stored cast when the caller says
``cast=True``; nothing is written when refused."""

from __future__ import annotations

import numpy as np
import pytest

import zvf
import zvf.aio as za
from zvf.errors import InvalidArgumentError

KW = {"chunk_shape": (5.0, 5.0, 5.0)}


def _pos(n, seed=0):
    return np.random.default_rng(seed).uniform(0, 10, (n, 3)).astype(np.float32)


@pytest.mark.parametrize("sharded", [False, True], ids=["incremental", "rewrite"])
async def test_uint8_vertex_attribute(tmp_path, sharded):
    url = str(tmp_path / "s")
    await za.write_points(url, _pos(50), attributes={"u": np.arange(50, dtype=np.uint8)}, **KW,
                          **({"shard_shape": (2, 2, 2)} if sharded else {}))
    ds = await za.open(url, mode="a")
    with pytest.raises(InvalidArgumentError, match=r"attributes\['u'\].*uint8.*3 of the appended.*0\.7, -1\.0, 300\.0"):
        await ds.append_points(_pos(3, 1), attributes={"u": [0.7, -1.0, 300.0]})
    assert len(await (await za.open(url)).read_all()) == 50  # nothing written
    await ds.append_points(_pos(3, 1), attributes={"u": [7.0, 0, 255]})  # exactly representable: fine
    await ds.append_points(_pos(3, 2), attributes={"u": [0.7, -1.0, 300.0]}, cast=True)
    sel = await (await za.open(url)).read_all()
    got = sel.attributes["u"]
    assert got.dtype == np.uint8 and len(got) == 56
    assert {7, 255}.issubset(set(got.tolist()))
    with pytest.raises(InvalidArgumentError, match="cast must be True or False"):
        await ds.append_points(_pos(1), attributes={"u": [1]}, cast="yes")
    await ds.close()


async def test_float_narrowing_of_attributes_and_positions(tmp_path):
    url = str(tmp_path / "s")
    await za.write_points(url, _pos(20), attributes={"f": np.zeros(20, np.float32)}, **KW)
    ds = await za.open(url, mode="a")
    with pytest.raises(InvalidArgumentError, match=r"attributes\['f'\].*float32.*0\.1"):
        await ds.append_points(_pos(2, 1), attributes={"f": np.array([0.5, 0.1])})
    with pytest.raises(InvalidArgumentError, match=r"positions.*float32"):
        await ds.append_points(_pos(1, 1).astype(np.float64) + 1e-9, attributes={"f": [0.5]})
    nan = np.array([np.nan, 0.25])
    await ds.append_points(_pos(2, 1).astype(np.float64), attributes={"f": nan})  # NaN is NaN in float32
    assert np.isnan((await (await za.open(url)).read_all()).attributes["f"]).sum() == 1
    await ds.close()


async def test_object_attributes_and_polylines(tmp_path):
    url = str(tmp_path / "l")
    lines = [_pos(4, k) for k in range(3)]
    await za.write_polylines(url, lines, object_attributes={"kind": np.array([1, 2, 3], np.int8)},
                             attributes={"w": [np.ones(4, np.int16) for _ in lines]}, **KW)
    ds = await za.open(url, mode="a")
    with pytest.raises(InvalidArgumentError, match=r"object_attributes\['kind'\].*int8.*200"):
        await ds.append_polylines([_pos(2, 5)], object_attributes={"kind": [200]}, attributes={"w": [np.ones(2)]})
    with pytest.raises(InvalidArgumentError, match=r"attributes\['w'\].*int16.*1\.5"):
        await ds.append_polylines([_pos(2, 5)], object_attributes={"kind": [4]}, attributes={"w": [[1.5, 2]]})
    with pytest.raises(InvalidArgumentError, match=r"polylines\[0\].*float32"):
        await ds.append_polylines([_pos(2, 5).astype(np.float64) / 3], object_attributes={"kind": [4]},
                                  attributes={"w": [np.ones(2)]})
    await ds.append_polylines([_pos(2, 5)], object_attributes={"kind": [200]}, attributes={"w": [[1.5, 2]]},
                              cast=True)
    again = await za.open(url)
    assert (await again.object_attribute("kind")).tolist() == [1, 2, 3, np.int8(200 - 256)]
    await again.close()
    await ds.close()


def test_blocking_facade_takes_cast(tmp_path):
    url = str(tmp_path / "s")
    zvf.write_points(url, _pos(10), attributes={"u": np.zeros(10, np.uint8)}, **KW)
    with zvf.open(url, mode="a") as ds:
        with pytest.raises(InvalidArgumentError, match="uint8"):
            ds.append_points(_pos(1), attributes={"u": [-1]})
        ds.append_points(_pos(1), attributes={"u": [-1]}, cast=True)
        assert ds.read_all().attributes["u"].max() == 255
