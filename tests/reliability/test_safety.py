"""Safety: names cannot escape the store, credentials never leak, read-only means read-only."""

from __future__ import annotations

import logging
import traceback

import numpy as np
import pytest

import zvf
from zvf.errors import InvalidArgumentError, ReadOnlyError, RemoteError, ZvfError
from zvf.io.executor import Executor
from zvf.io.store import open_store

BAD_NAMES = [
    "../x", "..", ".", "", "a/b", "/abs", "/", "a/../../b", "..\\x", "a\\b", "x\x00y", "\x00",
    "a\u2215b",  # DIVISION SLASH looks like '/'
    "\uff0e\uff0e",  # FULLWIDTH FULL STOP x2 (NFKC -> '..')
    "\u2024\u2024",  # ONE DOT LEADER x2
    "a\u202eb",  # RIGHT-TO-LEFT OVERRIDE
    "caf\u0065\u0301",  # combining accent
    ".zattrs", ".zarray", ".zvf-writing", "c/0", " x", "x ", "a\nb", "a" * 300, 7, None, b"bytes",
]

POS = np.random.default_rng(0).uniform(0, 100, (20, 3))


def _nothing_written(tmp_path) -> bool:
    return not any(p.is_file() for p in tmp_path.rglob("*"))


WRITERS = {
    "write_points attributes": lambda t, n: zvf.write_points(
        t, POS, chunk_shape=(50,) * 3, attributes={n: np.zeros(20)}),
    "write_points object_attributes": lambda t, n: zvf.write_points(
        t, POS, chunk_shape=(50,) * 3, object_ids=np.arange(20) % 2, object_attributes={n: np.zeros(2)}),
    "write_points group_attributes": lambda t, n: zvf.write_points(
        t, POS, chunk_shape=(50,) * 3, object_ids=np.arange(20) % 2, groups={0: [0, 1]},
        group_attributes={n: np.zeros(1)}),
    "write_graph link_attributes": lambda t, n: zvf.write_graph(
        t, POS, np.array([[0, 1], [1, 2]]), chunk_shape=(50,) * 3, link_attributes={n: np.zeros(2)}),
    "write_polylines attributes": lambda t, n: zvf.write_polylines(
        t, [POS[:5], POS[5:9]], chunk_shape=(50,) * 3, attributes={n: [np.zeros(5), np.zeros(4)]}),
    "write_mesh attributes": lambda t, n: zvf.write_mesh(
        t, POS[:4], np.array([[0, 1, 2], [1, 2, 3]]), chunk_shape=(50,) * 3, attributes={n: np.zeros(4)}),
}


@pytest.mark.parametrize("api", list(WRITERS))
def test_names_that_escape_are_refused_before_any_write(api, tmp_path):
    refused = 0
    for i, name in enumerate(BAD_NAMES):
        target = tmp_path / f"s{i}"
        with pytest.raises((InvalidArgumentError, TypeError)) as ei:
            WRITERS[api](str(target), name)
        if isinstance(ei.value, TypeError):  # non-string keys may fail in Python itself, never reach a key
            assert not isinstance(name, str)
        else:
            assert repr(name)[:20].strip("'\"")[:5] in str(ei.value) or not isinstance(name, str)
        assert _nothing_written(tmp_path), f"{api} {name!r} wrote {list(tmp_path.rglob('*'))}"
        refused += 1
    assert refused == len(BAD_NAMES)
    # a plain name still works
    WRITERS[api](str(tmp_path / "ok"), "ok_name-1.v2")


@pytest.mark.parametrize("api", list(WRITERS))
def test_metadata_key_as_name_is_refused_before_any_write(api, tmp_path):
    """An attribute called 'zarr.json' would turn its group's document into a directory."""
    with pytest.raises(InvalidArgumentError):
        WRITERS[api](str(tmp_path / "s"), "zarr.json")
    assert _nothing_written(tmp_path)


def test_target_traversal_is_refused(tmp_path, s3_endpoint):
    opts = s3_endpoint.storage_options()
    for target in ("s3://bucket/../etc/x", "s3://bucket/a/../../b", "memory://m/../x"):
        with pytest.raises(ZvfError):
            zvf.write_points(target, POS, chunk_shape=(50,) * 3,
                             storage_options=opts if target.startswith("s3") else None)


# --------------------------------------------------------------------------------------
# credentials
# --------------------------------------------------------------------------------------

KEY_ID = "AKIAZVFLEAKCHECK0001"
SECRET = "zvf-S3CRET-must-never-leak-7f3a9c"
TOKEN = "zvf-SESSION-TOKEN-must-not-leak-b71"


def _no_secret(*texts: str) -> None:
    for t in texts:
        for s in (SECRET, TOKEN, KEY_ID):
            assert s not in t, f"credential {s[:8]}... leaked in: {t[:300]}"


