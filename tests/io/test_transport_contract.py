"""The Transport contract (src/zvf/io/transport.py), asserted on every transport.

One class, run over the in-memory test double, a local directory, ``memory://``,
S3 (moto), GCS (fake-gcs-server) and Azure (Azurite), each through the same
``open_store`` path users take (so store prefixes are exercised too).  A rule
the module docstring promises is a test here; a backend that breaks one fails
by name.
"""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from zvf.errors import ConcurrentModificationError, InvalidArgumentError, RemoteError, StoreExistsError
from zvf.io.store import open_store
from zvf.io.transport import Transport

BACKENDS = ["double", "local", "memory", "s3", "gcs", "azure"]
BLOB = bytes(range(256)) * 8  # 2048 bytes, every byte value at a known offset


@pytest.fixture(params=BACKENDS)
def transport(request, tmp_path, memory_url) -> Transport:
    """A fresh, empty, writable transport of one backend, rooted below a prefix."""
    kind = request.param
    if kind == "double":
        from zvf.testing import MemoryTransport

        return MemoryTransport()
    if kind == "local":
        return open_store(tmp_path / "store", mode="w").transport
    if kind == "memory":
        return open_store(memory_url + "/prefix", mode="w").transport
    if kind == "s3":
        url, opts = request.getfixturevalue("s3_target")
        return open_store(url, mode="w", storage_options=opts).transport
    if kind == "gcs":
        gcs = request.getfixturevalue("fake_gcs")
        return open_store(f"gs://{gcs.create_bucket()}/data", mode="w", storage_options=gcs.storage_options()).transport
    az = request.getfixturevalue("azurite")
    return open_store(f"az://{az.create_container()}/data", mode="w", storage_options=az.storage_options()).transport


async def _filled(t: Transport) -> Transport:
    for key, data in [("a/x", BLOB), ("a/y", b"12345"), ("a/sub/z", b"z"), ("ab", b"not under a/"),
                      ("empty", b""), ("zarr.json", b"{}")]:
        await t.put(key, data)
    return t


