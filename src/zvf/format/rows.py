"""Fixed-size rows of one dtype: how spill files and ``.npz`` members lay out an array's rows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RowLayout:
    """An array of any number of rows, each ``row_shape`` items of ``dtype``, stored row after row."""

    dtype: np.dtype
    row_shape: tuple[int, ...]

    @property
    def row_nbytes(self) -> int:
        return self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))

    def rows_from(self, buf: bytes | bytearray | memoryview, n: int) -> np.ndarray:
        """``n`` rows read back from ``buf`` (exactly ``n * row_nbytes`` bytes)."""
        return np.frombuffer(buf, dtype=self.dtype).reshape(n, *self.row_shape)
