"""An S3 server inside this process, for demos and tests (moto on 127.0.0.1).

zvf talks to it exactly as to AWS -- obstore's S3Store over HTTP -- so a
demo or a test exercises the real request path without a network.
Needs the ``demo`` extra (``moto[server]``).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any


@dataclass
class EmbeddedS3:
    """A running in-process S3 server and the credentials it accepts."""

    endpoint: str
    access_key: str = "test"
    secret_key: str = "test"
    region: str = "us-east-1"
    _server: Any = field(default=None, repr=False)

    @classmethod
    def start(cls) -> EmbeddedS3:
        """Start moto's threaded server on a free port of 127.0.0.1."""
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise RuntimeError("the embedded S3 server needs moto: pip install 'zvf[demo]'") from exc
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        return cls(endpoint=f"http://{host}:{port}", _server=server)

    def storage_options(self, **overrides: Any) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "endpoint": self.endpoint,
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
            "region": self.region,
            "allow_http": True,
        }
        opts.update(overrides)
        return opts

    def create_bucket(self, name: str | None = None) -> str:
        import boto3

        name = name or f"zvf-{uuid.uuid4().hex[:16]}"
        boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                     aws_secret_access_key=self.secret_key, region_name=self.region).create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> EmbeddedS3:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
