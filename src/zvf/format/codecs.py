"""A cell's codec pipeline, read from and written to its array ``zarr.json``.

Supported pipelines (what 0.9.2 writes, plus what plain zarr may write for
the same arrays)::

    [vlen-bytes | bytes] [+ zstd | blosc]
    sharding_indexed(inner chunk_shape all ones; codecs as above;
                     index_codecs [bytes little, crc32c?]; index at end or start)

0.9.2's exact codec JSON (``codecs_json`` reproduces it key for key):

* zstd:  ``{"name": "zstd", "configuration": {"level": 0, "checksum": false}}``
* blosc: ``{"name": "blosc", "configuration": {"typesize": 4, "cname": "zstd",
  "clevel": 5, "shuffle": "bitshuffle", "blocksize": 0}}`` -- what
  ``compressor="blosc"`` produces in 0.9.2; zarr-python 3.1.6 and 0.9.2
  both read it (numcodecs >= 0.16 honours ``typesize``, so the bytes match
  zarr's own encoder).
* sharded: ``[{"name": "sharding_indexed", "configuration": {"chunk_shape":
  [1, ...], "codecs": [...], "index_codecs": [{"name": "bytes",
  "configuration": {"endian": "little"}}, {"name": "crc32c"}],
  "index_location": "end"}}]``; the array's ``chunk_grid`` chunk_shape is then
  the number of cells per shard.

For sharded arrays :meth:`CellCodec.encode` / :meth:`CellCodec.decode`
work on one inner chunk (one cell); use :mod:`.shard` to assemble / split
shard objects.  Decompression is bounded (``max_size``) *before* anything
is allocated: zstd frame headers and block headers are walked to bound the
output (frames without a content size included), blosc headers are
checked against the buffer.  numcodecs is imported lazily.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import FormatError, InvalidArgumentError
from .vlen import byte_view, decode_vlen, encode_vlen

__all__ = [
    "CellCodec",
    "DEFAULT_MAX_SIZE",
    "ZSTD_CONFIG",
    "BLOSC_CONFIG",
    "zstd_decompress",
    "zstd_bound",
    "blosc_decompress",
]

#: Default bound on one decoded cell (bytes).
DEFAULT_MAX_SIZE = 1 << 31

ZSTD_CONFIG: dict[str, Any] = {"level": 0, "checksum": False}
BLOSC_CONFIG: dict[str, Any] = {"typesize": 4, "cname": "zstd", "clevel": 5, "shuffle": "bitshuffle", "blocksize": 0}
_INDEX_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
_BLOSC_CNAMES = {"blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd"}

_ZSTD_MAGIC = 0xFD2FB528
_BLOCK_MAX = 128 * 1024


# ---------------------------------------------------------------------------
# zstd


def zstd_bound(data, *, key: str = "?") -> list[tuple[int, int, int | None, int]]:
    """Walk zstd frames without decompressing.

    Returns per frame ``(start, end, content_size or None, output upper bound)``;
    skippable frames are omitted.  Raises :class:`FormatError` on anything
    that is not a well-formed frame sequence (dictionaries are unsupported).
    """
    mv = byte_view(data)
    size = mv.nbytes
    frames = []
    pos = 0
    if size == 0:
        raise FormatError(f"{key}: empty zstd stream")
    while pos < size:
        if pos + 4 > size:
            raise FormatError(f"{key}: truncated zstd frame magic at byte {pos}")
        (magic,) = struct.unpack_from("<I", mv, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            if pos + 8 > size:
                raise FormatError(f"{key}: truncated skippable zstd frame at byte {pos}")
            (ln,) = struct.unpack_from("<I", mv, pos + 4)
            pos += 8 + ln
            if pos > size:
                raise FormatError(f"{key}: skippable zstd frame overruns the data")
            continue
        if magic != _ZSTD_MAGIC:
            raise FormatError(f"{key}: not zstd data (magic 0x{magic:08X} at byte {pos})")
        start = pos
        pos += 4
        if pos >= size:
            raise FormatError(f"{key}: truncated zstd frame header")
        fhd = mv[pos]
        pos += 1
        fcs_flag = fhd >> 6
        single = (fhd >> 5) & 1
        if fhd & 0x08:
            raise FormatError(f"{key}: zstd frame header reserved bit set")
        checksum = (fhd >> 2) & 1
        did_size = (0, 1, 2, 4)[fhd & 3]
        fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
        window = None
        if not single:
            if pos >= size:
                raise FormatError(f"{key}: truncated zstd frame header")
            wd = mv[pos]
            pos += 1
            exp, mant = wd >> 3, wd & 7
            base = 1 << (10 + exp)
            window = base + (base >> 3) * mant
        if pos + did_size + fcs_size > size:
            raise FormatError(f"{key}: truncated zstd frame header")
        if did_size:
            did = int.from_bytes(mv[pos : pos + did_size], "little")
            if did:
                raise FormatError(f"{key}: zstd frame needs dictionary {did}, which zarr never uses")
        pos += did_size
        content = None
        if fcs_size:
            content = int.from_bytes(mv[pos : pos + fcs_size], "little")
            if fcs_size == 2:
                content += 256
        pos += fcs_size
        if single:
            window = content
        block_max = min(window, _BLOCK_MAX)
        bound = 0
        while True:
            if pos + 3 > size:
                raise FormatError(f"{key}: truncated zstd block header at byte {pos}")
            bh = int.from_bytes(mv[pos : pos + 3], "little")
            pos += 3
            last = bh & 1
            btype = (bh >> 1) & 3
            bsize = bh >> 3
            if btype == 3:
                raise FormatError(f"{key}: reserved zstd block type at byte {pos - 3}")
            if btype == 1:  # RLE: one byte repeated bsize times
                if bsize > block_max:
                    raise FormatError(f"{key}: zstd RLE block of {bsize} bytes exceeds the block maximum")
                pos += 1
                bound += bsize
            else:
                if bsize > block_max:
                    raise FormatError(f"{key}: zstd block of {bsize} bytes exceeds the block maximum")
                pos += bsize
                bound += bsize if btype == 0 else block_max
            if pos > size:
                raise FormatError(f"{key}: zstd block overruns the data")
            if last:
                break
        if checksum:
            pos += 4
            if pos > size:
                raise FormatError(f"{key}: truncated zstd content checksum")
        if content is not None:
            if content > bound:
                raise FormatError(
                    f"{key}: zstd frame declares {content} bytes but its blocks can yield at most {bound}"
                )
            bound = content
        frames.append((start, pos, content, bound))
    return frames


def zstd_decompress(data, *, key: str = "?", max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """Decompress zstd frame(s) with the output bounded by ``max_size`` before allocation."""
    frames = zstd_bound(data, key=key)
    total = sum(f[3] for f in frames)
    if total > max_size:
        raise FormatError(f"{key}: zstd data may decompress to {total} bytes, above the {max_size}-byte limit")
    # Reads use python-zstandard: importing numcodecs costs ~70 ms of a cold start, and the
    # decompressed bytes do not depend on the library (writes still compress with numcodecs).
    import zstandard

    mv = byte_view(data)
    out = []
    for start, end, content, bound in frames:
        if content == 0:  # an empty frame; the block walk already validated it
            out.append(b"")
            continue
        try:
            piece = zstandard.ZstdDecompressor().decompress(mv[start:end], max_output_size=max(bound, 1))
        except (zstandard.ZstdError, ValueError) as exc:
            raise FormatError(f"{key}: corrupt zstd data ({exc})") from exc
        if content is not None and len(piece) != content:
            raise FormatError(f"{key}: zstd frame yielded {len(piece)} bytes, header says {content}")
        out.append(piece)
    if not out:
        raise FormatError(f"{key}: zstd data holds only skippable frames")
    return out[0] if len(out) == 1 else b"".join(out)


# ---------------------------------------------------------------------------
# blosc


def blosc_decompress(data, *, key: str = "?", max_size: int = DEFAULT_MAX_SIZE) -> bytes:
    """Decompress a blosc(1) buffer after checking its 16-byte header against the data."""
    mv = byte_view(data)
    size = mv.nbytes
    if size < 16:
        raise FormatError(f"{key}: blosc buffer is {size} bytes, shorter than its 16-byte header")
    version, _vlz, flags, typesize, nbytes, blocksize, cbytes = struct.unpack_from("<BBBBIII", mv, 0)
    if version not in (1, 2):
        raise FormatError(f"{key}: blosc format version {version} is not supported")
    if cbytes != size:
        raise FormatError(f"{key}: blosc header says {cbytes} compressed bytes, buffer has {size}")
    if nbytes > max_size:
        raise FormatError(f"{key}: blosc data decompresses to {nbytes} bytes, above the {max_size}-byte limit")
    if typesize == 0:
        raise FormatError(f"{key}: blosc typesize 0")
    if flags & 0x02:  # memcpyed: raw copy follows the header
        if size != 16 + nbytes:
            raise FormatError(f"{key}: blosc memcpy buffer of {size} bytes does not hold {nbytes} bytes")
        return bytes(mv[16:])
    if nbytes == 0:
        if size != 16:
            raise FormatError(f"{key}: empty blosc buffer has {size - 16} trailing bytes")
        return b""
    if blocksize == 0:
        raise FormatError(f"{key}: blosc blocksize 0 for {nbytes} bytes")
    nblocks = -(-nbytes // blocksize)
    if 16 + 4 * nblocks > size:
        raise FormatError(f"{key}: blosc buffer too short for its {nblocks} block offsets")
    bstarts = np.frombuffer(mv, dtype="<i4", count=nblocks, offset=16)
    if bstarts.size and (bstarts.min() < 16 + 4 * nblocks or bstarts.max() >= size):
        raise FormatError(f"{key}: blosc block offsets point outside the buffer")
    from numcodecs import blosc as _b

    try:
        out = _b.decompress(mv)
    except Exception as exc:
        raise FormatError(f"{key}: corrupt blosc data ({exc})") from exc
    if len(out) != nbytes:
        raise FormatError(f"{key}: blosc yielded {len(out)} bytes, header says {nbytes}")
    return out


# ---------------------------------------------------------------------------


def _int_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def _codec_list(codecs, key: str, what: str) -> list[tuple[str, dict]]:
    """Normalize a zarr codecs list to ``(name, configuration)`` pairs."""
    if not isinstance(codecs, list):
        raise FormatError(f"{key}: {what} is not a list")
    out = []
    for c in codecs:
        if isinstance(c, str):
            out.append((c, {}))
            continue
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
            raise FormatError(f"{key}: {what} entry {c!r} is not a codec object")
        cfg = c.get("configuration", {})
        if cfg is None:
            cfg = {}
        if not isinstance(cfg, Mapping):
            raise FormatError(f"{key}: codec {c['name']!r} configuration is not a JSON object")
        out.append((c["name"], dict(cfg)))
    return out


def _compressor_json(comp) -> list[dict]:
    if comp is None:
        return []
    name, cfg = comp
    return [{"name": name, "configuration": dict(cfg)}]


@dataclass(frozen=True)
class CellCodec:
    """How a cell's stored bytes map to its payload.

    ``compressor``: ``None``, ``("zstd", cfg)`` or ``("blosc", cfg)``.
    ``shard``: ``None`` or the number of cells per shard along each axis.
    ``serializer``: ``"vlen-bytes"`` (every spatial array) or ``"bytes"``
    (dense numeric arrays; then ``decode`` returns the raw chunk bytes).
    """

    compressor: tuple[str, Mapping[str, Any]] | None = None
    shard: tuple[int, ...] | None = None
    serializer: str = "vlen-bytes"
    index_location: str = "end"
    index_crc: bool = True
    endian: str = "little"
    inner_rows: int | None = None  # rows per inner chunk of a sharded 1-D array (None: one cell each)

    def __hash__(self) -> int:
        return hash((json.dumps(self.codecs_json(), sort_keys=True), self.serializer))

    # -- construction -------------------------------------------------------

    @classmethod
    def for_writing(cls, compression: str | None = None, shard_shape: Sequence[int] | None = None) -> CellCodec:
        """The codec 0.9.2 writes for ``compressor=compression, shard_shape=shard_shape``."""
        if compression in (None, "none", False):
            comp = None
        elif compression == "zstd":
            comp = ("zstd", dict(ZSTD_CONFIG))
        elif compression == "blosc":
            comp = ("blosc", dict(BLOSC_CONFIG))
        else:
            raise InvalidArgumentError(f"compression: expected None, 'zstd' or 'blosc', got {compression!r}")
        shard = None
        if shard_shape is not None:
            if isinstance(shard_shape, (int, np.integer)) or not all(
                isinstance(s, (int, np.integer)) and s >= 1 for s in shard_shape
            ):
                raise InvalidArgumentError(
                    f"shard_shape: expected a tuple of cells per shard (>= 1) per axis, got {shard_shape!r}"
                )
            shard = tuple(int(s) for s in shard_shape)
        return cls(comp, shard)

    @classmethod
    def from_array_metadata(cls, meta: Mapping[str, Any], *, key: str = "?") -> CellCodec:
        """Parse an array ``zarr.json`` dict; :class:`FormatError` names unsupported codecs."""
        if not isinstance(meta, Mapping):
            raise FormatError(f"{key}: array metadata is not a JSON object")
        codecs = _codec_list(meta.get("codecs"), key, "codecs")
        if not codecs:
            raise FormatError(f"{key}: array metadata has no codecs list")
        shard = None
        inner_rows = None
        loc = "end"
        crc = True
        if codecs[0][0] == "sharding_indexed":
            if len(codecs) != 1:
                raise FormatError(f"{key}: codecs after sharding_indexed are not supported")
            cfg = codecs[0][1]
            inner = cfg.get("chunk_shape")
            # Spatial arrays shard one cell per inner chunk; 1-D arrays (manifests) may pack several rows.
            if not _int_list(inner) or not all(x >= 1 for x in inner) or (len(inner) != 1 and any(x != 1 for x in inner)):
                raise FormatError(f"{key}: sharding_indexed inner chunk_shape {inner!r} is not supported")
            grid = meta.get("chunk_grid")
            gcfg = grid.get("configuration") if isinstance(grid, Mapping) else None
            outer = gcfg.get("chunk_shape") if isinstance(gcfg, Mapping) else None
            if not _int_list(outer) or len(outer) != len(inner) or not all(
                x >= 1 and x % i == 0 for x, i in zip(outer, inner)
            ):
                raise FormatError(f"{key}: shard shape {outer!r} does not match inner chunk_shape {inner!r}")
            shard = tuple(outer)
            inner_rows = inner[0] if len(inner) == 1 and inner[0] != 1 else None
            loc = cfg.get("index_location", "end")
            if loc not in ("end", "start"):
                raise FormatError(f"{key}: sharding index_location {loc!r} is not supported")
            icodecs = _codec_list(cfg.get("index_codecs", _INDEX_CODECS), key, "index_codecs")
            names = [n for n, _c in icodecs]
            if names == ["bytes", "crc32c"]:
                crc = True
            elif names == ["bytes"]:
                crc = False
            else:
                raise FormatError(f"{key}: sharding index_codecs {names!r} are not supported")
            if icodecs[0][1].get("endian", "little") != "little":
                raise FormatError(f"{key}: big-endian shard index is not supported")
            codecs = _codec_list(cfg.get("codecs"), key, "sharding_indexed codecs")
            if not codecs:
                raise FormatError(f"{key}: sharding_indexed has no inner codecs")
        sname, scfg = codecs[0]
        endian = "little"
        if sname == "bytes":
            endian = scfg.get("endian", "little")
            if endian not in ("little", "big"):
                raise FormatError(f"{key}: bytes codec endian {endian!r} is not supported")
        elif sname != "vlen-bytes":
            raise FormatError(f"{key}: unsupported serializer codec {sname!r} (expected vlen-bytes or bytes)")
        rest = codecs[1:]
        if len(rest) > 1:
            raise FormatError(f"{key}: unsupported codec chain {[n for n, _c in rest]!r}")
        comp = None
        if rest:
            cname, cfg = rest[0][0], dict(rest[0][1])
            if cname == "zstd":
                cfg.setdefault("level", 0)
                cfg.setdefault("checksum", False)
                if not isinstance(cfg["level"], int) or not isinstance(cfg["checksum"], bool):
                    raise FormatError(f"{key}: zstd configuration {cfg!r} is not supported")
                comp = ("zstd", cfg)
            elif cname == "blosc":
                ok = (
                    cfg.get("shuffle", "noshuffle") in _BLOSC_SHUFFLE
                    and cfg.get("cname", "zstd") in _BLOSC_CNAMES
                    and all(isinstance(cfg.get(k, 0), int) for k in ("clevel", "typesize", "blocksize"))
                )
                if not ok:
                    raise FormatError(f"{key}: blosc configuration {cfg!r} is not supported")
                comp = ("blosc", cfg)
            else:
                raise FormatError(f"{key}: unsupported codec {cname!r}")
        return cls(comp, shard, sname, loc, crc, endian, inner_rows)

    # -- JSON -----------------------------------------------------------------

    def codecs_json(self) -> list[dict]:
        """The ``codecs`` list for zarr.json, exactly as 0.9.2 writes it."""
        ser = (
            {"name": "vlen-bytes", "configuration": {}}
            if self.serializer == "vlen-bytes"
            else {"name": "bytes", "configuration": {"endian": self.endian}}
        )
        inner = [ser, *_compressor_json(self.compressor)]
        if self.shard is None:
            return inner
        return [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [self.inner_rows] if self.inner_rows else [1] * len(self.shard),
                    "codecs": inner,
                    "index_codecs": [dict(c) for c in (_INDEX_CODECS if self.index_crc else _INDEX_CODECS[:1])],
                    "index_location": self.index_location,
                },
            }
        ]

    @property
    def cells_per_shard(self) -> int:
        """Inner chunks in one shard."""
        if self.shard is None:
            return 1
        return int(np.prod(self.shard)) // (self.inner_rows or 1)

    # -- bytes ----------------------------------------------------------------

    def _compress(self, raw: bytes) -> bytes:
        if self.compressor is None:
            return raw
        name, cfg = self.compressor
        if name == "zstd":
            from numcodecs import zstd as _z

            return _z.compress(raw, int(cfg.get("level", 0)), bool(cfg.get("checksum", False)))
        from numcodecs import blosc as _b

        codec = _b.Blosc(
            cname=str(cfg.get("cname", "zstd")),
            clevel=int(cfg.get("clevel", 5)),
            shuffle=_BLOSC_SHUFFLE[cfg.get("shuffle", "noshuffle")],
            blocksize=int(cfg.get("blocksize", 0)),
            typesize=int(cfg.get("typesize", 1)),
        )
        return bytes(codec.encode(np.frombuffer(raw, dtype=np.uint8)))

    def _decompress(self, raw, key: str, max_size: int):
        if self.compressor is None:
            mv = byte_view(raw)
            if mv.nbytes > max_size:
                raise FormatError(f"{key}: cell of {mv.nbytes} bytes is above the {max_size}-byte limit")
            return mv
        if self.compressor[0] == "zstd":
            return zstd_decompress(raw, key=key, max_size=max_size)
        return blosc_decompress(raw, key=key, max_size=max_size)

    def encode_items(self, items: Sequence) -> bytes:
        """Items -> stored bytes of one chunk (one inner chunk when sharded)."""
        if self.serializer != "vlen-bytes":
            raise InvalidArgumentError("encode_items: this array uses the bytes serializer; use encode()")
        return self._compress(encode_vlen(items))

    def decode_items(
        self, raw, *, key: str = "?", expected: int | None = None, max_size: int = DEFAULT_MAX_SIZE
    ) -> list[memoryview]:
        """Stored bytes of one chunk -> item views."""
        if self.serializer != "vlen-bytes":
            raise InvalidArgumentError(f"{key}: decode_items on a bytes-serialized array; use decode()")
        return decode_vlen(self._decompress(raw, key, max_size), key=key, expected=expected)

    def encode(self, payload) -> bytes:
        """One payload -> stored bytes (vlen frame of one item, or raw bytes for ``bytes``)."""
        if self.serializer == "vlen-bytes":
            return self._compress(encode_vlen([payload]))
        return self._compress(bytes(byte_view(payload)))

    def decode(self, raw, *, key: str = "?", max_size: int = DEFAULT_MAX_SIZE) -> bytes:
        """Stored bytes -> the single payload as ``bytes`` (see :meth:`decode_view` to avoid the copy)."""
        return bytes(self.decode_view(raw, key=key, max_size=max_size))

    def decode_view(self, raw, *, key: str = "?", max_size: int = DEFAULT_MAX_SIZE) -> memoryview:
        """Like :meth:`decode` but a zero-copy view into ``raw`` or the decompressed buffer."""
        data = self._decompress(raw, key, max_size)
        if self.serializer != "vlen-bytes":
            return byte_view(data)
        return decode_vlen(data, key=key, expected=1)[0]
