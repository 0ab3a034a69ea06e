"""What ``serve`` and ``export --serve`` share over HTTP: who may read, and hosting an exported directory.

Data served to a browser is readable by any page the user visits unless the
server says otherwise, and a name that resolves to 127.0.0.1 (DNS rebinding)
reaches a local server from an attacker's page.  So:

* a request carrying an ``Origin`` header is answered only for allowed origins
  (loopback viewers -- http(s)://127.0.0.1, localhost, [::1] on any port --
  plus the ones listed), with ``Access-Control-Allow-Origin`` naming that
  origin; others get 403.  Requests without one (tools, same-origin pages) pass.
* the ``Host`` header must name the bound address: its host, the loopback names
  when bound to loopback, an IP literal when bound to every interface, or a
  listed host name; others get 421 (the rebinding case).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiohttp import web

if TYPE_CHECKING:
    from aiohttp.typedefs import Handler, Middleware

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD = frozenset({"", "0.0.0.0", "::"})
CORS_METHODS = {"Access-Control-Allow-Methods": "GET, HEAD, OPTIONS",
                "Access-Control-Allow-Headers": "Range, Content-Type",
                "Access-Control-Expose-Headers": "Content-Length, Content-Range",
                "Access-Control-Max-Age": "600"}


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL, lower-cased, default ports dropped (how browsers send Origin)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) origin: {url!r}")
    host = parts.hostname.lower()
    host = f"[{host}]" if ":" in host else host
    default = {"http": 80, "https": 443}[parts.scheme]
    port = f":{parts.port}" if parts.port and parts.port != default else ""
    return f"{parts.scheme}://{host}{port}"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _loopback(host: str) -> bool:
    return host in LOOPBACK_NAMES or (_is_ip(host) and ipaddress.ip_address(host).is_loopback)


@dataclass(frozen=True)
class Access:
    """Allowed browser origins and Host names of one server."""

    origins: frozenset[str]
    hosts: frozenset[str]
    bind: str

    @classmethod
    def create(cls, bind: str, origins: Iterable[str] = (), hosts: Iterable[str] = ()) -> Access:
        from ..errors import InvalidArgumentError

        try:
            allowed = frozenset(_origin(o) for o in origins)
        except ValueError as exc:
            raise InvalidArgumentError(f"allowed origins: {exc}") from None
        return cls(allowed, frozenset(h.lower().strip("[]") for h in hosts), bind.lower().strip("[]"))

    def origin_ok(self, origin: str) -> bool:
        try:
            origin = _origin(origin)
        except ValueError:
            return False
        return origin in self.origins or _loopback(urlsplit(origin).hostname or "")

    def host_ok(self, host_header: str | None) -> bool:
        if not host_header:
            return False
        try:
            host = (urlsplit(f"//{host_header}").hostname or "").lower()
        except ValueError:
            return False
        if host in self.hosts or host == self.bind:
            return True
        if _loopback(self.bind):
            return _loopback(host)
        return self.bind in WILDCARD and (_is_ip(host) or host == "localhost")


def guard(access: Access) -> Middleware:
    """aiohttp middleware enforcing ``access`` and answering CORS preflights."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not access.host_ok(request.headers.get("Host")):
            raise web.HTTPMisdirectedRequest(text="Host header does not name this server")
        origin = request.headers.get("Origin")
        headers: dict[str, str] = {}
        if origin is not None:
            if not access.origin_ok(origin):
                raise web.HTTPForbidden(text=f"origin {origin} is not allowed (see --allow-origin)")
            headers = {"Access-Control-Allow-Origin": origin, "Vary": "Origin", **CORS_METHODS}
        if request.method == "OPTIONS":
            return web.Response(status=204, headers=headers)
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            exc.headers.update(headers)
            raise
        response.headers.update(headers)
        return response

    return middleware


def directory_app(root: str | Path, access: Access) -> web.Application:
    """Static files under ``root`` (an export), ranged GETs included; nothing outside it is served."""
    app = web.Application(middlewares=[guard(access)])
    app.router.add_static("/", Path(root).resolve(), show_index=False, follow_symlinks=False)
    return app


async def start(app: web.Application, host: str, port: int, *, log_requests: bool = False) -> tuple[web.AppRunner, str]:
    """Run ``app`` on host:port (0 picks a free port); returns the runner and its ``http://host:port`` base
    (bound to every interface: the loopback address).
    ``log_requests``: one line per request (``GET /path 200``) on the ``zvf.neuroglancer.requests`` logger."""
    runner = (web.AppRunner(app, access_log=logging.getLogger("zvf.neuroglancer.requests"), access_log_format="%r %s")
              if log_requests else web.AppRunner(app))
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1]
    name = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # every interface: this machine
    name = f"[{name}]" if ":" in name else name
    return runner, f"http://{name}:{bound}"
