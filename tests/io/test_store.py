from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import anyio
import pytest

from zvf.errors import (
    InvalidArgumentError,
    ReadOnlyError,
    RemoteError,
    StoreExistsError,
    StoreNotFoundError,
    TransientError,
)
from zvf.io.backends import forget_memory_store, memory_store
from zvf.io.executor import Executor
from zvf.io.retry import RetryPolicy
from zvf.io.store import open_store
from zvf.io.transport import ObstoreTransport, ReadOnlyTransport

SECRET = "sEcReT-9f8e7d6c5b4a"


# ---------------------------------------------------------------------------- local


async def test_local_path_modes(tmp_path: Path):
    target = tmp_path / "store.zvf"
    with pytest.raises(StoreNotFoundError, match=r"store\.zvf"):
        open_store(target)
    h = open_store(target, mode="w")
    assert target.is_dir() and h.scheme == "file" and not h.read_only
    assert h.url == target.resolve().as_uri() and h.concurrency == 8
    ex = Executor(h)
    await ex.put("a/zarr.json", b"{}")
    assert (target / "a" / "zarr.json").read_bytes() == b"{}"
    # file:// URL and a plain string path reach the same data, read-only
    for t in (target.resolve().as_uri(), str(target)):
        r = Executor(open_store(t))
        assert await r.get("a/zarr.json") == b"{}"
        assert r.handle.read_only and isinstance(r.transport, ReadOnlyTransport)
        with pytest.raises(ReadOnlyError, match=r"'a/zarr\.json'"):
            await r.put("a/zarr.json", b"x")
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(StoreNotFoundError):
        open_store(tmp_path / "file")
    with pytest.raises(InvalidArgumentError):
        open_store(tmp_path / "file", mode="w")


async def test_obstore_transport_on_local_files(tmp_path: Path):
    ex = Executor(open_store(tmp_path, mode="a"))
    t = ex.transport
    assert isinstance(t, ObstoreTransport)
    await ex.put("x/a", b"0123456789")
    await ex.put("x/empty", b"")
    await ex.put("x/sub/b", b"bb")
    assert await ex.get("nope") is None and await ex.head("x/a") == 10
    assert await t.get_range("x/a", 8, 50) == b"89"
    assert await t.get_range("x/a", 50, 60) == b""
    assert await t.get_range("x/a", 50, None) == b""
    assert await t.get_range("x/a", 7, None) == b"789"
    assert await t.get_suffix("x/a", 30) == b"0123456789"
    assert await t.get_suffix("x/empty", 3) == b""
    assert await t.get_ranges("x/a", [0, 4, 9, 20], [2, 4, 12, 30]) == [b"01", b"", b"9", b""]
    assert await t.get_ranges("nope", [0], [1]) is None
    assert await ex.list("x") == [("x/a", 10), ("x/empty", 0), ("x/sub/b", 2)]
    assert await ex.list_dirs("x") == (["x/sub"], [("x/a", 10), ("x/empty", 0)])
    assert await ex.list("nothing-here") == []
    with pytest.raises(StoreExistsError, match="'x/a'"):
        await ex.put("x/a", b"new", mode="create")
    await ex.put_multipart("x/big", [b"a" * 100, b"b" * 100], part_size=64)
    assert await ex.get("x/big") == b"a" * 100 + b"b" * 100
    await ex.delete(["x/a", "x/missing", "x/big"])
    assert await ex.get("x/a") is None
    with pytest.raises(InvalidArgumentError, match=r"'\.\./evil'"):
        await ex.get("../evil")


# ---------------------------------------------------------------------------- memory


