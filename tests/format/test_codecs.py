"""Cell codecs: fixture pipelines byte for byte, zstd/blosc bounds, blosc stores readable by zarr and 0.9.2."""

from __future__ import annotations

import contextlib
import json
import shutil
import struct
import warnings

import numpy as np
import pytest

from zvf.errors import FormatError, InvalidArgumentError, SizeLimitError
from zvf.format.codecs import (
    BLOSC_CONFIG,
    CellCodec,
    blosc_decompress,
    zstd_bound,
    zstd_decompress,
)
from zvf.format.vlen import encode_vlen

KEY = "0/vertices/c/0/0/0"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def test_fixture_pipelines(ref_arrays):
    n = 0
    for arr in ref_arrays:
        cc = CellCodec.from_array_metadata(arr.meta, key=arr.name)
        assert cc.codecs_json() == arr.meta["codecs"]
        assert json.dumps(cc.codecs_json()) == json.dumps(arr.meta["codecs"])  # key order too
        if cc.shard is not None:
            stored = arr.shard_inner
        else:
            stored = {tuple(int(x) for x in k.split("/")[1:]): v for k, v in arr.objects.items()}
        for coords, raw in stored.items():
            if cc.serializer == "vlen-bytes":
                items = cc.decode_items(raw, key=f"{arr.name}/{coords}")
                assert [bytes(i) for i in items] == arr.cells[coords]
                assert cc.encode_items(items) == raw
                if len(items) == 1:
                    assert bytes(cc.decode(raw)) == items[0] and cc.encode(items[0]) == raw
            else:
                payload = cc.decode(raw, key=arr.name)
                assert bytes(payload) == arr.cells[coords][0]
                assert cc.encode(payload) == raw
            n += 1
    assert n > 300


def test_for_writing_json(ref_dir):
    assert CellCodec.for_writing().codecs_json() == [{"name": "vlen-bytes", "configuration": {}}]
    assert CellCodec.for_writing("zstd").codecs_json()[1] == {
        "name": "zstd",
        "configuration": {"level": 0, "checksum": False},
    }
    blosc = CellCodec.for_writing("blosc").codecs_json()[1]
    assert json.dumps(blosc) == json.dumps(
        {"name": "blosc",
         "configuration": {"typesize": 4, "cname": "zstd", "clevel": 5, "shuffle": "bitshuffle", "blocksize": 0}}
    )
    sh = CellCodec.for_writing("zstd", (2, 2, 2)).codecs_json()
    fixture = ref_dir / "points3d_sharded_zstd.zarrvectors" / "0" / "vertices" / "zarr.json"
    assert json.dumps(sh) == json.dumps(json.loads(fixture.read_text())["codecs"])
    assert CellCodec.for_writing("gzip").codecs_json()[1] == {"name": "gzip", "configuration": {"level": 5}}
    with pytest.raises(InvalidArgumentError, match="compression"):
        CellCodec.for_writing("brotli")
    with pytest.raises(InvalidArgumentError, match=r"unsupported codec 'numcodecs\.zfpy'"):
        CellCodec.for_writing([{"name": "numcodecs.zfpy", "configuration": {}}])
    with pytest.raises(InvalidArgumentError):
        CellCodec.for_writing("zstd", 2)
    assert CellCodec.for_writing("zstd", (2, 2)) == CellCodec.for_writing("zstd", (2, 2))
    assert len({CellCodec.for_writing("zstd"), CellCodec.for_writing("zstd"), CellCodec.for_writing()}) == 2


def _meta(codecs, chunk_shape=(1, 1, 1)):
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [3, 3, 3],
        "data_type": "variable_length_bytes",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk_shape)}},
        "codecs": codecs,
    }


VLEN = {"name": "vlen-bytes", "configuration": {}}


