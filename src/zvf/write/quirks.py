"""A switch that makes the object writers reproduce zarr-vectors 0.9.2's three write bugs.

Only the byte-compatibility tests want those bytes (to show every other byte
matches 0.9.2), so the switch is kept out of the public signatures.  It is a
process-wide flag rather than a context variable because the blocking facade
runs the writers on another thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_active = False


@contextmanager
def reference_quirks() -> Iterator[None]:
    """Inside the block, ``write_polylines``/``write_lines``/``write_graph``/``write_mesh`` write 0.9.2's bugs."""
    global _active
    before, _active = _active, True
    try:
        yield
    finally:
        _active = before


def active() -> bool:
    return _active
