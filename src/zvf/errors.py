"""zvf's exception and warning types.

Every failure zvf reports is a ``ZvfError`` subclass whose message names the
key, path or argument involved, so callers can catch one type and users can
tell what to fix.  Argument errors also subclass ``ValueError`` so that code
written against plain Python conventions keeps working.
"""

from __future__ import annotations


class ZvfError(Exception):
    """Base class of every error zvf raises on purpose."""


class InvalidArgumentError(ZvfError, ValueError):
    """A caller passed an argument zvf cannot use (wrong shape, range, name)."""


class UnknownArgumentError(InvalidArgumentError, TypeError):
    """A keyword the call does not take: also a ``TypeError``, which Python raises for any unexpected keyword."""


class InputFileError(ZvfError, ValueError):
    """A file given to read (a conversion's input) is not what its format says: truncated, of another
    format, rows that do not parse.  The message names the file and, where known, the line or column."""


class StoreNotFoundError(ZvfError, FileNotFoundError):
    """The target holds no store at all."""


class NotZvfStoreError(ZvfError):
    """The target is something else: Zarr v2, a plain Zarr group, not Zarr."""


class IncompleteStoreError(ZvfError):
    """The store has data but no root metadata: a write never finished."""


class FormatError(ZvfError):
    """Bytes or metadata in the store break the on-disk contract."""


class StoreExistsError(ZvfError, FileExistsError):
    """A writer would replace an existing store without ``overwrite=True``."""


class ReadOnlyError(ZvfError, PermissionError):
    """A write was attempted through a read-only handle or protocol."""


class RemoteError(ZvfError):
    """The object store kept failing after the allowed retries."""


class TransientError(RemoteError):
    """A store request failed in a way worth retrying (5xx, 429, timeouts, dropped or refused connections);
    the executor retries it and raises :class:`RemoteError` when it gives up.  ``ambiguous``: the request
    may have taken effect (a retried create could then meet its own write)."""

    def __init__(
        self, message: str, *, key: str = "", op: str = "", status: int | None = None,
        ambiguous: bool = True, reason: str = "",
    ) -> None:
        super().__init__(message)
        self.key = key
        self.op = op
        self.status = status
        self.ambiguous = ambiguous
        self.reason = reason or message  # the cause without the "op of key on store" part


class UnsupportedRequestError(RemoteError):
    """The store's server does not implement the request (a listing on a static web host: HTTP 405/501)."""


class SizeLimitError(FormatError):
    """Stored data would decode to more than its metadata allows (or than zvf reads): refused before it is
    inflated or allocated."""


class MissingDataError(FormatError):
    """Metadata names a chunk, fragment or object the store does not hold."""


class DatasetClosedError(ZvfError, ValueError):
    """A dataset was used after ``close()`` (like I/O on a closed file, a ValueError)."""


class MissingDependencyError(ZvfError, ImportError):
    """An optional package is not installed; the message names the extra that brings it."""


class ConcurrentModificationError(ZvfError):
    """Another process changed the object (or holds the store's lock) between our read and our write."""


class StaleDatasetError(ZvfError):
    """The store changed since the dataset was opened and the version it reads from is no longer kept:
    ``ds.refresh()`` moves it to the newest version (``open(..., refresh="auto")`` does that by itself)."""


class ForeignDataError(ZvfError, FileExistsError):
    """The target holds objects that belong to no ZVF store; zvf never deletes or overwrites them."""


class CallTimeoutError(ZvfError, TimeoutError):
    """A blocking call did not finish within its ``zvf.timeout(...)``; its work was cancelled."""


class ForkedProcessError(ZvfError, RuntimeError):
    """A forked child cannot use what zvf inherited from its parent (a store it cannot make again)."""


class ZvfWarning(UserWarning):
    """Base of the warnings zvf gives: ``warnings.filterwarnings("error", category=ZvfWarning)`` (or
    ``-W error::zvf.errors.ZvfWarning``) makes every one of them an error."""


class LayoutWarning(ZvfWarning):
    """A given chunk_shape makes far more (and far smaller) cells than the data needs."""


class PrecisionWarning(ZvfWarning):
    """float32 positions (Neuroglancer's) lose more than the data's own resolution (see ``--offset``)."""
