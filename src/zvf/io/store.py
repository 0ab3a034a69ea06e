"""Open a store: target URL + storage_options -> :class:`StoreHandle`.

Supported targets::

    /path/or/relative, file:///abs/path      local directory (LocalStore)
    memory://name[/prefix]                   process-wide named in-memory store
    memory://                                a fresh private in-memory store
    s3://bucket/prefix  (s3a://)             S3 and S3-compatible servers
    gs://bucket/prefix  (gcs://)             Google Cloud Storage
    az://container/prefix (azure://, abfs[s]://container@account.dfs.core.windows.net/p)
    http(s)://host/path                      read-only HTTP
    an obstore store built by the caller     used as is (``storage_options``: zvf keys only)

``storage_options`` (``None`` values are ignored; unknown keys are an error):

* store settings — ``endpoint`` (alias ``endpoint_url``), ``region``,
  ``access_key_id``/``secret_access_key``/``session_token`` (``aws_*`` aliases),
  ``skip_signature`` (alias ``anonymous``), ``virtual_hosted_style_request``,
  ``request_payer``; GCS ``service_account``/``service_account_key``/
  ``application_credentials``; Azure ``account_name``/``account_key``/
  ``sas_key``/``client_id``/``client_secret``/``tenant_id``/``use_emulator``.
  Whatever is not given comes from the environment exactly as obstore reads it
  (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_REGION``, ``GOOGLE_*``,
  ``AZURE_*``...).
* HTTP client — ``allow_http`` (on by default when the endpoint is ``http://``),
  ``timeout``, ``connect_timeout``, ``read_timeout`` (seconds or "5s" strings),
  ``allow_invalid_certificates``, ``proxy_url``.
* retries (zvf's executor is the retry layer, see ``executor.py``) —
  ``max_retries``, ``retry_timeout`` (total seconds), ``init_backoff``,
  ``max_backoff``, ``backoff_base``; ``transport_retries`` (obstore's own,
  default 0).
* zvf — ``concurrency`` (requests in flight; 32 remote, 8 local),
  ``coalesce_gap``/``coalesce_max`` (read merging, bytes), ``latency_hint``
  (s) / ``bandwidth_hint`` (B/s) for the cost model, ``multipart_threshold``,
  ``part_size``, ``multipart_concurrency`` for uploads.

Type checkers see these keys as :class:`StorageOptions`.  Credentials are
passed to obstore and then forgotten: the handle keeps a credential-free URL
and error messages are scrubbed of secret values.

One connection pool per target: the datasets and writers a process opens on the
same remote target with the same options share one obstore store (its HTTP
client and connections), held by weak reference -- it goes, and its connections
close, with the last handle using it.  obstore stores are safe to share: their
configuration is fixed, and requests from any thread or event loop run on
obstore's own runtime.  After ``os.fork()`` a child makes its stores again
(see :mod:`zvf.io.fork`).
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict, cast
from urllib.parse import urlsplit, urlunsplit

from ..errors import InvalidArgumentError, ReadOnlyError, RemoteError, StoreNotFoundError
from . import fork

if TYPE_CHECKING:
    from obstore.store import ClientConfig, ObjectStore, RetryConfig

__all__ = [
    "RetryPolicy",
    "StorageOptions",
    "StoreHandle",
    "Target",
    "forget_memory_store",
    "memory_store",
    "open_store",
]


class StorageOptions(TypedDict, total=False):
    """``storage_options`` keys (the module docstring says what each does; defaults in comments).

    Durations are seconds or strings such as ``"5s"``.  The aliases at the end
    name the same settings as their fsspec/boto spellings.
    """

    # S3 / GCS / Azure store settings (default: the environment, as obstore reads it)
    endpoint: str
    region: str
    access_key_id: str
    secret_access_key: str
    session_token: str
    skip_signature: bool
    virtual_hosted_style_request: bool
    request_payer: bool
    service_account: str
    service_account_key: str
    application_credentials: str
    account_name: str
    account_key: str
    sas_key: str
    client_id: str
    client_secret: str
    tenant_id: str
    use_emulator: bool
    # HTTP client (allow_http: on for http:// endpoints; timeout: 30 s, obstore's)
    allow_http: bool
    timeout: float | str
    connect_timeout: float | str
    read_timeout: float | str
    allow_invalid_certificates: bool
    proxy_url: str
    # zvf's retries (see RetryPolicy: 6 retries within 30 s, backoff 0.05 s doubling to 5 s)
    max_retries: int
    retry_timeout: float
    init_backoff: float
    max_backoff: float
    backoff_base: float
    transport_retries: int  # obstore's own retries under zvf's: 0
    # zvf's I/O (remote / local defaults): 32 / 8 requests in flight, merge reads 256 KiB / 16 KiB
    # apart up to 16 MiB / 8 MiB, 30 ms / 0.1 ms latency and 100 MB/s / 2 GB/s for the cost model,
    # multipart uploads above 32 MiB in 8 MiB parts, 4 at a time
    concurrency: int
    coalesce_gap: int
    coalesce_max: int
    latency_hint: float
    bandwidth_hint: float
    multipart_threshold: int
    part_size: int
    multipart_concurrency: int
    # aliases
    endpoint_url: str
    aws_endpoint: str
    aws_endpoint_url: str
    aws_region: str
    region_name: str
    aws_access_key_id: str
    aws_secret_access_key: str
    aws_session_token: str
    token: str
    anonymous: bool
    aws_skip_signature: bool


Target: TypeAlias = "str | os.PathLike[str] | ObjectStore"
"""Where a store lives: a local path, a URL, or an obstore store the caller built."""


@dataclass(frozen=True)
class RetryPolicy:
    """How the executor retries transient failures (exponential backoff, full jitter).

    A request is tried at most ``1 + max_retries`` times and no retry starts
    if its backoff would end later than ``retry_timeout`` seconds after the
    first attempt.  Each attempt is itself bounded by the client ``timeout``
    (obstore default 30 s), so the worst case is about retry_timeout + timeout.
    """

    max_retries: int = 6
    retry_timeout: float = 30.0
    init_backoff: float = 0.05
    max_backoff: float = 5.0
    backoff_base: float = 2.0

    def backoff(self, attempt: int) -> float:
        """Upper bound of the sleep before retry number ``attempt`` (1-based)."""
        return min(self.max_backoff, self.init_backoff * self.backoff_base ** (attempt - 1))


@dataclass
class StoreHandle:
    """An opened store: its transport plus the knobs the executor and planner use."""

    transport: Any
    url: str
    read_only: bool
    scheme: str
    concurrency: int
    mode: str = "r"
    coalesce_gap: int = 256 * 1024
    coalesce_max: int = 16 * 1024 * 1024
    latency_hint: float = 0.03
    bandwidth_hint: float = 100e6
    multipart_threshold: int = 32 * 1024 * 1024
    part_size: int = 8 * 1024 * 1024
    multipart_concurrency: int = 4
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
# memory:// registry
# --------------------------------------------------------------------------------------

_MEMORY: dict[str, Any] = {}
_MEMORY_LOCK = threading.Lock()
# remote stores shared by the handles opened on the same target with the same options (module docstring)
_SHARED: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def memory_store(name: str, *, create: bool = True) -> Any:
    """The process-wide obstore MemoryStore called ``name`` (None if absent and not create).  In a forked
    child, a copy of the parent's, as the fork left it."""
    with _MEMORY_LOCK:
        st = _MEMORY.get(name)
        if st is not None and fork.api_of(st) is not fork.obstore():
            st = _MEMORY[name] = fork.remake(st)
        if st is None and create:
            st = _MEMORY[name] = fork.obstore().store.MemoryStore()
        return st


