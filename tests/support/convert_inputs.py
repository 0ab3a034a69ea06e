"""Input files for the converter tests: a LAS file with extra-bytes fields and a tractogram (laspy and
nibabel are optional: callers skip without them, these import them when called)."""

from __future__ import annotations

import numpy as np


def make_las(path, n=5000, point_format=3, version="1.2", seed=0):
    """A LAS/LAZ file of ``n`` random points with three extra-bytes fields (temperature, normal, label); read back."""
    import laspy

    rng = np.random.default_rng(seed)
    header = laspy.LasHeader(point_format=point_format, version=version)
    header.add_extra_dim(laspy.ExtraBytesParams(name="temperature", type=np.float32, description="deg C"))
    header.add_extra_dim(laspy.ExtraBytesParams(name="normal", type="3f8"))
    header.add_extra_dim(laspy.ExtraBytesParams(name="label", type=np.int16))
    header.scales = np.array([0.01, 0.01, 0.001])
    header.offsets = np.array([500000.0, 4100000.0, 10.0])
    las = laspy.LasData(header)
    las.X = rng.integers(0, 200000, n, dtype=np.int32)
    las.Y = rng.integers(-100000, 100000, n, dtype=np.int32)
    las.Z = rng.integers(0, 50000, n, dtype=np.int32)
    las.intensity = rng.integers(0, 65535, n).astype(np.uint16)
    las.return_number = rng.integers(1, 5, n).astype(np.uint8)
    las.number_of_returns = np.full(n, 5, np.uint8)
    las.classification = rng.integers(0, 31 if point_format < 6 else 255, n).astype(np.uint8)
    las.synthetic = rng.integers(0, 2, n).astype(np.uint8)
    las.point_source_id = rng.integers(0, 9, n).astype(np.uint16)
    las.gps_time = rng.random(n) * 1e6
    if "red" in las.point_format.dimension_names:
        las.red = rng.integers(0, 65535, n).astype(np.uint16)
        las.green = rng.integers(0, 65535, n).astype(np.uint16)
        las.blue = rng.integers(0, 65535, n).astype(np.uint16)
    las.temperature = rng.random(n).astype(np.float32) * 40
    las.normal = rng.random((n, 3))
    las.label = rng.integers(-300, 300, n).astype(np.int16)
    las.write(str(path))
    return laspy.read(str(path))


AFFINE = np.array([[2.0, 0, 0, -90], [0, 2.0, 0, -126], [0, 0, 2.0, -72], [0, 0, 0, 1]])


def make_tractogram(n=300, seed=0):
    """``n`` random streamlines with per-point ``fa``/``rgb`` and per-streamline ``weight``/``cluster``."""
    from nibabel.streamlines import ArraySequence, Tractogram

    rng = np.random.default_rng(seed)
    lens = rng.integers(2, 30, n)
    lines = [np.cumsum(rng.normal(size=(k, 3)), axis=0).astype(np.float32) + 20 for k in lens]
    fa = [rng.random((k, 1)).astype(np.float32) for k in lens]
    rgb = [rng.random((k, 3)).astype(np.float32) for k in lens]
    dps = {"weight": rng.random((n, 1)).astype(np.float32), "cluster": rng.integers(0, 9, (n, 1)).astype(np.float32)}
    return Tractogram(ArraySequence(lines), data_per_point={"fa": ArraySequence(fa), "rgb": ArraySequence(rgb)},
                      data_per_streamline=dps, affine_to_rasmm=np.eye(4))
