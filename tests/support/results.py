"""What the reliability tests measure as they run, for tests/reliability/conftest.py to print in the
terminal summary (and write into docs/RELIABILITY.md when ``ZVF_RELIABILITY_DOC=1``)."""

from __future__ import annotations

import collections

RESULTS: dict[str, str] = {}
FUZZ_COUNTS: collections.Counter = collections.Counter()
FUZZ_FINDINGS: dict[str, str] = {}  # failure site -> example, for non-ZvfError exceptions outside the validator


def record_table(name: str, text: str) -> None:
    """Keep a result table for the summary (and the doc)."""
    RESULTS[name] = text.rstrip() + "\n"
