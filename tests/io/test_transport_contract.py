"""The Transport contract (``zvf.testing.TransportTests``) over the in-memory test double, a local
directory, ``memory://`` and S3 (moto), each through the same ``open_store`` path users take (so store
prefixes are exercised too).  tests/io/test_emulators.py runs it on GCS and Azure emulators."""

from __future__ import annotations

import pytest

from zvf.io.store import open_store
from zvf.io.transport import ObstoreTransport, Transport
from zvf.testing import TransportTests


class TestTransportContract(TransportTests):
    @pytest.fixture(params=["double", "local", "memory", "s3"])
    def transport(self, request, tmp_path, memory_url) -> Transport:
        """A fresh, empty, writable transport of one backend, rooted below a prefix."""
        kind = request.param
        if kind == "double":
            from zvf.testing import MemoryTransport

            return MemoryTransport()
        if kind == "local":
            return open_store(tmp_path / "store", mode="w").transport
        if kind == "memory":
            return open_store(memory_url + "/prefix", mode="w").transport
        url, opts = request.getfixturevalue("s3_target")
        return open_store(url, mode="w", storage_options=opts).transport

    def supports(self, transport: Transport, feature: str) -> bool:
        """obstore's LocalStore has no ETags: its get_tagged answers a None tag."""
        local = isinstance(transport, ObstoreTransport) and type(transport.store).__name__ == "LocalStore"
        return not (feature == "compare_and_swap" and local)