@pytest.mark.parametrize(
    "codecs, msg",
    [
        ([VLEN, {"name": "numcodecs.zfpy", "configuration": {}}], "unsupported codec 'numcodecs.zfpy'"),
        ([{"name": "transpose"}, VLEN], "unsupported serializer codec 'transpose'"),
        ([VLEN, {"name": "gzip", "configuration": {"level": "high"}}], "gzip configuration"),
        ([VLEN, {"name": "numcodecs.lzma", "configuration": {"format": 99}}], "lzma configuration"),
        ([VLEN, {"name": "crc32c", "configuration": {"location": "middle"}}], "location"),
        ([VLEN, {"name": "blosc", "configuration": {"cname": "brotli"}}], "blosc configuration"),
        ([], "no codecs"),
        (
            [{"name": "sharding_indexed", "configuration": {"chunk_shape": [1, 2, 1], "codecs": [VLEN]}}],
            "inner chunk_shape",
        ),
        (
            [{"name": "sharding_indexed", "configuration": {"chunk_shape": [1, 1, 1], "codecs": [VLEN],
                                                            "index_codecs": [{"name": "bytes"}, {"name": "zstd"}]}}],
            "index_codecs",
        ),
        (
            [{"name": "sharding_indexed", "configuration": {"chunk_shape": [1, 1, 1], "codecs": [VLEN],
                                                            "index_location": "middle"}}],
            "index_location",
        ),
    ],
)
def test_unsupported(codecs, msg):
    with pytest.raises(FormatError, match=msg) as ei:
        CellCodec.from_array_metadata(_meta(codecs), key="0/vertices")
    assert "0/vertices" in str(ei.value)


