"""zvf's tuning settings in one place: one default each, overridable for a block of calls.

Every memory bound, batch size, lease and limit that is a choice rather than part of the format lives
here.  Code reads the value in effect with ``config.tuning().<name>``; a user changes it for the calls
made inside a block::

    with zvf.config.tuned(spill_bytes=8 << 20):
        zvf.write_points(url, positions)

The setting is a context variable: it follows the block into the tasks and threads the call starts
and into the blocking facade's loop, and leaves every other thread and task as it was.  It is not
carried into other processes (Dask workers read their own defaults).

It imports only ``zvf.errors``: every layer may read it.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .errors import InvalidArgumentError

__all__ = ["DEFAULTS", "Tuning", "tuned", "tuning"]


@dataclass(frozen=True, slots=True)
class Tuning:
    """The tuning settings (sections by layer; each field says what it bounds)."""

    # --- io ----------------------------------------------------------------------------------------

    # --- read --------------------------------------------------------------------------------------

    # --- write -------------------------------------------------------------------------------------

    # --- lifecycle ---------------------------------------------------------------------------------

    # --- export, converters, neuroglancer, validation ----------------------------------------------


DEFAULTS = Tuning()
_current: contextvars.ContextVar[Tuning] = contextvars.ContextVar("zvf_tuning", default=DEFAULTS)


def tuning() -> Tuning:
    """The settings in effect for the running call."""
    return _current.get()


@contextmanager
def tuned(**changes: Any) -> Iterator[Tuning]:
    """Change settings for the calls made in the block (nested blocks change the outer block's values)."""
    fields = {f.name: f for f in dataclasses.fields(Tuning)}
    for name, value in changes.items():
        if name not in fields:
            raise InvalidArgumentError(f"zvf.config.tuned: no setting {name!r} (settings: {', '.join(sorted(fields))})")
        default = fields[name].default
        if type(value) is not type(default) and not (isinstance(default, float) and type(value) is int):
            raise InvalidArgumentError(f"zvf.config.tuned: {name} must be a {type(default).__name__}, got {value!r}")
        if isinstance(value, (int, float)) and not value > 0:
            raise InvalidArgumentError(f"zvf.config.tuned: {name} must be > 0, got {value!r}")
    token = _current.set(dataclasses.replace(_current.get(), **changes))
    try:
        yield _current.get()
    finally:
        _current.reset(token)
