"""An ``.npz`` (a stored zip of ``.npy`` members) written column by column, in place where it can be.

``np.savez`` wants every array in memory; an export has one batch at a time.  A zip member's bytes
are contiguous, so a column whose final row count is known when it is added gets its region
reserved at once and every batch is written straight to its place (``os.pwrite``): the data is
written once.  A column with no known count, and rows past the count, go to a temporary file and
are copied in at the end.  Only a prefix of the columns can be
reserved (a region after an unknown one has no known place); if a reserved column ends with
fewer or more rows than announced, the zip is assembled afresh from what was written, so a
wrong count costs a copy, never a wrong file.  A member's CRC-32 covers its ``.npy`` header too:
a reserved column's is known from the start and its CRC runs as batches arrive; a copied
column's is computed as it is copied.

The container is zip64 throughout (every size in the zip64 extra field), which ``zipfile`` and
``np.load`` read; members are stored, uncompressed, as ``np.savez`` writes them.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError
from ..format.rows import RowLayout

if TYPE_CHECKING:
    import tempfile

    from typing_extensions import Buffer

_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01, the zip epoch: results do not depend on the clock
_ZIP64_VERSION = 45
_UNKNOWN32 = 0xFFFFFFFF
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)  # O_BINARY: no newline edits on Windows


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """A version 2.0 ``.npy`` header, padded to a multiple of 64 bytes as numpy pads its own."""
    text = repr({"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)})
    body = text.encode("latin1")
    total = -(-(12 + len(body) + 1) // 64) * 64
    body += b" " * (total - 12 - len(body) - 1) + b"\n"
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(body)) + body


def local_header(name: bytes, size: int, crc: int) -> bytes:
    """A stored member's local header, sizes in the zip64 extra field (so its length never changes)."""
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, _ZIP64_VERSION, 0, 0, 0, _DOS_DATE, crc, _UNKNOWN32,
                       _UNKNOWN32, len(name), 20) + name + struct.pack("<HHQQ", 1, 16, size, size)


def central_directory(members: list[tuple[bytes, int, int, int]], at: int) -> bytes:
    """Central directory of (name, local header offset, size, crc) members starting at byte ``at``,
    then the zip64 end record, its locator and the end record."""
    entries = b"".join(
        struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, (3 << 8) | _ZIP64_VERSION, _ZIP64_VERSION, 0, 0, 0,
                    _DOS_DATE, crc, _UNKNOWN32, _UNKNOWN32, len(name), 28, 0, 0, 0, 0o100644 << 16, _UNKNOWN32)
        + name + struct.pack("<HHQQQ", 1, 24, size, size, offset)
        for name, offset, size, crc in members)
    n, end64 = len(members), at + len(entries)
    return (entries
            + struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, _ZIP64_VERSION, _ZIP64_VERSION, 0, 0, n, n,
                          len(entries), at)
            + struct.pack("<IIQI", 0x07064B50, 0, end64, 1)
            + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, _UNKNOWN32, _UNKNOWN32, 0))


def pwrite_all(fd: int, data: Buffer, offset: int) -> None:
    """All of ``data`` at ``offset`` (seek and write where the platform has no ``pwrite``: one writer)."""
    view = memoryview(data).cast("B")
    while len(view):
        if hasattr(os, "pwrite"):
            n = os.pwrite(fd, view, offset)
        else:
            os.lseek(fd, offset, os.SEEK_SET)
            n = os.write(fd, view)
        view, offset = view[n:], offset + n


def _pread(fd: int, n: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, n)


def copy_range(src: int, src_at: int, dst: int, dst_at: int, nbytes: int, crc: int) -> int:
    """``nbytes`` from one file descriptor to another; returns ``crc`` continued over them."""
    done = 0
    step = tuning().npz_copy_bytes
    while done < nbytes:
        block = _pread(src, min(step, nbytes - done), src_at + done)
        if not block:
            raise OSError(f"{nbytes - done} bytes missing from a column of the .npz being written")
        crc = zlib.crc32(block, crc)
        pwrite_all(dst, block, dst_at + done)
        done += len(block)
    return crc


@dataclass
class _Column(RowLayout):
    """One member: where its region is (if reserved), how many rows it holds, its CRC so far."""

    name: bytes
    header_at: int = -1  # offset of its local header in the zip; -1: not reserved
    data_at: int = -1  # offset of its first row there
    capacity: int = 0  # rows reserved in place
    rows: int = 0
    crc: int = 0  # of the member so far (reserved columns: the header for ``capacity`` rows, then the rows)
    spill: BinaryIO | None = None  # rows past the reserved ones (or all of them)

    def npy(self, rows: int) -> bytes:
        return npy_header(self.dtype, (rows, *self.row_shape))

    def header(self, rows: int) -> bytes:
        """Local header and ``.npy`` header of the member holding ``rows`` rows."""
        body = self.npy(rows)
        return local_header(self.name, len(body) + rows * self.row_nbytes, self.crc) + body

    @property
    def in_place(self) -> bool:
        return self.header_at >= 0 and self.rows == self.capacity and self.spill is None


