"""Shared fixtures.  Server helpers live in tests/servers.py (no pytest there).

I/O fixtures:
  s3_endpoint   session: moto on 127.0.0.1 (or ZVF_TEST_S3_ENDPOINT) -> servers.S3Endpoint
  s3_target     function: fresh bucket -> (url "s3://bucket/data", storage_options)
  fault_proxy   function: servers.FaultProxy in front of s3_endpoint (started, stopped after)
  s3_proxied    function: fresh bucket behind fault_proxy -> (url, storage_options, proxy)
  memory_url    function: a fresh "memory://<name>" URL, forgotten afterwards
  azurite       session: Azurite on 127.0.0.1 -> servers.Azurite (skips, saying why, if it cannot run)
  fake_gcs      session: fake-gcs-server behind its XML bridge -> servers.FakeGcs (same)

Reference stores:
  ref_dir       session: THE directory of the stores zarr-vectors 0.9.2 wrote, with
                ``<name>.expected.json`` -- the shared fixtures when complete, else
                generated once per process with the installed reference package
                (tests/refstores.py decides; ``ZVF_REF_STORES`` / ``ZVF_REF_GENERATE``).
``REF_FIXTURES`` (the shared fixture path, which may be absent) and ``SHARED``
are kept for code that only reports where the fixtures would be; tests read
stores through ``ref_dir``.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.refstores import FIXTURES as REF_FIXTURES
from tests.refstores import REPO, SHARED, ReferenceStoresUnavailable, reference_dir
from tests.servers import (
    Azurite,
    EmulatorUnavailable,
    FakeGcs,
    FaultProxy,
    S3Endpoint,
    create_bucket,
    start_s3_endpoint,
)

__all__ = ["REF_FIXTURES", "REPO", "SHARED"]


@pytest.fixture(scope="session")
def ref_dir(tmp_path_factory) -> Path:
    """Directory of every reference store (see tests/refstores.py); read-only, copy before editing."""
    try:
        return reference_dir(tmp_path_factory.getbasetemp())
    except ReferenceStoresUnavailable as e:
        pytest.skip(str(e))
    except ImportError as e:
        pytest.skip(f"reference stores absent and zarr-vectors 0.9.2 cannot generate them: {e}")


@pytest.fixture(scope="session")
def s3_endpoint() -> S3Endpoint:
    ep = start_s3_endpoint()
    yield ep
    ep.stop()


@pytest.fixture
def s3_target(s3_endpoint: S3Endpoint) -> tuple[str, dict]:
    bucket = create_bucket(s3_endpoint)
    return f"s3://{bucket}/data", s3_endpoint.storage_options()


@pytest.fixture
def fault_proxy(s3_endpoint: S3Endpoint) -> FaultProxy:
    with FaultProxy(s3_endpoint.endpoint) as proxy:
        yield proxy


@pytest.fixture
def s3_proxied(s3_endpoint: S3Endpoint, fault_proxy: FaultProxy) -> tuple[str, dict, FaultProxy]:
    bucket = create_bucket(s3_endpoint)
    opts = s3_endpoint.storage_options(endpoint=fault_proxy.url)
    return f"s3://{bucket}/data", opts, fault_proxy


@pytest.fixture
def memory_url() -> str:
    from zvf.io.backends import forget_memory_store

    name = f"t{uuid.uuid4().hex[:12]}"
    yield f"memory://{name}"
    forget_memory_store(name)


def _emulator(factory):
    try:
        server = factory()
    except EmulatorUnavailable as e:
        pytest.skip(f"emulator unavailable: {e}")
    return server


@pytest.fixture(scope="session")
def azurite() -> Azurite:
    server = _emulator(Azurite)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fake_gcs() -> FakeGcs:
    server = _emulator(FakeGcs)
    yield server
    server.stop()
