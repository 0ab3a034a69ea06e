"""Credentials never reach what a user, a log or a report sees -- whether they came in ``storage_options`` or from
the environment -- even when the server echoes them (AWS's ExpiredToken body holds the session token; error
bodies quote signed URLs and Authorization headers), and the chained exceptions zvf's errors keep hold none."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import traceback
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from aiohttp import web

import zvf
from zvf.errors import RemoteError, ZvfError

KEY_ID = "AKIAZVFTESTKEYID4242"
SECRET = "zvfSecretAccessKey/WithSlash+Plus=0123456789"
TOKEN = "IQoJb3JpZ2luX2VjEZVF//session+token/that=is/long0123456789abcdef"
AZURE_KEY = "QXp1cmVTZWNyZXRBY2NvdW50S2V5Rm9yWnZmVGVzdHMwMTIzNDU2Nzg5"
SAS = "sv=2022-11-02&ss=b&srt=o&sp=r&se=2030-01-01&sig=U2FzU2lnbmF0dXJlMDEyMzQ1Njc4OQ%3D%3D"
PRIVATE_KEY = "-----BEGIN PRIVATE KEY-----\\nMIIEvZVFTESTPRIVATEKEYMATERIAL0123456789\\n-----END PRIVATE KEY-----\\n"
GCS_KEY = json.dumps({"disable_oauth": True, "client_email": "zvf@test.iam", "private_key": PRIVATE_KEY,
                      "private_key_id": "f00dfacezvf0123456789abcdef"})
SECRETS = [KEY_ID, SECRET, TOKEN, AZURE_KEY, SAS, "U2FzU2lnbmF0dXJlMDEyMzQ1Njc4OQ", PRIVATE_KEY,
           "MIIEvZVFTESTPRIVATEKEYMATERIAL0123456789", "f00dfacezvf0123456789abcdef"]
# signatures the client computes per request (not known to the test): long hex / base64 runs after their names
DERIVED = re.compile(r"(Signature=[0-9a-f]{16}|SharedKey \w+:[A-Za-z0-9+/]{16}|X-Goog-Signature=[0-9a-f]{8})")
POS = np.random.default_rng(8).uniform(0, 100, (300, 3)).astype(np.float32)


class FakeCloud:
    """An object-store look-alike on 127.0.0.1: serves a store's files (``mode = "ok"``) or fails every request
    with the body a real service sends, echoing what the request carried (``expired``, ``denied``, ``broken``)."""

    def __init__(self, files: dict[str, bytes]):
        self.files, self.mode = files, "ok"
        self.loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", 0).start())
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def handle(self, request: web.Request) -> web.Response:
        token = request.headers.get("x-amz-security-token", "")
        auth = request.headers.get("Authorization", "")
        signed = (f"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
                  f"{quote(KEY_ID + '/20260101/us-east-1/s3/aws4_request', safe='')}&X-Amz-Security-Token="
                  f"{quote(TOKEN, safe='')}&X-Amz-Signature=5e1f0c0ffee0123456789abcdef&X-Amz-SignedHeaders=host "
                  f"https://storage.googleapis.com/b/k?X-Goog-Credential=zvf%40test.iam%2F20260101&"
                  f"X-Goog-Signature=9a8b7c6d5e4f3a2b1c0d private_key={PRIVATE_KEY}")
        if self.mode == "expired":
            return web.Response(status=400, content_type="application/xml", text=(
                "<?xml version='1.0' encoding='UTF-8'?><Error><Code>ExpiredToken</Code><Message>The provided "
                f"token has expired.</Message><Token-0>{token}</Token-0><RequestId>7</RequestId></Error>"))
        if self.mode in ("denied", "broken"):
            return web.Response(status=403 if self.mode == "denied" else 500, content_type="application/xml", text=(
                f"<Error><Code>AccessDenied</Code><AWSAccessKeyId>{KEY_ID}</AWSAccessKeyId><Message>Request "
                f"{request.path_qs} with {auth}; see {signed}</Message><StringToSign>AWS4-HMAC-SHA256 {SECRET}"
                f"</StringToSign><CanonicalRequest>x-amz-security-token:{token}</CanonicalRequest></Error>"))
        found = self.files.get(request.path.partition("/store/")[2])  # /<bucket>/store/<key> (Azure: /acct/cont/...)
        if request.method not in ("GET", "HEAD") or found is None:
            return web.Response(status=404, text="<Error><Code>NoSuchKey</Code></Error>")
        return web.Response(body=found if request.method == "GET" else b"",
                            headers={"ETag": '"1"', "Last-Modified": "Wed, 01 Jan 2025 00:00:00 GMT"})

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    local = tmp_path_factory.mktemp("s") / "store"
    zvf.write_points(str(local), POS, chunk_shape=(50, 50, 50), attributes={"w": np.ones(300, np.float32)})
    server = FakeCloud({p.relative_to(local).as_posix(): p.read_bytes() for p in Path(local).rglob("*")
                        if p.is_file()})
    yield server
    server.stop()


def _chain(exc: BaseException) -> list[BaseException]:
    """Every exception reachable from ``exc``, suppressed context included (code can read ``__context__``)."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__]
    return seen


