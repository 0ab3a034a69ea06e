"""Test doubles and local servers for code built on zvf (and zvf's own tests, demo, examples).

* :class:`MemoryTransport` -- a dict-backed transport with latency, faults
  (:class:`FaultPlan`) and a request log; wrap it with
  ``StoreHandle.for_transport`` to run readers and writers without a network.
* :class:`EmbeddedS3` -- moto's S3 server on 127.0.0.1 inside this process
  (needs the ``demo`` extra).
* :class:`TransportTests` -- the Transport contract as a pytest suite: subclass it
  with a ``transport`` fixture to check a transport (see :mod:`zvf.testing.transport`).

Nothing here is imported by ``import zvf``; the names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # "X as X": explicit re-exports for type checkers; keep in step with _HOME
    from .memory import Fault as Fault
    from .memory import FaultPlan as FaultPlan
    from .memory import LogEntry as LogEntry
    from .memory import MemoryTransport as MemoryTransport
    from .s3 import EmbeddedS3 as EmbeddedS3
    from .transport import TransportTests as TransportTests

__all__ = ["EmbeddedS3", "Fault", "FaultPlan", "LogEntry", "MemoryTransport", "TransportTests"]

_HOME = {"EmbeddedS3": "s3", "Fault": "memory", "FaultPlan": "memory", "LogEntry": "memory",
         "MemoryTransport": "memory", "TransportTests": "transport"}


def __getattr__(name: str) -> Any:
    """Load the submodule on first use (moto, anyio and pytest stay unimported until needed)."""
    mod = _HOME.get(name)
    if mod is None:
        raise AttributeError(f"module 'zvf.testing' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
