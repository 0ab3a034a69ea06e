"""Shared fixtures.  Server helpers live in tests/servers.py (no pytest there).

I/O fixtures:
  s3_endpoint   session: moto on 127.0.0.1 (or ZVF_TEST_S3_ENDPOINT) -> servers.S3Endpoint
  s3_target     function: fresh bucket -> (url "s3://bucket/data", storage_options)
  fault_proxy   function: servers.FaultProxy in front of s3_endpoint (started, stopped after)
  s3_proxied    function: fresh bucket behind fault_proxy -> (url, storage_options, proxy)
  memory_url    function: a fresh "memory://<name>" URL, forgotten afterwards
  azurite       session: Azurite on 127.0.0.1 -> servers.Azurite (skips, saying why, if it cannot run)
  fake_gcs      session: fake-gcs-server behind its XML bridge -> servers.FakeGcs (same)

Paths: ``REF_FIXTURES`` is the directory of stores zarr-vectors 0.9.2 wrote
(``../shared/fixtures/ref-0.9.2`` beside the repo, or ``ZVF_REF_FIXTURES``);
``SHARED`` is that ``shared/`` directory.  Every test module takes them from here.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.servers import (
    Azurite,
    EmulatorUnavailable,
    FakeGcs,
    FaultProxy,
    S3Endpoint,
    create_bucket,
    start_s3_endpoint,
)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REF_FIXTURES = Path(os.environ.get("ZVF_REF_FIXTURES") or SHARED / "fixtures" / "ref-0.9.2")


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
    from zvf.io.store import forget_memory_store

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