def _texts(exc: BaseException) -> list[str]:
    out = ["".join(traceback.format_exception(exc))]
    for e in _chain(exc):
        out += [str(e), repr(e), repr(e.args), repr(vars(e))]
    return out


def _clean(*texts: str) -> None:
    for text in texts:
        for s in SECRETS:
            for form in (s, quote(s, safe=""), quote(s, safe="/")):
                assert form not in text, f"credential leaked: ...{text[max(0, text.find(form) - 80):][:200]}..."
        m = DERIVED.search(text)
        assert m is None, f"a request signature leaked: {m.group(0)}"


def _every_failure(url: str, opts: dict, cloud: FakeCloud, caplog) -> list[str]:
    """Open, read, write and validate against the failing server; -> every text a user or a log sees."""
    texts = []
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="zvf"):
        cloud.mode = "ok"
        ds = zvf.open(url, storage_options=opts)
        for mode in ("expired", "denied", "broken"):
            cloud.mode = mode
            ds._inner.context.ex.clear_caches()
            for op in (lambda: zvf.open(url, storage_options=opts), lambda: ds.read_all(),
                       lambda: zvf.write_points(url + "-new", POS, chunk_shape=(50,) * 3, storage_options=opts)):
                with pytest.raises(ZvfError) as ei:
                    op()
                texts += _texts(ei.value)
                if isinstance(ei.value, RemoteError) and mode != "broken":
                    assert ei.value.status in (400, 403), repr(ei.value)  # what is useful stays on the error
                    assert getattr(ei.value, "key", ""), repr(ei.value)
            report = zvf.validate(url, storage_options=opts)
            assert not report.ok
            texts += [str(report), report.to_json()]
        ds.close()
        cloud.mode = "ok"
    texts += [caplog.text, *(r.getMessage() for r in caplog.records)]
    assert len(texts) > 40
    return texts


CLOUD = {"max_retries": 1, "init_backoff": 0.01, "retry_timeout": 2}


@pytest.mark.parametrize("source", ["environment", "options"])
def test_s3_credentials_never_leak(source, cloud, caplog, monkeypatch):
    opts = {"endpoint": cloud.url, "region": "us-east-1", **CLOUD}
    creds = {"access_key_id": KEY_ID, "secret_access_key": SECRET, "session_token": TOKEN}
    if source == "environment":
        for name, value in creds.items():
            monkeypatch.setenv(f"AWS_{name.upper()}", value)
    else:
        opts.update(creds)
    texts = _every_failure("s3://bucket/store", opts, cloud, caplog)
    assert any("ExpiredToken" in t for t in texts) and any("AccessDenied" in t for t in texts)
    _clean(*texts)


@pytest.mark.parametrize("source", ["environment", "options", "sas"])
def test_azure_keys_and_sas_never_leak(source, cloud, caplog, monkeypatch):
    opts = {"endpoint": f"{cloud.url}/acct", "account_name": "acct", **CLOUD}
    if source == "environment":
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURE_KEY)
    elif source == "options":
        opts["account_key"] = AZURE_KEY
    else:
        opts["sas_key"] = SAS
    _clean(*_every_failure("az://cont/store", opts, cloud, caplog))


@pytest.mark.parametrize("source", ["environment", "options"])
def test_gcs_service_account_never_leaks(source, cloud, caplog, monkeypatch):
    opts = {"endpoint": cloud.url, **CLOUD}
    if source == "environment":
        monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT_KEY", GCS_KEY)
    else:
        opts["service_account_key"] = GCS_KEY
    _clean(*_every_failure("gs://bucket/store", opts, cloud, caplog))


def test_the_scrubber_on_what_services_echo(monkeypatch):
    from zvf.io.transport import scrub

    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    text = (f"<Token-0>{TOKEN}</Token-0> ?X-Amz-Credential=AKIAOTHER%2Fx&X-Amz-Signature=00ff&sig=abc%3D&se=2030 "
            f"Authorization: AWS4-HMAC-SHA256 Credential=AKIAOTHER/x, Signature=00ff00ff Bearer eyJhbGciOiJIUzI1NiJ9 "
            f'"private_key": "-----BEGIN-----" {quote(TOKEN, safe="")}')
    out = scrub(text)
    for leaked in (TOKEN, "AKIAOTHER", "00ff", "abc%3D", "eyJhbGciOiJIUzI1NiJ9", "BEGIN", quote(TOKEN, safe="")):
        assert leaked not in out, (leaked, out)
    assert "se=2030" in out and "<Token-0>***</Token-0>" in out  # what is not a credential stays readable
