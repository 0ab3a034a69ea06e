"""How the executor retries transient failures: the policy, its backoff, and when it gives up.

Transient failures (:class:`~zvf.errors.TransientError`: 5xx, 429, timeouts, dropped or refused
connections) are retried with exponential backoff and full jitter (``sleep ~ U(0, min(max_backoff,
init_backoff * base**(n-1)))``) at most ``max_retries`` times and never past ``retry_timeout`` seconds
after the first attempt; then :class:`~zvf.errors.RemoteError` naming the key.  Permanent errors
(4xx, permission, bad key) are not this module's: they fail at once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..config import tuning
from ..errors import RemoteError, TransientError

__all__ = ["RetryPolicy"]


@dataclass(frozen=True)
class RetryPolicy:
    """How the executor retries transient failures (exponential backoff, full jitter; defaults: :mod:`zvf.config`).

    A request is tried at most ``1 + max_retries`` times and no retry starts
    if its backoff would end later than ``retry_timeout`` seconds after the
    first attempt.  Each attempt is itself bounded by the client ``timeout``
    (obstore default 30 s), so the worst case is about retry_timeout + timeout.
    """

    max_retries: int = field(default_factory=lambda: tuning().max_retries)
    retry_timeout: float = field(default_factory=lambda: tuning().retry_timeout)
    init_backoff: float = field(default_factory=lambda: tuning().init_backoff)
    max_backoff: float = field(default_factory=lambda: tuning().max_backoff)
    backoff_base: float = field(default_factory=lambda: tuning().backoff_base)

    def backoff(self, attempt: int) -> float:
        """Upper bound of the sleep before retry number ``attempt`` (1-based)."""
        return min(self.max_backoff, self.init_backoff * self.backoff_base ** (attempt - 1))

    def delay(self, error: TransientError, *, attempt: int, elapsed: float, rng: random.Random, what: str,
              replayable: bool = True, retry_ambiguous: bool = True) -> float:
        """Seconds to sleep before retrying ``what`` after attempt number ``attempt`` failed with ``error``
        ``elapsed`` seconds after the first attempt began; raises the :class:`RemoteError` ending the request
        when it is not retried: the data source cannot be replayed (``replayable`` False), the failure may
        have been applied and ``retry_ambiguous`` is False, or the attempts or time are used up."""
        if not replayable or (error.ambiguous and not retry_ambiguous):
            why = "retrying could repeat a write that may have been applied" if replayable \
                else "the data source cannot be replayed"
            raise _gave_up(f"{what} failed and was not retried ({why}): {error.reason}", error, attempt) from None
        delay = rng.uniform(0.0, self.backoff(attempt))
        if attempt > self.max_retries or elapsed + delay > self.retry_timeout:
            raise _gave_up(f"{what} failed after {attempt} attempts in {elapsed:.2f}s; last error: {error.reason}",
                          error, attempt) from None
        return delay


def _gave_up(message: str, cause: BaseException, attempts: int) -> RemoteError:
    """The RemoteError ending a request: carries the last HTTP status and the attempts made."""
    err = RemoteError(message)
    err.status = getattr(cause, "status", None)  # type: ignore[attr-defined]
    err.attempts = attempts  # type: ignore[attr-defined]
    return err
