"""How the executor retries transient failures: the policy and its backoff."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RetryPolicy"]


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
