"""Where a chain test keeps its stores: a base (local directory, ``memory://name`` or an S3 bucket)
under which every store is ``<base>/<name>``, plus raw object access to plant and check keys that
are not zvf's (a foreign file next to the stores, a user attribute in a root document)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import obstore

from zvf.io.backends import forget_memory_store
from zvf.io.store import open_store


class Backend:
    """A base URL with raw ``get``/``put``/``keys`` on the obstore store behind it (no prefix)."""

    def __init__(self, name: str, base: str, storage_options: dict | None = None, forget: str | None = None):
        self.name = name
        self.base = base.rstrip("/")
        self.storage_options = storage_options
        self._forget = forget
        self._store = open_store(self.base, mode="w", storage_options=storage_options).transport.store

    @classmethod
    def local(cls, directory: Path) -> Backend:
        directory.mkdir(parents=True, exist_ok=True)
        return cls("local", str(directory))

    @classmethod
    def memory(cls) -> Backend:
        name = f"chain{uuid.uuid4().hex[:12]}"
        return cls("memory", f"memory://{name}", forget=name)

    @classmethod
    def s3(cls, bucket: str, storage_options: dict) -> Backend:
        return cls("s3", f"s3://{bucket}", storage_options)

    def close(self) -> None:
        if self._forget:
            forget_memory_store(self._forget)

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def options(self) -> dict[str, Any]:
        """``storage_options=`` for zvf calls on this backend (absent for local and memory)."""
        return {"storage_options": self.storage_options} if self.storage_options else {}

    # ----------------------------------------------------------------------- raw access
    def get(self, key: str) -> bytes | None:
        try:
            return bytes(obstore.get(self._store, key).bytes())
        except FileNotFoundError:
            return None

    def put(self, key: str, data: bytes) -> None:
        obstore.put(self._store, key, data)

    def keys(self, prefix: str = "") -> list[str]:
        out: list[str] = []
        for batch in obstore.list(self._store, prefix=prefix or None):
            out.extend(m["path"] for m in batch)
        return sorted(out)

    def root_doc(self, store: str) -> dict[str, Any]:
        raw = self.get(f"{store}/zarr.json")
        assert raw is not None, f"{self.url(store)}: no root zarr.json"
        return json.loads(raw)

    def set_root_attribute(self, store: str, name: str, value: Any) -> None:
        """Add a user attribute to a store's root, as zarr-python's ``group.attrs[name] = value`` does."""
        doc = self.root_doc(store)
        doc.setdefault("attributes", {})[name] = value
        self.put(f"{store}/zarr.json", json.dumps(doc).encode())