async def test_memory_registry_shared_between_opens(memory_url: str):
    with pytest.raises(StoreNotFoundError, match="memory"):
        open_store(memory_url)  # mode "r" does not create
    w = Executor(open_store(memory_url, mode="w"))
    await w.put("zarr.json", b"{}")
    r = Executor(open_store(memory_url))
    assert await r.get("zarr.json") == b"{}"
    # a prefix inside a named memory store
    sub = Executor(open_store(memory_url + "/sub", mode="a"))
    await sub.put("k", b"v")
    assert await w.get("sub/k") == b"v"
    assert await sub.list("") == [("k", 1)] and await sub.list_dirs("") == ([], [("k", 1)])
    assert await w.list_dirs("") == (["sub"], [("zarr.json", 2)])
    # anonymous memory stores are private
    a, b = Executor(open_store("memory://", mode="w")), Executor(open_store("memory://", mode="w"))
    await a.put("k", b"1")
    assert await b.get("k") is None
    assert memory_store(memory_url[len("memory://"):], create=False) is not None
    forget_memory_store("never-created")


# ---------------------------------------------------------------------------- options


def test_arguments_and_options_validation(memory_url: str):
    with pytest.raises(InvalidArgumentError, match="mode"):
        open_store(memory_url, mode="x")
    with pytest.raises(InvalidArgumentError, match="'ftp'"):
        open_store("ftp://host/x")
    with pytest.raises(InvalidArgumentError, match="'bogus_option'"):
        open_store(memory_url, mode="w", storage_options={"bogus_option": 1})
    with pytest.raises(InvalidArgumentError, match="'endpoint'"):
        open_store(memory_url, mode="w", storage_options={"endpoint": "http://x"})
    with pytest.raises(InvalidArgumentError, match="'concurrency'"):
        open_store(memory_url, mode="w", storage_options={"concurrency": 0})
    with pytest.raises(InvalidArgumentError, match="'latency_hint'"):
        open_store(memory_url, mode="w", storage_options={"latency_hint": "soon"})
    with pytest.raises(InvalidArgumentError, match="endpoint_url"):
        open_store("s3://b/p", storage_options={"endpoint": "http://a", "endpoint_url": "http://b"})
    with pytest.raises(InvalidArgumentError):
        open_store(123)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        open_store(memory_url, storage_options=[("a", 1)])  # type: ignore[arg-type]
    h = open_store(memory_url, mode="w", storage_options={
        "concurrency": 3, "coalesce_gap": 10, "coalesce_max": 100, "latency_hint": 0.5,
        "bandwidth_hint": 1e6, "max_retries": 2, "retry_timeout": 4, "init_backoff": 0.1,
        "part_size": 6 << 20, "multipart_threshold": 64 << 20, "multipart_concurrency": 2,
        "region": None,  # None values are ignored
    })
    assert (h.concurrency, h.coalesce_gap, h.coalesce_max) == (3, 10, 100)
    assert (h.latency_hint, h.bandwidth_hint) == (0.5, 1e6)
    assert h.retry == RetryPolicy(max_retries=2, retry_timeout=4.0, init_backoff=0.1)
    assert (h.part_size, h.multipart_threshold, h.multipart_concurrency) == (6 << 20, 64 << 20, 2)
    assert Executor(h).concurrency == 3 and Executor(h, concurrency=5).concurrency == 5


def test_cloud_handles_need_no_network():
    h = open_store("s3://bucket/some/prefix", storage_options={
        "endpoint_url": "http://127.0.0.1:9", "aws_access_key_id": "AKIDEXAMPLE",
        "aws_secret_access_key": SECRET, "region": "eu-west-1", "anonymous": False,
        "timeout": 5, "connect_timeout": "1s", "virtual_hosted_style_request": False,
    })
    assert h.scheme == "s3" and h.url == "s3://bucket/some/prefix" and h.concurrency == 32
    assert h.read_only and h.is_remote
    store = h.transport.inner.store
    assert store.prefix == "some/prefix" and str(store.client_options["allow_http"]).lower() == "true"
    assert store.retry_config["max_retries"] == 0  # zvf retries, not obstore
    for text in (repr(h), str(h), repr(h.transport)):
        assert SECRET not in text and "AKIDEXAMPLE" not in text
    g = open_store("gs://bkt/p", mode="w", storage_options={"anonymous": True})
    assert g.scheme == "gs" and g.url == "gs://bkt/p"
    g2 = open_store("gcs://bkt/p", storage_options={"anonymous": True})
    assert g2.transport.inner.store.prefix == "p"
    a = open_store("az://cont/p", storage_options={"account_name": "acct", "anonymous": True})
    assert a.scheme == "az"
    b = open_store("abfs://cont@acct.dfs.core.windows.net/p", storage_options={"anonymous": True})
    assert b.scheme == "az"
    with pytest.raises(InvalidArgumentError, match="'account_name'"):
        open_store("s3://b/p", storage_options={"account_name": "x"})


