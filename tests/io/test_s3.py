"""Real S3 round trips: obstore S3Store against moto (or ZVF_TEST_S3_ENDPOINT),
directly and through the FaultProxy."""

from __future__ import annotations

import time

import anyio
import pytest

from zvf.errors import RemoteError, StoreExistsError
from zvf.io.executor import Executor
from zvf.io.plan import ByteRange
from zvf.io.store import open_store

pytestmark = pytest.mark.s3

MiB = 1024 * 1024


def proxied(s3_target, proxy, **extra):
    url, opts = s3_target
    return url, {**opts, "endpoint": proxy.url, **extra}


async def test_round_trips(s3_target):
    url, opts = s3_target
    ex = Executor(open_store(url, mode="w", storage_options=opts))
    blob = bytes(range(256)) * 40
    await ex.put("zarr.json", b"{}")
    await ex.put("c/0/0", blob)
    await ex.put("c/0/1", b"")
    await ex.put("c/1/0", b"x")
    assert await ex.get("zarr.json") == b"{}"
    assert await ex.get("missing") is None
    assert await ex.head("c/0/0") == len(blob) and await ex.head("missing") is None
    assert await ex.get_range("c/0/0", 100, 200) == blob[100:200]
    assert await ex.get_range("c/0/0", len(blob) - 5, len(blob) + 50) == blob[-5:]
    assert await ex.get_range("c/0/0", len(blob) + 10, len(blob) + 50) == b""
    assert await ex.get_range("c/0/0", 10_000, None) == blob[10_000:]
    assert await ex.get_suffix("c/0/0", 16) == blob[-16:]
    assert await ex.get_suffix("c/0/0", 100_000) == blob
    assert await ex.get_suffix("c/0/1", 8) == b""
    assert await ex.get_range("missing", 0, 4) is None
    ranges = [ByteRange("c/0/0", i, i + 7) for i in range(0, 5000, 250)]
    ranges.append(ByteRange.suffix_of("c/0/0", 4))
    assert await ex.read_ranges(ranges, max_gap=0, max_size=MiB) == [
        blob[r.start:r.end] if r.end is not None else blob[-4:] for r in ranges]
    assert await ex.transport.get_ranges("c/0/0", [0, 9], [3, 12]) == [blob[:3], blob[9:12]]
    assert await ex.list("c") == [("c/0/0", len(blob)), ("c/0/1", 0), ("c/1/0", 1)]
    assert await ex.list("") == [("c/0/0", len(blob)), ("c/0/1", 0), ("c/1/0", 1),
                                 ("zarr.json", 2)]
    assert await ex.list_dirs("c") == (["c/0", "c/1"], [])
    assert await ex.list_dirs("") == (["c"], [("zarr.json", 2)])
    await ex.delete(["c/0/1", "c/1/0", "never-existed"])
    assert await ex.list("c") == [("c/0/0", len(blob))]
    # the prefix really is a prefix inside the bucket
    root = Executor(open_store(url.rsplit("/", 1)[0], storage_options=opts))
    assert await root.get("data/zarr.json") == b"{}"


async def test_create_conditional_conflict(s3_target):
    url, opts = s3_target
    ex = Executor(open_store(url, mode="w", storage_options=opts))
    await ex.put("zarr.json", b"first", mode="create")
    with pytest.raises(StoreExistsError, match=r"'zarr\.json'"):
        await ex.put("zarr.json", b"second", mode="create")
    assert await ex.get("zarr.json") == b"first"


