"""Store versions: the record a published root keeps of the versions readers may still hold.

Every change to a store publishes a new root ``zarr.json`` (see :mod:`zvf.write.publish`).  A reader
pins the root it opened; the cells that root names must stay as they were while it may still read them.
Zarr v3 lets each array store its cells under one of several *chunk-key families* -- ``c/1/0/1``
(default encoding, separator "/"), ``c.1.0.1`` (default, "."), ``1.0.1`` (v2, ".") and ``1/0/1``
(v2, "/"; the same keys as v2 "." for 1-D arrays) -- so a new version writes every array it changes under
a family no kept version of that array uses, and readers of those versions find their cells untouched.

The root records, under the attribute :data:`RECORD` (zarr-vectors 0.9.2 ignores unknown attributes):

* ``version``: this version's id;
* ``retention``: seconds a superseded version stays readable; ``lease``: seconds a reader of this
  version trusts it without looking at the root again;
* ``retained``: the superseded versions still kept, newest first, each with the family of every array it
  used, when it was superseded, the lease its readers hold, and -- once it is being reclaimed -- when that
  was published (``draining``): from then on its readers are told their version is gone, and its families
  are reused or deleted only after its lease has run out;
* ``pending_documents``: the documents on disk do not match the root's consolidated section yet (the
  writer publishes the root first, then the documents; the next change rewrites them from the section).

A root without the record (a store's first write, or one 0.9.2 wrote) is one version whose id is a digest
of the root itself.  This module is pure: parsing, ids, family codes and key classification.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..config import tuning
from .keys import ChunkKeyEncoding

RECORD = "zvf_publication"

#: Chunk-key family codes, in the order writers prefer them (0.9.2 writes "c/").
FAMILIES = ("c/", "c.", "v2.", "v2/")
_ENCODINGS = {"c/": ChunkKeyEncoding("default", "/"), "c.": ChunkKeyEncoding("default", "."),
              "v2.": ChunkKeyEncoding("v2", "."), "v2/": ChunkKeyEncoding("v2", "/")}
_V2_DOT = re.compile(r"-?\d+(?:\.-?\d+)*")
_V2_SLASH = re.compile(r"-?\d+(?:/-?\d+)+")
_DEFAULT_TAIL = re.compile(r"(?:/-?\d+)*")
_DOT_TAIL = re.compile(r"(?:\.-?\d+)*")


def lease_for(retention: float) -> float:
    """The lease readers of a version hold: the ``max_reader_lease`` setting, or a quarter of a shorter
    retention."""
    return min(tuning().max_reader_lease, max(float(retention), 0.0) / 4)


def families_for(ndim: int) -> tuple[str, ...]:
    """The families whose keys differ for an array of ``ndim`` dimensions (1-D: v2 "/" is v2 ".")."""
    if ndim == 0:
        return ("c/", "v2.")
    if ndim == 1:
        return ("c/", "c.", "v2.")
    return FAMILIES


def family_of(enc: ChunkKeyEncoding, ndim: int) -> str:
    """The family code of an array's encoding (codes name key sets: the same keys, the same code)."""
    if enc.name == "default":
        return "c/" if enc.separator == "/" or ndim == 0 else "c."
    return "v2/" if enc.separator == "/" and ndim > 1 else "v2."


def encoding_of(code: str) -> ChunkKeyEncoding:
    return _ENCODINGS[code]


def family_of_key(suffix: str) -> str | None:
    """The family of a key relative to its array (``c/1/0``, ``c.1.0``, ``1.0``, ``1/0``), None when it is
    no chunk key."""
    if suffix == "c" or (suffix.startswith("c/") and _DEFAULT_TAIL.fullmatch(suffix[1:])):
        return "c/"
    if suffix.startswith("c.") and _DOT_TAIL.fullmatch(suffix[1:]):
        return "c."
    if _V2_DOT.fullmatch(suffix):
        return "v2."
    if _V2_SLASH.fullmatch(suffix):
        return "v2/"
    return None