def forget_memory_store(name: str) -> None:
    """Drop a named memory store (its data goes away with the last reference)."""
    with _MEMORY_LOCK:
        _MEMORY.pop(name, None)


def _shared_store(key: str, make: Callable[[], Any]) -> Any:
    """The store registered under ``key``, else ``make()`` registered there (until its last user goes)."""
    with _SHARED_LOCK:
        store = _SHARED.get(key)
        if store is None:
            store = _SHARED[key] = make()
        return store


@fork.at_fork
def _forget_parent_stores() -> None:
    """In a forked child: fresh locks (a parent thread may have held one), no shared stores (the child's
    transports make theirs again, and share those)."""
    global _MEMORY_LOCK, _SHARED_LOCK, _exit_hook
    _MEMORY_LOCK, _SHARED_LOCK, _exit_hook = threading.Lock(), threading.Lock(), threading.Lock()
    _SHARED.clear()


# --------------------------------------------------------------------------------------
# storage_options
# --------------------------------------------------------------------------------------

_ALIASES = {
    "endpoint_url": "endpoint",
    "aws_endpoint": "endpoint",
    "aws_endpoint_url": "endpoint",
    "aws_region": "region",
    "region_name": "region",
    "aws_access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "aws_session_token": "session_token",
    "token": "session_token",
    "anonymous": "skip_signature",
    "aws_skip_signature": "skip_signature",
}