def _all_text(exc: BaseException) -> list[str]:
    """What a user or a logger sees: str, repr, the printed traceback and every chained
    exception the traceback prints (``raise ... from None`` hides the original on purpose)."""
    out = [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    while cause is not None:
        out += [str(cause), repr(cause)]
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return out


@pytest.mark.s3
def test_credentials_never_leak(s3_endpoint, fault_proxy, caplog):
    from tests.servers import Rule, create_bucket

    bucket = create_bucket(s3_endpoint)  # boto3 (test side) before log capture starts
    caplog.set_level(logging.DEBUG)
    opts = s3_endpoint.storage_options(endpoint=fault_proxy.url, access_key_id=KEY_ID, secret_access_key=SECRET,
                                       session_token=TOKEN, max_retries=1, init_backoff=0.01)
    url = f"s3://{bucket}/creds"
    zvf.write_points(url, POS, chunk_shape=(50,) * 3, storage_options=opts)
    ds = zvf.open(url, storage_options=opts)
    texts = [repr(ds), str(ds), repr(ds.aio), repr(ds._inner.context.handle), str(ds._inner.context.handle),
             repr(ds._inner.context.ex), repr(ds._inner.context.handle.transport), repr(ds.stats), str(ds.info()),
             repr(open_store(url, mode="w", storage_options=opts))]
    rep = zvf.validate(url, storage_options=opts)
    texts += [rep.to_json(), str(rep)]
    # the server refuses: 403 whose body echoes the key id and signature like real S3 does
    body = (f"<Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>{KEY_ID}</AWSAccessKeyId>"
            f"<StringToSign>AWS4-HMAC-SHA256 {SECRET}</StringToSign><Token>{TOKEN}</Token></Error>").encode()
    fault_proxy.add_rule(Rule("status", times=None, status=403, body=body))
    failures = []
    for op in (lambda: zvf.open(url, storage_options=opts),
               lambda: ds.query(([0, 0, 0], [100, 100, 100])),
               lambda: zvf.write_points(f"s3://{bucket}/other", POS, chunk_shape=(50,) * 3, storage_options=opts)):
        ds._inner.context.ex.clear_caches()
        with pytest.raises(ZvfError) as ei:
            op()
        failures.append(ei.value)
        texts += _all_text(ei.value)
    rep = zvf.validate(url, storage_options=opts)
    assert not rep.ok
    texts += [rep.to_json(), str(rep)]
    assert any(isinstance(e, RemoteError) and "access denied" in str(e) for e in failures), failures
    # 5xx bodies too
    fault_proxy.clear_rules()
    fault_proxy.add_rule(Rule("status", times=None, status=500, body=body))
    ds._inner.context.ex.clear_caches()
    with pytest.raises(RemoteError) as ei:
        ds.read_all()
    texts += _all_text(ei.value)
    fault_proxy.clear_rules()
    texts.append(caplog.text)
    texts += [r.getMessage() for r in caplog.records]
    _no_secret(*texts)


def test_credentials_in_urls_and_bad_options_do_not_leak():
    for target in (f"http://user:{SECRET}@127.0.0.1:1/x", f"https://127.0.0.1:1/x?sig={SECRET}"):
        h = open_store(target, mode="r")
        _no_secret(repr(h), h.url, repr(h.transport))
        with pytest.raises(ReadOnlyError) as ei:
            open_store(target, mode="w")
        _no_secret(*_all_text(ei.value))
    with pytest.raises(InvalidArgumentError) as ei:
        open_store("s3://b/x", storage_options={"secret_access_key": SECRET, "not_an_option": 1})
    _no_secret(*_all_text(ei.value))
    with pytest.raises(InvalidArgumentError) as ei:
        open_store("s3://b/x", storage_options={"secret_access_key": SECRET, "concurrency": "lots"})
    _no_secret(*_all_text(ei.value))


# --------------------------------------------------------------------------------------
# read-only
# --------------------------------------------------------------------------------------


async def test_mode_r_refuses_writes(tmp_path):
    zvf.write_points(str(tmp_path / "s"), POS, chunk_shape=(50,) * 3)
    h = open_store(str(tmp_path / "s"), mode="r")
    ex = Executor(h)
    for call in (lambda: ex.put("0/vertices/c/0/0/0", b"x"),
                 lambda: ex.put("new", b"x", mode="create"),
                 lambda: ex.put_multipart("big", [b"x" * 10]),
                 lambda: ex.delete(["zarr.json"]),
                 lambda: h.transport.put("zarr.json", b"{}"),
                 lambda: h.transport.delete(["zarr.json"])):
        with pytest.raises(ReadOnlyError) as ei:
            await call()
        assert "read-only" in str(ei.value)
    assert zvf.validate(str(tmp_path / "s")).ok  # untouched
    ds = await zvf.aio.open(str(tmp_path / "s"))
    assert ds.context.handle.read_only


@pytest.mark.parametrize("url", ["http://127.0.0.1:1/x", "https://127.0.0.1:1/x.zarrvectors"])
@pytest.mark.parametrize("mode", ["w", "a"])
def test_http_stores_are_read_only(url, mode):
    with pytest.raises(ReadOnlyError) as ei:
        open_store(url, mode=mode)
    assert "127.0.0.1:1" in str(ei.value)
    with pytest.raises(ReadOnlyError):
        zvf.write_points(url, POS, chunk_shape=(50,) * 3)


def test_http_read_of_nothing_is_a_clear_error():
    """A refused connection is a RemoteError (or no store), in bounded time, never a hang."""
    import time

    t0 = time.perf_counter()
    with pytest.raises(ZvfError):
        zvf.open("http://127.0.0.1:1/x", storage_options={"max_retries": 1, "retry_timeout": 1,
                                                          "connect_timeout": "1s"})
    assert time.perf_counter() - t0 < 10
    rep = zvf.validate("http://127.0.0.1:1/x", storage_options={"max_retries": 0, "connect_timeout": "1s"})
    assert not rep.ok
