"""What a rewritten root keeps of the root it replaces.

An append or a rechunk gets its root from a writer, which knows only the layout it wrote; a pyramid
build adds levels to the root it read.  Whatever else the old root carried -- the converters'
``zvf_source`` record, a user's own attributes, a CRS, axis names and units, the store's name -- goes
forward.  The publication (:mod:`zvf.write.publish`) then gives the root its consolidated section and
version record.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..format.versions import RECORD

#: Root attributes every zvf writer makes afresh (the version record: its publication); any other one is
#: carried whole.
WRITTEN = ("zarr_vectors", "multiscales", "ome", RECORD)
#: ``zarr_vectors`` keys a writer leaves out on purpose (no bins, no pyramid): never carried.
LAYOUT = ("base_bin_shape", "cross_level_depth", "cross_level_storage")


def carry_root(old: Mapping[str, Any], new: Mapping[str, Any], *, same_store: bool) -> dict[str, Any]:
    """``new`` (a root document) with what ``old`` holds that ``new``'s writer does not write.

    Carried: root attributes other than :data:`WRITTEN`; ``zarr_vectors`` keys ``new`` lacks (other
    than :data:`LAYOUT`); ``multiscales[0]`` but its ``datasets``; ``ome`` but its ``nodes`` (and its
    ``name`` unless ``same_store``: a rechunked copy is named after its own location).
    """
    out = copy.deepcopy(dict(new))
    attrs = out.setdefault("attributes", {})
    before = old.get("attributes")
    if not isinstance(before, dict):
        return out
    for key, value in before.items():
        if key not in WRITTEN:
            attrs[key] = copy.deepcopy(value)
    _fill(attrs.get("zarr_vectors"), before.get("zarr_vectors"), skip=LAYOUT)
    ms_new, ms_old = attrs.get("multiscales"), before.get("multiscales")
    if isinstance(ms_new, list) and ms_new and isinstance(ms_old, list) and ms_old:
        _fill(ms_new[0], ms_old[0], skip=("datasets",), replace=True)
    _fill(attrs.get("ome"), before.get("ome"), skip=("nodes",) if same_store else ("nodes", "name"), replace=True)
    return out


def _fill(new: Any, old: Any, *, skip: tuple[str, ...], replace: bool = False) -> None:
    """Copy ``old``'s keys into ``new`` (dicts; anything else is left alone): those ``new`` lacks, or
    with ``replace`` every one, except ``skip``."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return
    for key, value in old.items():
        if key not in skip and (replace or key not in new):
            new[key] = copy.deepcopy(value)

