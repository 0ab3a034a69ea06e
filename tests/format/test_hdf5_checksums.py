"""zarr v3's HDF5 checksum codecs (``numcodecs.fletcher32``, ``numcodecs.jenkins_lookup3``) read and verified."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import zvf
from zvf.errors import FormatError
from zvf.format.codecs import CellCodec
from zvf.format.vlen import encode_vlen

FLETCHER = {"name": "numcodecs.fletcher32", "configuration": {}}
JENKINS = {"name": "numcodecs.jenkins_lookup3", "configuration": {"initval": 7}}


def _numcodecs(codec: dict):
    """The codec zarr-python writes these names with (numcodecs' own classes)."""
    from numcodecs.checksum32 import JenkinsLookup3
    from numcodecs.fletcher32 import Fletcher32

    return Fletcher32() if codec is FLETCHER else JenkinsLookup3(**codec["configuration"])


@pytest.mark.parametrize("codec", [FLETCHER, JENKINS], ids=["fletcher32", "jenkins_lookup3"])
@pytest.mark.parametrize("size", [0, 1, 13, 4096])
def test_bytes_match_numcodecs_and_a_flipped_byte_is_caught(codec, size):
    payload = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    cc = CellCodec.from_array_metadata({"codecs": [{"name": "vlen-bytes"}, codec]}, key="k")
    stored = bytes(_numcodecs(codec).encode(np.frombuffer(encode_vlen([payload]), np.uint8)))
    assert cc.encode(payload) == stored
    assert cc.decode(stored, key="k") == payload
    for at in (0, len(stored) // 2, len(stored) - 1):
        bad = bytearray(stored)
        bad[at] ^= 0x10
        with pytest.raises(FormatError, match=r"0/vertices/c/1: .*checksum mismatch"):
            cc.decode(bytes(bad), key="0/vertices/c/1")
    with pytest.raises(FormatError, match="no 4-byte checksum"):
        cc.decode(stored[:3], key="k")


@pytest.mark.parametrize("config", [{"initval": "7"}, {"initval": -1}, {"prefix": [1, 2]}, {"seed": 1}])
def test_jenkins_configurations_zvf_cannot_honour_are_refused(config):
    with pytest.raises(FormatError, match="jenkins_lookup3 configuration"):
        CellCodec.from_array_metadata(
            {"codecs": [{"name": "vlen-bytes"}, {"name": "numcodecs.jenkins_lookup3", "configuration": config}]},
            key="k")


def _recode_store(root: Path, codecs: list[dict]) -> dict[str, bytes]:
    """Append ``codecs`` to the pipeline of every unsharded vlen array of a local store: each cell's stored bytes
    go through numcodecs' own encoders (as zarr-python writes them), the array documents and the root's
    consolidated copy are rewritten; -> the payload of each cell."""
    payloads = {}
    root_doc = json.loads((root / "zarr.json").read_text())
    section = root_doc["consolidated_metadata"]["metadata"]
    for zj in root.rglob("zarr.json"):
        meta = json.loads(zj.read_text())
        if meta.get("node_type") != "array" or meta.get("data_type") != "variable_length_bytes":
            continue
        before = CellCodec.from_array_metadata(meta, key=str(zj))
        if before.shard is not None:
            continue
        for cell in (zj.parent / "c").rglob("*"):
            if cell.is_file():
                stored = cell.read_bytes()
                payloads[cell.relative_to(root).as_posix()] = bytes(before.decode(stored, key=str(cell)))
                for c in codecs:
                    stored = bytes(_numcodecs(c).encode(np.frombuffer(stored, np.uint8)))
                cell.write_bytes(stored)
        meta["codecs"] = [*meta["codecs"], *codecs]
        zj.write_text(json.dumps(meta))
        section[zj.parent.relative_to(root).as_posix()] = meta
    (root / "zarr.json").write_text(json.dumps(root_doc))
    return payloads


@pytest.mark.parametrize("codecs", [[FLETCHER], [JENKINS], [FLETCHER, JENKINS]],
                         ids=["fletcher32", "jenkins_lookup3", "both"])
def test_a_store_whose_cells_carry_hdf5_checksums_reads_and_reports_damage(codecs, tmp_path):
    rng = np.random.default_rng(3)
    pts = rng.uniform(0, 100, (3000, 3)).astype(np.float32)
    target = tmp_path / "s.zarrvectors"
    zvf.write_points(str(target), pts, object_ids=rng.integers(0, 40, 3000), chunk_shape=(50, 50, 50),
                     attributes={"i": rng.random(3000).astype(np.float32)})
    want = zvf.open(str(target)).read_all()
    payloads = _recode_store(target, codecs)
    with zvf.open(str(target)) as ds:
        got = ds.read_all()
        assert np.array_equal(got.positions, want.positions)
        assert np.array_equal(got.attributes["i"], want.attributes["i"])
        assert np.array_equal(got.object_ids, want.object_ids)
        assert len(ds.query(([0, 0, 0], [40, 40, 40]))) == int(np.all(pts <= 40, axis=1).sum())
    zarr = pytest.importorskip("zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(str(target), mode="r")
        rel = next(r for r in payloads if r.startswith("0/vertices/"))
        arr_path, coords = rel.split("/c/")
        cell = group[arr_path][tuple(int(c) for c in coords.split("/"))]
        assert bytes(np.asarray(cell).item()) == payloads[rel].rstrip(b"\0")  # zarr reads what zvf reads
    damaged = target / rel
    raw = bytearray(damaged.read_bytes())
    raw[len(raw) // 2] ^= 1
    damaged.write_bytes(bytes(raw))
    with zvf.open(str(target)) as ds, pytest.raises(FormatError, match=f"{rel}.*checksum mismatch"):
        ds.read_all()
