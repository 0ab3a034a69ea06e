"""Dask ingest sources that fail, or kill the worker process running them, on their first call (a job
that dies and is resumed; a machine lost mid-ingest).  Pickled by value: workers need not import the
tests package."""

from __future__ import annotations

import os
import sys

try:
    import cloudpickle
except ImportError:  # no dask extra: the tests skip
    pass
else:
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


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
