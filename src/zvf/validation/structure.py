"""Level 1, structure: documents exist and parse as Zarr v3 ZVF nodes, the arrays each
geometry needs are there, claim objects and orphans are reported.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from ..config import tuning
from ..errors import FormatError, NotZvfStoreError, RemoteError
from ..format import metadata as md
from ..format import parse
from ..format.keys import ChunkKeyEncoding
from ..format.versions import Record, array_families, family_of, family_of_key, is_store_key
from ..write.lock import TAKEOVER, holder_state
from ..write.lock import holder_record as lock_holder
from ..write.publish import is_control_key, kept_families, section_nodes
from .model import ArrayInfo, Failed, LevelInfo, ValidatorBase, array_of, strip_key


def is_lock_key(key: str) -> bool:
    """The writer lock / creation claim, or a marker of a stale lock's takeover."""
    return key == md.CLAIM_KEY or key.startswith(TAKEOVER)


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{max(seconds, 0.0):.0f} s"


def _state(rec: dict[str, Any]) -> str:
    dead, why = holder_state(rec)
    return f"{'dead' if dead else 'live'} ({why})"


class StructureChecks(ValidatorBase):
    """Level 1, structure checks of :class:`zvf.validation.checks.Validator`."""

    async def _structure(self) -> bool:
        """Listing, documents, root, levels, nodes.  False when nothing more can be checked."""
        try:
            listing = await self.ex.list("")
        except RemoteError as e:
            self.error(1, "zarr.json", f"cannot list the store: {e}")
            return False
        self.sizes = dict(listing)
        self.keys = sorted(self.sizes)
        self.counts["objects_listed"] = len(self.keys)
        if not self.keys:
            self.error(1, "zarr.json", f"no store at {self.url} (the location is empty)")
            return False

        await self._writer_lock()
        doc_keys = [k for k in self.keys if k == "zarr.json" or k.endswith("/zarr.json")]
        most = tuning().max_document_bytes
        big = [k for k in doc_keys if self.sizes[k] > most]
        for k in big:
            self.error(1, k, f"metadata document of {self.sizes[k]} bytes (over max_document_bytes={most}): not read")
        doc_keys = [k for k in doc_keys if self.sizes[k] <= most]
        raws = await self.ex.gather([self._get_or_issue(k) for k in doc_keys])
        for k, raw in zip(doc_keys, raws):
            if raw is None or isinstance(raw, Failed):
                continue
            path = k[: -len("zarr.json")].rstrip("/")
            try:
                doc = parse.loads(raw, key=k)
            except FormatError as e:
                self.error(1, k, strip_key(str(e), k))
                continue
            fmt = doc.get("zarr_format")
            if fmt != 3 or isinstance(fmt, bool):
                self.error(1, k, f"zarr_format must be 3 (Zarr v3), got {fmt!r}")
                continue
            if doc.get("node_type") not in ("group", "array"):
                self.error(1, k, f"node_type must be 'group' or 'array', got {doc.get('node_type')!r}")
                continue
            self.docs[path] = doc
        self.counts["documents"] = len(self.docs)

        for v2 in (".zgroup", ".zarray", ".zattrs"):
            hits = [k for k in self.keys if k == v2 or k.endswith("/" + v2)]
            if hits:
                self.error(1, hits[0], f"Zarr v2 metadata ({len(hits)} {v2} file(s)); ZVF stores are Zarr v3")

        root_doc = self.docs.get("")
        if root_doc is None:
            if "zarr.json" in self.sizes:  # present but unreadable: already reported
                return False
            self._report_rootless()
            return False
        if root_doc.get("node_type") != "group":
            self.error(1, "zarr.json", "the root is a Zarr array, not a Zarr Vectors store")
            return False
        attrs = root_doc.get("attributes")
        if not isinstance(attrs, dict) or "zarr_vectors" not in attrs:
            self.error(1, "zarr.json", "a Zarr group without the 'zarr_vectors' attributes: not a ZVF store")
            return False
        try:
            self._root = parse.parse_root(root_doc, key="zarr.json")
        except (NotZvfStoreError, FormatError) as e:
            self.error(1, "zarr.json", strip_key(str(e), "zarr.json"))
            return False
        self.ndim = self.root.ndim
        geoms = self.root.geometry_types
        self.geometry = geoms[0] if geoms else None

        self._adopt_published(root_doc)
        self._index_nodes()
        self._find_orphans()
        self._check_required()
        return bool(self.levels)

    async def _writer_lock(self) -> None:
        """``.zvf-writing``, the store's lock.  On a store with a root it is a warning naming the holder,
        live or dead (a dead one is a failed change's leftover: the next change or ``zvf gc`` takes it
        over) -- the published store itself is whole.  Without a root it is the claim of an unfinished
        first write: an error."""
        markers = [k for k in self.keys if k.startswith(TAKEOVER)]
        also = (f"; {len(markers)} takeover marker(s) {TAKEOVER}* beside it (removed when their winner "
                "releases the lock)") if markers else ""
        if md.CLAIM_KEY not in self.sizes:
            if markers:
                self.warn(1, markers[0], f"{len(markers)} takeover marker(s) of a store lock that is no longer "
                                         "held (a holder died while releasing it); `zvf gc` removes them")
            return
        rec: dict[str, Any] = {}
        if self.sizes[md.CLAIM_KEY] <= tuning().validation_lock_bytes:
            body = await self._get_or_issue(md.CLAIM_KEY)
            if isinstance(body, Failed) or body is None:  # unreadable (reported) or released since the listing
                return
            rec = lock_holder(bytes(body))
        rooted = "zarr.json" in self.sizes
        if not rec or not rooted:
            what = "" if not rec else f" ({rec.get('purpose', 'a writer')}, {_state(rec)})"
            report = self.error if not rooted else self.warn
            report(1, md.CLAIM_KEY,
                   f"a zvf write claim{what} is present: a write is in progress or was interrupted"
                   + ("; rewrite the store with overwrite=True (or delete it) once no writer is running" if not rooted
                      else " after its root was published; `zvf gc` removes it once no writer runs"))
            return
        age = time.time() - float(rec["time"])
        who = (f"{rec.get('purpose', 'a writer')} (owner {rec.get('owner', '?')}, pid {rec.get('pid', '?')} "
               f"on {rec.get('host', '?')})")
        dead, _ = holder_state(rec)
        if not dead:
            state = (f"{_state(rec)}: a change is in progress and is published when it releases the lock; "
                     "validate again then")
        else:
            state = (f"{_state(rec)}: the leftover of a failed change, the published store is whole; the next "
                     "change takes the lock over, or `zvf gc` clears it")
        self.warn(1, md.CLAIM_KEY, f"the store lock is held by {who} for {_duration(age)}; {state}{also}")

    def _report_rootless(self) -> None:
        """No root document: describe what is there instead."""
        data = [k for k in self.keys if not is_lock_key(k)]
        dirs = Counter(array_of(k) or "." for k in data if not k.endswith("zarr.json"))
        docs = sum(1 for k in data if k.endswith("zarr.json"))
        what = ", ".join(f"{n} under {d}/" for d, n in sorted(dirs.items())[:8])
        more = "" if len(dirs) <= 8 else f" and {len(dirs) - 8} more directories"
        self.error(
            1, "zarr.json",
            f"missing, but the location holds {len(data)} object(s) ({docs} metadata documents; cells: "
            f"{what or 'none'}{more}): an unfinished or interrupted write, not a readable store",
        )
        for d, n in sorted(dirs.items())[:tuning().validation_similar_issues]:
            self.error(1, d, f"{n} orphan object(s) left by an interrupted write (no root zarr.json)",
                       kind="orphan-dir")

    def _index_nodes(self) -> None:
        """Sort every document into levels; parse level and array documents."""
        root = self.root
        listed = {t.level for t in root.transforms}
        found: set[int] = set()
        for path in self.docs:
            head = path.split("/", 1)[0]
            if head.isdigit() and head.isascii():
                found.add(int(head))
        data_levels = {int(k.split("/", 1)[0]) for k in self.keys
                       if "/" in k and k.split("/", 1)[0].isdigit() and k.split("/", 1)[0].isascii()}
        for n in sorted(listed | found | data_levels):
            key = f"{n}/zarr.json"
            lv = LevelInfo(n, key)
            doc = self.docs.get(str(n))
            if doc is None:
                if key in self.sizes:  # unreadable: reported already
                    pass
                elif n in listed:
                    self.error(1, key, f"level {n} group document is missing (the level is listed by the root's "
                                       "multiscales)")
                else:  # only cells: the leftovers of a change that never published this level
                    self.warn(1, key, f"level {n} holds data but no document, and the root does not list it "
                                      "(leftovers of an interrupted change); `zvf gc` deletes them")
                    continue
            elif n not in listed and root.transforms:
                self.warn(1, key, f"level {n} is not listed in the root's multiscales datasets")
            if doc is not None:
                try:
                    lv.meta = parse.parse_level(doc, key=key)
                except FormatError as e:
                    self.error(1, key, strip_key(str(e), key))
            self.levels[n] = lv
        if 0 not in self.levels:
            self.error(1, "0/zarr.json", "level 0 is missing")

        for path, doc in self.docs.items():
            if not path:
                continue
            head, _, rel = path.partition("/")
            if not (head.isdigit() and head.isascii()) or int(head) not in self.levels:
                self.warn(1, f"{path}/zarr.json", "a node outside any resolution level")
                continue
            if not rel:
                continue
            lv = self.levels[int(head)]
            key = f"{path}/zarr.json"
            if doc.get("node_type") == "group":
                a = doc.get("attributes", {})
                lv.groups[rel] = a if isinstance(a, dict) else {}
                continue
            try:
                meta = parse.parse_array(doc, key=key)
            except FormatError as e:
                self.error(1, key, strip_key(str(e), key))
                continue
            info = ArrayInfo(path, meta)
            try:
                info.keys = ChunkKeyEncoding.from_metadata(doc, key=key)
                info.origin = np.asarray(meta.grid_origin, dtype=np.int64)
            except (FormatError, ValueError) as e:
                self.error(1, key, strip_key(str(e), key))
                info.usable = False
            lv.arrays[rel] = info
        self.counts["levels"] = len(self.levels)
        self.counts["arrays"] = sum(len(lv.arrays) for lv in self.levels.values())

    def _adopt_published(self, root_doc: dict[str, Any]) -> None:
        """On a root zvf's publication protocol wrote (its version record), the version is what its
        consolidated section says: the documents on disk follow it only after the root, so documents that
        differ (an interrupted publication) or that it does not name are leftovers (warnings: the next
        change or `zvf gc` rewrites or deletes them), never the store's content."""
        self.record = Record.of(root_doc)
        self.kept = kept_families(self.record, array_families(section_nodes(root_doc)))
        if not self.record.recorded:
            return
        section = section_nodes(root_doc)
        lagging = sorted(p for p, d in section.items() if self.docs.get(p) != d)
        if lagging:
            self.warn(1, f"{lagging[0]}/zarr.json",
                      f"{len(lagging)} document(s) on disk differ from the root's consolidated section (a publication "
                      "was interrupted after its commit; zvf reads the section); the next change or `zvf gc` "
                      "rewrites them", kind="lagging")
        stale = sorted(p for p in self.docs if p and p not in section)
        if stale:
            self.warn(1, f"{stale[0]}/zarr.json",
                      f"{len(stale)} document(s) of nodes the published version does not have (an interrupted or "
                      "superseded change's); `zvf gc` deletes them", kind="leftover-doc")
        self.docs = {"": root_doc, **section}

    def _find_orphans(self) -> None:
        """Objects no array owns, and which stored keys belong to which array.  Cells in another key family
        than their array's belong to a superseded version still kept for its readers (fine) or to none (a
        failed change's leftovers: a warning, `zvf gc` deletes them)."""
        keys = self.keys
        covered = np.zeros(len(keys) + 1, dtype=np.int64)
        for lv in self.levels.values():
            for info in lv.arrays.values():
                p = info.path + "/"
                lo = bisect.bisect_left(keys, p)
                hi = bisect.bisect_left(keys, info.path + "0")  # "0" sorts right after "/"
                covered[lo] += 1
                covered[hi] -= 1
                mine = family_of(info.keys, info.meta.ndim) if info.keys is not None else None
                info.stored = []
                for k in keys[lo:hi]:
                    fam = family_of_key(k[len(p):])
                    if k == p + "zarr.json":
                        continue
                    if mine is None or fam is None or fam == mine:
                        info.stored.append(k)
                    else:
                        self._other_version(info.path, k, fam)
        owned = np.cumsum(covered[:-1]) > 0
        orphans: dict[str, list[str]] = defaultdict(list)
        for i in np.flatnonzero(~owned).tolist():
            k = keys[i]
            if is_lock_key(k) or k == "zarr.json" or k.endswith("/zarr.json") or is_control_key(k):
                continue
            if k.rsplit("/", 1)[-1] in (".zgroup", ".zarray", ".zattrs"):
                continue
            owner = next((a for a in self.kept if k.startswith(a + "/")), None)
            fam = family_of_key(k[len(owner) + 1:]) if owner is not None else None
            if owner is not None and fam is not None:
                self._other_version(owner, k, fam)
                continue
            orphans[array_of(k) or "."].append(k)
        for d, ks in sorted(orphans.items()):
            doc = f"{d}/zarr.json"
            if all(is_store_key(k) for k in ks):
                self.warn(1, ks[0], f"{len(ks)} stored object(s) under {d}/ belong to no array of the published "
                                    "version (leftovers of an interrupted or superseded change, or of an array "
                                    "whose document was lost); `zvf gc` deletes them", kind="orphan")
                continue
            why = (f"its array document {doc} is missing" if doc not in self.sizes
                   else f"{doc} is not a readable array document")
            self.error(1, ks[0], f"{len(ks)} stored object(s) under {d}/ belong to no array: {why} "
                                 "(leftover of an interrupted write or of a removed array)", kind="orphan")
        self.counts["orphan_objects"] = sum(len(v) for v in orphans.values())
        for (path, fam), n in sorted(self._leftover.items()):
            self.warn(1, f"{path}/zarr.json", f"{n} cell(s) of {path} in the key family {fam!r}, which no kept "
                                              "version uses (leftovers of an interrupted or superseded change); "
                                              "`zvf gc` deletes them", kind="leftover")
        kept = sum(self._kept_cells.values())
        if kept:
            self.counts["kept_version_cells"] = kept

    def _other_version(self, path: str, key: str, fam: str) -> None:
        """A cell of ``path`` in family ``fam``, not the published version's: a kept version's, or a leftover."""
        if fam in self.kept.get(path, ()):
            self._kept_cells[path] += 1
        else:
            self._leftover[(path, fam)] += 1

    def _check_required(self) -> None:
        """The arrays each level needs for its geometry."""
        geom = self.geometry
        for n, lv in self.levels.items():
            if lv.meta is None:
                continue
            pre = f"{n}/"
            for name in ("vertices", "vertex_fragments"):
                if name not in lv.arrays and f"{pre}{name}/zarr.json" not in self.sizes:
                    self.error(1, f"{pre}{name}/zarr.json", f"required array {pre}{name} is missing")
            needs_index = "object_index" in lv.meta.arrays_present or (n == 0 and geom in md.OBJECT_GEOMETRIES)
            if needs_index:
                if "object_index" not in lv.groups and f"{pre}object_index/zarr.json" not in self.sizes:
                    self.error(1, f"{pre}object_index/zarr.json",
                               f"the {geom} level needs an object index but {pre}object_index is missing")
                if "object_index/manifests" not in lv.arrays and "object_index/data" not in lv.arrays:
                    # 0.9.2 writes an empty store's object_index group without manifests.
                    if f"{pre}object_index/manifests/zarr.json" not in self.sizes and lv.meta.vertex_count:
                        self.error(1, f"{pre}object_index/manifests/zarr.json",
                                   "the object index has no manifests array")
                elif "object_index/object_ids" not in lv.arrays and "object_index/manifests" in lv.arrays:
                    self.warn(1, f"{pre}object_index/object_ids/zarr.json",
                              "missing: readers will assume object ids 0..O-1")
            if n == 0 and geom in ("graph", "skeleton", "mesh"):
                if "links/0" not in lv.groups:
                    self.warn(1, f"{pre}links/0/zarr.json", f"a {geom} store without a links/0 family (no edges)")
                if "link_fragments" not in lv.arrays:
                    self.warn(1, f"{pre}link_fragments/zarr.json", f"a {geom} level without link_fragments")
