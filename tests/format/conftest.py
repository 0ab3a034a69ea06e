"""Fixture-store access for the format tests, independent of zvf's own decoders.

``ref_arrays`` (session) walks every store of ``ref_dir`` (tests/conftest.py:
the shared 0.9.2 fixtures, else stores generated with zarr-vectors 0.9.2) with
plain struct/numcodecs code and yields every Zarr array with its stored objects
and decoded vlen items (tests/support/ref_arrays.py).  ``fuzz_counts`` (session)
is a Counter the fuzz tests bump per example; the totals are printed in the
terminal summary.
"""

from __future__ import annotations

import collections

import pytest

from tests.support.ref_arrays import RefArray, load_ref_arrays

FUZZ_COUNTS: collections.Counter = collections.Counter()


@pytest.fixture(scope="session")
def ref_arrays(ref_dir) -> list[RefArray]:
    return load_ref_arrays(ref_dir)


@pytest.fixture(scope="session")
def fuzz_counts() -> collections.Counter:
    return FUZZ_COUNTS


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if FUZZ_COUNTS:
        total = sum(FUZZ_COUNTS.values())
        parts = ", ".join(f"{k}={v}" for k, v in sorted(FUZZ_COUNTS.items()))
        terminalreporter.write_line(f"zvf format fuzz: {total} examples ({parts})")
