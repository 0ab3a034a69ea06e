"""Read and rewrite a local 0.9.2-style store's vlen cells by hand (unsharded, optional zstd/blosc), for
tests that plant damage or variants zvf must read or refuse."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))


def vlen_frame(*items: bytes) -> bytes:
    """A vlen-bytes cell of ``items`` (no compression): u32 n, then (u32 len, bytes) each."""
    parts = [len(items).to_bytes(4, "little")]
    for it in items:
        parts += [len(it).to_bytes(4, "little"), bytes(it)]
    return b"".join(parts)


def unframe(raw: bytes) -> list[bytes]:
    """The items of a vlen-bytes frame (the whole frame: nothing may follow its last item)."""
    n = int.from_bytes(raw[:4], "little")
    out, p = [], 4
    for _ in range(n):
        ln = int.from_bytes(raw[p:p + 4], "little")
        out.append(bytes(raw[p + 4:p + 4 + ln]))
        p += 4 + ln
    assert p == len(raw), f"{len(raw) - p} bytes after the last of {n} vlen items"
    return out


def plain_vlen_codecs(array_dir: Path) -> None:
    """Make an array's cells plain vlen-bytes frames (so tests can write cells directly)."""
    meta = read_json(array_dir / "zarr.json")
    meta["codecs"] = [{"name": "vlen-bytes", "configuration": {}}]
    write_json(array_dir / "zarr.json", meta)


def cell_path(array_dir: Path, coords) -> Path:
    """Chunk file of ``coords`` (grid coordinates) under the default '/' encoding."""
    return array_dir.joinpath("c", *[str(int(c)) for c in coords])


def _stored(array_dir: Path, p: Path) -> bytes:
    raw = p.read_bytes()
    codecs = [c["name"] for c in read_json(array_dir / "zarr.json")["codecs"]]
    if "zstd" in codecs or "blosc" in codecs:
        import numcodecs

        raw = (numcodecs.Zstd() if "zstd" in codecs else numcodecs.Blosc()).decode(raw)
    return bytes(raw)


def decode_cell(array_dir: Path, coords) -> bytes | None:
    """Payload of a one-item vlen cell as 0.9.2 stores it (optional zstd/blosc, no sharding)."""
    p = cell_path(array_dir, coords)
    if not p.exists():
        return None
    return unframe(_stored(array_dir, p))[0]


def vlen_items(array_dir: Path) -> list[bytes]:
    """All items of a 1-D vlen array (object_index/manifests, groups), in order."""
    meta = read_json(array_dir / "zarr.json")
    n = meta["shape"][0]
    per = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
    out: list[bytes] = []
    for c in range(-(-n // per) if n else 0):
        p = cell_path(array_dir, (c,))
        want = min(per, n - c * per)
        out += unframe(_stored(array_dir, p))[:want] if p.exists() else [b""] * want
    return out


def write_vlen_items(array_dir: Path, items: list[bytes]) -> None:
    """Rewrite a 1-D vlen array as one plain cell holding ``items``."""
    meta = read_json(array_dir / "zarr.json")
    meta["shape"] = [len(items)]
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [max(len(items), 1)]
    meta["codecs"] = [{"name": "vlen-bytes", "configuration": {}}]
    write_json(array_dir / "zarr.json", meta)
    shutil.rmtree(array_dir / "c", ignore_errors=True)
    p = cell_path(array_dir, (0,))
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(vlen_frame(*items))