class NpzBuilder:
    """One ``.npz`` at ``path``, its columns added (in member order) and appended to batch by batch."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, _OPEN_FLAGS, 0o644)
        self.columns: dict[str, _Column] = {}
        self.end = 0  # bytes reserved so far (the zip's length if every column fills its region)
        self.reserving = True  # still a prefix of reserved columns
        self.spill_dir: tempfile.TemporaryDirectory[str] | None = None

    def add(self, key: str, dtype: np.dtype, row_shape: tuple[int, ...], rows: int | None) -> None:
        """A member ``key.npy`` of rows of ``row_shape``; ``rows``: its final row count, when known."""
        dtype = np.dtype(dtype)
        col = _Column(dtype, tuple(row_shape), f"{key}.npy".encode())
        head = 0 if rows is None else len(col.header(int(rows)))
        # a wrong, huge count in untrusted metadata must not make a file of absurd apparent size
        most = tuning().npz_max_reserved_bytes
        if rows is not None and self.reserving and self.end + head + int(rows) * col.row_nbytes <= most:
            col.header_at, col.data_at, col.capacity = self.end, self.end + head, int(rows)
            col.crc = zlib.crc32(col.npy(col.capacity))
            self.end = col.data_at + col.capacity * col.row_nbytes
        else:
            self.reserving = False
        self.columns[key] = col

    def append(self, key: str, rows: np.ndarray) -> None:
        col = self.columns[key]
        if tuple(rows.shape[1:]) != col.row_shape:
            raise InvalidArgumentError(f"{self.path}: rows of shape {tuple(rows.shape[1:])} for column {key!r}, "
                                       f"whose rows are {col.row_shape}")
        flat = np.ascontiguousarray(rows, dtype=col.dtype).reshape(-1).view(np.uint8)
        n = len(rows)
        fits = min(n, max(0, col.capacity - col.rows)) if col.header_at >= 0 else 0
        if fits:
            part = flat[:fits * col.row_nbytes]
            col.crc = zlib.crc32(part.data, col.crc)
            pwrite_all(self.fd, part.data, col.data_at + col.rows * col.row_nbytes)
        if fits < n:
            if col.spill is None:
                if self.spill_dir is None:
                    import tempfile  # here: a cold start's first query never exports (issue 26)

                    self.spill_dir = tempfile.TemporaryDirectory(prefix="zvf-export-",
                                                                 dir=os.path.dirname(os.path.abspath(self.path)))
                number = list(self.columns).index(key)  # not the key: attribute names may hold any character
                col.spill = open(os.path.join(self.spill_dir.name, f"{number}.bin"), "w+b")  # noqa: SIM115
            col.spill.write(flat[fits * col.row_nbytes:].data)
        col.rows += n

    def finish(self) -> None:
        """Headers, the columns not in place, and the central directory.  Reserved columns that all
        filled their regions stay where they are; otherwise the zip is assembled afresh beside it."""
        cols = list(self.columns.values())
        if all(c.in_place for c in cols if c.header_at >= 0):
            for c in cols:
                if c.header_at >= 0:
                    pwrite_all(self.fd, c.header(c.rows), c.header_at)
            self._write_rest(self.fd, self.end, [c for c in cols if c.header_at < 0])
            return
        fresh = f"{self.path}.assembling"
        fd = os.open(fresh, _OPEN_FLAGS, 0o644)
        try:
            self._write_rest(fd, 0, cols)
        except BaseException:
            os.close(fd)
            os.remove(fresh)
            raise
        os.close(self.fd)
        self.fd = fd
        try:
            os.replace(fresh, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(fresh)
            raise

    def _write_rest(self, fd: int, at: int, todo: list[_Column]) -> None:
        """``todo`` written one after another from ``at`` (their reserved rows, then their spilled ones),
        then the central directory of every column."""
        for c in todo:
            body = c.npy(c.rows)
            in_region = min(c.rows, c.capacity) * c.row_nbytes if c.header_at >= 0 else 0
            data_at = at + len(local_header(c.name, 0, 0)) + len(body)
            crc = zlib.crc32(body)
            if in_region:
                crc = copy_range(self.fd, c.data_at, fd, data_at, in_region, crc)
            if c.spill is not None:
                c.spill.flush()
                crc = copy_range(c.spill.fileno(), 0, fd, data_at + in_region, c.rows * c.row_nbytes - in_region, crc)
            c.crc = crc
            pwrite_all(fd, c.header(c.rows), at)
            c.header_at, c.data_at, c.capacity = at, data_at, c.rows
            at = data_at + c.rows * c.row_nbytes
        members = [(c.name, c.header_at, len(c.npy(c.rows)) + c.rows * c.row_nbytes, c.crc)
                   for c in self.columns.values()]
        tail = central_directory(members, at)
        pwrite_all(fd, tail, at)
        os.ftruncate(fd, at + len(tail))

    def close(self) -> None:
        """Release the file descriptors and temporary files (the zip itself stays)."""
        for c in self.columns.values():
            if c.spill is not None:
                c.spill.close()
        if self.spill_dir is not None:
            self.spill_dir.cleanup()
            self.spill_dir = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
