"""Level 4, conventions: per-geometry rules (links convention, widths, skeleton trees)."""

from __future__ import annotations

import math

import numpy as np

from .model import CONVENTIONS, ValidatorBase


class ConventionChecks(ValidatorBase):
    """Level 4, conventions checks of :class:`zvf.validation.checks.Validator`."""

    def _conventions(self) -> None:
        root = self.root
        geom = self.geometry
        if geom is not None:
            allowed = CONVENTIONS.get(geom, set())
            if root.links_convention not in allowed:
                self.error(4, "zarr.json", f"links_convention {root.links_convention!r} does not suit geometry "
                                           f"{geom!r} (expected {' or '.join(sorted(allowed))})")
        lv = self.levels.get(0)
        if lv is None or lv.meta is None:
            return
        fam = lv.groups.get("links/0")
        if fam is not None:
            lw = fam.get("link_width")
            key = "0/links/0/zarr.json"
            if geom == "point_cloud":
                self.warn(4, key, "a point cloud with a links family")
            elif geom == "mesh" and lw != 3:
                self.error(4, key, f"mesh link_width is {lw!r}, must be 3 (triangles)")
            elif geom in ("graph", "skeleton", "line", "polyline", "streamline") and lw != 2:
                self.error(4, key, f"{geom} link_width is {lw!r}, must be 2 (edges)")
            for rel, info in lv.arrays.items():
                if not rel.startswith("links/0/") or info.zv != "links":
                    continue
                offs = rel.rsplit("/", 1)[-1]
                intra = all(x in ("0",) for part in offs.split("_") for x in part.split("."))
                if intra and info.attrs.get("has_perm"):
                    self.warn(4, f"{info.path}/zarr.json", "intra-chunk links should not carry a perm column")
        if geom == "skeleton" and self._skeleton_edges:
            self._skeleton_check()

    def _skeleton_check(self) -> None:
        e = np.concatenate(self._skeleton_edges)
        key = "0/links/0"
        child, parent = e[:, 0], e[:, 1]
        loops = child == parent
        if loops.any():
            self.warn(4, key, f"{int(loops.sum())} skeleton row(s) link a vertex to itself")
        nodes, inv = np.unique(e.reshape(-1), return_inverse=True)
        inv = inv.reshape(-1, 2)
        c, p = inv[:, 0], inv[:, 1]
        counts = np.bincount(c, minlength=len(nodes))
        if (counts > 1).any():
            self.warn(4, key, f"{int((counts > 1).sum())} skeleton vertex(es) have more than one parent row "
                              "(rows are (child, parent))")
            return
        par = np.full(len(nodes), -1, dtype=np.int64)
        par[c] = p
        par[c[loops]] = -1
        anc = par.copy()
        for _ in range(max(1, math.ceil(math.log2(len(nodes) + 1)) + 1)):
            nxt = np.where(anc >= 0, anc[np.maximum(anc, 0)], -1)
            anc = nxt
        if (anc >= 0).any():
            self.warn(4, key, f"skeleton (child, parent) rows contain a cycle ({int((anc >= 0).sum())} vertices "
                              "never reach a root)")
