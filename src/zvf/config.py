"""zvf's tuning settings in one place: one default each, overridable for a block of calls.

Every memory bound, batch size, lease and limit that is a choice rather than part of the format lives
here.  Code reads the value in effect with ``config.tuning().<name>``; a user changes it for the calls
made inside a block::

    with zvf.config.tuned(spill_bytes=8 << 20):
        zvf.write_points(url, positions)

The setting is a context variable: it follows the block into the tasks and threads the call starts
and into the blocking facade's loop, and leaves every other thread and task as it was.  It is not
carried into other processes (Dask workers read their own defaults).

It imports only ``zvf.errors``: every layer may read it.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .errors import InvalidArgumentError

__all__ = ["DEFAULTS", "Tuning", "in_effect", "tuned", "tuning"]


@dataclass(frozen=True, slots=True)
class Tuning:
    """The tuning settings (sections by layer; each field says what it bounds)."""

    # --- format: bounds on untrusted sizes, and the versions writers keep --------------------------
    max_document_bytes: int = 64 << 20  # a metadata document (zarr.json) parsed; larger ones are refused unparsed
    max_bins_per_chunk: int = 1 << 20  # bins tiling one chunk (readers build per-chunk masks of them)
    max_decoded_bytes: int = 1 << 31  # one chunk decompressed (checked against the codec headers before inflating)
    max_gather_rows: int = 1 << 27  # rows a fragment index expands to when it was decoded without the chunk's rows
    version_retention: float = 300.0  # seconds a superseded version stays readable (writers' default retention)
    max_reader_lease: float = 20.0  # seconds a reader trusts its version before it looks at the root again

    # --- io ----------------------------------------------------------------------------------------

    # --- read --------------------------------------------------------------------------------------
    offload_bytes: int = 4 << 20  # payload bytes above which a read decodes and assembles rows in a worker thread
    prealloc_rows: int = 1 << 26  # rows a whole-level read allocates up front from the (untrusted) vertex_count
    prefault_rows: int = 1 << 21  # rows of those whose pages a worker thread touches before the rows arrive

    # --- write -------------------------------------------------------------------------------------

    # --- lifecycle ---------------------------------------------------------------------------------
    pyramid_blocks_in_flight: int = 8  # blocks a pyramid build fetches and coarsens at once (hides request latency)
    pyramid_block_bytes: int = 256 << 20  # estimated memory of a build's blocks in flight (a larger block runs alone)
    pyramid_upload_bytes: int = 64 << 20  # coarse cells a build or block task queues for upload (max_inflight_bytes)
    rewrite_batch_chunks: int = 64  # source chunks per batch when a rechunk or append streams a point cloud's level 0
    rewrite_object_batch: int = 4096  # whole objects per batch when a rechunk or append streams an object level 0

    # --- export, converters, neuroglancer, validation ----------------------------------------------
    convert_batch_rows: int = 1_000_000  # rows per batch a converter reads from a point/table source (LAS, PLY, CSV)
    convert_batch_streamlines: int = 10_000  # streamlines per batch a converter reads from TRK/TCK/TRX
    convert_object_batch: int = 4096  # objects per read when a converter exports a store's objects
    neuroglancer_resolution_sample: int = 65536  # coordinates per axis sampled to estimate the data's resolution
    neuroglancer_index_block: int = 1 << 20  # annotations handled at once while building the spatial index
    neuroglancer_max_segments: int = 1000  # object ids a viewer state lists as visible (more make the URL unwieldy)
    validation_dense_bytes: int = 1 << 26  # a dense array (ids, attributes) the validator reads whole; larger: warned
    validation_similar_issues: int = 10  # issues of one kind per array the validator lists; the rest are counted
    validation_lock_bytes: int = 64 << 10  # a lock body the validator reads (a short JSON record; larger: not read)


DEFAULTS = Tuning()
_current: contextvars.ContextVar[Tuning] = contextvars.ContextVar("zvf_tuning", default=DEFAULTS)


def tuning() -> Tuning:
    """The settings in effect for the running call."""
    return _current.get()


@contextmanager
def tuned(**changes: Any) -> Iterator[Tuning]:
    """Change settings for the calls made in the block (nested blocks change the outer block's values)."""
    fields = {f.name: f for f in dataclasses.fields(Tuning)}
    for name, value in changes.items():
        if name not in fields:
            raise InvalidArgumentError(f"zvf.config.tuned: no setting {name!r} (settings: {', '.join(sorted(fields))})")
        default = fields[name].default
        if type(value) is not type(default) and not (isinstance(default, float) and type(value) is int):
            raise InvalidArgumentError(f"zvf.config.tuned: {name} must be a {type(default).__name__}, got {value!r}")
        if isinstance(value, (int, float)) and not value > 0:
            raise InvalidArgumentError(f"zvf.config.tuned: {name} must be > 0, got {value!r}")
        if isinstance(default, float) and isinstance(value, int):
            changes[name] = float(value)
    with in_effect(dataclasses.replace(_current.get(), **changes)) as settings:
        yield settings


@contextmanager
def in_effect(settings: Tuning) -> Iterator[Tuning]:
    """Make ``settings`` (a caller's ``tuning()``) the settings of this block: how a call handed to another
    thread's event loop, which has its own context, keeps its caller's ``tuned()`` values."""
    token = _current.set(settings)
    try:
        yield settings
    finally:
        _current.reset(token)
