"""OBJ and STL meshes, with small readers and writers of our own (no extra needed).

OBJ: ``v x y z [r g b]`` vertices (a colour becomes the 3-channel attribute ``color``),
``f`` faces (``i``, ``i/t``, ``i//n``, ``i/t/n``; negative indices count back), ``o name``
starts a new object (the objects' vertices and faces keep their own ids on the way back).
Normals and texture coordinates are per corner in OBJ and are not kept.
STL: binary or ASCII triangles; corners at equal positions become one vertex, so the store
holds a connected mesh.  Facet normals are recomputed on writing and the 2-byte attribute
word is written as 0.  Files are parsed whole (both formats are one text or record block).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InputFileError, InvalidArgumentError
from .base import Converted, StoreOptions, Written, source_record, stamp, take_options

if TYPE_CHECKING:
    from ..read.dataset import DatasetReader
    from ..read.selection import Selection

_STL_RECORD = np.dtype([("normal", "<f4", (3,)), ("v", "<f4", (3, 3)), ("attr", "<u2")])


# ----------------------------------------------------------------------------------- OBJ


def _numbers(lines: list[str], src: str, what: str) -> np.ndarray:
    """Lines of equally many numbers as one 2-D array."""
    if not lines:
        return np.zeros((0, 0))
    widths = {len(ln.split()) for ln in lines}
    if len(widths) != 1:
        raise InputFileError(f"{src}: {what} lines have {sorted(widths)} values; they must all have the same")
    try:
        return np.array(" ".join(lines).split(), dtype=np.float64).reshape(len(lines), widths.pop())
    except ValueError as exc:
        raise InputFileError(f"{src}: a {what} line is not numeric ({exc})") from None


def read_obj(src: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any], dict[int, str]]:
    """(positions, faces, object id per vertex, attributes, name of each named object) of an OBJ file."""
    with open(src, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    v_lines = re.findall(r"^v[ \t]+(.*?)\s*$", text, re.MULTILINE)
    verts = _numbers(v_lines, src, "v")
    if verts.shape[1] not in (3, 4, 6, 7):
        raise InputFileError(f"{src}: v lines must hold x y z [w] [r g b], got {verts.shape[1]} values")
    pos = verts[:, :3]
    attrs = {"color": verts[:, -3:].astype(np.float32)} if verts.shape[1] >= 6 else {}
    # object of each vertex: count the 'o' statements before each v line
    v_at = np.array([m.start() for m in re.finditer(r"^v[ \t]", text, re.MULTILINE)], dtype=np.int64)
    o_lines = list(re.finditer(r"^o[ \t]+(.*?)\s*$", text, re.MULTILINE))
    o_at = np.array([m.start() for m in o_lines], dtype=np.int64)
    oids = np.searchsorted(o_at, v_at, side="right")  # 'o' lines before each vertex
    first = int(oids.min()) if len(oids) else 0
    oids -= first
    # object k follows the (k + first)-th 'o' line (none for vertices before any)
    names = {k - first: o_lines[k - 1].group(1) for k in np.unique(oids + first).tolist() if k >= 1}
    f_lines = [re.sub(r"/\S*", "", ln) for ln in re.findall(r"^f[ \t]+(.*?)\s*$", text, re.MULTILINE)]
    faces = _numbers(f_lines, src, "f").astype(np.int64)
    if faces.size:
        faces = np.where(faces < 0, faces + len(pos), faces - 1)
        if faces.min() < 0 or faces.max() >= len(pos):
            raise InputFileError(f"{src}: a face refers to a vertex outside 1..{len(pos)}")
    else:
        faces = np.zeros((0, 3), np.int64)
    return pos, faces, oids.astype(np.int64), attrs, names


class ObjOut:
    """OBJ text written object by object; vertex numbers run on across objects."""

    def __init__(self, dst: str):
        self.fh = open(dst, "w", encoding="utf-8")  # noqa: SIM115 -- held across write() calls, closed by close()
        self.fh.write("# written by zvf\n")
        self.nv = self.nf = 0

    def write(self, oid: int, sel: Selection, name: str | None = None) -> None:
        self.fh.write(f"o {name or f'object_{oid}'}\n")
        cols = [sel.positions.astype(np.float64)]
        color = sel.attributes.get("color")
        if color is not None and color.ndim == 2 and color.shape[1] == 3:
            cols.append(color.astype(np.float64))
        np.savetxt(self.fh, np.hstack(cols), fmt="v" + " %.17g" * sum(c.shape[1] for c in cols))
        if sel.faces is not None and len(sel.faces):
            np.savetxt(self.fh, sel.faces + self.nv + 1, fmt="f" + " %d" * sel.faces.shape[1])
            self.nf += len(sel.faces)
        self.nv += len(sel.positions)

    def close(self) -> None:
        self.fh.close()


# ----------------------------------------------------------------------------------- STL


def read_stl(src: str) -> np.ndarray:
    """Triangles (T, 3, 3) float64 of a binary or ASCII STL file."""
    with open(src, "rb") as fh:
        data = fh.read()
    if len(data) >= 84:
        count = int(np.frombuffer(data, "<u4", 1, 80)[0])
        if 84 + count * _STL_RECORD.itemsize == len(data):
            return np.frombuffer(data, _STL_RECORD, count, 84)["v"].astype(np.float64)
    if not data.lstrip().lower().startswith(b"solid"):
        raise InputFileError(f"{src}: neither a binary STL (size does not match its triangle count) "
                                   f"nor an ASCII one (no 'solid')")
    nums = re.findall(rb"vertex\s+(\S+)\s+(\S+)\s+(\S+)", data)
    if len(nums) % 3:
        raise InputFileError(f"{src}: {len(nums)} vertex lines is not a whole number of triangles")
    try:
        return np.array(nums, dtype=np.float32).astype(np.float64).reshape(-1, 3, 3)  # STL is float32
    except ValueError as exc:
        raise InputFileError(f"{src}: a vertex line is not numeric ({exc})") from None


def write_stl(dst: str, tris: np.ndarray, *, ascii: bool) -> None:
    normal = np.cross(tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0])
    length = np.linalg.norm(normal, axis=1, keepdims=True)
    normal = np.divide(normal, length, out=np.zeros_like(normal), where=length > 0)
    if ascii:
        with open(dst, "w", encoding="utf-8") as fh:
            fh.write("solid zvf\n")
            rows = np.concatenate([normal[:, None], tris], axis=1).reshape(len(tris), 12)
            np.savetxt(fh, rows, fmt=" facet normal %.9g %.9g %.9g\n  outer loop\n"
                                     + "   vertex %.9g %.9g %.9g\n" * 3 + "  endloop\n endfacet")
            fh.write("endsolid zvf\n")
        return
    rec = np.zeros(len(tris), _STL_RECORD)
    rec["normal"], rec["v"] = normal, tris
    with open(dst, "wb") as fh:
        fh.write(b"binary STL written by zvf".ljust(80, b" "))
        fh.write(np.uint32(len(tris)).tobytes())
        fh.write(rec.tobytes())


# ----------------------------------------------------------------------------------- both


async def to_store(fmt: str, src: str, dst: str, store: StoreOptions, **options: Any) -> Converted:
    opts = take_options(fmt, options, {"dtype": "float32" if fmt == "stl" else "float64"})
    from ..write.objects.memory import write_mesh

    names: dict[int, str] = {}
    if fmt == "obj":
        pos, faces, oids, attrs, names = read_obj(src)
    else:
        tris = read_stl(src)
        pos, inverse = np.unique(tris.reshape(-1, 3), axis=0, return_inverse=True)
        faces = inverse.reshape(-1, 3).astype(np.int64)
        oids, attrs = np.zeros(len(pos), np.int64), {}
    if not len(pos):
        raise InputFileError(f"{src}: no vertices")
    if names:  # OBJ object names, for the way back
        stamp(store, {"format": "obj", "object_names": {str(k): v for k, v in names.items()}})
    s = await write_mesh(dst, pos, faces, chunk_shape=store.chunk_shape, object_ids=oids, attributes=attrs or None,
                         dtype=opts["dtype"], **store.writer_kw())
    return {"vertices": s.vertex_count, "faces": len(faces), "objects": s.object_count}


async def from_store(fmt: str, ds: DatasetReader, dst: str, written: Written, **options: Any) -> Converted:
    opts = take_options(fmt, options, {"level": 0, "ascii": False})
    level = opts["level"]
    ids = await ds.object_ids(level=level)
    if fmt == "obj":
        names = source_record(ds, "obj").get("object_names", {})
        out = ObjOut(dst)
        try:
            k = 0
            async for sel in written.each(ds.iter_objects(level=level), level):
                out.write(int(ids[k]), sel, names.get(str(int(ids[k]))))
                k += 1
        finally:
            out.close()
        return {"vertices": out.nv, "faces": out.nf, "objects": len(ids)}
    tris = []
    async for sel in written.each(ds.iter_objects(level=level), level):
        if sel.faces is not None and len(sel.faces):
            if sel.faces.shape[1] != 3:
                raise InvalidArgumentError(f"{ds.url}: STL holds triangles, the mesh has {sel.faces.shape[1]}-gons")
            tris.append(sel.positions[sel.faces].astype(np.float64))
    all_tris = np.concatenate(tris) if tris else np.zeros((0, 3, 3))
    write_stl(dst, all_tris, ascii=bool(opts["ascii"]))
    return {"vertices": written.done, "faces": len(all_tris), "objects": len(ids)}