_ZVF_INT = {
    "concurrency", "coalesce_gap", "coalesce_max", "multipart_threshold", "part_size",
    "multipart_concurrency", "max_retries", "transport_retries",
}
_ZVF_FLOAT = {
    "latency_hint", "bandwidth_hint", "retry_timeout", "init_backoff", "max_backoff",
    "backoff_base",
}
_ZVF_POSITIVE = {"concurrency", "part_size", "multipart_concurrency"}  # 0 would stall a read or write
_CLIENT = {
    "allow_http", "timeout", "connect_timeout", "read_timeout", "allow_invalid_certificates",
    "proxy_url",
}
_DURATIONS = {"timeout", "connect_timeout", "read_timeout"}
_SCHEME_KEYS = {
    "s3": {
        "endpoint", "region", "access_key_id", "secret_access_key", "session_token",
        "skip_signature", "virtual_hosted_style_request", "request_payer",
    },
    "gs": {
        "endpoint", "service_account", "service_account_key", "application_credentials",
        "skip_signature",
    },
    "az": {
        "endpoint", "account_name", "account_key", "sas_key", "client_id", "client_secret",
        "tenant_id", "use_emulator", "skip_signature",
    },
    "http": set(),
    "file": set(),
    "memory": set(),
}
_SECRET_KEYS = {
    "secret_access_key", "session_token", "access_key_id", "account_key", "sas_key",
    "client_secret", "service_account_key",
}
_ALL_KEYS = _ZVF_INT | _ZVF_FLOAT | _CLIENT | set().union(*_SCHEME_KEYS.values())

_DEFAULTS = {
    # scheme class -> concurrency, coalesce_gap, coalesce_max, latency_hint, bandwidth_hint
    "remote": dict(concurrency=32, coalesce_gap=256 * 1024, coalesce_max=16 * 1024 * 1024,
                   latency_hint=0.03, bandwidth_hint=100e6),
    "local": dict(concurrency=8, coalesce_gap=16 * 1024, coalesce_max=8 * 1024 * 1024,
                  latency_hint=1e-4, bandwidth_hint=2e9),
}


