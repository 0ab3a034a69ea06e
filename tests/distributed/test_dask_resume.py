"""A Dask object ingest that died part way resumes from its finished tasks (Dask's in-process scheduler:
the failure is injected by patching a task function, which a worker process would not see)."""

from __future__ import annotations

import numpy as np
import pytest

import zvf
from tests.support.object_batches import OPTS, graph_batches, kw_of
from tests.support.store_tree import tree

zvf_dask = pytest.importorskip("zvf.dask")


def test_a_job_that_died_in_its_link_tasks_resumes_from_them(tmp_path, monkeypatch):
    import dask

    from zvf.write.objects import tasks as object_tasks

    rng = np.random.default_rng(8)
    batches, _ = graph_batches(rng, [50, 40, 30], 3)
    kw = kw_of(OPTS[2])
    zvf.write_graph(tmp_path / "s" / "store", batches, **kw)
    real, calls = object_tasks.link_cells, []

    def dies_once(job, index, task, sources):  # the second link task to run fails, the first one finished
        calls.append(index)
        if len(calls) == 2:
            raise RuntimeError("worker lost")
        return real(job, index, task, sources)

    monkeypatch.setattr(object_tasks, "link_cells", dies_once)
    target = str(tmp_path / "d" / "store")
    with dask.config.set(scheduler="sync"):  # one task at a time, in this process
        with pytest.raises(RuntimeError, match="worker lost"):
            zvf_dask.write_graph(target, batches, job="j", rows_per_task=20, **kw)
        zvf_dask.write_graph(target, batches, job="j", rows_per_task=20, **kw)
    assert tree(tmp_path / "s" / "store") == tree(target)
    assert calls[0] not in calls[2:] and calls[1] in calls[2:]  # the finished link task was not rerun


def test_a_failed_task_returns_only_after_the_others_ended(tmp_path):
    """No task of a failed job may write after the call raised (a resumed job's commit would leave it)."""
    import time

    import dask

    from zvf.distributed.run import compute

    def slow():
        time.sleep(0.5)
        (tmp_path / "late").write_text("written")

    def fails():
        raise RuntimeError("source unavailable")

    with pytest.raises(RuntimeError, match="source unavailable"):
        compute([dask.delayed(slow)(), dask.delayed(fails)()])  # Dask's local threaded scheduler
    assert (tmp_path / "late").exists()
