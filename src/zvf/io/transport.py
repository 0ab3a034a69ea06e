"""Transports: the only code that talks to a store.

A transport performs exactly one store operation per call and never retries;
the executor decides about retries, concurrency and caching.  Failures are
normalised so the executor can decide without knowing the backend:

* data                 -> ``bytes`` from ``get`` (documents are parsed as JSON); ranged reads
  (``get_range(s)``, ``get_suffix``) may return a read-only ``memoryview`` straight over the
  backend's buffer, so cell payloads are not copied on their way in
* missing object       -> ``None`` (``get``, ``get_range``, ``get_suffix``, ``head``)
* range past the end   -> the shorter slice, ``b""`` when it starts past the end
* create conflict      -> :class:`zvf.errors.StoreExistsError`
* stale ETag put       -> :class:`zvf.errors.ConcurrentModificationError`
  (``mode=tag`` with the tag from :meth:`get_tagged`: ``{"e_tag": ...}`` plus
  ``"version"`` where the store needs it, e.g. GCS generations)
* retryable failure    -> :class:`zvf.errors.TransientError` (a ``RemoteError``) with
  ``ambiguous=True`` when the request may have been applied (500, dropped
  connection) and ``False`` when it surely was not (429, 503, connect refused)
* anything else        -> :class:`zvf.errors.RemoteError` (not retried)

Messages name the operation and key and pass through :func:`scrub` so
credentials handed to the store never appear in them.

:class:`ObstoreTransport` wraps any obstore store; :class:`ReadOnlyTransport`
refuses writes.  A dict-backed test double with injectable faults lives in
:mod:`zvf.testing`.
"""

from __future__ import annotations

import asyncio
import atexit
import builtins
import functools
import os
import re
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, cast, runtime_checkable

import anyio

from ..config import tuning
from ..errors import (
    ConcurrentModificationError,
    FormatError,
    InvalidArgumentError,
    ReadOnlyError,
    RemoteError,
    StoreExistsError,
    StoreNotFoundError,
    TransientError,
    UnsupportedRequestError,
    ZvfError,
)
from . import fork

if TYPE_CHECKING:
    from obstore import PutMode
    from typing_extensions import Buffer

__all__ = [
    "Chunks",
    "ObstoreTransport",
    "ReadOnlyTransport",
    "Transport",
]

Chunks = Any  # bytes-like, Iterable[bytes-like] or AsyncIterable[bytes-like]
P = ParamSpec("P")
R = TypeVar("R")


#: obstore requests of this process whose result obstore's threads may still hand to Python: each leaves
#: when its result reached its event loop, or (cancelled) when obstore lets go of it
_unfinished: weakref.WeakSet[asyncio.Future[Any]] = weakref.WeakSet()
_EXIT_PAUSE = 0.05  # seconds the interpreter's exit waits at most for unfinished obstore requests
_EXIT_AFTER_LAST = 0.01  # and at least this long after the last one finished (its thread returning)
_last_finished = 0.0


def _finished(fut: asyncio.Future[Any]) -> None:
    global _last_finished
    _last_finished = time.monotonic()
    if not fut.cancelled():  # a cancelled one: obstore's thread may still look at it
        _unfinished.discard(fut)


@atexit.register
def _pause_at_exit() -> None:
    """Let obstore's threads finish handing results over before the interpreter tears down.

    With obstore 0.12 on CPython 3.11 a background thread handing a result to asyncio while Python
    finalizes aborts the process (exit 134 instead of the real status): an event loop in another thread
    (the blocking facade's, a service's) may still have requests in flight, and the thread that handed
    over the last result may still be returning.  A process whose last request finished more than
    ``_EXIT_AFTER_LAST`` ago exits at once (a serverless function or a CLI command pays nothing).
    """
    deadline = time.monotonic() + _EXIT_PAUSE
    while (_unfinished or time.monotonic() < _last_finished + _EXIT_AFTER_LAST) and time.monotonic() < deadline:
        time.sleep(0.002)


@fork.at_fork
def _forget_unfinished() -> None:
    """In a forked child: the parent's requests run in the parent (obstore's threads stayed there)."""
    _unfinished.clear()


