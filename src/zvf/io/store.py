"""Open a store: a target and ``storage_options`` -> :class:`StoreHandle`.

The targets are :mod:`zvf.io.backends`' (paths, ``file://``, ``memory://``, ``s3://``, ``gs://``,
``az://``, ``http(s)://`` URLs, or an obstore store the caller built); the ``storage_options`` keys are
:class:`~zvf.io.options.StorageOptions` (for a store the caller built: zvf's own keys only).
Credentials are passed to obstore and then forgotten: the handle keeps a credential-free URL and
error messages are scrubbed of secret values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from ..config import tuning
from ..errors import InvalidArgumentError, ReadOnlyError
from . import backends, options
from .backends import Backend
from .options import StorageOptions
from .retry import RetryPolicy

if TYPE_CHECKING:
    from obstore.store import ObjectStore

__all__ = ["StoreHandle", "Target", "open_store"]


Target: TypeAlias = "str | os.PathLike[str] | ObjectStore"
"""Where a store lives: a local path, a URL, or an obstore store the caller built."""


@dataclass(repr=False)  # its own __repr__ (scrubbed URL, knobs)
class StoreHandle:
    """An opened store: its transport plus the knobs the executor and planner use (defaults: :mod:`zvf.config`)."""

    transport: Any
    url: str
    read_only: bool
    scheme: str
    concurrency: int
    mode: str = "r"
    coalesce_gap: int = field(default_factory=lambda: tuning().remote_coalesce_gap)
    coalesce_max: int = field(default_factory=lambda: tuning().remote_coalesce_max)
    latency_hint: float = field(default_factory=lambda: tuning().remote_latency_hint)
    bandwidth_hint: float = field(default_factory=lambda: tuning().remote_bandwidth_hint)
    multipart_threshold: int = field(default_factory=lambda: tuning().multipart_threshold)
    part_size: int = field(default_factory=lambda: tuning().part_size)
    multipart_concurrency: int = field(default_factory=lambda: tuning().multipart_concurrency)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    concurrency_auto: bool = False  # no `concurrency` option given: the executor sizes it from each plan

    @classmethod
    def for_transport(
        cls,
        transport: Any,
        *,
        url: str = "memory-transport://",
        read_only: bool = False,
        concurrency: int = 8,
        **settings: Any,
    ) -> StoreHandle:
        """A handle around any transport (tests: ``MemoryTransport`` with faults)."""
        from .transport import ReadOnlyTransport

        if read_only:
            transport = ReadOnlyTransport(transport)
        return cls(
            transport=transport, url=url, read_only=read_only, scheme="memory",
            concurrency=concurrency, mode="r" if read_only else "a", **settings,
        )

    @property
    def is_remote(self) -> bool:
        return self.scheme not in ("file", "memory")

    def __repr__(self) -> str:
        return (
            f"StoreHandle(url={self.url!r}, scheme={self.scheme!r}, mode={self.mode!r}, "
            f"read_only={self.read_only}, concurrency={self.concurrency})"
        )

    __str__ = __repr__


# --------------------------------------------------------------------------------------
# open_store
# --------------------------------------------------------------------------------------


def open_store(
    target: Target,
    *,
    mode: str = "r",
    storage_options: StorageOptions | Mapping[str, Any] | None = None,
) -> StoreHandle:
    """Open ``target`` for reading (``mode="r"``) or writing (``"w"``/``"a"``).

    No request is made here (local paths must exist in mode "r"); an S3 store without credentials
    checks for an instance metadata service before its first request, off the event loop (see
    :func:`zvf.io.backends.aws_credentials_check`).  Whether the target holds a zvf store is for the
    reader to decide.
    """
    if mode not in ("r", "w", "a"):
        raise InvalidArgumentError(f"mode must be 'r', 'w' or 'a', got {mode!r}")
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise InvalidArgumentError("storage_options must be a mapping")

    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str):
        return _prebuilt(target, mode, storage_options)
    if not target:
        raise InvalidArgumentError(f"target must be a non-empty path or URL, got {target!r}")

    scheme_raw = target.split("://", 1)[0].lower() if "://" in target else ""
    scheme = backends.SCHEMES.get(scheme_raw)
    if scheme is None:
        raise InvalidArgumentError(f"unsupported URL scheme {scheme_raw!r} in target {target!r}")

    opts = options.normalise(storage_options, scheme)
    secrets = [str(v) for k, v in opts.items() if k in options.SECRET_KEYS]
    config, client, zvf = options.split(opts)
    backend = backends.make(target, scheme_raw, read_only=mode == "r", config=config, client=client, zvf=zvf,
                            secrets=secrets)
    return _handle(backend, mode=mode, zvf=zvf)


def _prebuilt(store: Any, mode: str, storage_options: Mapping[str, Any] | None) -> StoreHandle:
    """A handle around an obstore store the caller configured: only zvf's own settings apply."""
    backend = backends.prebuilt(store)
    opts = options.normalise(storage_options, "memory", "an obstore store you built: configure the store")
    if "transport_retries" in opts:
        raise InvalidArgumentError("storage option 'transport_retries' does not apply to a store you built: "
                                   "give the store its own retry_config")
    if backend.scheme == "http" and mode != "r":
        raise ReadOnlyError(f"cannot open {store.url!r} for writing: HTTP stores are read-only")
    return _handle(backend, mode=mode, zvf=opts)


def _handle(backend: Backend, *, mode: str, zvf: dict[str, Any]) -> StoreHandle:
    """The handle around a backend's store, with zvf's settings resolved against the scheme's defaults."""
    from .transport import ObstoreTransport, ReadOnlyTransport

    read_only = mode == "r"
    scheme, url = backend.scheme, backend.url
    settings = options.planner_defaults(remote=scheme not in ("file", "memory"))
    for k in ("concurrency", "coalesce_gap", "coalesce_max", "latency_hint", "bandwidth_hint"):
        if k in zvf:
            settings[k] = zvf[k]
    retry = RetryPolicy(**{k: zvf[k] for k in ("max_retries", "retry_timeout", "init_backoff", "max_backoff",
                                                 "backoff_base") if k in zvf})
    transport: Any = ObstoreTransport(backend.store, prefix=backend.prefix, secrets=backend.secrets, label=url,
                                      remake=backend.remake, check=backend.check)
    if read_only:
        transport = ReadOnlyTransport(transport)
    t = tuning()
    part_size = int(zvf.get("part_size", t.part_size))
    return StoreHandle(
        transport=transport,
        url=url,
        read_only=read_only,
        scheme=scheme,
        mode=mode,
        concurrency=int(settings["concurrency"]),
        coalesce_gap=int(settings["coalesce_gap"]),
        coalesce_max=int(settings["coalesce_max"]),
        latency_hint=float(settings["latency_hint"]),
        bandwidth_hint=float(settings["bandwidth_hint"]),
        multipart_threshold=int(zvf.get("multipart_threshold", max(t.multipart_threshold, part_size))),
        part_size=part_size,
        multipart_concurrency=int(zvf.get("multipart_concurrency", t.multipart_concurrency)),
        retry=retry,
        concurrency_auto="concurrency" not in zvf and scheme not in ("file", "memory"),
    )
