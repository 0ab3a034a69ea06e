# pyright: strict
"""Checked by mypy --strict and pyright (strict), never run: a user's script that appends to a store,
builds its pyramid, rechunks it and converts files; every result has a concrete type."""

from __future__ import annotations

from typing import reveal_type

import numpy as np
import numpy.typing as npt

import zvf
import zvf.aio

positions: npt.NDArray[np.float32] = np.zeros((4, 3), dtype=np.float32)


def blocking() -> None:
    with zvf.open("s3://bucket/cloud", mode="a") as ds:
        reveal_type(ds.append_points(positions, attributes={"v": np.ones(4)}))
        reveal_type(ds.append_polylines([positions]))
        reveal_type(ds.append_lines(np.zeros((2, 2, 3))))
        reveal_type(ds.append_graph(positions, [[0, 1]]))
    reveal_type(zvf.build_pyramid("s", [(2, 1)]))
    reveal_type(zvf.rechunk("s", "t", chunk_shape=(20.0, 20.0, 20.0)))
    converted = zvf.convert("cloud.laz", "s3://bucket/cloud", chunk_shape=(20.0, 20.0, 20.0), batch_rows=100_000)
    reveal_type(converted)
    reveal_type(converted["vertices"])
    reveal_type(converted.get("objects"))


async def asynchronous() -> None:
    async with await zvf.aio.open("s3://bucket/cloud", mode="a") as ds:
        reveal_type(await ds.append_mesh(positions, [[0, 1, 2]]))
    reveal_type(await zvf.aio.build_pyramid("s", [(2, 1)]))
    reveal_type(await zvf.aio.rechunk("s", "t", chunk_shape=(20.0, 20.0, 20.0)))

    def show(p: zvf.ConvertProgress) -> None:
        print(p["done"], p["total"])

    reveal_type(await zvf.aio.convert("s3://bucket/cloud", "cloud.las", level=1, progress=show))
