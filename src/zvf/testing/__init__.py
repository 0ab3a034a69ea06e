"""Test doubles and local servers for code built on zvf (and zvf's own tests, demo, examples).

* :class:`MemoryTransport` -- a dict-backed transport with latency, faults
  (:class:`FaultPlan`) and a request log; wrap it with
  ``StoreHandle.for_transport`` to run readers and writers without a network.
* :class:`EmbeddedS3` -- moto's S3 server on 127.0.0.1 inside this process
  (needs the ``demo`` extra).

Nothing here is imported by ``import zvf``; the names load on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EmbeddedS3", "Fault", "FaultPlan", "LogEntry", "MemoryTransport"]

_HOME = {"EmbeddedS3": "s3", "Fault": "memory", "FaultPlan": "memory", "LogEntry": "memory",
         "MemoryTransport": "memory"}


def __getattr__(name: str) -> Any:
    """Load the submodule on first use (moto and anyio stay unimported until needed)."""
    mod = _HOME.get(name)
    if mod is None:
        raise AttributeError(f"module 'zvf.testing' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
