"""The Transport contract as a test suite: subclass :class:`TransportTests` to check a transport.

Every rule :mod:`zvf.io.transport` promises (missing objects read as None, ranges past the end come
back shorter, create-if-absent has one winner, a conditional put replaces only what was read, listings
treat the prefix as a directory...) is one test here.  zvf runs it over its in-memory double, local
files, ``memory://``, S3 (moto), GCS and Azure emulators; a transport of your own (a wrapper that logs,
caches or encrypts) can run it too.  The subclass gives a ``transport`` fixture: a fresh, empty,
writable transport per test::

    import pytest
    from zvf.io.store import open_store
    from zvf.testing import TransportTests

    class TestMyTransport(TransportTests):
        @pytest.fixture
        def transport(self, tmp_path):
            return MyLoggingTransport(open_store(tmp_path / "store", mode="w").transport)

The tests are plain functions that run their coroutine with ``anyio.run``: no pytest plugin for
asyncio is needed.  A store that lacks a feature says so by overriding :meth:`TransportTests.supports`.
This module imports pytest; ``import zvf`` never loads it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import numpy as np
import pytest

from ..errors import ConcurrentModificationError, InvalidArgumentError, RemoteError, StoreExistsError
from ..io.transport import Transport

__all__ = ["TransportTests"]

BLOB = bytes(range(256)) * 8  # 2048 bytes, every byte value at a known offset
FILLED = {"a/x": BLOB, "a/y": b"12345", "a/sub/z": b"z", "ab": b"not under a/", "empty": b"", "zarr.json": b"{}"}


def _blocking(test: Callable[[TransportTests, Transport], Awaitable[None]]) -> Callable[[TransportTests, Transport],
                                                                                        None]:
    """A test method that runs the coroutine method ``test`` to its end in its own event loop."""

    def run(self: TransportTests, transport: Transport) -> None:
        anyio.run(test, self, transport)

    run.__name__, run.__qualname__, run.__doc__ = test.__name__, test.__qualname__, test.__doc__
    return run


async def _filled(t: Transport) -> Transport:
    for key, data in FILLED.items():
        await t.put(key, data)
    return t


async def _race(n: int, attempt: Callable[[int], Awaitable[object]], lost: type[Exception]) -> list[int]:
    """Run ``attempt(0)`` .. ``attempt(n - 1)`` at once; the ones that did not raise ``lost`` (any other
    error fails the test)."""
    won: list[int] = []

    async def one(i: int) -> None:
        try:
            await attempt(i)
        except lost:
            return
        won.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return won


class TransportTests:
    """The Transport contract; a subclass provides the ``transport`` fixture (see the module docstring)."""

    def supports(self, transport: Transport, feature: str) -> bool:
        """Whether ``transport`` offers ``feature``; tests of what it lacks are skipped, saying so.

        Features: ``"compare_and_swap"`` (``get_tagged`` gives a tag and ``put(mode=tag)`` honours it;
        a store without one answers a None tag), ``"stale_version_refused"`` (a tag's ``version`` part
        is checked too), ``"copy"``.
        """
        return True

    def _skip_unless(self, transport: Transport, feature: str) -> None:
        if not self.supports(transport, feature):
            pytest.skip(f"{transport.label}: no {feature} ({type(self).__name__}.supports)")

    @_blocking
    async def test_is_a_transport_with_a_label(self, transport: Transport) -> None:
        assert isinstance(transport, Transport)
        assert isinstance(transport.label, str) and transport.label

    @_blocking
    async def test_get_returns_what_put_stored(self, transport: Transport) -> None:
        await _filled(transport)
        assert await transport.get("a/x") == BLOB
        assert await transport.get("empty") == b""
        assert await transport.head("a/x") == len(BLOB)
        assert await transport.head("empty") == 0

    @_blocking
    async def test_missing_object_is_none_for_every_read(self, transport: Transport) -> None:
        await _filled(transport)
        assert await transport.get("nope") is None
        assert await transport.get_range("nope", 0, 4) is None
        assert await transport.get_ranges("nope", [0], [4]) is None
        assert await transport.get_suffix("nope", 4) is None
        assert await transport.head("nope") is None
        assert await transport.get("a") is None  # a "directory" is not an object

    @_blocking
    async def test_key_below_an_object_is_missing(self, transport: Transport) -> None:
        await _filled(transport)
        assert await transport.get("a/y/zarr.json") is None
        assert await transport.head("a/y/zarr.json") is None

    @_blocking
    async def test_bounded_ranges(self, transport: Transport) -> None:
        await _filled(transport)
        assert await transport.get_range("a/x", 0, 1) == BLOB[:1]
        assert await transport.get_range("a/x", 100, 300) == BLOB[100:300]
        assert await transport.get_range("a/x", 7, 7) == b""  # empty range, no error
        assert await transport.get_range("a/x", 9, 3) == b""

    @_blocking
    async def test_range_past_the_end_is_shorter_or_empty(self, transport: Transport) -> None:
        await _filled(transport)
        n = len(BLOB)
        assert await transport.get_range("a/x", n - 5, n + 50) == BLOB[-5:]
        assert await transport.get_range("a/x", n, n + 10) == b""
        assert await transport.get_range("a/x", n + 100, n + 200) == b""

    @_blocking
    async def test_open_ended_ranges(self, transport: Transport) -> None:
        await _filled(transport)
        assert await transport.get_range("a/x", 2000, None) == BLOB[2000:]
        assert await transport.get_range("a/x", 0, None) == BLOB
        assert await transport.get_range("a/x", -10, None) == BLOB[-10:]  # negative start: a suffix

    @_blocking
    async def test_suffix_reads(self, transport: Transport) -> None:
        await _filled(transport)
        assert await transport.get_suffix("a/x", 16) == BLOB[-16:]
        assert await transport.get_suffix("a/x", len(BLOB)) == BLOB
        assert await transport.get_suffix("a/x", 10 * len(BLOB)) == BLOB  # longer than the object
        assert await transport.get_suffix("empty", 8) == b""
        with pytest.raises(InvalidArgumentError, match="'a/x'"):
            await transport.get_suffix("a/x", 0)

    @_blocking
    async def test_many_ranges_of_one_object(self, transport: Transport) -> None:
        await _filled(transport)
        starts, ends = [0, 9, 500, 100, 2040, 5000], [3, 12, 500, 90, 2100, 6000]
        got = await transport.get_ranges("a/x", starts, ends)
        assert got == [BLOB[s:e] if e > s else b"" for s, e in zip(starts, ends)]
        assert await transport.get_ranges("a/x", [], []) == []
        with pytest.raises(InvalidArgumentError, match="'a/x'"):
            await transport.get_ranges("a/x", [0, 1], [2])

    @_blocking
    async def test_put_takes_any_contiguous_buffer(self, transport: Transport) -> None:
        arr = np.arange(12, dtype=np.float32).reshape(3, 4)
        await transport.put("buf/np", arr)
        await transport.put("buf/mv", memoryview(b"view"))
        await transport.put("buf/ba", bytearray(b"ba"))
        assert await transport.get("buf/np") == arr.tobytes()
        assert await transport.get("buf/mv") == b"view"
        assert await transport.get("buf/ba") == b"ba"

    @_blocking
    async def test_overwrite_replaces(self, transport: Transport) -> None:
        await transport.put("k", b"first")
        await transport.put("k", b"second", mode="overwrite")
        assert await transport.get("k") == b"second"

    @_blocking
    async def test_create_if_absent(self, transport: Transport) -> None:
        await transport.put("claim", b"mine", mode="create")
        with pytest.raises(StoreExistsError, match="'claim'"):
            await transport.put("claim", b"theirs", mode="create")
        assert await transport.get("claim") == b"mine"

    @_blocking
    async def test_concurrent_creates_have_one_winner(self, transport: Transport) -> None:
        winners = await _race(6, lambda i: transport.put("race", f"writer {i}".encode(), mode="create"),
                              StoreExistsError)
        assert len(winners) == 1
        assert await transport.get("race") == f"writer {winners[0]}".encode()

    @_blocking
    async def test_etag_put_replaces_only_what_was_read(self, transport: Transport) -> None:
        """get_tagged + put(mode=tag) is a compare-and-swap; a store without one says so with a None tag."""
        await transport.put("doc", b"v1")
        got = await transport.get_tagged("doc")
        assert got is not None
        data, tag = got
        assert data == b"v1"
        assert await transport.get_tagged("nope") is None
        if not self.supports(transport, "compare_and_swap"):
            assert tag is None
            return
        assert tag is not None
        again = await transport.get_tagged("doc")
        assert again is not None and again[1] == tag  # stable while the object is unchanged
        if "version" in tag:
            self._skip_unless(transport, "stale_version_refused")
        winners = await _race(4, lambda i: transport.put("doc", f"v2 by {i}".encode(), mode=tag),
                              ConcurrentModificationError)
        assert len(winners) == 1
        assert await transport.get("doc") == f"v2 by {winners[0]}".encode()
        with pytest.raises(ConcurrentModificationError, match="'doc'"):
            await transport.put("doc", b"v3", mode=tag)

    @_blocking
    async def test_copy_duplicates_an_object(self, transport: Transport) -> None:
        self._skip_unless(transport, "copy")
        await _filled(transport)
        await transport.copy("a/x", "b/c/x")
        await transport.copy("a/y", "a/x")  # over an existing object
        assert await transport.get("b/c/x") == BLOB and await transport.get("a/x") == b"12345"
        with pytest.raises(RemoteError, match="'nope'"):
            await transport.copy("nope", "b/n")

    @_blocking
    async def test_bad_put_mode_is_refused_naming_the_key(self, transport: Transport) -> None:
        with pytest.raises(InvalidArgumentError, match="'k'"):
            await transport.put("k", b"x", mode="update")
        assert await transport.get("k") is None

    @_blocking
    async def test_multipart_put_from_bytes_lists_and_async_chunks(self, transport: Transport) -> None:
        part = 5 * 1024 * 1024  # S3's smallest part (all but the last)
        big = np.random.default_rng(0).integers(0, 256, part + 4097, dtype=np.uint8).tobytes()
        await transport.put_multipart("mp/bytes", big, part_size=part)
        await transport.put_multipart("mp/list", [big[:700], big[700:]], part_size=part)

        async def chunks() -> AsyncIterator[bytes]:
            for i in range(0, len(big), 1 << 20):
                yield big[i:i + (1 << 20)]

        await transport.put_multipart("mp/async", chunks(), part_size=part, max_concurrency=2)
        for key in ("mp/bytes", "mp/list", "mp/async"):
            assert await transport.get(key) == big, key

    @_blocking
    async def test_list_treats_the_prefix_as_a_directory(self, transport: Transport) -> None:
        await _filled(transport)
        assert await transport.list("a") == [("a/sub/z", 1), ("a/x", len(BLOB)), ("a/y", 5)]
        assert await transport.list("a/") == await transport.list("a")
        assert await transport.list("a/sub") == [("a/sub/z", 1)]
        assert await transport.list("nothing") == []
        everything = await transport.list("")
        assert [k for k, _ in everything] == sorted(FILLED)

    @_blocking
    async def test_list_dirs_splits_at_the_next_slash(self, transport: Transport) -> None:
        await _filled(transport)
        assert await transport.list_dirs("") == (["a"], [("ab", 12), ("empty", 0), ("zarr.json", 2)])
        assert await transport.list_dirs("a") == (["a/sub"], [("a/x", len(BLOB)), ("a/y", 5)])
        assert await transport.list_dirs("nothing") == ([], [])

    @_blocking
    async def test_delete_removes_and_ignores_missing_keys(self, transport: Transport) -> None:
        await _filled(transport)
        await transport.delete(["a/y", "a/sub/z", "never-existed"])
        await transport.delete([])
        assert await transport.get("a/y") is None and await transport.head("a/sub/z") is None
        assert await transport.list("a") == [("a/x", len(BLOB))]
        await transport.delete(["gone-too"])