def _normalise_options(options: Mapping[str, Any] | None, scheme: str, where: str = "") -> dict[str, Any]:
    """Canonical keys with checked values; ``where`` names the target in errors."""
    out: dict[str, Any] = {}
    for raw_key, value in (options or {}).items():
        if value is None:
            continue
        if not isinstance(raw_key, str):
            raise InvalidArgumentError(f"storage option names must be strings, got {raw_key!r}")
        key = _ALIASES.get(raw_key.lower(), raw_key.lower())
        if key not in _ALL_KEYS:
            raise InvalidArgumentError(f"unknown storage option {raw_key!r}")
        allowed = _ZVF_INT | _ZVF_FLOAT | _SCHEME_KEYS[scheme]
        if scheme not in ("file", "memory"):
            allowed = allowed | _CLIENT
        if key not in allowed:
            raise InvalidArgumentError(
                f"storage option {raw_key!r} does not apply to {where or scheme + ':// targets'}"
            )
        if key in out:
            raise InvalidArgumentError(f"storage option {raw_key!r} is given twice (via an alias)")
        if key in _ZVF_INT or key in _ZVF_FLOAT:
            value = _number_option(raw_key, value, integer=key in _ZVF_INT, positive=key in _ZVF_POSITIVE)
        elif key in _DURATIONS and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = timedelta(seconds=float(value))
        out[key] = value
    return out


def _number_option(raw_key: str, value: Any, *, integer: bool, positive: bool) -> int | float:
    """A zvf tuning option as an int (``integer``) or float, never negative; ``positive`` refuses 0 too."""
    try:
        number = int(value) if integer else float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"storage option {raw_key!r} must be {'an integer' if integer else 'a number'}") from None
    if number < 0 or (positive and number == 0):
        raise InvalidArgumentError(
            f"storage option {raw_key!r} must be {'positive' if integer else '>= 0'}, got {number}")
    return number


