"""Implementation of ``zvf.aio``: thin entry points over the read and write packages."""

from __future__ import annotations

from ..read.dataset import AsyncDataset
from ..read.selection import Selection

__all__ = [
    "AsyncDataset",
    "Selection",
    "open",
    "validate",
    "write_graph",
    "write_lines",
    "write_mesh",
    "write_points",
    "write_polylines",
]


async def open(target, *, mode: str = "r", storage_options=None) -> AsyncDataset:  # noqa: A001
    """Open a ZVF store (local path, file://, memory://, s3://, gs://, az://, http(s)://)."""
    return await AsyncDataset.open(target, mode=mode, storage_options=storage_options)


async def write_points(target, positions, **kwargs) -> dict:
    """Write a point cloud; see ``zvf.write.points.write_points``."""
    from ..write.points import write_points as impl

    return await impl(target, positions, **kwargs)


async def write_polylines(target, polylines, **kwargs) -> dict:
    from ..write.objects import write_polylines as impl

    return await impl(target, polylines, **kwargs)


async def write_lines(target, endpoints, **kwargs) -> dict:
    from ..write.objects import write_lines as impl

    return await impl(target, endpoints, **kwargs)


async def write_graph(target, positions, edges, **kwargs) -> dict:
    from ..write.objects import write_graph as impl

    return await impl(target, positions, edges, **kwargs)


async def write_mesh(target, vertices, faces, **kwargs) -> dict:
    from ..write.objects import write_mesh as impl

    return await impl(target, vertices, faces, **kwargs)


async def validate(target, *, level: int = 3, storage_options=None):
    from ..validate import validate as impl

    return await impl(target, level=level, storage_options=storage_options)
