"""zvf.config: a setting changed with ``tuned()`` holds for the calls made in the block -- blocking facade
calls (run on the facade's loop thread), coroutines, worker threads -- and nowhere else; bad names and
values are refused naming the setting."""

from __future__ import annotations

import concurrent.futures
import threading

import anyio
import anyio.to_thread
import numpy as np
import pytest

import zvf
from zvf.config import DEFAULTS, Tuning, tuned, tuning
from zvf.errors import FormatError, InvalidArgumentError

TINY = 64  # bytes: every root document is larger, so a store opened under max_document_bytes=TINY is refused


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("config") / "points.zvf")
    rng = np.random.default_rng(0)
    zvf.write_points(path, rng.uniform(0, 100, (500, 3)), chunk_shape=(50.0, 50.0, 50.0))
    return path


def test_blocking_calls_in_the_block_use_its_settings(store):
    with tuned(max_document_bytes=TINY), pytest.raises(FormatError, match="max_document_bytes"):
        zvf.open(store)
    with zvf.open(store) as ds:  # defaults again after the block
        assert len(ds.read_all()) == 500


def test_a_dataset_opened_before_the_block_reads_under_it(store):
    with zvf.open(store) as ds:
        with tuned(max_decoded_bytes=8):  # every cell decodes to more
            with pytest.raises(zvf.errors.ZvfError, match="limit"):
                ds.read_all()
            with pytest.raises(zvf.errors.ZvfError, match="limit"):
                list(ds.iter_chunks())  # the facade's iterators step on the loop thread too
        assert sum(len(s) for s in ds.iter_chunks()) == 500


async def test_coroutines_and_their_worker_threads_use_the_block(store):
    with tuned(max_document_bytes=TINY):
        with pytest.raises(FormatError, match="max_document_bytes"):
            await zvf.aio.open(store)
        assert (await anyio.to_thread.run_sync(tuning)).max_document_bytes == TINY
    async with await zvf.aio.open(store) as ds:
        assert len(await ds.read_all()) == 500


def test_dask_local_threads_use_the_block():
    dask = pytest.importorskip("dask")
    from zvf.distributed.run import compute

    with tuned(convert_batch_rows=7):
        got = compute([dask.delayed(tuning)() for _ in range(4)])
    assert [t.convert_batch_rows for t in got] == [7] * 4


def test_other_threads_keep_their_own_settings(store):
    """A block changes its own thread's calls only: a server thread serving another request meanwhile
    keeps the defaults (and its blocking calls share the facade's loop with the block's)."""
    inside, outside = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def other() -> None:
        inside.wait(10)
        try:
            with zvf.open(store) as ds:
                seen["rows"] = len(ds.read_all())
        except Exception as exc:  # reported below
            seen["rows"] = exc
        seen["setting"] = tuning().max_document_bytes
        outside.set()

    thread = threading.Thread(target=other)
    thread.start()
    with tuned(max_document_bytes=TINY):
        inside.set()
        assert outside.wait(30)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a thread not started by zvf: defaults
            assert pool.submit(tuning).result() is DEFAULTS
        with pytest.raises(FormatError, match="max_document_bytes"):
            zvf.open(store)
    thread.join()
    assert seen == {"rows": 500, "setting": DEFAULTS.max_document_bytes}


def test_blocks_nest_and_restore():
    assert tuning() is DEFAULTS
    with tuned(convert_batch_rows=10, validation_similar_issues=3) as outer:
        assert outer is tuning() and (outer.convert_batch_rows, outer.validation_similar_issues) == (10, 3)
        with tuned(convert_batch_rows=20):
            assert (tuning().convert_batch_rows, tuning().validation_similar_issues) == (20, 3)
        assert tuning() is outer
        with pytest.raises(RuntimeError), tuned(convert_batch_rows=30):
            raise RuntimeError("an error leaves the block")
        assert tuning() is outer
    assert tuning() is DEFAULTS


def test_float_settings_take_ints():
    with tuned(max_reader_lease=5) as t:
        assert t.max_reader_lease == 5.0 and type(t.max_reader_lease) is float


@pytest.mark.parametrize(("changes", "match"), [
    ({"spill_byts": 1}, "no setting 'spill_byts'"),
    ({"convert_batch_rows": "1000"}, "convert_batch_rows must be of type int"),
    ({"convert_batch_rows": 2.5}, "convert_batch_rows must be of type int"),
    ({"convert_batch_rows": True}, "convert_batch_rows must be of type int"),
    ({"convert_batch_rows": 0}, "convert_batch_rows must be > 0"),
    ({"max_reader_lease": float("nan")}, "max_reader_lease must be > 0"),
    ({"max_reader_lease": "20"}, "max_reader_lease must be of type float"),
])
def test_bad_settings_are_refused_naming_them(changes, match):
    with pytest.raises(InvalidArgumentError, match=match), tuned(**changes):
        pass
    assert tuning() is DEFAULTS


def test_every_setting_has_a_positive_default_of_its_type():
    for name in Tuning.__annotations__:
        value = getattr(DEFAULTS, name)
        assert type(value) in (int, float) and value > 0, name


def test_settings_are_read_only_and_tuned_makes_new_ones():
    with pytest.raises(AttributeError, match="tuned"):
        DEFAULTS.max_width = 1
    with pytest.raises(AttributeError):
        del tuning().max_width
    with tuned(max_width=7) as inner:
        assert inner is tuning() and inner.max_width == 7 and inner.get_batch == DEFAULTS.get_batch
        with tuned(get_batch=3) as nested:  # keeps the outer block's change
            assert (nested.max_width, nested.get_batch) == (7, 3)
        assert repr(inner) == "Tuning(max_width=7)"
    assert tuning() is DEFAULTS and DEFAULTS.max_width == Tuning.max_width
    with pytest.raises(InvalidArgumentError, match="max_widht"):
        Tuning(max_widht=7)
