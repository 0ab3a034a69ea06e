"""The Dask tests' two-process local cluster, one per module (sources that fail or kill their worker
once are in tests/support/failing_sources.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                      host="127.0.0.1") as cluster, Client(cluster) as c:
        yield c