async def _settled(call: Any) -> Any:
    """Await one obstore request; when the caller is cancelled (an error elsewhere, Ctrl-C), let the
    request finish first (up to ``zvf.config`` ``settle_seconds``).

    obstore completes a request from its own threads by posting to the event loop: a request still
    running when its loop closes (a CLI command or ``asyncio.run`` ending on an error) posts to a
    closed loop ("Event loop is closed" on stderr), and a cancelled PUT could land after its caller
    returned.  Waiting keeps both from happening.  Until it finishes the request is in
    ``_unfinished`` (the interpreter's exit waits for it).
    """
    fut = asyncio.ensure_future(call)
    _unfinished.add(fut)
    fut.add_done_callback(_finished)
    try:
        return await asyncio.shield(fut)
    except BaseException:
        if not fut.done():
            with anyio.CancelScope(shield=True), anyio.move_on_after(tuning().settle_seconds):
                await asyncio.wait({fut})
        if fut.done() and not fut.cancelled():
            fut.exception()  # retrieved: what propagates is the caller's own error or cancellation
        raise


async def _settled_stream(stream: Any) -> Any:
    """An obstore async stream (a listing) whose every step is awaited with :func:`_settled`."""
    it = stream.__aiter__()
    while True:
        try:
            item = await _settled(it.__anext__())
        except StopAsyncIteration:
            return
        yield item