def _split(opts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """-> (store config, client options, zvf settings)."""
    zvf = {k: opts.pop(k) for k in list(opts) if k in _ZVF_INT | _ZVF_FLOAT}
    client = {k: opts.pop(k) for k in list(opts) if k in _CLIENT}
    return opts, client, zvf


def _retry_config(zvf: dict[str, Any]) -> RetryConfig:
    cfg: RetryConfig = {
        "max_retries": int(zvf.get("transport_retries", 0)),
        "retry_timeout": timedelta(seconds=float(zvf.get("retry_timeout", 30.0))),
    }
    if "transport_retries" in zvf:
        cfg["backoff"] = {
            "init_backoff": timedelta(seconds=float(zvf.get("init_backoff", 0.05))),
            "max_backoff": timedelta(seconds=float(zvf.get("max_backoff", 5.0))),
            "base": float(zvf.get("backoff_base", 2.0)),
        }
    return cfg


def _clean_url(url: str) -> tuple[str, list[str]]:
    """Strip userinfo, query and fragment from a URL; return the parts that are secret."""
    parts = urlsplit(url)
    secrets = [s for s in (parts.username, parts.password) if s]
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    if parts.query:
        secrets.append(parts.query)
    return urlunsplit((parts.scheme, host, parts.path, "", "")), secrets


# --------------------------------------------------------------------------------------
# open_store
# --------------------------------------------------------------------------------------


_exit_hook = threading.Lock()
_exit_hook_set = False


def _settle_obstore_at_exit() -> None:
    """Give obstore's I/O threads a moment before the interpreter tears down.

    With obstore 0.12 on CPython 3.11 a background thread still handing a
    result to asyncio while Python finalizes aborts the process (exit 134
    instead of the real status); a short pause at exit avoids the race.
    """
    global _exit_hook_set
    with _exit_hook:
        if not _exit_hook_set:
            import atexit
            import time

            atexit.register(time.sleep, 0.05)
            _exit_hook_set = True


def open_store(
    target: Target,
    *,
    mode: str = "r",
    storage_options: StorageOptions | Mapping[str, Any] | None = None,
) -> StoreHandle:
    """Open ``target`` for reading (``mode="r"``) or writing (``"w"``/``"a"``).

    The store itself is not probed (no request is made) except for local
    paths, which must exist in mode "r".  Whether the target holds a zvf
    store is for the reader to decide.
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
    scheme = {
        "": "file", "file": "file", "memory": "memory", "s3": "s3", "s3a": "s3",
        "gs": "gs", "gcs": "gs", "az": "az", "azure": "az", "abfs": "az", "abfss": "az",
        "adl": "az", "http": "http", "https": "http",
    }.get(scheme_raw)
    if scheme is None:
        raise InvalidArgumentError(f"unsupported URL scheme {scheme_raw!r} in target {target!r}")

    opts = _normalise_options(storage_options, scheme)
    secrets = [str(v) for k, v in opts.items() if k in _SECRET_KEYS]
    config, client, zvf = _split(opts)
    read_only = mode == "r"
    prefix = ""

    remake: Callable[[], Any] | None = None
    if scheme == "file":
        path = target[len("file://"):] if scheme_raw == "file" else target
        p = Path(path).expanduser().resolve()
        url = p.as_uri()
        if read_only and not p.is_dir():
            raise StoreNotFoundError(f"no store at {str(p)!r}: not an existing directory")
        if not read_only and p.exists() and not p.is_dir():
            raise InvalidArgumentError(f"target {str(p)!r} exists and is not a directory")
        mkdir = not read_only
        remake = functools.partial(_build, lambda: fork.obstore().store.LocalStore(p, mkdir=mkdir), url, secrets)
        store = remake()
    elif scheme == "memory":
        rest = target[len(scheme_raw) + 3:].strip("/")
        name, _, prefix = rest.partition("/")
        url = f"memory://{rest}"
        if not name:
            store = fork.obstore().store.MemoryStore()
        else:
            store = memory_store(name, create=not read_only)
            if store is None:
                raise StoreNotFoundError(f"no store at {url!r}: memory store {name!r} does not exist")
            remake = functools.partial(memory_store, name)
    elif scheme == "http":
        if not read_only:
            url, _ = _clean_url(target)
            raise ReadOnlyError(f"cannot open {url!r} for writing: HTTP stores are read-only")
        url, url_secrets = _clean_url(target)
        secrets += url_secrets
        client.setdefault("allow_http", target.lower().startswith("http://"))
        retry = _retry_config(zvf)
        remake = _sharing(("http", target, client, retry), lambda: _build(
            lambda: fork.obstore().store.HTTPStore.from_url(target, client_options=cast("ClientConfig", client),
                                                            retry_config=retry),
            url, secrets,
        ))
        store = remake()
    else:
        url, url_secrets = _clean_url(target)
        secrets += url_secrets
        remake = _build_cloud(scheme, target, config, client, zvf, url, secrets)
        store = remake()
    return _handle(store, url=url, scheme=scheme, mode=mode, prefix=prefix, secrets=secrets, zvf=zvf, remake=remake)


def _sharing(spec: tuple[Any, ...], make: Callable[[], Any]) -> Callable[[], Any]:
    """A maker of the store shared by every handle opened with this ``spec`` (everything the store is made
    from, credentials included: only the process's own memory ever holds the key)."""
    key = repr(spec)
    return functools.partial(_shared_store, key, make)


_STORE_SCHEMES = {"S3Store": "s3", "GCSStore": "gs", "AzureStore": "az", "HTTPStore": "http",
                  "LocalStore": "file", "MemoryStore": "memory"}


def _prebuilt(store: Any, mode: str, storage_options: Mapping[str, Any] | None) -> StoreHandle:
    """A handle around an obstore store the caller configured: only zvf's own settings apply."""
    made_by = fork.api_of(store)
    if made_by is None:
        raise InvalidArgumentError(
            f"target must be a path, a URL or an obstore store (S3Store, GCSStore, ...), got {type(store).__name__}")
    scheme = next(v for k, v in _STORE_SCHEMES.items() if isinstance(store, getattr(made_by.store, k)))
    opts = _normalise_options(storage_options, "memory", "an obstore store you built: configure the store")
    if "transport_retries" in opts:
        raise InvalidArgumentError("storage option 'transport_retries' does not apply to a store you built: "
                                   "give the store its own retry_config")
    if scheme == "http" and mode != "r":
        raise ReadOnlyError(f"cannot open {store.url!r} for writing: HTTP stores are read-only")
    if scheme in ("s3", "gs", "az"):
        bucket = store.config["container_name" if scheme == "az" else "bucket"]
        prefix = str(store.prefix or "").strip("/")
        url = f"{scheme}://{bucket}" + (f"/{prefix}" if prefix else "")
    elif scheme == "http":
        url = _clean_url(store.url)[0]
    elif scheme == "file":
        url = Path(str(store.prefix or "/")).as_uri()
    else:
        url = "memory://"
    return _handle(store, url=url, scheme=scheme, mode=mode, prefix="", secrets=[], zvf=opts)


def _handle(store: Any, *, url: str, scheme: str, mode: str, prefix: str, secrets: list[str],
            zvf: dict[str, Any], remake: Callable[[], Any] | None = None) -> StoreHandle:
    """The handle around an obstore store, with zvf's settings resolved against the scheme's defaults;
    ``remake`` makes the store again in a forked child (None: from the store's own configuration)."""
    from .transport import ObstoreTransport, ReadOnlyTransport

    read_only = mode == "r"
    settings = dict(_DEFAULTS["local" if scheme in ("file", "memory") else "remote"])
    for k in ("concurrency", "coalesce_gap", "coalesce_max", "latency_hint", "bandwidth_hint"):
        if k in zvf:
            settings[k] = zvf[k]
    retry = RetryPolicy(
        max_retries=int(zvf.get("max_retries", RetryPolicy.max_retries)),
        retry_timeout=float(zvf.get("retry_timeout", RetryPolicy.retry_timeout)),
        init_backoff=float(zvf.get("init_backoff", RetryPolicy.init_backoff)),
        max_backoff=float(zvf.get("max_backoff", RetryPolicy.max_backoff)),
        backoff_base=float(zvf.get("backoff_base", RetryPolicy.backoff_base)),
    )
    _settle_obstore_at_exit()
    transport: Any = ObstoreTransport(store, prefix=prefix, secrets=secrets, label=url, remake=remake)
    if read_only:
        transport = ReadOnlyTransport(transport)
    part_size = int(zvf.get("part_size", 8 * 1024 * 1024))
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
        multipart_threshold=int(zvf.get("multipart_threshold", max(32 * 1024 * 1024, part_size))),
        part_size=part_size,
        multipart_concurrency=int(zvf.get("multipart_concurrency", 4)),
        retry=retry,
        concurrency_auto="concurrency" not in zvf and scheme not in ("file", "memory"),
    )


def _build(factory: Any, url: str, secrets: list[str]) -> Any:
    """Run a store constructor; configuration errors become InvalidArgumentError, scrubbed."""
    try:
        return factory()
    except Exception as e:  # obstore config errors may echo values back
        from .transport import error_detail

        message = f"cannot configure store {url!r}: {error_detail(e, secrets)}"
    raise InvalidArgumentError(message)  # outside the except clause: the unscrubbed error is not chained


def _build_cloud(
    scheme: str, target: str, config: dict[str, Any], client: dict[str, Any],
    zvf: dict[str, Any], url: str, secrets: list[str],
) -> Callable[[], Any]:
    """The maker of a cloud store (shared, see the module docstring); the maker checks and fixes the options."""
    endpoint = config.get("endpoint")
    env_endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT")
    http_endpoint = str(endpoint or (env_endpoint if scheme == "s3" else "") or "")
    if "allow_http" not in client and http_endpoint.lower().startswith("http://"):
        client["allow_http"] = True
    if config.get("skip_signature") is not None:
        config["skip_signature"] = bool(config["skip_signature"])
    retry_config = _retry_config(zvf)
    if scheme == "s3":
        _check_aws_credentials(config, url)
    if scheme == "gs" and "endpoint" in config:
        config["base_url"] = config.pop("endpoint")
    _emulator_config(scheme, config)
    alias = {"gs": "gcs://", "az": "azure://"}.get(scheme)
    if alias and target.lower().startswith(alias):
        target = f"{scheme}://" + target[len(alias):]
    cls = {"s3": "S3Store", "gs": "GCSStore", "az": "AzureStore"}[scheme]
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIX[scheme]))  # obstore reads these
    return _sharing((scheme, target, sorted(config.items()), sorted(client.items()), retry_config, env), lambda: _build(
        lambda: getattr(fork.obstore().store, cls).from_url(target, config=config, client_options=client,
                                                            retry_config=retry_config),
        url, secrets,
    ))