def test_sharded_variants():
    inner = [VLEN, {"name": "zstd", "configuration": {"level": 3, "checksum": True}}]
    cfg = {"chunk_shape": [1, 1, 1], "codecs": inner,
           "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "index_location": "start"}
    cc = CellCodec.from_array_metadata(_meta([{"name": "sharding_indexed", "configuration": cfg}], (4, 2, 1)), key="k")
    assert cc.shard == (4, 2, 1) and cc.cells_per_shard == 8 and cc.index_location == "start" and not cc.index_crc
    assert cc.compressors == (("zstd", {"level": 3, "checksum": True}),)
    assert bytes(cc.decode(cc.encode(b"payload"))) == b"payload"
    assert cc.codecs_json()[0]["configuration"] == cfg


# -- zstd ------------------------------------------------------------------------------


def _frame_unknown_size(data: bytes, *, rle_blocks=0, block=0x10000) -> bytes:
    """A zstd frame without a content size (as streaming writers produce): raw blocks."""
    out = bytearray(ZSTD_MAGIC + bytes([0x00, 7 << 3]))  # FHD: no FCS, not single segment; window 128 KiB
    chunks = [data[i : i + block] for i in range(0, len(data), block)] or [b""]
    for i, c in enumerate(chunks):
        last = i == len(chunks) - 1 and rle_blocks == 0
        out += ((len(c) << 3) | (0 << 1) | last).to_bytes(3, "little") + c
    for j in range(rle_blocks):
        last = j == rle_blocks - 1
        out += ((0x20000 << 3) | (1 << 1) | last).to_bytes(3, "little") + b"\x07"
    return bytes(out)


def test_zstd_known_and_unknown_sizes():
    import numcodecs.zstd

    rng = np.random.default_rng(0)
    for n in (0, 1, 1000, 200_000, 1_300_000):
        for data in (rng.integers(0, 256, n, dtype=np.uint8).tobytes(), bytes(n), (b"abc" * n)[:n]):
            comp = numcodecs.zstd.compress(data, 0)
            assert zstd_decompress(comp, key=KEY) == data
            frames = zstd_bound(comp)
            assert len(frames) == 1 and frames[0][2] == n and frames[0][3] == n
    data = bytes(range(256)) * 1000
    raw = _frame_unknown_size(data)
    assert zstd_bound(raw)[0][2] is None
    assert zstd_decompress(raw, key=KEY) == data
    # numcodecs itself copes with it too (streaming path)
    assert numcodecs.zstd.decompress(raw) == data
    # concatenated frames and a skippable frame
    two = numcodecs.zstd.compress(b"hello ", 1) + b"\x50\x2a\x4d\x18" + struct.pack("<I", 3) + b"xyz" + raw
    assert zstd_decompress(two) == b"hello " + data
    # checksummed frames
    assert zstd_decompress(numcodecs.zstd.compress(b"abc" * 99, 3, True)) == b"abc" * 99


def test_zstd_bomb_is_refused_before_allocation():
    bomb = _frame_unknown_size(b"", rle_blocks=8192)  # 1 GiB of 0x07 from ~32 KiB
    assert len(bomb) < 40_000
    assert zstd_bound(bomb)[0][3] == 8192 * 0x20000
    with pytest.raises(SizeLimitError, match="the 1048576-byte limit") as ei:
        zstd_decompress(bomb, key=KEY, max_size=1 << 20)  # an output buffer of the limit at most, then refused
    assert KEY in str(ei.value)
    small = _frame_unknown_size(b"", rle_blocks=2)
    assert zstd_decompress(small, max_size=1 << 20) == b"\x07" * 0x40000
    # a frame of undeclared size within the limit reads though its blocks could hold more (streaming writers)
    assert zstd_decompress(small, max_size=0x40000) == b"\x07" * 0x40000
    with pytest.raises(SizeLimitError):
        zstd_decompress(small, max_size=0x40000 - 1)


def test_zstd_header_lies():
    import numcodecs.zstd

    comp = bytearray(numcodecs.zstd.compress(b"x" * 100, 0))
    # single-segment frame with 1-byte FCS: claim 8-byte FCS of 2^40 instead
    fhd = comp[4]
    assert fhd & 0x20
    lie = bytes(comp[:4]) + bytes([0xE0]) + (1 << 40).to_bytes(8, "little") + bytes(comp[6:])
    with pytest.raises(FormatError):
        zstd_decompress(lie, key=KEY)
    cases = [
        (b"", "empty"),
        (b"\x00\x01\x02\x03", "not zstd"),
        (bytes(comp[:5]), "truncated"),
        (bytes(comp[:-1]), "overruns|truncated"),
        (ZSTD_MAGIC + b"\x01\x38" + b"\x05" + b"\x00" * 8, "dictionary"),
        (ZSTD_MAGIC + b"\x08\x38" + b"\x00" * 8, "reserved bit"),
        (ZSTD_MAGIC + b"\x00\x38" + (7).to_bytes(3, "little"), "reserved zstd block type"),
    ]
    for blob, msg in cases:
        with pytest.raises(FormatError, match=msg):
            zstd_decompress(blob, key=KEY)
    # corrupt compressed body: libzstd reports it, we wrap it
    comp = bytearray(numcodecs.zstd.compress(bytes(range(256)) * 64, 5))
    comp[len(comp) // 2] ^= 0xFF
    with contextlib.suppress(FormatError):
        zstd_decompress(bytes(comp), key=KEY)


def test_cell_max_size():
    cc = CellCodec.for_writing("zstd")
    raw = cc.encode(b"a" * 5000)
    with pytest.raises(FormatError, match="limit"):
        cc.decode(raw, key=KEY, max_size=1000)
    with pytest.raises(FormatError, match="limit"):
        CellCodec.for_writing().decode(encode_vlen([b"a" * 5000]), key=KEY, max_size=1000)
    assert bytes(cc.decode(raw, max_size=5008)) == b"a" * 5000


# -- blosc -------------------------------------------------------------------------------


def test_blosc_bytes_match_zarr(tmp_path):
    zarr = pytest.importorskip("zarr")
    from zarr.codecs import BloscCodec, VLenBytesCodec

    warnings.filterwarnings("ignore")
    path = tmp_path / "b.zarr"
    a = zarr.create_array(
        str(path), shape=(3,), chunks=(1,), dtype="bytes", serializer=VLenBytesCodec(),
        compressors=[BloscCodec(**BLOSC_CONFIG)], fill_value=b"",
    )
    cc = CellCodec.for_writing("blosc")
    assert json.loads((path / "zarr.json").read_text())["codecs"] == cc.codecs_json()
    rng = np.random.default_rng(1)
    payloads = [b"tiny", rng.random(3000).astype("<f4").tobytes(), bytes(70_000)]
    vals = np.empty(3, dtype=object)
    vals[:] = payloads
    a[:] = vals
    for i, p in enumerate(payloads):
        stored = (path / "c" / str(i)).read_bytes()
        assert cc.encode(p) == stored
        assert bytes(cc.decode(stored, key=KEY)) == p


def test_blosc_store_readable_by_zarr_and_reference(tmp_path, ref_dir):
    """Hand-write a blosc store (re-encode every vlen cell of points3d) and read it with zarr and 0.9.2."""
    src = ref_dir / "points3d.zarrvectors"
    zarr = pytest.importorskip("zarr")
    zv = pytest.importorskip("zarr_vectors")
    warnings.filterwarnings("ignore")
    dst = tmp_path / "points3d_blosc.zarrvectors"
    shutil.copytree(src, dst)
    blosc = CellCodec.for_writing("blosc")
    payloads = {}
    for zj in dst.rglob("zarr.json"):
        meta = json.loads(zj.read_text())
        if meta.get("node_type") != "array" or meta.get("data_type") != "variable_length_bytes":
            continue
        plain = CellCodec.from_array_metadata(meta, key=str(zj))
        assert plain.compressors == ()
        for cell in (zj.parent / "c").rglob("*"):
            if cell.is_file():
                payload = bytes(plain.decode(cell.read_bytes(), key=str(cell)))
                payloads[cell.relative_to(dst).as_posix()] = payload
                cell.write_bytes(blosc.encode(payload))
        meta["codecs"] = blosc.codecs_json()
        zj.write_text(json.dumps(meta))
    g = zarr.open_group(str(dst), mode="r")
    for rel, payload in list(payloads.items())[:20]:
        arr_path, coords = rel.split("/c/")
        got = g[arr_path][tuple(int(c) for c in coords.split("/"))]
        got = got.item() if hasattr(got, "item") else got
        got = got.item() if hasattr(got, "item") else got
        # zarr returns numpy bytes, which drop trailing NUL bytes
        assert bytes(got) == payload.rstrip(b"\x00")
    orig = zv.open(str(src)).read().positions
    ours = zv.open(str(dst)).read().positions
    assert np.array_equal(np.sort(orig, axis=0), np.sort(ours, axis=0))


def test_blosc_header_checks():
    cc = CellCodec.for_writing("blosc")
    raw = cc.encode(np.arange(5000, dtype="<f4").tobytes())
    assert raw[0] == 2 and raw[3] == 4  # blosc1 format, typesize 4
    with pytest.raises(FormatError, match="compressed bytes"):
        blosc_decompress(raw[:-1], key=KEY)
    with pytest.raises(FormatError, match="limit"):
        blosc_decompress(raw, key=KEY, max_size=100)
    lie = bytearray(raw)
    lie[4:8] = struct.pack("<I", 0x7FFFFFFF)
    with pytest.raises(FormatError):
        blosc_decompress(bytes(lie), key=KEY, max_size=1 << 20)
    with pytest.raises(FormatError, match="shorter than its 16-byte header"):
        blosc_decompress(raw[:10], key=KEY)
    tiny = cc.encode(b"abc")
    assert bytes(cc.decode(tiny)) == b"abc"


def test_bytes_serializer():
    meta = _meta([{"name": "bytes", "configuration": {"endian": "little"}},
                  {"name": "zstd", "configuration": {"level": 0, "checksum": False}}])
    cc = CellCodec.from_array_metadata(meta, key="0/object_index/object_ids")
    data = np.arange(10, dtype="<i8").tobytes()
    assert bytes(cc.decode(cc.encode(data))) == data
    with pytest.raises(InvalidArgumentError):
        cc.decode_items(cc.encode(data))


def test_decode_types():
    for cc in (CellCodec.for_writing(), CellCodec.for_writing("zstd"), CellCodec.for_writing("blosc")):
        raw = cc.encode(b"\x01\x02\x00")
        assert type(cc.decode(raw)) is bytes and cc.decode(raw) == b"\x01\x02\x00"
        view = cc.decode_view(raw)
        assert isinstance(view, memoryview) and bytes(view) == b"\x01\x02\x00"


# -- codec lists 0.9.2 writes verbatim --------------------------------------------------------------


def _chain(*codecs):
    return CellCodec.from_array_metadata(_meta([VLEN, *codecs]), key="0/vertices")


BOMB = b"\0" * (1 << 20)


@pytest.mark.parametrize("codec, compress", [
    ({"name": "gzip", "configuration": {"level": 9}}, lambda b: __import__("gzip").compress(b, 9)),
    ({"name": "numcodecs.zlib", "configuration": {"level": 9}}, lambda b: __import__("zlib").compress(b, 9)),
    ({"name": "numcodecs.bz2", "configuration": {"level": 9}}, lambda b: __import__("bz2").compress(b, 9)),
    ({"name": "numcodecs.lzma", "configuration": {}}, lambda b: __import__("lzma").compress(b)),
    ({"name": "numcodecs.lz4", "configuration": {}}, lambda b: bytes(__import__("numcodecs.lz4").lz4.compress(b))),
])
def test_bombs_are_refused_before_inflating(codec, compress):
    """A small blob that inflates past max_size is refused; the limit, not the blob, bounds the memory."""
    cc = _chain(codec)
    blob = compress(encode_vlen([BOMB]))
    assert len(blob) < len(BOMB) // 50
    with pytest.raises(FormatError, match=r"0/vertices.*limit"):
        cc.decode(blob, key="0/vertices", max_size=1 << 16)
    assert cc.decode(blob, key="0/vertices") == BOMB
    with pytest.raises(FormatError, match="0/vertices"):
        cc.decode(blob[: len(blob) // 2], key="0/vertices")  # truncated stream


def test_lz4_header_lies_are_refused_without_allocating():
    with pytest.raises(FormatError, match="cannot hold"):
        _chain({"name": "numcodecs.lz4"}).decode((1 << 30).to_bytes(4, "little") + b"\0" * 10, key="k")
    with pytest.raises(FormatError, match="limit"):
        _chain({"name": "numcodecs.lz4"}).decode((-5).to_bytes(4, "little", signed=True) + b"\0", key="k")


@pytest.mark.parametrize("codec", [{"name": "crc32c"}, {"name": "numcodecs.crc32", "configuration": {}},
                                   {"name": "numcodecs.adler32", "configuration": {"location": "end"}},
                                   {"name": "numcodecs.crc32c", "configuration": {}}])
def test_checksums_match_numcodecs_and_catch_corruption(codec):
    """zvf's checksum bytes are numcodecs' (what zarr writes), and a flipped byte is reported by key."""
    import numcodecs

    cc = _chain(codec)
    blob = cc.encode(b"payload bytes")
    short = codec["name"].removeprefix("numcodecs.")
    ref = numcodecs.get_codec({"id": short, **codec.get("configuration", {})}) if short != "crc32c" else \
        numcodecs.get_codec({"id": "crc32c", "location": "end"})
    assert bytes(ref.encode(encode_vlen([b"payload bytes"]))) == blob
    bad = bytearray(blob)
    bad[9] ^= 1
    with pytest.raises(FormatError, match=r"k: .*checksum mismatch"):
        cc.decode(bytes(bad), key="k")


def test_chain_order_and_json_roundtrip():
    """Codecs undo in reverse order; 0.9.2's JSON (crc32c bare) is written back unchanged."""
    codecs = [{"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
              {"name": "zstd", "configuration": {"level": 3, "checksum": True}}, {"name": "crc32c"}]
    cc = _chain(*codecs)
    assert cc.codecs_json() == [VLEN, *codecs]
    payload = np.arange(1000, dtype=np.float32).tobytes()
    assert cc.decode(cc.encode(payload)) == payload
    import numcodecs

    shuffled = numcodecs.Shuffle(elementsize=4).encode(np.frombuffer(encode_vlen([payload]), np.uint8))
    assert bytes(shuffled) == bytes(_chain(codecs[0]).encode(payload))
    assert CellCodec.for_writing(codecs) == cc
