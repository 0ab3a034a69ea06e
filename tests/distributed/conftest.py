"""What the Dask tests share: a two-process local cluster per module, a store's files by content, and
sources that fail or kill their worker once."""

from __future__ import annotations

import os
import sys

import pytest

try:
    import cloudpickle
except ImportError:  # no dask extra: the tests skip
    pass
else:
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import the tests package


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                      host="127.0.0.1") as cluster, Client(cluster) as c:
        yield c


class KillOnce:
    """A source whose first call kills the worker process running it (a machine lost mid-ingest)."""

    def __init__(self, marker: str, batch: dict):
        self.marker, self.batch = marker, batch

    def __call__(self):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return self.batch


class FailOnce(KillOnce):
    """A source whose first call fails (a job that dies and is resumed)."""

    def __call__(self):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("source unavailable")
        return self.batch
