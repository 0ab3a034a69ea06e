"""From a target to an obstore store: URL schemes, store construction, the stores a process shares.

Supported targets::

    /path/or/relative, file:///abs/path      local directory (LocalStore)
    memory://name[/prefix]                   process-wide named in-memory store
    memory://                                a fresh private in-memory store
    s3://bucket/prefix  (s3a://)             S3 and S3-compatible servers
    gs://bucket/prefix  (gcs://)             Google Cloud Storage
    az://container/prefix (azure://, abfs[s]://container@account.dfs.core.windows.net/p)
    http(s)://host/path                      read-only HTTP
    an obstore store built by the caller     used as is (:func:`prebuilt`)

One connection pool per target: the datasets and writers a process opens on the same remote target
with the same options share one obstore store (its HTTP client and connections), held by weak
reference -- it goes, and its connections close, with the last handle using it.  obstore stores are
safe to share: their configuration is fixed, and requests from any thread or event loop run on
obstore's own runtime.  After ``os.fork()`` a child makes its stores again (see :mod:`zvf.io.fork`).

Nothing here makes a request: an S3 store without credentials gets a check for its first request
(:func:`aws_credentials_check`), which the transport runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit, urlunsplit

from ..config import tuning
from ..errors import InvalidArgumentError, ReadOnlyError, RemoteError, StoreNotFoundError
from . import fork
from .options import obstore_retry_config

if TYPE_CHECKING:
    from obstore.store import ClientConfig

__all__ = ["SCHEMES", "Backend", "forget_memory_store", "make", "memory_store", "prebuilt"]

#: URL scheme -> store kind
SCHEMES = {
    "": "file", "file": "file", "memory": "memory", "s3": "s3", "s3a": "s3",
    "gs": "gs", "gcs": "gs", "az": "az", "azure": "az", "abfs": "az", "abfss": "az",
    "adl": "az", "http": "http", "https": "http",
}


@dataclass
class Backend:
    """An obstore store and what a transport needs to use it."""

    store: Any
    url: str  # credential-free: the store's name in messages
    scheme: str  # store kind (a value of SCHEMES)
    prefix: str = ""  # applied by the transport (memory://name/prefix)
    secrets: tuple[str, ...] = ()  # scrubbed from every message
    remake: Callable[[], Any] | None = None  # makes the store again in a forked child
    check: Callable[[], None] | None = None  # a blocking check the store's first request waits for


# --------------------------------------------------------------------------------------
# process-wide registries: memory:// stores, shared remote stores
# --------------------------------------------------------------------------------------

_MEMORY: dict[str, Any] = {}
_MEMORY_LOCK = threading.Lock()
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


def _sharing(spec: tuple[Any, ...], make: Callable[[], Any]) -> Callable[[], Any]:
    """A maker of the store shared by every handle opened with this ``spec`` (everything the store is made
    from, credentials included: only the process's own memory ever holds the key)."""
    return functools.partial(_shared_store, repr(spec), make)


@fork.at_fork
def _forget_parent_stores() -> None:
    """In a forked child: fresh locks (a parent thread may have held one), no shared stores (the child's
    transports make theirs again, and share those)."""
    global _MEMORY_LOCK, _SHARED_LOCK
    _MEMORY_LOCK, _SHARED_LOCK = threading.Lock(), threading.Lock()
    _SHARED.clear()


# --------------------------------------------------------------------------------------
# building stores
# --------------------------------------------------------------------------------------


def clean_url(url: str) -> tuple[str, list[str]]:
    """Strip userinfo, query and fragment from a URL; return the parts that are secret."""
    parts = urlsplit(url)
    secrets = [s for s in (parts.username, parts.password) if s]
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    if parts.query:
        secrets.append(parts.query)
    return urlunsplit((parts.scheme, host, parts.path, "", "")), secrets


def make(target: str, scheme_raw: str, *, read_only: bool, config: dict[str, Any], client: dict[str, Any],
         zvf: dict[str, Any], secrets: list[str]) -> Backend:
    """The store of URL or path ``target`` (``scheme_raw``: its URL scheme, a key of :data:`SCHEMES`) from
    normalised options split into store ``config``, ``client`` options and ``zvf``'s settings."""
    scheme = SCHEMES[scheme_raw]
    if scheme == "file":
        path = target[len("file://"):] if scheme_raw == "file" else target
        p = Path(path).expanduser().resolve()
        url = p.as_uri()
        if read_only and not p.is_dir():
            raise StoreNotFoundError(f"no store at {str(p)!r}: not an existing directory")
        if not read_only and p.exists() and not p.is_dir():
            raise InvalidArgumentError(f"target {str(p)!r} exists and is not a directory")
        mkdir = not read_only
        remake: Callable[[], Any] = functools.partial(
            _build, lambda: fork.obstore().store.LocalStore(p, mkdir=mkdir), url, secrets)
        return Backend(remake(), url, scheme, secrets=tuple(secrets), remake=remake)
    if scheme == "memory":
        rest = target[len(scheme_raw) + 3:].strip("/")
        name, _, prefix = rest.partition("/")
        url = f"memory://{rest}"
        if not name:
            return Backend(fork.obstore().store.MemoryStore(), url, scheme, prefix, tuple(secrets))
        store = memory_store(name, create=not read_only)
        if store is None:
            raise StoreNotFoundError(f"no store at {url!r}: memory store {name!r} does not exist")
        return Backend(store, url, scheme, prefix, tuple(secrets), functools.partial(memory_store, name))
    url, url_secrets = clean_url(target)
    if scheme == "http" and not read_only:
        raise ReadOnlyError(f"cannot open {url!r} for writing: HTTP stores are read-only")
    secrets = secrets + url_secrets
    if scheme == "http":
        client.setdefault("allow_http", target.lower().startswith("http://"))
        retry = obstore_retry_config(zvf)
        remake = _sharing(("http", target, client, retry), lambda: _build(
            lambda: fork.obstore().store.HTTPStore.from_url(target, client_options=cast("ClientConfig", client),
                                                            retry_config=retry),
            url, secrets,
        ))
        return Backend(remake(), url, scheme, secrets=tuple(secrets), remake=remake)
    remake = _build_cloud(scheme, target, config, client, zvf, url, secrets)
    check = aws_credentials_check(config, url) if scheme == "s3" else None
    return Backend(remake(), url, scheme, secrets=tuple(secrets), remake=remake, check=check)


_STORE_SCHEMES = {"S3Store": "s3", "GCSStore": "gs", "AzureStore": "az", "HTTPStore": "http",
                  "LocalStore": "file", "MemoryStore": "memory"}


def prebuilt(store: Any) -> Backend:
    """An obstore store the caller configured, as it is (its URL without credentials)."""
    made_by = fork.api_of(store)
    if made_by is None:
        raise InvalidArgumentError(
            f"target must be a path, a URL or an obstore store (S3Store, GCSStore, ...), got {type(store).__name__}")
    scheme = next(v for k, v in _STORE_SCHEMES.items() if isinstance(store, getattr(made_by.store, k)))
    if scheme in ("s3", "gs", "az"):
        bucket = store.config["container_name" if scheme == "az" else "bucket"]
        prefix = str(store.prefix or "").strip("/")
        url = f"{scheme}://{bucket}" + (f"/{prefix}" if prefix else "")
    elif scheme == "http":
        url = clean_url(store.url)[0]
    elif scheme == "file":
        url = Path(str(store.prefix or "/")).as_uri()
    else:
        url = "memory://"
    return Backend(store, url, scheme)


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
    retry_config = obstore_retry_config(zvf)
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


def aws_credentials_check(config: dict[str, Any], url: str) -> Callable[[], None] | None:
    """The check an S3 store without credentials runs before its first request (None: it has some).

    Without credentials obstore asks the EC2 metadata endpoint, and off EC2 every request then waits for
    that endpoint's timeout (30 s each) before failing with its URL.  A short probe tells the two cases
    apart (``metadata_probe_seconds`` of :mod:`zvf.config`), as the AWS SDKs do.  The probe blocks: the
    transport runs it in a worker thread.
    """
    if config.get("skip_signature") or config.get("access_key_id") or any(os.environ.get(k)
                                                                            for k in _AWS_CREDENTIAL_ENV):
        return None
    endpoint = (os.environ.get("AWS_METADATA_ENDPOINT") or "http://169.254.169.254").rstrip("/")
    return functools.partial(_probe_instance_metadata, endpoint, url)


def _probe_instance_metadata(endpoint: str, url: str) -> None:
    """Return if an instance metadata service answers at ``endpoint`` in time, else raise RemoteError."""
    wait = tuning().metadata_probe_seconds
    import urllib.error
    import urllib.request

    probe = urllib.request.Request(f"{endpoint}/latest/api/token", method="PUT",
                                   headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
    try:
        with opener.open(probe, timeout=wait):
            return
    except urllib.error.HTTPError as e:
        if e.code in (400, 401, 405):  # a metadata service that wants IMDSv1 or another token call
            return
    except OSError:
        pass
    raise RemoteError(
        f"no AWS credentials found for {url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, pass "
        f"storage_options access_key_id/secret_access_key, or skip_signature=True for a public bucket "
        f"(no instance metadata service answered within {wait:g} s)")


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