async def test_missing_credentials_probe_runs_off_the_event_loop(monkeypatch):
    """An S3 store without credentials asks for an instance metadata service (1 s) before its first request,
    in a worker thread: open_store returns at once and the event loop keeps running other tasks meanwhile."""
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    silent = socket.socket()  # listens, never answers: the probe waits out its 1 s
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(tick)
            t0 = time.perf_counter()
            ex = Executor(open_store("s3://some-bucket/data", storage_options={"region": "us-east-1"}))
            assert time.perf_counter() - t0 < 0.5  # no request while opening
            with pytest.raises(RemoteError, match="no AWS credentials found for s3://some-bucket/data"):
                await ex.get("zarr.json")
            assert time.perf_counter() - t0 >= 0.9 and ticks >= 30  # the loop ran during the probe
            t1 = time.perf_counter()
            with pytest.raises(RemoteError, match="no AWS credentials found"):
                await ex.head("zarr.json")  # the check's answer is kept: no second probe
            assert time.perf_counter() - t1 < 0.5
            tg.cancel_scope.cancel()
    finally:
        silent.close()


def test_http_is_read_only_and_hides_userinfo():
    with pytest.raises(ReadOnlyError, match="read-only"):
        open_store("https://example.org/data.zvf", mode="w")
    h = open_store(f"https://user:{SECRET}@example.org/data.zvf?sig={SECRET}")
    assert h.url == "https://example.org/data.zvf" and h.read_only and h.scheme == "http"
    assert SECRET not in repr(h) and SECRET not in repr(h.transport)


async def test_credentials_never_in_error_messages():
    # a port we bound and released: connections are refused at once
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    h = open_store("s3://bucket/p", mode="w", storage_options={
        "endpoint": f"http://127.0.0.1:{port}", "access_key_id": "AKIDEXAMPLE",
        "secret_access_key": SECRET, "session_token": SECRET + "tok",
        "max_retries": 1, "init_backoff": 0.001, "connect_timeout": 1,
    })
    ex = Executor(h)
    for op in (ex.get("k/0"), ex.put("k/1", b"x", mode="create"), ex.list("k")):
        with pytest.raises(RemoteError) as ei:
            await op
        msg = str(ei.value)
        assert SECRET not in msg and "AKIDEXAMPLE" not in msg
        assert ei.value.__cause__ is None and ei.value.__suppress_context__
    assert ex.stats.retries >= 2  # connection refused proves the put was not applied


def test_transport_scrubs_secrets_and_classifies():
    t = ObstoreTransport(object(), secrets=[SECRET], label="s3://b")

    class GenericError(Exception):
        pass

    def err(text):
        return t._error(GenericError(text), "get", "k")

    e = err(f"Error performing GET http://h/{SECRET} - Server returned non-2xx status code: "
            "503 Service Unavailable: <Error/>\n\nDebug source:\nsecret stuff")
    assert isinstance(e, TransientError) and not e.ambiguous and e.status == 503
    assert SECRET not in str(e) and "secret stuff" not in str(e) and "'k'" in str(e)
    assert err("status code: 500 Internal").ambiguous
    assert not err("status code: 429 Too Many Requests").ambiguous
    e400 = err("status code: 400 Bad Request")
    assert isinstance(e400, RemoteError) and not isinstance(e400, TransientError)
    assert err("HTTP error: error sending request ... kind: Connect").ambiguous is False
    assert err("HTTP error: error sending request IncompleteMessage").ambiguous is True
    assert type(err("something odd")) is RemoteError