class TestTransportContract:
    async def test_is_a_transport_with_a_label(self, transport):
        assert isinstance(transport, Transport)
        assert isinstance(transport.label, str) and transport.label

    async def test_get_returns_what_put_stored(self, transport):
        await _filled(transport)
        assert await transport.get("a/x") == BLOB
        assert await transport.get("empty") == b""
        assert await transport.head("a/x") == len(BLOB)
        assert await transport.head("empty") == 0

    async def test_missing_object_is_none_for_every_read(self, transport):
        await _filled(transport)
        assert await transport.get("nope") is None
        assert await transport.get_range("nope", 0, 4) is None
        assert await transport.get_ranges("nope", [0], [4]) is None
        assert await transport.get_suffix("nope", 4) is None
        assert await transport.head("nope") is None
        assert await transport.get("a") is None  # a "directory" is not an object

    async def test_key_below_an_object_is_missing(self, transport):
        await _filled(transport)
        assert await transport.get("a/y/zarr.json") is None
        assert await transport.head("a/y/zarr.json") is None

    async def test_bounded_ranges(self, transport):
        await _filled(transport)
        assert await transport.get_range("a/x", 0, 1) == BLOB[:1]
        assert await transport.get_range("a/x", 100, 300) == BLOB[100:300]
        assert await transport.get_range("a/x", 7, 7) == b""  # empty range, no error
        assert await transport.get_range("a/x", 9, 3) == b""

    async def test_range_past_the_end_is_shorter_or_empty(self, transport):
        await _filled(transport)
        n = len(BLOB)
        assert await transport.get_range("a/x", n - 5, n + 50) == BLOB[-5:]
        assert await transport.get_range("a/x", n, n + 10) == b""
        assert await transport.get_range("a/x", n + 100, n + 200) == b""

    async def test_open_ended_ranges(self, transport):
        await _filled(transport)
        assert await transport.get_range("a/x", 2000, None) == BLOB[2000:]
        assert await transport.get_range("a/x", 0, None) == BLOB
        assert await transport.get_range("a/x", -10, None) == BLOB[-10:]  # negative start: a suffix

    async def test_suffix_reads(self, transport):
        await _filled(transport)
        assert await transport.get_suffix("a/x", 16) == BLOB[-16:]
        assert await transport.get_suffix("a/x", len(BLOB)) == BLOB
        assert await transport.get_suffix("a/x", 10 * len(BLOB)) == BLOB  # longer than the object
        assert await transport.get_suffix("empty", 8) == b""
        with pytest.raises(InvalidArgumentError, match="'a/x'"):
            await transport.get_suffix("a/x", 0)

    async def test_many_ranges_of_one_object(self, transport):
        await _filled(transport)
        starts, ends = [0, 9, 500, 100, 2040, 5000], [3, 12, 500, 90, 2100, 6000]
        got = await transport.get_ranges("a/x", starts, ends)
        assert got == [BLOB[s:e] if e > s else b"" for s, e in zip(starts, ends)]
        assert await transport.get_ranges("a/x", [], []) == []
        with pytest.raises(InvalidArgumentError, match="'a/x'"):
            await transport.get_ranges("a/x", [0, 1], [2])

    async def test_put_takes_any_contiguous_buffer(self, transport):
        arr = np.arange(12, dtype=np.float32).reshape(3, 4)
        await transport.put("buf/np", arr)
        await transport.put("buf/mv", memoryview(b"view"))
        await transport.put("buf/ba", bytearray(b"ba"))
        assert await transport.get("buf/np") == arr.tobytes()
        assert await transport.get("buf/mv") == b"view"
        assert await transport.get("buf/ba") == b"ba"

    async def test_overwrite_replaces(self, transport):
        await transport.put("k", b"first")
        await transport.put("k", b"second", mode="overwrite")
        assert await transport.get("k") == b"second"

    async def test_create_if_absent(self, transport):
        await transport.put("claim", b"mine", mode="create")
        with pytest.raises(StoreExistsError, match="'claim'"):
            await transport.put("claim", b"theirs", mode="create")
        assert await transport.get("claim") == b"mine"

    async def test_concurrent_creates_have_one_winner(self, transport):
        outcomes: list[str] = []

        async def claim(i: int) -> None:
            try:
                await transport.put("race", f"writer {i}".encode(), mode="create")
                outcomes.append(f"writer {i}")
            except StoreExistsError:
                outcomes.append("lost")

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(claim, i)
        winners = [o for o in outcomes if o != "lost"]
        assert len(winners) == 1 and len(outcomes) == 6
        assert await transport.get("race") == winners[0].encode()

    async def test_etag_put_replaces_only_what_was_read(self, transport):
        """get_tagged + put(mode=tag) is a compare-and-swap; a store without one says so with a None
        tag (obstore's LocalStore)."""
        await transport.put("doc", b"v1")
        data, tag = await transport.get_tagged("doc")
        assert data == b"v1"
        assert await transport.get_tagged("nope") is None
        if tag is None:
            assert type(transport.store).__name__ == "LocalStore"
            return
        _, tag2 = await transport.get_tagged("doc")
        assert tag2 == tag  # stable while the object is unchanged
        if "version" in tag and transport.label.startswith("gs://"):
            pytest.skip("fake-gcs-server accepts a stale x-goog-if-generation-match (GCS itself refuses it)")
        outcomes = []

        async def swap(i: int) -> None:
            try:
                await transport.put("doc", f"v2 by {i}".encode(), mode=tag)
                outcomes.append(i)
            except ConcurrentModificationError:
                outcomes.append("lost")

        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(swap, i)
        winners = [o for o in outcomes if o != "lost"]
        assert len(winners) == 1
        assert await transport.get("doc") == f"v2 by {winners[0]}".encode()
        with pytest.raises(ConcurrentModificationError, match="'doc'"):
            await transport.put("doc", b"v3", mode=tag)

    async def test_copy_duplicates_an_object(self, transport):
        if transport.label.startswith("gs://"):
            pytest.skip("fake-gcs-server answers the XML API's x-goog-copy-source with an empty object")
        await _filled(transport)
        await transport.copy("a/x", "b/c/x")
        await transport.copy("a/y", "a/x")  # over an existing object
        assert await transport.get("b/c/x") == BLOB and await transport.get("a/x") == b"12345"
        with pytest.raises(RemoteError, match="'nope'"):
            await transport.copy("nope", "b/n")

    async def test_bad_put_mode_is_refused_naming_the_key(self, transport):
        with pytest.raises(InvalidArgumentError, match="'k'"):
            await transport.put("k", b"x", mode="update")
        assert await transport.get("k") is None

    async def test_multipart_put_from_bytes_lists_and_async_chunks(self, transport):
        part = 5 * 1024 * 1024  # S3's smallest part (all but the last)
        big = np.random.default_rng(0).integers(0, 256, part + 4097, dtype=np.uint8).tobytes()
        await transport.put_multipart("mp/bytes", big, part_size=part)
        await transport.put_multipart("mp/list", [big[:700], big[700:]], part_size=part)

        async def chunks():
            for i in range(0, len(big), 1 << 20):
                yield big[i:i + (1 << 20)]

        await transport.put_multipart("mp/async", chunks(), part_size=part, max_concurrency=2)
        for key in ("mp/bytes", "mp/list", "mp/async"):
            assert await transport.get(key) == big, key

    async def test_list_treats_the_prefix_as_a_directory(self, transport):
        await _filled(transport)
        assert await transport.list("a") == [("a/sub/z", 1), ("a/x", len(BLOB)), ("a/y", 5)]
        assert await transport.list("a/") == await transport.list("a")
        assert await transport.list("a/sub") == [("a/sub/z", 1)]
        assert await transport.list("nothing") == []
        everything = await transport.list("")
        assert [k for k, _ in everything] == sorted(["a/x", "a/y", "a/sub/z", "ab", "empty", "zarr.json"])

    async def test_list_dirs_splits_at_the_next_slash(self, transport):
        await _filled(transport)
        assert await transport.list_dirs("") == (["a"], [("ab", 12), ("empty", 0), ("zarr.json", 2)])
        assert await transport.list_dirs("a") == (["a/sub"], [("a/x", len(BLOB)), ("a/y", 5)])
        assert await transport.list_dirs("nothing") == ([], [])

    async def test_delete_removes_and_ignores_missing_keys(self, transport):
        await _filled(transport)
        await transport.delete(["a/y", "a/sub/z", "never-existed"])
        await transport.delete([])
        assert await transport.get("a/y") is None and await transport.head("a/sub/z") is None
        assert await transport.list("a") == [("a/x", len(BLOB))]
        await transport.delete(["gone-too"])
