"""Fixtures of the point-cloud tests.

``ref_dir`` (session): the directory with the reference point stores and their
``expected.json`` -- the shared 0.9.2 fixtures when present, otherwise stores
generated here with zarr-vectors (see tests/refstores.py).
"""

from __future__ import annotations

import pytest

from tests.refstores import POINT_STORES, reference_stores


@pytest.fixture(scope="session")
def ref_dir(tmp_path_factory):
    return reference_stores(tmp_path_factory.mktemp("refstores"), POINT_STORES)