async def test_multipart_upload_with_5mib_parts(s3_target, fault_proxy):
    url, opts = proxied(s3_target, fault_proxy)
    ex = Executor(open_store(url, mode="w", storage_options=opts))
    blob = (bytes(range(251)) * (11 * MiB // 251 + 1))[: 11 * MiB + 123]
    await ex.put_multipart("big/blob", blob, part_size=5 * MiB)
    c = fault_proxy.counts()["requests"]
    assert c["POST"] == 2 and c["PUT"] == 3  # create + complete; three parts
    assert await ex.head("big/blob") == len(blob)
    assert await ex.get_range("big/blob", 5 * MiB - 3, 5 * MiB + 3) == blob[5 * MiB - 3: 5 * MiB + 3]

    async def chunks():  # arbitrary chunk sizes are re-cut into parts by obstore
        for i in range(0, len(blob), 3 * MiB):
            yield blob[i:i + 3 * MiB]

    await ex.put_multipart("big/stream", chunks(), part_size=5 * MiB)
    assert await ex.get("big/stream") == blob
    assert ex.stats.bytes_put == 2 * len(blob)


async def test_storage_options_from_environment(s3_target, s3_endpoint, monkeypatch):
    url, _opts = s3_target
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_endpoint.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_endpoint.secret_key)
    monkeypatch.setenv("AWS_REGION", s3_endpoint.region)
    ex = Executor(open_store(url, mode="w"))  # allow_http follows the http:// endpoint
    await ex.put("env", b"ok")
    assert await ex.get("env") == b"ok"


async def test_503_burst_is_retried(s3_proxied):
    url, opts, fault_proxy = s3_proxied
    opts.update(init_backoff=0.01, max_backoff=0.05)
    ex = Executor(open_store(url, mode="w", storage_options=opts))
    await ex.put("c/0", b"chunk")
    fault_proxy.reset_counters()
    fault_proxy.fail(503, times=3, method="GET", key="c/0")
    assert await ex.get("c/0") == b"chunk"
    assert ex.stats.retries == 3
    assert fault_proxy.requests("GET") == 4 and fault_proxy.counts()["faults"] == 3
    # 429 SlowDown and dropped connections are retried too
    fault_proxy.slowdown(times=2, method="GET")
    fault_proxy.drop(times=1, method="GET")
    assert await ex.get_range("c/0", 1, 3) == b"hu"
    assert ex.stats.retries == 6


async def test_persistent_500_ends_in_remote_error_naming_key(s3_target, fault_proxy):
    url, opts = proxied(s3_target, fault_proxy, max_retries=50, retry_timeout=0.5,
                        init_backoff=0.02, max_backoff=0.1)
    ex = Executor(open_store(url, mode="w", storage_options=opts))
    fault_proxy.fail(500, times=None, key="c/bad")
    with pytest.raises(RemoteError, match="'c/bad'") as ei:
        await ex.get("c/bad")
    # retry_timeout (0.5 s), not max_retries (50), ended it; every attempt reached the proxy
    assert ex.stats.requests == fault_proxy.requests("GET") < 51
    assert "500" in str(ei.value) and opts["secret_access_key"] not in str(ei.value)
    assert ex.stats.failures == 1 and ex.stats.retries >= 2
    # a create put is not retried after an ambiguous failure (500)
    fault_proxy.clear_rules()
    fault_proxy.fail(500, times=1, method="PUT", key="c/new")
    with pytest.raises(RemoteError, match="'c/new'") as ei:
        await ex.put("c/new", b"x", mode="create")
    assert not isinstance(ei.value, StoreExistsError)
    assert await ex.get("c/new") is None  # the proxy answered; moto never saw it


async def test_latency_parallel_reads_take_one_round_trip(s3_target, fault_proxy):
    url, opts = proxied(s3_target, fault_proxy)
    ex = Executor(open_store(url, mode="w", storage_options=opts))
    await ex.gather([ex.put(f"c/{i}", bytes([i]) * 100) for i in range(16)])
    fault_proxy.latency = 0.1
    ex.stats.reset()
    out = await ex.map(ex.get, [f"c/{i}" for i in range(16)])
    assert out == [bytes([i]) * 100 for i in range(16)]
    assert ex.stats.round_trips == 1 and ex.stats.requests == 16 and ex.stats.max_inflight == 16
    # a latency spike on one key only delays that request
    fault_proxy.latency = 0.0
    spike = fault_proxy.spike(0.3, key="c/3")
    with anyio.fail_after(5):
        assert await ex.get("c/4") == bytes([4]) * 100
        assert spike.fired == 0
        t0 = time.monotonic()
        assert await ex.get("c/3") == bytes([3]) * 100
        assert spike.fired == 1 and time.monotonic() - t0 >= 0.3  # a lower bound: cannot flake


def test_fault_proxy_counts_and_stops_cleanly(s3_endpoint):
    from tests.servers import FaultProxy

    proxy = FaultProxy(s3_endpoint.endpoint, latency=0.0).start()
    url = proxy.url
    import urllib.error
    import urllib.request

    try:  # ListBuckets, unsigned: moto answers, other servers may refuse (any answer will do)
        with urllib.request.urlopen(url + "/") as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:
        body = e.read()
    assert proxy.requests("GET") == 1 and proxy.counts()["bytes_out"]["GET"] == len(body)
    proxy.stop()
    proxy.stop()  # idempotent
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/", timeout=1)
