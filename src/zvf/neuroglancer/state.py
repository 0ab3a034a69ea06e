"""A ready Neuroglancer viewer state for served or hosted precomputed data, and its URL (pure).

The state holds one layer per precomputed source -- an annotation layer for
points / lines / edges, a segmentation layer (with the object ids shown) for
skeletons and meshes, the edges linked to the skeletons by their ``object``
relationship -- the store's axes as global dimensions, and a 3-D view centred
on the store's bounds and zoomed to fit them.  Where the data were shifted by
an offset (see :mod:`.coords`) each layer's transform adds it back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, urlsplit

import numpy as np

from ..config import tuning
from ..errors import InvalidArgumentError
from .objects import nm_per_unit

DEFAULT_VIEWER = "https://neuroglancer-demo.appspot.com/"
FIT = 1.25  # view extent / the bounds' largest side

ANNOTATION_NAMES = {"point_cloud": "points", "line": "lines", "polyline": "polylines", "streamline": "streamlines",
                    "graph": "graph edges", "skeleton": "skeleton edges"}
SEGMENTATION_NAMES = {"skeletons": "skeletons", "mesh": "meshes"}


def http_base(url: str) -> str:
    """``url`` without its trailing slash, checked to be http(s) (what a browser viewer can fetch)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidArgumentError(f"the data's URL must be http:// or https://, got {url!r}")
    return url.rstrip("/")


def sources(base: str, layers: Sequence[str]) -> dict[str, str]:
    """``{layer directory: precomputed://<base>/<directory>}``."""
    return {name: f"precomputed://{http_base(base)}/{name}" for name in layers}


def _transform(offset: np.ndarray, names: Sequence[str], scale_m: float, unit_scale: float) -> dict[str, Any]:
    rank = len(names)
    matrix = [[1.0 if j == i else 0.0 for j in range(rank)] + [float(offset[i]) * unit_scale] for i in range(rank)]
    return {"matrix": matrix, "outputDimensions": {n: [scale_m, "m"] for n in names}}


def viewer_state(*, geometry: str, base: str, layers: Sequence[str], axes: Sequence[str], unit: str,
                 lower: Sequence[float], upper: Sequence[float], offset: Sequence[float] | None = None,
                 segments: Sequence[int] = ()) -> dict[str, Any]:
    """The viewer state showing ``layers`` (directories under ``base``) of a store of ``geometry``.

    ``lower``/``upper``: the store's bounds in its own coordinates (before any
    offset); ``segments``: object ids to show in segmentation layers (the
    first ``neuroglancer_max_segments``, a :mod:`zvf.config` setting).
    """
    srcs = sources(base, layers)
    lo, hi = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    off = np.zeros(len(lo)) if offset is None else np.asarray(offset, np.float64)
    nm = nm_per_unit(unit)
    scale_m = nm * 1e-9
    shifted = bool(off.any())
    ids = [str(int(s)) for s in list(segments)[:tuning().neuroglancer_max_segments]]
    out: list[dict[str, Any]] = []
    seg_layer = None
    for name in layers:
        if name == "annotations":
            continue
        source: dict[str, Any] | str = srcs[name]
        if shifted:  # skeletons and meshes are in nanometres, as x, y, z
            off3 = np.zeros(3)
            off3[:min(3, len(off))] = off[:3]
            source = {"url": srcs[name], "transform": _transform(off3, ["x", "y", "z"], 1e-9, nm)}
        seg_layer = SEGMENTATION_NAMES[name]
        out.append({"type": "segmentation", "name": seg_layer, "source": source, "segments": ids})
    if "annotations" in layers:
        source = srcs["annotations"]
        if shifted:
            source = {"url": srcs["annotations"], "transform": _transform(off, axes, scale_m, 1.0)}
        layer: dict[str, Any] = {"type": "annotation", "name": ANNOTATION_NAMES[geometry], "source": source}
        if seg_layer is not None:
            layer["linkedSegmentationLayer"] = {"object": seg_layer}
        out.insert(0, layer)
    extent = float(np.max(hi - lo)) if len(lo) else 1.0
    extent = extent if extent > 0 else 1.0
    return {"dimensions": {n: [scale_m, "m"] for n in axes},
            "position": [float(v) for v in (lo + hi) / 2],
            "crossSectionScale": FIT * extent / 512,
            "projectionScale": FIT * extent,
            "layers": out,
            "showSlices": False,
            "showAxisLines": False,
            "showDefaultAnnotations": False,
            "layout": "3d" if len(lo) == 3 else "xy"}


def viewer_url(viewer: str, state: dict[str, Any]) -> str:
    """The viewer's URL with ``state`` in its fragment (``#!`` + URL-encoded JSON), as Neuroglancer reads it."""
    parts = urlsplit(viewer)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidArgumentError(f"the viewer URL must be http:// or https://, got {viewer!r}")
    return viewer.split("#", 1)[0] + "#!" + quote(json.dumps(state, separators=(",", ":")), safe="")


def ready(*, geometry: str, base: str, layers: Sequence[str], axes: Sequence[str], unit: str,
          bounds: Sequence[Sequence[float]], offset: Sequence[float] | None, segments: Sequence[int],
          viewer: str = DEFAULT_VIEWER) -> dict[str, Any]:
    """What ``serve`` and ``export`` print: the sources, the viewer state and the viewer URL holding it."""
    state = viewer_state(geometry=geometry, base=base, layers=layers, axes=axes, unit=unit, lower=bounds[0],
                         upper=bounds[1], offset=offset, segments=segments)
    return {"sources": sources(base, layers), "state": state, "url": viewer_url(viewer, state)}
