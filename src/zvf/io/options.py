"""``storage_options``: the keys a caller may pass when opening a store, and their checking.

Users pass one flat dict (``None`` values are ignored; unknown keys are an error).  Its keys fall
into four concerns, one ``TypedDict`` each, and :class:`StorageOptions` is their union:

* :class:`CredentialOptions` -- where the store is and who we are: ``endpoint``, ``region``,
  ``access_key_id``/``secret_access_key``/``session_token``, ``skip_signature``,
  ``virtual_hosted_style_request``, ``request_payer`` (S3); ``service_account``/
  ``service_account_key``/``application_credentials`` (GCS); ``account_name``/``account_key``/
  ``sas_key``/``client_id``/``client_secret``/``tenant_id``/``use_emulator`` (Azure).
  Whatever is not given comes from the environment exactly as obstore reads it
  (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_REGION``, ``GOOGLE_*``, ``AZURE_*``...).
* :class:`ClientOptions` -- the HTTP client: ``allow_http`` (on by default when the endpoint is
  ``http://``), ``timeout``, ``connect_timeout``, ``read_timeout`` (seconds or "5s" strings),
  ``allow_invalid_certificates``, ``proxy_url``.
* :class:`RetryOptions` -- zvf's executor is the retry layer (see :mod:`zvf.io.retry`):
  ``max_retries``, ``retry_timeout`` (total seconds), ``init_backoff``, ``max_backoff``,
  ``backoff_base``; ``transport_retries`` (obstore's own, default 0).
* :class:`PlannerOptions` -- zvf's I/O: ``concurrency`` (requests in flight),
  ``coalesce_gap``/``coalesce_max`` (read merging, bytes), ``latency_hint`` (s) /
  ``bandwidth_hint`` (B/s) for the cost model, ``multipart_threshold``, ``part_size``,
  ``multipart_concurrency`` for uploads.

Other spellings of the same settings (fsspec's and boto's: ``endpoint_url``, ``aws_region``,
``anonymous``...) are :class:`AliasOptions`, whose annotations name the key each stands for:
that class is the one table of aliases.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, TypedDict, get_type_hints

from ..config import tuning
from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from obstore.store import RetryConfig

__all__ = [
    "AliasOptions",
    "ClientOptions",
    "CredentialOptions",
    "PlannerOptions",
    "RetryOptions",
    "StorageOptions",
]


class S3Options(TypedDict, total=False):
    """S3 and S3-compatible servers (default: the environment, as obstore reads it)."""

    endpoint: str
    region: str
    access_key_id: str
    secret_access_key: str
    session_token: str
    skip_signature: bool
    virtual_hosted_style_request: bool
    request_payer: bool


class GCSOptions(TypedDict, total=False):
    """Google Cloud Storage."""

    endpoint: str
    service_account: str
    service_account_key: str
    application_credentials: str
    skip_signature: bool


class AzureOptions(TypedDict, total=False):
    """Azure Blob Storage (``use_emulator`` with an ``endpoint``: Azurite, see :mod:`zvf.io.backends`)."""

    endpoint: str
    account_name: str
    account_key: str
    sas_key: str
    client_id: str
    client_secret: str
    tenant_id: str
    use_emulator: bool
    skip_signature: bool


class CredentialOptions(S3Options, GCSOptions, AzureOptions, total=False):
    """Where a cloud store is and the credentials it takes (each key applies to the clouds naming it)."""


class ClientOptions(TypedDict, total=False):
    """The HTTP client of remote stores (``timeout``: 30 s, obstore's)."""

    allow_http: bool
    timeout: float | str
    connect_timeout: float | str
    read_timeout: float | str
    allow_invalid_certificates: bool
    proxy_url: str


class RetryOptions(TypedDict, total=False):
    """zvf's retries (defaults: :class:`zvf.io.retry.RetryPolicy`)."""

    max_retries: int
    retry_timeout: float
    init_backoff: float
    max_backoff: float
    backoff_base: float
    transport_retries: int  # obstore's own retries under zvf's: 0


class PlannerOptions(TypedDict, total=False):
    """zvf's I/O planning (defaults: :mod:`zvf.config`, by store kind: :func:`planner_defaults`)."""

    concurrency: int
    coalesce_gap: int
    coalesce_max: int
    latency_hint: float
    bandwidth_hint: float
    multipart_threshold: int
    part_size: int
    multipart_concurrency: int


class AliasOptions(TypedDict, total=False):
    """Other spellings of :class:`CredentialOptions` keys; each annotation names the key it stands for."""

    endpoint_url: Annotated[str, "endpoint"]
    aws_endpoint: Annotated[str, "endpoint"]
    aws_endpoint_url: Annotated[str, "endpoint"]
    aws_region: Annotated[str, "region"]
    region_name: Annotated[str, "region"]
    aws_access_key_id: Annotated[str, "access_key_id"]
    aws_secret_access_key: Annotated[str, "secret_access_key"]
    aws_session_token: Annotated[str, "session_token"]
    token: Annotated[str, "session_token"]
    anonymous: Annotated[bool, "skip_signature"]
    aws_skip_signature: Annotated[bool, "skip_signature"]


class StorageOptions(CredentialOptions, ClientOptions, RetryOptions, PlannerOptions, AliasOptions, total=False):
    """``storage_options`` keys (the module docstring says what each does).

    Durations are seconds or strings such as ``"5s"``.
    """


def _hints(schema: type) -> dict[str, Any]:
    return get_type_hints(schema, include_extras=True)


#: alias -> the key it stands for
ALIASES: dict[str, str] = {name: hint.__metadata__[0] for name, hint in _hints(AliasOptions).items()}
#: store kind -> the credential keys that apply to it
SCHEME_KEYS: dict[str, frozenset[str]] = {
    "s3": frozenset(S3Options.__annotations__), "gs": frozenset(GCSOptions.__annotations__),
    "az": frozenset(AzureOptions.__annotations__), "http": frozenset(), "file": frozenset(), "memory": frozenset(),
}
CLIENT_KEYS = frozenset(ClientOptions.__annotations__)
#: zvf's own settings (retries and planning), by the number type they take
ZVF_KEYS: dict[str, type] = {**_hints(RetryOptions), **_hints(PlannerOptions)}
_POSITIVE = {"concurrency", "part_size", "multipart_concurrency"}  # 0 would stall a read or write
_DURATIONS = {"timeout", "connect_timeout", "read_timeout"}
#: credentials: given to obstore, scrubbed from every message, never kept
SECRET_KEYS = frozenset({"secret_access_key", "session_token", "access_key_id", "account_key", "sas_key",
                         "client_secret", "service_account_key"})
ALL_KEYS = frozenset(CredentialOptions.__annotations__) | CLIENT_KEYS | set(ZVF_KEYS)



def planner_defaults(remote: bool) -> dict[str, int | float]:
    """The planner settings in effect for a remote store (else local files and memory) not given as options."""
    t = tuning()
    if remote:
        return dict(concurrency=t.remote_concurrency, coalesce_gap=t.remote_coalesce_gap,
                    coalesce_max=t.remote_coalesce_max, latency_hint=t.remote_latency_hint,
                    bandwidth_hint=t.remote_bandwidth_hint)
    return dict(concurrency=t.local_concurrency, coalesce_gap=t.local_coalesce_gap,
                coalesce_max=t.local_coalesce_max, latency_hint=t.local_latency_hint,
                bandwidth_hint=t.local_bandwidth_hint)


def normalise(options: Mapping[str, Any] | None, scheme: str, where: str = "") -> dict[str, Any]:
    """Canonical keys with checked values; ``where`` names the target in errors."""
    out: dict[str, Any] = {}
    for raw_key, value in (options or {}).items():
        if value is None:
            continue
        if not isinstance(raw_key, str):
            raise InvalidArgumentError(f"storage option names must be strings, got {raw_key!r}")
        key = ALIASES.get(raw_key.lower(), raw_key.lower())
        if key not in ALL_KEYS:
            raise InvalidArgumentError(f"unknown storage option {raw_key!r}")
        allowed = ZVF_KEYS.keys() | SCHEME_KEYS[scheme]
        if scheme not in ("file", "memory"):
            allowed = allowed | CLIENT_KEYS
        if key not in allowed:
            raise InvalidArgumentError(
                f"storage option {raw_key!r} does not apply to {where or scheme + ':// targets'}"
            )
        if key in out:
            raise InvalidArgumentError(f"storage option {raw_key!r} is given twice (via an alias)")
        if key in ZVF_KEYS:
            value = _number_option(raw_key, value, integer=ZVF_KEYS[key] is int, positive=key in _POSITIVE)
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


def split(opts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Normalised options -> (store config, client options, zvf settings)."""
    zvf = {k: opts.pop(k) for k in list(opts) if k in ZVF_KEYS}
    client = {k: opts.pop(k) for k in list(opts) if k in CLIENT_KEYS}
    return opts, client, zvf


def obstore_retry_config(zvf: dict[str, Any]) -> RetryConfig:
    """obstore's own retry settings: none unless ``transport_retries`` asks for some."""
    t = tuning()
    cfg: RetryConfig = {
        "max_retries": int(zvf.get("transport_retries", 0)),
        "retry_timeout": timedelta(seconds=float(zvf.get("retry_timeout", t.retry_timeout))),
    }
    if "transport_retries" in zvf:
        cfg["backoff"] = {
            "init_backoff": timedelta(seconds=float(zvf.get("init_backoff", t.init_backoff))),
            "max_backoff": timedelta(seconds=float(zvf.get("max_backoff", t.max_backoff))),
            "base": float(zvf.get("backoff_base", t.backoff_base)),
        }
    return cfg