_ENV_PREFIX = {"s3": "AWS_", "gs": "GOOGLE_", "az": "AZURE_"}


# Where obstore finds AWS credentials besides storage_options and the instance metadata service.
_AWS_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                       "AWS_CONTAINER_CREDENTIALS_FULL_URI")


def _check_aws_credentials(config: dict[str, Any], url: str) -> None:
    """Fail fast when S3 has no credentials and no instance metadata service would give any.

    Without credentials obstore asks the EC2 metadata endpoint, and off EC2
    every request then waits for that endpoint's timeout (30 s each) before
    failing with its URL.  A 1 s probe tells the two cases apart, as the AWS SDKs do.
    """
    if config.get("skip_signature") or config.get("access_key_id") or any(os.environ.get(k)
                                                                            for k in _AWS_CREDENTIAL_ENV):
        return
    import urllib.error
    import urllib.request

    endpoint = (os.environ.get("AWS_METADATA_ENDPOINT") or "http://169.254.169.254").rstrip("/")
    probe = urllib.request.Request(f"{endpoint}/latest/api/token", method="PUT",
                                   headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
    try:
        with opener.open(probe, timeout=1.0):
            return
    except urllib.error.HTTPError as e:
        if e.code in (400, 401, 405):  # a metadata service that wants IMDSv1 or another token call
            return
    except OSError:
        pass
    raise RemoteError(
        f"no AWS credentials found for {url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, pass "
        f"storage_options access_key_id/secret_access_key, or skip_signature=True for a public bucket "
        f"(no instance metadata service answered within 1 s)")


# Azurite's fixed development account and key (public, documented by Microsoft; not a secret).
_AZURITE_ACCOUNT = "devstoreaccount1"
_AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _emulator_config(scheme: str, config: dict[str, Any]) -> None:
    """Make ``endpoint`` work with local emulators (obstore alone does not).

    * Azure ``use_emulator`` with an ``endpoint``: obstore's emulator mode only
      reaches 127.0.0.1:10000 (or AZURITE_BLOB_STORAGE_URL), so zvf keeps the
      endpoint, adds the account path when missing and the development
      account/key when none is given.
    * GCS ``skip_signature``: obstore skips signing reads only and still asks
      a metadata server for a token before writes; a credential-free service
      account (``disable_oauth``) makes every request unsigned, as the option says.
    """
    if scheme == "az" and config.get("use_emulator") and config.get("endpoint"):
        account = config.setdefault("account_name", _AZURITE_ACCOUNT)
        if not any(k in config for k in ("account_key", "sas_key", "client_secret")):
            config["account_key"] = _AZURITE_KEY
        parts = urlsplit(str(config["endpoint"]))
        if parts.path.strip("/") == "":
            config["endpoint"] = urlunsplit((parts.scheme, parts.netloc, f"/{account}", "", ""))
        config.pop("use_emulator")
    if scheme == "gs" and config.get("skip_signature") and not any(
        k in config for k in ("service_account", "service_account_key", "application_credentials")
    ):
        import json

        config["service_account_key"] = json.dumps(
            {"disable_oauth": True, "client_email": "", "private_key": "", "private_key_id": ""}
        )