class _SettlingObstore:
    """The ``obstore`` module with every ``*_async`` function awaited through :func:`_settled`."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._module, name)
        if not name.endswith("_async"):
            return fn

        async def settled(*args: Any, **kwargs: Any) -> Any:
            return await _settled(fn(*args, **kwargs))

        setattr(self, name, settled)  # built once per name: later lookups skip __getattr__ (a write makes thousands)
        return settled


def _settling_obstore() -> Any:
    """This process's obstore API (:func:`zvf.io.fork.obstore`, imported on first use, so ``import zvf`` stays
    light) through :class:`_SettlingObstore`."""
    return _settling(fork.obstore())


@functools.cache
def _settling(api: Any) -> _SettlingObstore:
    return _SettlingObstore(api)


@runtime_checkable
class Transport(Protocol):
    """One store operation per call; see the module docstring for error rules.

    Keys are ``/``-separated paths relative to the store root.  ``list`` and
    ``list_dirs`` treat ``prefix`` as a directory ("a" lists "a/..." only; ""
    lists everything); keys come back sorted.  Optional: ``get_view(key)``,
    ``get`` as a read-only view of the backend's buffer (cell payloads are then
    not copied; a wrapper that logs or counts ``get`` must wrap it too), and
    ``get_batch`` with ``blocking_gets`` (see :meth:`ObstoreTransport.get_batch`).
    """

    label: str

    async def get(self, key: str) -> bytes | None: ...
    async def get_range(self, key: str, start: int, end: int | None) -> bytes | memoryview | None: ...
    async def get_ranges(
        self, key: str, starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes | memoryview] | None: ...
    async def get_suffix(self, key: str, nbytes: int) -> bytes | memoryview | None: ...
    async def head(self, key: str) -> int | None: ...
    async def get_tagged(self, key: str) -> tuple[bytes, dict[str, str] | None] | None: ...
    async def put(self, key: str, data: Any, *, mode: str | dict[str, str] = "overwrite") -> None: ...
    async def put_multipart(
        self, key: str, chunks: Chunks, *, part_size: int, max_concurrency: int = 4
    ) -> None: ...
    async def list(self, prefix: str = "") -> list[tuple[str, int]]: ...
    async def list_dirs(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[tuple[str, int]]]: ...
    async def delete(self, keys: Iterable[str]) -> None: ...
    async def copy(self, src: str, dst: str) -> None: ...


def _check_mode(mode: str | dict[str, str], key: str) -> None:
    if isinstance(mode, dict):
        if "e_tag" not in mode or not set(mode) <= {"e_tag", "version"} or not all(
                isinstance(v, str) for v in mode.values()):
            raise InvalidArgumentError(f"put mode for {key!r}: a conditional put is the tag get_tagged gave, "
                                       f"got {mode!r}")
    elif mode not in ("overwrite", "create"):
        raise InvalidArgumentError(f"put mode for {key!r} must be 'overwrite', 'create' or {{'e_tag': ...}}, "
                                   f"got {mode!r}")


def _flat(data: Any) -> Any:
    """A 1-d uint8 view of any C-contiguous buffer (what obstore accepts)."""
    if isinstance(data, (bytes, bytearray)):
        return data
    mv = memoryview(data)
    if mv.format == "B" and mv.ndim == 1 and mv.c_contiguous:
        return mv
    return mv.cast("B") if mv.c_contiguous else mv.tobytes()


def _dir_prefix(prefix: str | None) -> str:
    p = (prefix or "").strip("/")
    return p + "/" if p else ""


# --------------------------------------------------------------------------------------
# obstore
# --------------------------------------------------------------------------------------

# Patterns of error paths only, as strings: ``re`` compiles one on its first use (and keeps it), not every
# process at import (~2.4 ms for these, of a cold process that may never see an error).
_STATUS = r"status(?: code)?:? (\d{3})"
_RANGE_PAST_END = ("StartTooLarge", "Requested range was invalid", "Wanted range starting at")
# Statuses that say "not processed, try later": safe to retry even for non-idempotent puts.
_SURELY_NOT_APPLIED = {429, 503}
# Statuses that say "this server never does that" (a listing on a static web host): not worth retrying.
_NOT_IMPLEMENTED = {405, 501}


class _RangePastEnd(Exception):
    pass


class _NotPartial(Exception):
    """The server answered a range request with the whole object (empty objects, or
    servers that ignore Range): fetch it whole and slice."""


# Environment variables obstore takes credentials from: AWS_*, AZURE_*, GOOGLE_* whose name says key, secret,
# token, SAS or password (AWS_ACCESS_KEY_ID, AWS_SESSION_TOKEN, AZURE_STORAGE_ACCOUNT_KEY,
# GOOGLE_SERVICE_ACCOUNT_KEY...)
_CREDENTIAL_ENV = r"^(AWS|AZURE|GOOGLE)_\w*(KEY|SECRET|TOKEN|SAS|PASSWORD)\w*$"
# Credentials a server or client may echo whatever their value: signed-URL query parameters and signature
# header fields (AWS SigV2/V4, GCS V4, Azure SAS), XML elements of S3 error bodies, Authorization schemes,
# service-account JSON fields.
_CREDENTIAL_PATTERNS = (
    (r"(?i)\b(X-Amz-Credential|X-Amz-Signature|X-Amz-Security-Token|X-Goog-Credential|X-Goog-Signature|"
     r"AWSAccessKeyId|GoogleAccessId|Credential|Signature|sig|access_token|token)=[^&\s\"'<>,;)]+",
     r"\1=***"),
    (r"(?s)<(Token-\d+|AWSAccessKeyId|SignatureProvided|StringToSign|StringToSignBytes|"
     r"CanonicalRequest|CanonicalRequestBytes|AccessKeyId|SecretAccessKey|SessionToken)>.*?</\1>",
     r"<\1>***</\1>"),
    (r"(?i)\b(Bearer|SharedKey|SharedKeyLite|AWS)\s+[A-Za-z0-9_./+=:-]{8,}", r"\1 ***"),
    (r"(?i)(x-amz-security-token|authorization|x-ms-\w*(?:key|token))(\s*[:=]\s*)[^\s,\"'<>&;]+",
     r"\1\2***"),
    (r'("(?:private_key|private_key_id|client_secret|refresh_token|access_token)"\s*:\s*)"[^"]*"',
     r'\1"***"'),
)


def environment_secrets() -> list[str]:
    """Credential values in this process's environment (and the private fields of a JSON key given there)."""
    import json
    import os

    out = []
    for name, value in os.environ.items():
        if not re.match(_CREDENTIAL_ENV, name.upper()) or len(value) < 8:
            continue
        out.append(value)
        if value.lstrip().startswith("{"):
            try:
                doc = json.loads(value)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out += [str(v) for k, v in doc.items() if k in ("private_key", "private_key_id", "client_secret",
                                                                 "refresh_token") and v]
    return out


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with credentials replaced by ``***``: each of ``secrets`` and of the environment's (3+ characters;
    as is and URL-encoded) and whatever the patterns of signed URLs, signature headers and S3 error bodies hold.
    Store errors echo them: AWS's ExpiredToken body holds the session token, a signed URL its signature."""
    from urllib.parse import quote

    for s in sorted({*secrets, *environment_secrets()}, key=len, reverse=True):
        if s and len(s) >= 3:
            for form in {s, quote(s, safe=""), quote(s, safe="/")}:
                text = text.replace(form, "***")
    for pattern, replacement in _CREDENTIAL_PATTERNS:
        text = re.sub(pattern, replacement, text)
    return text


