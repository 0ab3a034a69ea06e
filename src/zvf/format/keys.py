"""Chunk keys and chunk-id strings.

Zarr v3 ``chunk_key_encoding``:

* ``{"name": "default", "configuration": {"separator": "/"}}`` -> ``c/1/0/1``
  (what 0.9.2 writes); with ``"."`` -> ``c.1.0.1``; a 0-d array -> ``c``.
* ``{"name": "v2", "configuration": {"separator": "."}}`` -> ``1.0.1`` (the
  seed documents' bare dot keys); with ``"/"`` -> ``1/0/1``; 0-d -> ``0``.

``nonempty_chunks`` attributes hold ``"i.j.k"`` strings with absolute
(possibly negative) chunk coordinates: :func:`format_chunk_id` /
:func:`parse_chunk_id`.  Link array names use signed offsets
(``0.+1.-1``, faces joined by ``_``): :func:`format_offsets_name` /
:func:`parse_offsets_name`; level deltas are ``0``, ``+1``, ``-1``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import FormatError, InvalidArgumentError

__all__ = [
    "DEFAULT_ENCODING",
    "SEED_ENCODING",
    "ChunkKeyEncoding",
    "format_chunk_id",
    "format_delta",
    "format_offsets_name",
    "parse_chunk_id",
    "parse_chunk_ids",
    "parse_delta",
    "parse_offsets_name",
]


@dataclass(frozen=True)
class ChunkKeyEncoding:
    """A chunk key encoding: ``name`` "default" or "v2", ``separator`` "/" or "."."""

    name: str = "default"
    separator: str = "/"

    def __post_init__(self) -> None:
        if self.name not in ("default", "v2"):
            raise InvalidArgumentError(f"chunk key encoding name {self.name!r}: expected 'default' or 'v2'")
        if self.separator not in ("/", "."):
            raise InvalidArgumentError(f"chunk key separator {self.separator!r}: expected '/' or '.'")

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any] | None, *, key: str = "?") -> ChunkKeyEncoding:
        """From an array zarr.json dict or its ``chunk_key_encoding`` entry (absent = default "/")."""
        if meta is None:
            return DEFAULT_ENCODING
        if not isinstance(meta, Mapping):
            raise FormatError(f"{key}: chunk_key_encoding is not a JSON object")
        if "chunk_key_encoding" in meta:
            cke = meta["chunk_key_encoding"]
        elif "node_type" in meta or "zarr_format" in meta:
            return DEFAULT_ENCODING
        else:
            cke = meta
        if not isinstance(cke, Mapping):
            raise FormatError(f"{key}: chunk_key_encoding is not a JSON object")
        name = cke.get("name", "default")
        cfg = cke.get("configuration") or {}
        if not isinstance(cfg, Mapping):
            raise FormatError(f"{key}: chunk_key_encoding configuration is not a JSON object")
        sep = cfg.get("separator", "/" if name == "default" else ".")
        if name not in ("default", "v2") or sep not in ("/", "."):
            raise FormatError(f"{key}: unsupported chunk_key_encoding {dict(cke)!r}")
        return cls(name, sep)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"separator": self.separator}}

    def suffix(self, coords: Sequence[int]) -> str:
        """Key of one chunk relative to its array: ``c/1/0/1``."""
        parts = [str(int(c)) for c in coords]
        if self.name == "default":
            return self.separator.join(["c", *parts])
        return self.separator.join(parts) if parts else "0"

    def key(self, array_path: str, coords: Sequence[int]) -> str:
        """Full key: ``0/vertices`` + ``(1, 0, 1)`` -> ``0/vertices/c/1/0/1``."""
        base = array_path.strip("/")
        s = self.suffix(coords)
        return f"{base}/{s}" if base else s

    def keys(self, array_path: str, coords: Iterable[Sequence[int]]) -> list[str]:
        """:meth:`key` for each row of ``coords`` ((N, ndim) array or list)."""
        c = np.asarray(coords, dtype=np.int64)
        if c.ndim != 2:
            raise InvalidArgumentError(f"coords: expected (N, ndim), got shape {c.shape}")
        base = array_path.strip("/")
        prefix = f"{base}/" if base else ""
        return [prefix + self.suffix(row) for row in c.tolist()]

    def parse(self, key_suffix: str, ndim: int | None = None) -> tuple[int, ...]:
        """Chunk coordinates from a key relative to the array (``c/1/0/1`` -> (1, 0, 1))."""
        s = key_suffix
        if self.name == "default":
            if s == "c":
                parts: list[str] = []
            elif s.startswith("c" + self.separator):
                parts = s[2:].split(self.separator)
            else:
                raise FormatError(
                    f"{key_suffix}: not a chunk key of the default encoding (expected 'c{self.separator}...')"
                )
        else:
            parts = s.split(self.separator)
            if parts == ["0"] and ndim == 0:
                parts = []
        bad = [p for p in parts if not _is_int(p)]
        if bad:
            raise FormatError(f"{key_suffix}: chunk key part {bad[0]!r} is not an integer")
        coords = tuple(int(p) for p in parts)
        if ndim is not None and len(coords) != ndim:
            raise FormatError(f"{key_suffix}: chunk key has {len(coords)} coordinates, expected {ndim}")
        return coords


def _is_int(p: str) -> bool:
    q = p[1:] if p[:1] == "-" else p
    return q.isdigit() and q.isascii()


DEFAULT_ENCODING = ChunkKeyEncoding("default", "/")
SEED_ENCODING = ChunkKeyEncoding("v2", ".")


def format_chunk_id(coords: Sequence[int]) -> str:
    """``(1, 0, -1)`` -> ``"1.0.-1"`` (``nonempty_chunks`` entries)."""
    return ".".join(str(int(c)) for c in coords)


def parse_chunk_id(text: str, ndim: int | None = None) -> tuple[int, ...]:
    """``"-1.0"`` -> ``(-1, 0)``."""
    if not isinstance(text, str) or not text:
        raise FormatError(f"{text!r}: not a chunk id")
    parts = text.split(".")
    if not all(_is_int(p) for p in parts):
        raise FormatError(f"{text!r}: chunk id parts must be integers")
    if ndim is not None and len(parts) != ndim:
        raise FormatError(f"{text!r}: chunk id has {len(parts)} coordinates, expected {ndim}")
    return tuple(int(p) for p in parts)


def parse_chunk_ids(texts: Sequence[str], ndim: int, *, key: str = "nonempty_chunks") -> np.ndarray:
    """Many chunk ids -> int64 (N, ndim) array."""
    n = len(texts)
    if n == 0:
        return np.zeros((0, ndim), dtype=np.int64)
    if not all(isinstance(t, str) for t in texts):
        raise FormatError(f"{key}: chunk ids must be strings")
    parts = ".".join(texts).split(".")
    if (
        len(parts) != n * ndim
        or any(t.count(".") != ndim - 1 for t in texts)
        or not all(_is_int(p) for p in parts)
    ):
        bad = next((t for t in texts if len(t.split(".")) != ndim or not all(_is_int(p) for p in t.split("."))), "?")
        raise FormatError(f"{key}: chunk id {bad!r} is not {ndim} dot-separated integers")
    return np.array(parts, dtype=np.int64).reshape(n, ndim)


def _signed(v: int) -> str:
    return f"+{v}" if v > 0 else str(v)


def format_offsets_name(offsets: ArrayLike) -> str:
    """``[[0, 1, -1]]`` (or ``[0, 1, -1]``) -> ``"0.+1.-1"``; faces join endpoints with ``_``."""
    try:
        a = np.asarray(offsets, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgumentError(f"offsets: need integer offset vectors, got {offsets!r}") from None
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.size == 0:
        raise InvalidArgumentError(f"offsets: need a list of offset vectors, got {offsets!r}")
    return "_".join(".".join(_signed(int(v)) for v in row) for row in a.tolist())


_OFFSET = r"(?:\+[1-9][0-9]{0,8}|-[1-9][0-9]{0,8}|0)"


def parse_offsets_name(name: str, ndim: int | None = None, *, key: str = "") -> NDArray[np.int64]:
    """Inverse of :func:`format_offsets_name`: ``"0.0.0_+1.0.0"`` -> int64 (L-1, ndim) array.

    Only the canonical spelling 0.9.2 writes is accepted (``+1`` not ``1``, no
    ``+0`` or leading zeros), so a name maps to one set of offsets and back.
    """
    if not isinstance(name, str):
        raise FormatError(f"{key or name!s}: {name!r} is not an offsets name")
    n = name.split("_", 1)[0].count(".") + 1 if ndim is None else ndim
    row = _OFFSET + (r"\." + _OFFSET) * (n - 1)
    if n < 1 or re.fullmatch(f"{row}(?:_{row})*", name) is None:
        raise FormatError(f"{key or name!s}: {name!r} is not a {n}-D offsets name")
    return np.array([[int(x) for x in r.split(".")] for r in name.split("_")], dtype=np.int64)


def format_delta(delta: int) -> str:
    return _signed(int(delta))


def parse_delta(text: str) -> int:
    t = text[1:] if text[:1] == "+" else text
    if not _is_int(t):
        raise FormatError(f"{text!r}: not a level delta")
    return int(t)
