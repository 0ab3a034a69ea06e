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
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .errors import InvalidArgumentError

__all__ = ["DEFAULTS", "Tuning", "in_effect", "tuned", "tuning"]


class Tuning:
    """The tuning settings (sections by layer; each field says what it bounds): the class attributes are the
    defaults, an instance holds the settings :func:`tuned` changed and is read-only.  Not a dataclass: generating
    its methods for ~95 fields cost every process ~5 ms of its import (settings are compared by identity)."""

    # --- format: bounds on untrusted sizes, and the versions writers keep --------------------------
    max_document_bytes: int = 64 << 20  # a metadata document (zarr.json) parsed; larger ones are refused unparsed
    max_bins_per_chunk: int = 1 << 20  # bins tiling one chunk (readers build per-chunk masks of them)
    max_decoded_bytes: int = 1 << 31  # one chunk decompressed (checked against the codec headers before inflating)
    max_gather_rows: int = 1 << 27  # rows a fragment index expands to when it was decoded without the chunk's rows
    version_retention: float = 300.0  # seconds a superseded version stays readable (writers' default retention)
    max_reader_lease: float = 20.0  # seconds a reader trusts its version before it looks at the root again

    # --- io ----------------------------------------------------------------------------------------
    max_width: int = 256  # requests in flight a plan may widen a remote store's limit to (pools and servers cap it)
    get_batch: int = 16  # fewest keys per worker-thread call of get_many on local files and memory
    settle_seconds: float = 5.0  # seconds a cancelled caller waits for its obstore request before abandoning it
    max_retries: int = 6  # re-attempts of a request after transient failures (storage option max_retries: per store)
    retry_timeout: float = 30.0  # seconds after a request's first attempt past which no retry starts (same)
    init_backoff: float = 0.05  # seconds bounding the jittered sleep before the first retry (same)
    max_backoff: float = 5.0  # seconds bounding any retry's sleep (same)
    backoff_base: float = 2.0  # factor the sleep's bound grows by per retry (same)
    metadata_probe_seconds: float = 1.0  # an S3 store without credentials waits this long for an EC2 metadata service
    meta_cache_bytes: int = 8 << 20  # documents an executor's cache keeps (zarr.json...)
    shard_index_cache_bytes: int = 64 << 20  # shard indexes an executor's cache keeps
    fragment_index_cache_bytes: int = 64 << 20  # decoded fragment indexes an executor's cache keeps
    manifest_cache_bytes: int = 32 << 20  # decoded object manifests an executor's cache keeps
    shard_cache_bytes: int = 64 << 20  # whole shards an executor's cache keeps
    cell_cache_bytes: int = 64 << 20  # decoded compressed cells an executor's cache keeps (box queries)
    other_cache_bytes: int = 16 << 20  # each other cache namespace of an executor
    remote_concurrency: int = 32  # requests in flight on a remote store (storage option concurrency: per store)
    local_concurrency: int = 8  # requests in flight on local files and memory (same)
    remote_coalesce_gap: int = 256 << 10  # bytes between two ranges of an object a remote read fetches as one
    local_coalesce_gap: int = 16 << 10  # the same on local files and memory
    remote_coalesce_max: int = 16 << 20  # bytes one merged remote request spans at most
    local_coalesce_max: int = 8 << 20  # the same on local files and memory
    remote_latency_hint: float = 0.03  # seconds per request the planner's cost model assumes, remote
    local_latency_hint: float = 1e-4  # the same on local files and memory
    remote_bandwidth_hint: float = 100e6  # bytes per second the cost model assumes, remote
    local_bandwidth_hint: float = 2e9  # the same on local files and memory
    multipart_threshold: int = 32 << 20  # bytes of one object above which a put is a multipart upload
    part_size: int = 8 << 20  # bytes per part of a multipart upload (S3 needs 5 MiB or more)
    multipart_concurrency: int = 4  # parts of one multipart upload sent at once

    # --- read --------------------------------------------------------------------------------------
    offload_bytes: int = 4 << 20  # payload bytes above which a read decodes and assembles rows in a worker thread
    decode_threads: int = 2  # worker threads one read decodes its cells in at once (zstd runs without the GIL)
    max_overread: float = 3.0  # bytes a box may fetch from the cells it cuts per byte of the bins it touches before
    #                            it reads only those bins (one more round trip on a fresh dataset; math.inf: time only)
    overread_cell_bytes: int = 64 << 10  # raw bytes a cell must fetch beyond its touched bins before max_overread
    #                                      applies (smaller cells are read whole: a few KB are not worth a round trip)
    overread_max_chunks: int = 8  # chunks a box may cut for max_overread to apply (a small box around a corner: 8)
    narrow_bridge_fraction: float = 0.25  # bytes that read as bins or frames may add by reading through the holes
    #                                      between its ranges (fewer requests), as a fraction of its own bytes
    thread_decode_bytes: int = 1 << 20  # stored bytes of a read's cells past which they decode in those threads
    prealloc_rows: int = 1 << 26  # rows a whole-level read allocates up front from the (untrusted) vertex_count
    prefault_rows: int = 1 << 21  # rows of those whose pages a worker thread touches before the rows arrive
    manifest_prefetch_bytes: int = 1 << 20  # object ids / shard indexes an open prefetches; a manifest suffix read
    open_prefetch_shards: int = 16  # fragment-index shards an object level's open reads beside its object index
    manifest_offload_bytes: int = 1 << 19  # stored manifest bytes past which a shard is decoded in a worker thread
    max_spare_owner_slots: int = 1 << 22  # fragment slots past 8 a manifest reference before manifests count as damaged
    max_dense_bytes: int = 1 << 30  # a dense per-object or per-group array read whole; larger ones are refused
    sweep_bytes: int = 256 << 20  # decoded cells an object sweep (read_all, export) keeps before starting afresh
    sweep_whole_groups: int = 8  # groups a level that fits in sweep_bytes has its objects' rows gathered in
    export_write_ahead_bytes: int = 64 << 20  # rows an export queues for its file writer thread (besides one batch)
    export_text_rows: int = 65536  # rows a CSV or JSON Lines export formats at once (bounds the Python objects made)
    npz_copy_bytes: int = 8 << 20  # bytes per read/write when an .npz export moves a column into place
    npz_max_reserved_bytes: int = 1 << 40  # file bytes an .npz export reserves for announced rows; past it: temp files

    # --- write -------------------------------------------------------------------------------------
    spill_bytes: int = 32 << 20  # rows a streamed write or routing task buffers before a chunk-sorted run goes to disk
    upload_bytes: int = 32 << 20  # encoded cells a streamed write queues for upload at once (its spill_bytes twin)
    put_batch: int = 64  # blobs one uploader stores per worker-thread call where the executor batches puts
    seek_frame_bytes: int = 16384  # raw bytes a zstd frame of a seekable point cell holds at least (smaller frames
    #                                 read less of a box, but each costs a whole read a fixed ~3 us of zstd)
    piece_rows: int = 8192  # rows of a sharded vlen array (manifests) framed and compressed per work item
    link_cells_per_task: int = 64  # link cells encoded per worker task (amortizes the hand-off, overlaps uploads)
    deferred_link_records: int = 1 << 16  # link records a streamed object write queues before placing them
    rows_per_task: int = 4_000_000  # rows a distributed cell task gathers at once (bounds a worker's memory)
    fragment_shard_chunks: int = 64  # chunks per shard of an object level's fragment index (zvf's layout)
    shard_auto_bytes: int = 64 << 20  # raw vertex bytes per shard shard_shape="auto" aims at (a writer holds a shard)
    shard_auto_cells: int = 1024  # cells per shard shard_shape="auto" stays within (16 B of shard index each)
    manifest_inner_rows: int = 64  # manifests per zstd frame of the sharded object index (one ranged read)
    manifest_shard_rows: int = 65536  # manifests per shard of the sharded object index
    layout_target_points: int = 65536  # vertices per occupied chunk chunk_shape="auto" aims at
    layout_target_bin_points: int = 2048  # vertices per bin bin_shape="auto" aims at
    layout_max_point_bins: int = 4096  # bins per chunk bin_shape="auto" makes for points at most (a box reads the
    #                                    fragment index of each chunk it cuts whole: 16 B a bin, before zstd)
    layout_sparse_cells: int = 4096  # occupied cells past which a layout of nearly empty cells is warned about
    layout_sparse_points: int = 16  # mean vertices per cell under which those cells count as nearly empty
    layout_max_sparse_cells: int = 1 << 20  # nearly empty cells past which a write is refused (hours of PUTs)
    layout_object_read_bytes: int = 1 << 20  # bytes beyond its own rows reading one typical object may fetch
    layout_min_chunk_points: int = 4096  # mean vertices per chunk the choosers never go under
    layout_sample_objects: int = 1024  # objects the chooser samples to size a typical one
    layout_sample_points: int = 65536  # vertices the chooser samples to see where points are (a few ms an edge)
    layout_density_gain: float = 2.0  # a smaller auto edge must divide the typical point's chunk by this much
    layout_object_bins: int = 32  # bins across a typical object (bin_shape="auto" for objects)
    layout_chooser_steps: int = 10  # 1-2-5 steps a chooser goes down from the extent's edge at most (three decades)
    layout_max_object_bins: int = 1 << 18  # bins per chunk the object default stays within (readers refuse past 2**20)

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

    def __init__(self, **changes: Any) -> None:
        """Settings differing from the defaults, each checked: a known name, the default's type (an int
        for a float setting becomes a float), above 0."""
        names = Tuning.__annotations__
        for name, value in changes.items():
            if name not in names:
                raise InvalidArgumentError(f"zvf.config: no setting {name!r} (settings: {', '.join(sorted(names))})")
            default = getattr(Tuning, name)
            if type(value) is not type(default) and not (isinstance(default, float) and type(value) is int):
                raise InvalidArgumentError(f"zvf.config: {name} must be of type {type(default).__name__}, "
                                           f"got {value!r}")
            if isinstance(value, (int, float)) and not value > 0:
                raise InvalidArgumentError(f"zvf.config: {name} must be > 0, got {value!r}")
            object.__setattr__(self, name, float(value) if isinstance(default, float) else value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"zvf.config settings are read-only: change {name} with zvf.config.tuned({name}=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"zvf.config settings are read-only: {name} cannot be deleted")

    def __repr__(self) -> str:
        changed = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"Tuning({changed})"


DEFAULTS = Tuning()
_current: contextvars.ContextVar[Tuning] = contextvars.ContextVar("zvf_tuning", default=DEFAULTS)


def tuning() -> Tuning:
    """The settings in effect for the running call."""
    return _current.get()


@contextmanager
def tuned(**changes: Any) -> Iterator[Tuning]:
    """Change settings for the calls made in the block (nested blocks change the outer block's values)."""
    with in_effect(Tuning(**{**vars(_current.get()), **changes})) as settings:
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