def error_detail(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """An obstore error's first paragraph on one line (no debug dump), scrubbed, then cut at ~400 characters
    (scrubbing first: a secret cut in two would no longer match)."""
    first = scrub(str(exc).split("\n\nDebug source:", 1)[0].strip().replace("\n", " "), secrets)
    return first if len(first) <= 400 else first[:400] + "..."


def _detached(fn: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """An ``ObstoreTransport`` coroutine method whose zvf errors carry no chained exception: the obstore
    error a translation was raised from (``__context__`` even under ``from None``) holds the unscrubbed
    response, request URL and debug dump; what is useful of it -- status, key, operation -- is on the error."""

    @functools.wraps(fn)
    async def method(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except ZvfError as e:
            err = e
        err.__context__ = err.__cause__ = None
        raise err  # outside the except clause: nothing is chained again

    return method


def _inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both absolute and normalised)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _under_a_file(exc: BaseException) -> bool:
    """A local key below a path that is a file (``a/data`` a blob, ``a/data/zarr.json`` asked): missing."""
    return "os error 20" in str(exc) or "Not a directory" in str(exc)


def _missing(exc: BaseException) -> bool:
    """A read failed because the key is not there (absent, or below a file): the read answers None."""
    return isinstance(exc, FileNotFoundError) or _under_a_file(exc)


class ObstoreTransport:
    """Transport over an obstore store (S3, GCS, Azure, HTTP, local, memory).

    ``prefix`` is applied by this class (used for ``memory://name/sub``; the
    cloud stores take their prefix natively).  ``secrets`` are strings scrubbed
    from every error message.  ``label`` is a credential-free description used
    in messages (the store URL).
    """

    def __init__(
        self, store: Any, *, prefix: str = "", secrets: Iterable[str] = (), label: str = "",
        remake: Callable[[], Any] | None = None, check: Callable[[], None] | None = None,
    ) -> None:
        self._store, self._api = store, fork.api_of(store)
        self._remake = remake  # makes the store again in a forked child (None: from its own configuration)
        #: a blocking check the first request waits for (an S3 store without credentials: is there an
        #: instance metadata service?), run once, in a worker thread: the event loop goes on meanwhile
        self._check = check
        self._check_locks: dict[int, threading.Lock] = {}  # by process: a forked child must not inherit a held one
        self._check_failed: BaseException | None = None
        self.prefix = _dir_prefix(prefix)
        self._secrets = tuple(secrets)
        self.label = label or type(store).__name__
        #: puts and whole-object gets may run as blocking calls in worker threads (:meth:`put_batch`,
        #: :meth:`get_batch`): local files and memory, where an async request costs more event-loop time
        #: than the transfer itself
        self.blocking_puts = self.blocking_gets = type(store).__name__ in ("LocalStore", "MemoryStore")
        #: a local store's directory, resolved: no key may lead out of it through a symbolic link
        self._local_root = (os.path.realpath(store.prefix or "/") if type(store).__name__ == "LocalStore"
                            else None)

    def __repr__(self) -> str:
        return f"ObstoreTransport({self.label!r})"

    @property
    def store(self) -> Any:
        """The obstore store, made again by a forked child's own obstore API on first use there."""
        api = fork.obstore()
        if self._api is not api:
            self._store = self._remake() if self._remake is not None else fork.remake(self._store)
            self._api = api
        return self._store

    # -- helpers ----------------------------------------------------------------------

    async def _obstore(self) -> Any:
        """The obstore API for a request, once the store's check passed (see ``check``)."""
        if self._check is not None:
            await anyio.to_thread.run_sync(self._run_check)
        return _settling_obstore()

    def _run_check(self) -> None:
        """Run the check once (in a worker thread); its failure is every later request's too."""
        with self._check_locks.setdefault(os.getpid(), threading.Lock()):
            if self._check_failed is not None:
                raise self._check_failed
            if self._check is not None:
                try:
                    self._check()
                except BaseException as e:
                    self._check_failed = e
                    raise
                self._check = None

    def _path(self, key: str) -> str:
        """The store path of ``key``; on a local store, refused (FormatError) where a symbolic link on the way
        leads out of the store's directory -- a cell must not read (or a write replace) a file elsewhere."""
        path = self.prefix + key if self.prefix else key
        root = self._local_root
        if root is not None and _inside(os.path.normpath(os.path.join(root, path)), root):  # ".." is obstore's
            real = os.path.realpath(os.path.join(root, path))
            if not _inside(real, root):
                raise FormatError(f"{key}: a symbolic link in {self.label} leads out of the store (to {real}); "
                                  "refused: a store's keys stay inside its directory")
        return path

    def _error(self, exc: BaseException, op: str, key: str) -> BaseException:
        """Translate an obstore exception into zvf's (see module docstring), which carries the operation, key
        and HTTP status (where one was answered) as attributes: the obstore error is not chained (see
        :func:`_detached`)."""
        err = exc if isinstance(exc, ZvfError) else self._translate(exc, op, key)
        if isinstance(err, RemoteError):
            err.op, err.key = op, key  # type: ignore[attr-defined]
            if getattr(err, "status", None) is None:
                m = re.search(_STATUS, str(exc))
                err.status = int(m.group(1)) if m else None  # type: ignore[attr-defined]
        return err

    def _translate(self, exc: BaseException, op: str, key: str) -> BaseException:
        oe = fork.obstore().exceptions

        raw = str(exc)
        detail = error_detail(exc, self._secrets)
        where = f"{op} of {key!r} on {self.label}"
        if isinstance(exc, (oe.AlreadyExistsError, oe.PreconditionError)):
            return StoreExistsError(f"{key!r} already exists on {self.label} ({op})")
        if isinstance(exc, oe.InvalidPathError) or (
            isinstance(exc, ValueError) and "parse path" in raw
        ):
            return InvalidArgumentError(f"invalid key {key!r} for {self.label}: {detail}")
        if "NoSuchBucket" in raw or "ContainerNotFound" in raw:
            return StoreNotFoundError(f"{self.label}: the bucket (container) does not exist ({op} of {key!r})")
        if "/latest/api/token" in raw or "/latest/meta-data" in raw:  # obstore fell back to EC2 instance metadata
            return RemoteError(f"{self.label}: no credentials found (pass access_key_id/secret_access_key in "
                               f"storage_options, set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or skip_signature=True "
                               f"for a public bucket); {op} of {key!r}")
        if any(m in raw for m in _RANGE_PAST_END):
            return _RangePastEnd()
        if "non-partial response" in raw or "CONTENT_RANGE header" in raw or "Range request not supported" in raw:
            return _NotPartial()  # whole object, or a Content-Range we cannot trust (bytes 0--1/0)
        if isinstance(exc, (oe.PermissionDeniedError, oe.UnauthenticatedError)) or "403 Forbidden" in raw:
            e = RemoteError(f"{self.label}: access denied: the credentials were rejected or may not do this "
                            f"(check them and the bucket policy); {where}: {detail}")
            e.status = 403  # type: ignore[attr-defined]
            return e
        if isinstance(exc, (oe.NotSupportedError, oe.UnknownConfigurationKeyError)):
            return RemoteError(f"{where} is not supported: {detail}")
        m = re.search(_STATUS, raw)
        status = int(m.group(1)) if m else None
        if status == 416:
            return _RangePastEnd()
        if status in _NOT_IMPLEMENTED:
            e = UnsupportedRequestError(f"{where}: the server does not implement this request (HTTP {status}; a "
                                        f"static web host answers GET and HEAD only): {detail}")
            e.status = status  # type: ignore[attr-defined]
            return e
        if status is not None:
            if status >= 500 or status in (408, 429):
                return TransientError(
                    f"{where} failed with HTTP {status}: {detail}", key=key, op=op,
                    status=status, ambiguous=status not in _SURELY_NOT_APPLIED,
                    reason=f"HTTP {status}: {detail}",
                )
            e = RemoteError(f"{where} failed with HTTP {status}: {detail}")
            e.status = status  # type: ignore[attr-defined]
            return e
        low = raw.lower()
        if any(s in low for s in ("error sending request", "timed out", "timeout", "connection",
                                   "connect", "incompletemessage", "broken pipe", "reset by peer",
                                   "body", "decoding response")):
            not_sent = "kind: connect" in low or "tcp connect error" in low
            what = "timed out" if ("timed out" in low or "timedout" in low) else "network error"
            return TransientError(
                f"{where} failed ({what}): {detail}", key=key, op=op, ambiguous=not not_sent,
                reason=f"{what}: {detail}",
            )
        return RemoteError(f"{where} failed: {detail}")

    def _raise(self, exc: BaseException, op: str, key: str) -> None:
        err = self._error(exc, op, key)
        if isinstance(err, (_RangePastEnd, _NotPartial)):  # only meaningful for ranged reads
            err = RemoteError(f"{op} of {key!r} on {self.label} failed: unexpected range error")
        raise err from None

    def _read_error(self, exc: BaseException, op: str, key: str) -> BaseException | None:
        """A ranged read's failure as zvf's error (range ones included), or None where the key is missing."""
        return None if _missing(exc) else self._error(exc, op, key)

    def _raise_unless_missing(self, exc: BaseException, op: str, key: str) -> None:
        """A whole-object read's failure: returns where the key is missing (the read answers None), else raises."""
        if not _missing(exc):
            self._raise(exc, op, key)

    # -- reads ------------------------------------------------------------------------

    @_detached
    async def get(self, key: str) -> bytes | None:
        view = await self.get_view(key)
        return None if view is None else bytes(view)

    @_detached
    async def get_view(self, key: str) -> memoryview | None:
        """:meth:`get` as a read-only view of obstore's buffer, not copied (cell payloads, never parsed as text)."""
        obs = await self._obstore()

        try:
            res = await obs.get_async(self.store, self._path(key))
            return memoryview(await _settled(res.bytes_async()))
        except Exception as e:
            self._raise_unless_missing(e, "get", key)
            return None

    def get_batch(self, keys: Sequence[str]) -> list[memoryview | None]:
        """Whole objects of ``keys`` (None where missing), one after another with blocking calls, in a
        worker thread (only where ``blocking_gets``), as views of obstore's buffers (no copy).  Returns the
        results up to the first failure, which the caller repeats through :meth:`get` to get its error."""
        obstore = fork.obstore()

        out: list[memoryview | None] = []
        for key in keys:
            try:
                out.append(memoryview(obstore.get(self.store, self._path(key)).bytes()))
            except Exception as e:
                if not _missing(e):
                    break
                out.append(None)
        return out

    @_detached
    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes | memoryview | None:
        obs = await self._obstore()

        if end is not None and end <= start:
            return b""
        try:
            if end is None:
                if start < 0:
                    return await self.get_suffix(key, -start)
                if start == 0:
                    return await self.get(key)
                res = await obs.get_async(
                    self.store, self._path(key), options={"range": {"offset": start}}
                )
                return memoryview(await _settled(res.bytes_async()))
            return memoryview(await obs.get_range_async(self.store, self._path(key), start=start, end=end))
        except Exception as e:
            err = self._read_error(e, "get_range", key)
            if err is None:
                return None
            if isinstance(err, _RangePastEnd):
                return b""
            if isinstance(err, _NotPartial):
                whole = await self.get(key)
                return None if whole is None else whole[start:end]
            raise err from None

    @_detached
    async def get_ranges(
        self, key: str, starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes | memoryview] | None:
        """Several bounded ranges of one object; obstore does not merge them (coalesce=0)."""
        obs = await self._obstore()

        starts, ends = [int(s) for s in starts], [int(e) for e in ends]
        if len(starts) != len(ends):
            raise InvalidArgumentError(f"get_ranges of {key!r}: starts and ends differ in length")
        live = [i for i in range(len(starts)) if ends[i] > starts[i]]
        out: list[bytes | memoryview] = [b""] * len(starts)
        if not live:
            return out
        try:
            got: Sequence[Buffer] = await obs.get_ranges_async(
                self.store, self._path(key),
                starts=[starts[i] for i in live], ends=[ends[i] for i in live], coalesce=0,
            )
        except Exception as e:
            err = self._read_error(e, "get_ranges", key)
            if err is None:
                return None
            if not isinstance(err, (_RangePastEnd, _NotPartial)):
                raise err from None
            one_by_one: list[bytes | memoryview] = []
            for i in live:  # some range starts past the end: do them one by one
                piece = await self.get_range(key, starts[i], ends[i])
                if piece is None:
                    return None
                one_by_one.append(piece)
            got = one_by_one
        for i, g in zip(live, got):
            out[i] = memoryview(g)
        return out

    @_detached
    async def get_suffix(self, key: str, nbytes: int) -> bytes | memoryview | None:
        obs = await self._obstore()

        if nbytes <= 0:
            raise InvalidArgumentError(f"suffix of {key!r} needs nbytes > 0, got {nbytes}")
        try:
            res = await obs.get_async(self.store, self._path(key), options={"range": {"suffix": nbytes}})
            return memoryview(await _settled(res.bytes_async()))
        except Exception as e:
            err = self._read_error(e, "get_suffix", key)
            if err is None:
                return None
            if isinstance(e, fork.obstore().exceptions.NotSupportedError):  # Azure has no suffix ranges
                size = await self.head(key)
                return None if size is None else await self.get_range(key, max(0, size - nbytes), size)
            if isinstance(err, _RangePastEnd):  # empty object
                return b""
            if isinstance(err, _NotPartial):
                whole = await self.get(key)
                return None if whole is None else whole[-nbytes:]
            raise err from None

    @_detached
    async def head(self, key: str) -> int | None:
        obs = await self._obstore()

        try:
            meta = await obs.head_async(self.store, self._path(key))
            return int(meta["size"])
        except Exception as e:
            self._raise_unless_missing(e, "head", key)
            return None

    @_detached
    async def get_tagged(self, key: str) -> tuple[bytes, dict[str, str] | None] | None:
        """The object and its tag for a later ``put(key, data, mode=tag)`` (a compare-and-swap); the
        tag is None where the store has no conditional update (obstore's LocalStore)."""
        obs = await self._obstore()

        try:
            res = await obs.get_async(self.store, self._path(key))
            data = bytes(await _settled(res.bytes_async()))
        except Exception as e:
            self._raise_unless_missing(e, "get", key)
            return None
        e_tag, version = res.meta.get("e_tag"), res.meta.get("version")
        if type(self.store).__name__ == "LocalStore" or not e_tag:
            return data, None
        tag = {"e_tag": e_tag}
        if version:
            tag["version"] = version
        return data, tag

    # -- writes -----------------------------------------------------------------------

    @_detached
    async def put(self, key: str, data: Any, *, mode: str | dict[str, str] = "overwrite") -> None:
        obs = await self._obstore()
        PreconditionError = fork.obstore().exceptions.PreconditionError

        _check_mode(mode, key)
        try:
            await obs.put_async(
                # _check_mode accepted it: "overwrite", "create" or an {"e_tag", "version"} tag
                self.store, self._path(key), _flat(data), mode=cast("PutMode", mode), use_multipart=False
            )
        except PreconditionError as e:
            if not isinstance(mode, dict):  # S3 answers a create conflict with 412 too
                self._raise(e, "put", key)
            raise ConcurrentModificationError(
                f"{key!r} on {self.label} changed since its ETag was read (conditional put refused)") from None
        except Exception as e:
            self._raise(e, "put", key)

    def put_batch(self, items: Sequence[tuple[str, Any]]) -> int:
        """Overwrite-put ``items`` (key, bytes-like) one after another with blocking calls, in a worker
        thread (only where ``blocking_puts``): one thread hop for many small cells instead of one event-loop
        round per cell.  Returns how many were stored; it stops at the first failure, which the caller
        repeats through :meth:`put` to get its error (or retry)."""
        obstore = fork.obstore()

        done = 0
        for key, data in items:
            try:
                obstore.put(self.store, self._path(key), _flat(data), mode="overwrite", use_multipart=False)
            except Exception:
                break
            done += 1
        return done

    @_detached
    async def put_multipart(
        self, key: str, chunks: Chunks, *, part_size: int, max_concurrency: int = 4
    ) -> None:
        """Upload in parts of ``part_size`` bytes (S3 needs >= 5 MiB except the last)."""
        obs = await self._obstore()

        if isinstance(chunks, (bytes, bytearray, memoryview)) or hasattr(chunks, "__array__"):
            chunks = _flat(chunks)
        elif isinstance(chunks, (list, tuple)):
            chunks = [_flat(c) for c in chunks]
        try:
            await obs.put_async(
                self.store, self._path(key), chunks, use_multipart=True,
                chunk_size=int(part_size), max_concurrency=max(1, int(max_concurrency)),
            )
        except Exception as e:
            self._raise(e, "put_multipart", key)

    @_detached
    async def copy(self, src: str, dst: str) -> None:
        """Copy one object, server side where the store can (S3, GCS, Azure): no bytes through us."""
        obs = await self._obstore()

        try:
            await obs.copy_async(self.store, self._path(src), self._path(dst), overwrite=True)
        except FileNotFoundError:
            raise RemoteError(f"copy of {src!r} to {dst!r} on {self.label}: {src!r} does not exist") from None
        except Exception as e:
            self._raise(e, "copy", src)

    @_detached
    async def delete(self, keys: Iterable[str]) -> None:
        """Delete ``keys``; missing ones are ignored."""
        obs = await self._obstore()

        keys = list(keys)
        if not keys:
            return
        try:
            await obs.delete_async(self.store, [self._path(k) for k in keys])
            return
        except FileNotFoundError:
            pass
        except Exception as e:
            self._raise(e, "delete", keys[0])
        for k in keys:  # a backend that refuses missing keys in bulk (local files)
            try:
                await obs.delete_async(self.store, self._path(k))
            except FileNotFoundError:
                continue
            except Exception as e:
                self._raise(e, "delete", k)

    # -- listing ----------------------------------------------------------------------

    def _strip(self, path: str) -> str:
        return path[len(self.prefix):] if self.prefix and path.startswith(self.prefix) else path

    @_detached
    async def list(self, prefix: str = "") -> list[tuple[str, int]]:
        obs = await self._obstore()

        p = (self.prefix + (prefix or "").strip("/")).strip("/") or None
        out: list[tuple[str, int]] = []
        try:
            async for batch in _settled_stream(obs.list(self.store, p, chunk_size=1000)):
                out.extend((self._strip(m["path"]), int(m["size"])) for m in batch)
        except FileNotFoundError:
            return []
        except Exception as e:
            self._raise(e, "list", prefix or "")
        out.sort()
        return out

    @_detached
    async def list_dirs(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[tuple[str, int]]]:
        obs = await self._obstore()

        p = (self.prefix + (prefix or "").strip("/")).strip("/") or None
        try:
            res = await obs.list_with_delimiter_async(self.store, p)
        except FileNotFoundError:
            return [], []
        except Exception as e:
            self._raise(e, "list_dirs", prefix or "")
            raise
        dirs = sorted(self._strip(d.rstrip("/")) for d in res["common_prefixes"])
        objs = sorted((self._strip(m["path"]), int(m["size"])) for m in res["objects"])
        return dirs, objs


class ReadOnlyTransport:
    """Wraps a transport and refuses every write with ReadOnlyError naming the key."""

    blocking_puts = False  # no put_batch: every write goes through put, which refuses it

    def __init__(self, inner: Transport, *, reason: str = "the store is opened read-only") -> None:
        self.inner = inner
        self.reason = reason
        self.label = getattr(inner, "label", "store")

    def __repr__(self) -> str:
        return f"ReadOnlyTransport({self.inner!r})"

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _refuse(self, key: str) -> None:
        raise ReadOnlyError(f"cannot write {key!r} on {self.label}: {self.reason}")

    async def get(self, key: str) -> bytes | None:
        return await self.inner.get(key)

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes | memoryview | None:
        return await self.inner.get_range(key, start, end)

    async def get_ranges(
        self, key: str, starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes | memoryview] | None:
        return await self.inner.get_ranges(key, starts, ends)

    async def get_suffix(self, key: str, nbytes: int) -> bytes | memoryview | None:
        return await self.inner.get_suffix(key, nbytes)

    async def head(self, key: str) -> int | None:
        return await self.inner.head(key)

    async def list(self, prefix: str = "") -> list[tuple[str, int]]:
        return await self.inner.list(prefix)

    async def list_dirs(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[tuple[str, int]]]:
        return await self.inner.list_dirs(prefix)

    async def put(self, key: str, data: Any, *, mode: str = "overwrite") -> None:
        self._refuse(key)

    def put_batch(self, items: Sequence[tuple[str, Any]]) -> int:
        if items:
            self._refuse(items[0][0])
        return 0

    async def put_multipart(self, key: str, chunks: Chunks, *, part_size: int, max_concurrency: int = 4) -> None:
        self._refuse(key)

    async def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if keys:
            self._refuse(keys[0])

    async def copy(self, src: str, dst: str) -> None:
        self._refuse(dst)
