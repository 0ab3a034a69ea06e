"""What a converter stamps (``zvf_source``) and what a rechunk carries from its source's root are in the
root its writer publishes, not in a second root write after it: every root a store ever shows (each PUT
of ``zarr.json``, watched at the transport) already holds them, so a kill between the writer's commit
and a later rewrite cannot leave a published store without them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import zvf
from zvf.io.transport import ObstoreTransport


@pytest.fixture
def root_puts(monkeypatch):
    """Every document written to a root ``zarr.json`` (parsed), in order."""
    seen: list[dict] = []
    put0 = ObstoreTransport.put

    async def put(self, key, data, **kw):
        await put0(self, key, data, **kw)
        if key == "zarr.json":
            seen.append(json.loads(bytes(data)))

    monkeypatch.setattr(ObstoreTransport, "put", put)
    return seen


def test_converter_stamps_in_the_one_root_write(tmp_path, root_puts):
    src = tmp_path / "n.swc"
    src.write_text("# a tree\n1 1 0 0 0 1 -1\n2 1 1 0 0 1 1\n3 1 2 1 0 1 2\n")
    store = tmp_path / "n.zarrvectors"
    zvf.convert(src, store)
    assert len(root_puts) == 1  # the writer's first write publishes the root, the record in it
    assert root_puts[0]["attributes"]["zvf_source"]["format"] == "swc"


def test_rechunk_in_place_carries_in_the_commit(tmp_path, root_puts):
    store = tmp_path / "p.zarrvectors"
    zvf.write_points(store, np.random.default_rng(0).uniform(0, 100, (200, 3)), chunk_shape=(50.0,) * 3)
    doc = json.loads((store / "zarr.json").read_text())
    doc["attributes"]["mine"] = {"project": "thesis"}
    (store / "zarr.json").write_text(json.dumps(doc))
    root_puts.clear()
    zvf.rechunk(store, store, chunk_shape=(25.0,) * 3, overwrite=True)
    versions = {d["attributes"]["zvf_publication"]["version"] for d in root_puts}
    assert len(versions) == 1  # one publication: its commit (and the pending-documents flag cleared)
    assert all(d["attributes"].get("mine") == {"project": "thesis"} for d in root_puts)
    with zvf.open(store) as ds:
        assert ds.root.raw["attributes"]["mine"] == {"project": "thesis"} and len(ds.read_all()) == 200