def array_families(docs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Array path -> family code, of every array document in ``docs`` (node path -> document)."""
    out = {}
    for path, doc in docs.items():
        if not isinstance(doc, dict) or doc.get("node_type") != "array":
            continue
        try:
            enc = ChunkKeyEncoding.from_metadata(doc, key=path)
            ndim = len(doc.get("shape") or ())
        except (ValueError, TypeError):
            continue
        out[path] = family_of(enc, ndim)
    return out


def is_store_key(key: str) -> bool:
    """Whether ``key`` has the shape of a ZVF store's own objects: the root document, a document or a chunk
    key below a resolution level (``0/...``).  Anything else (``notes.txt``, ``sub/data.bin``,
    ``0/readme.md``) is foreign: zvf never deletes it."""
    if key == "zarr.json":
        return True
    head, sep, rest = key.partition("/")
    if not sep or not head.isdigit() or not head.isascii() or not rest:
        return False
    if rest == "zarr.json" or rest.endswith("/zarr.json"):
        return True
    parts = rest.split("/")
    # a chunk key's tail, after at least one node name: c/1/0, c.1.0, 1.0 or 1/0
    return any(family_of_key("/".join(parts[cut:])) is not None for cut in range(1, len(parts)))


def version_of(root_doc: dict[str, Any]) -> str:
    """The id of the version a root document publishes: its record's, else a digest of the root (its
    consolidated section aside: the digest readers compute from what they parsed)."""
    rec = (root_doc.get("attributes") or {}).get(RECORD) if isinstance(root_doc.get("attributes"), dict) else None
    if isinstance(rec, dict) and isinstance(rec.get("version"), str):
        return str(rec["version"])
    raw = {k: v for k, v in root_doc.items() if k != "consolidated_metadata"}
    blob = json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str).encode()
    return "root-" + hashlib.blake2b(blob, digest_size=12).hexdigest()


@dataclass
class Retained:
    """A superseded version still kept (see the module docstring)."""

    version: str
    superseded: float  # wall time of the publication that superseded it
    lease: float
    families: dict[str, str] = field(default_factory=dict)
    draining: float | None = None  # wall time its reclaim was published; None while readable

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version, "superseded": self.superseded, "lease": self.lease,
                               "families": dict(sorted(self.families.items()))}
        if self.draining is not None:
            out["draining"] = self.draining
        return out

    @classmethod
    def parse(cls, obj: Any) -> Retained | None:
        if not isinstance(obj, dict) or not isinstance(obj.get("version"), str):
            return None
        fams = obj.get("families")
        fams = {str(k): v for k, v in fams.items() if v in FAMILIES} if isinstance(fams, dict) else {}
        draining = obj.get("draining")
        lease = _num(obj.get("lease"), tuning().max_reader_lease)
        return cls(obj["version"], _num(obj.get("superseded"), 0.0), lease, fams,
                   None if draining is None else _num(draining, 0.0))


def _num(v: Any, default: float) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


@dataclass
class Record:
    """What a root says about versions (:data:`RECORD`); :meth:`of` reads it (a root without one: its
    own single version)."""

    version: str
    retention: float = field(default_factory=lambda: tuning().version_retention)
    lease: float = field(default_factory=lambda: tuning().max_reader_lease)
    retained: list[Retained] = field(default_factory=list)
    pending_documents: bool = False
    recorded: bool = False  # the root carries the record (its consolidated section is then authoritative)

    @classmethod
    def of(cls, root_doc: dict[str, Any]) -> Record:
        attrs = root_doc.get("attributes")
        rec = attrs.get(RECORD) if isinstance(attrs, dict) else None
        version = version_of(root_doc)
        if not isinstance(rec, dict) or not isinstance(rec.get("version"), str):
            return cls(version)
        retention = _num(rec.get("retention"), tuning().version_retention)
        kept = [r for r in (Retained.parse(x) for x in rec.get("retained") or []) if r is not None]
        return cls(version, retention, _num(rec.get("lease"), lease_for(retention)), kept,
                   bool(rec.get("pending_documents")), True)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version, "retention": self.retention, "lease": self.lease,
                               "retained": [r.to_json() for r in self.retained]}
        if self.pending_documents:
            out["pending_documents"] = True
        return out

    def readable(self, version: str) -> bool:
        """Whether a reader pinned to ``version`` may go on reading it: the current version, or a
        superseded one not being reclaimed."""
        return version == self.version or any(r.version == version and r.draining is None for r in self.retained)
