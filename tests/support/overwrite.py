"""The overwrite contract every backend must keep, checked the same way on each (S3, emulators)."""

from __future__ import annotations

import numpy as np
import pytest

import zvf
from zvf.errors import StoreExistsError


def assert_overwrite_needed(url: str, opts: dict, pos: np.ndarray, bounds) -> None:
    """A second write to an existing store is refused until ``overwrite=True``, which replaces it."""
    zvf.write_points(url, pos, storage_options=opts, chunk_shape=(60.0,) * 3, bounds=bounds)
    with pytest.raises(StoreExistsError, match="overwrite=True"):
        zvf.write_points(url, pos[:5], storage_options=opts, chunk_shape=(60.0,) * 3, bounds=bounds)
    zvf.write_points(url, pos[:5], storage_options=opts, chunk_shape=(60.0,) * 3, bounds=bounds, overwrite=True)
    with zvf.open(url, storage_options=opts) as ds:
        assert len(ds.read_all()) == 5
