"""What the Dask tests share: a two-process local cluster per module, and a store's files by content."""

from __future__ import annotations

import hashlib
import os

import pytest


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                      host="127.0.0.1") as cluster, Client(cluster) as c:
        yield c


def tree(root) -> dict[str, str]:
    """Every file of a store: relative path -> content hash."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out
