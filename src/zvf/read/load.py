"""Loading metadata: root, level and array documents in as few round trips as possible.

The first wave of requests asks for everything whose name the format fixes
(root, level 0, its core arrays); on a remote store it leaves before the
dataset's executor is set up (:class:`FirstWave`).  Stores zvf writes carry every document in
the root's ``consolidated_metadata`` (zarr-python's inline section).  When
the documents wave 1 fetched agree with their copies there, the section is
trusted: every other document comes from it and listings are answered from
its keys, so opening and reading never list the store -- a static web host or
CDN (GET and HEAD only) serves it, and a reader needs no list permission.
Without a trusted section (stores 0.9.2 writes, or a store changed by a tool
that kept a stale section) a second wave lists the groups whose children are
user-named (attributes) and a third fetches what the listings named.
Families needed only by some reads (links, object index, groups) load
lazily, once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from ..config import tuning
from ..errors import (
    FormatError,
    IncompleteStoreError,
    InvalidArgumentError,
    NotZvfStoreError,
    StoreNotFoundError,
    UnsupportedRequestError,
)
from ..format import metadata as md
from ..format import parse
from ..format.draco import ENCODING as DRACO
from ..format.layout import LevelLayout
from ..format.versions import Record
from ..io.executor import Executor
from .cells import CellArray
from .levels import LevelNodes

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ..io.store import StoreHandle
    from .object_index import ObjectIndex

#: A parsed JSON document (a node's zarr.json).
Doc: TypeAlias = dict[str, Any]
#: Wave 1 of opening a level: its document and its fixed-name array documents by path (None: absent).
LevelParts: TypeAlias = tuple[Doc | None, dict[str, Doc | None]]
#: Raw documents fetched before the executor existed (:class:`FirstWave`), by key (None: absent).
Fetched: TypeAlias = Mapping[str, bytes | None]

# What each lazily loaded family consists of: documents at fixed paths, or
# user-named members found by listing (with how deep the names go).
FIXED_DOCS = {
    "core": ("vertices", "vertex_fragments"),
    "object_index": ("object_index", "object_index/manifests", "object_index/object_ids", "object_index/data"),
    "groups": ("groups",),
    "link_fragments": ("link_fragments",),
}
LISTED = {
    "vertex_attributes": 1,
    "object_attributes": 1,
    "group_attributes": 1,
    "fragment_attributes": 1,
    "links": 2,
    "cross_chunk_links": 2,
    "link_attributes": 3,
}


# Capability tokens zvf reads correctly (all that zarr-vectors 0.9.2 stamps); a store that declares
# any other one uses a feature zvf does not implement, and reading it anyway could answer wrongly.
KNOWN_CAPABILITIES = frozenset({"preserved_object_ids", "shared_fragments", "fragment_index", "multiscale_links"})


def check_capabilities(root_doc: dict[str, Any], url: str) -> None:
    """Refuse a store whose ``format_capabilities``/``required_capabilities`` name unknown features."""
    zv = (root_doc.get("attributes") or {}).get("zarr_vectors")
    if not isinstance(zv, dict):
        return  # parse_root reports the missing block
    for field_name in ("required_capabilities", "format_capabilities"):
        caps = zv.get(field_name) or []
        unknown = sorted({str(c) for c in caps} - KNOWN_CAPABILITIES) if isinstance(caps, list) else [repr(caps)]
        if unknown:
            raise FormatError(
                f"{url}/zarr.json: zarr_vectors.{field_name} names {unknown}, which this zvf does not implement "
                f"(it reads {sorted(KNOWN_CAPABILITIES)}); refusing rather than returning a wrong answer")


@dataclass
class Level(LevelNodes[CellArray]):
    """One resolution level: its metadata, layout and arrays (by path under the level)."""

    meta: md.LevelMeta
    layout: LevelLayout
    loaded: set[str] = field(default_factory=set)  # families whose documents are in
    object_index: ObjectIndex | None = None

    @property
    def nonempty_chunks(self) -> np.ndarray:
        """Absolute coords of the chunks holding vertices, as listed by ``vertices``."""
        arr = self.arrays.get("vertices")
        if arr is None:
            return np.zeros((0, self.key_ndim), dtype=np.int64)
        return arr.meta.nonempty_chunk_array

    # ------------------------------------------------------------- attribute-chunked levels
    @property
    def categories(self) -> tuple[Any, ...] | None:
        """Values of the leading categorical chunk axis (``chunk_by_attribute``), None when spatial only."""
        return self.meta.chunk_attribute_values if self.meta.chunk_attribute_name is not None else None

    @property
    def category_name(self) -> str | None:
        return self.meta.chunk_attribute_name

    @property
    def key_ndim(self) -> int:
        """Rank of chunk coordinates (cell keys, manifests): ndim, plus one for a categorical axis."""
        return self.layout.key_ndim

    def is_draco(self) -> bool:
        """Whether the vertex cells are Draco bitstreams (3-D meshes only); FormatError for an encoding
        zvf does not read."""
        vert = self.arrays.get("vertices")
        enc = "raw" if vert is None else vert.meta.attributes.get("encoding", "raw")
        if enc == "raw":
            return False
        if enc != DRACO or self.layout.ndim != 3:
            raise FormatError(f"{self.index}/vertices/zarr.json: vertex encoding {enc!r} is not supported "
                              f"(only 'raw', and 'draco' in 3-D)")
        return True

    def needs_chunkset(self) -> bool:
        """Whether the plain chunk reader cannot lay the level out (a category axis, or Draco cells): its
        rows are read through a ``zvf.read.chunkset.ChunkSet``."""
        return self.categories is not None or self.is_draco()

    def category_index(self, categories: Any) -> np.ndarray:
        """Positions on the category axis of the given category values (InvalidArgumentError if unknown).
        ``categories``: one value of the chunking attribute (any JSON scalar) or a sequence of them."""
        values = self.categories
        if values is None:
            raise InvalidArgumentError(
                f"categories={categories!r}: level {self.index} is not chunked by an attribute")
        if isinstance(categories, (str, bytes)) or np.isscalar(categories):
            categories = [categories]
        want = list(categories)
        missing = [c for c in want if c not in values]
        if missing:
            raise InvalidArgumentError(
                f"categories {missing} are not values of {self.category_name!r} in level {self.index} "
                f"(it has {list(values)})")
        return np.asarray([values.index(c) for c in want], dtype=np.int64)

    def chunks_in(self, lo: ArrayLike | None = None, hi: ArrayLike | None = None,
                  categories: Any = None) -> np.ndarray:
        """Stored chunks that can hold vertices in the closed box ``[lo, hi]`` (all when None)
        and, on an attribute-chunked level, in the given categories (all when None)."""
        chunks = self.nonempty_chunks
        keep = np.ones(len(chunks), dtype=bool)
        if categories is not None:
            keep &= np.isin(chunks[:, 0], self.category_index(categories))
        if lo is not None and len(chunks):
            assert hi is not None, "a box has both corners"
            keep &= self.layout.in_box(chunks, lo, hi)
        return chunks[keep]


SECTION = "consolidated"  # executor cache namespace holding a verified root section (node path -> document)


def _section(ex: Executor) -> dict[str, Any] | None:
    """The verified consolidated section of this store, if any (see the module docstring)."""
    section: dict[str, Any] | None = ex.cache(SECTION).get("zarr.json")
    return section


async def _get_json(ex: Executor, key: str, fetched: Fetched | None = None) -> dict[str, Any] | None:
    section = _section(ex)
    if section is not None and key.endswith("/zarr.json"):
        return section.get(key[:-len("/zarr.json")])  # complete: a node it lacks does not exist
    if fetched is not None and key in fetched:
        raw = fetched[key]
        if raw is not None:
            ex.put_cached("meta", key, raw)  # as ex.get would have
    else:
        raw = await ex.get(key, cache="meta")
    return None if raw is None else parse.loads(raw, key=key)


def _trust_section(ex: Executor, root_doc: Doc, index: int, level_doc: Doc | None,
                   fixed: dict[str, Doc | None]) -> None:
    """Adopt the root's consolidated section when the documents wave 1 fetched agree with it -- or, on a
    root zvf's publication protocol wrote (its version record), always: that section IS the version the
    root publishes, and the documents on disk follow it only after the root (``zvf.write.publish``)."""
    cm = root_doc.get("consolidated_metadata")
    section = cm.get("metadata") if isinstance(cm, dict) else None
    if not isinstance(section, dict) or not all(isinstance(d, dict) for d in section.values()):
        return
    fetched = {f"{index}": level_doc, **{f"{index}/{p}": d for p, d in fixed.items()}}
    if not Record.of(root_doc).recorded and any(section.get(k) != d for k, d in fetched.items()):
        return
    # keyed by the root's key: this executor's own rewrite of the root (append, pyramid) drops it
    ex.put_cached(SECTION, "zarr.json", section, nbytes=len(json.dumps(section)))


async def _diagnose_missing_root(ex: Executor, url: str) -> Exception:
    """Explain why there is no root ``zarr.json``: v2, half-written, or nothing."""
    v2 = await ex.gather([ex.get(".zgroup"), ex.get(".zarray")])
    if any(x is not None for x in v2):
        return NotZvfStoreError(f"{url}: a Zarr v2 store (.zgroup/.zarray); zvf reads Zarr v3 ZVF stores only")
    try:
        prefixes, objects = await ex.list_dirs("")
    except UnsupportedRequestError:
        return StoreNotFoundError(f"{url}: no store here (no zarr.json; the server cannot list what else is there)")
    names = [p.rstrip("/").rsplit("/", 1)[-1] for p in prefixes] + [k.rsplit("/", 1)[-1] for k, _ in objects]
    if any(n.isdigit() or n == md.CLAIM_KEY for n in names):  # a level directory or a writer's claim
        return IncompleteStoreError(
            f"{url}: holds data but no root zarr.json -- an unfinished or interrupted write; "
            "run `zvf validate` to see what is left"
        )
    if names:
        shown = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
        return NotZvfStoreError(f"{url}: not a ZVF store (no zarr.json, and none of what a zvf write leaves: "
                                f"level directories 0/, 1/..., {md.CLAIM_KEY}); it holds {shown}")
    return StoreNotFoundError(f"{url}: no store here (no zarr.json)")


def make_level(root: md.RootMeta, index: int, level_doc: dict[str, Any], vertices_doc: dict[str, Any] | None
               ) -> Level:
    """A level from its document and its ``vertices`` array's (which place its grid)."""
    key = f"{index}/zarr.json"
    meta = parse.parse_level(level_doc, key=key)
    parse.check_level_grid(root, meta, key=key)
    vertices = None
    if vertices_doc is not None and vertices_doc.get("node_type") == "array":
        vertices = parse.parse_array(vertices_doc, key=f"{index}/vertices/zarr.json")
    return Level(index, meta, LevelLayout.of_level(root, meta, vertices, key=key))


async def family_paths(ex: Executor, level: int, family: str) -> list[str]:
    """Paths (relative to the level) of the nodes a family may hold."""
    if family in FIXED_DOCS:
        return list(FIXED_DOCS[family])
    return [family] + [p for p in await _list_tree(ex, f"{level}/{family}/", LISTED[family])]


async def load_family(ex: Executor, level: Level, family: str, paths: list[str] | None = None) -> None:
    """Fetch the documents of one family into ``level`` (absent ones are skipped)."""
    if family in level.loaded:
        return
    if paths is None:
        paths = await family_paths(ex, level.index, family)
    docs = await ex.gather([_get_json(ex, f"{level.index}/{p}/zarr.json") for p in paths])
    _add_docs(level, ex, paths, docs)
    level.loaded.add(family)


async def _list_tree(ex: Executor, prefix: str, depth: int) -> list[str]:
    """Relative paths of the nodes below ``prefix`` down to ``depth`` levels (no chunk keys)."""
    out: list[str] = []
    frontier = [prefix]
    base = len(prefix.split("/", 1)[0]) + 1  # strip the level number
    section = _section(ex)
    if section is not None:  # a trusted section names every node: no request
        return sorted(k[base:] for k in section if k.startswith(prefix) and k[len(prefix):].count("/") < depth)
    for step in range(depth):
        try:
            results = await ex.gather([ex.list_dirs(p) for p in frontier])
        except UnsupportedRequestError as e:
            raise UnsupportedRequestError(
                f"{ex.handle.url}: the root has no consolidated metadata zvf can trust, so the groups under "
                f"{prefix!r} must be listed, and the server cannot list ({e}); rewrite the store with zvf "
                f"(its stores carry consolidated metadata) to serve it from a static host") from None
        frontier = []
        for dirs, _objs in results:
            for d in dirs:
                d = d.rstrip("/")
                # below a member, "c" is its chunk key space; a group's own member may be named "c"
                if step and d.rsplit("/", 1)[-1] == "c":
                    continue
                out.append(d[base:])
                frontier.append(d + "/")
        if not frontier:
            break
    return out


# Documents at fixed paths fetched when a level opens, and groups listed then
# (their members' documents arrive in the second wave).
OPEN_FIXED = ("core", "object_index", "link_fragments")
OPEN_LISTED = ("vertex_attributes", "links", "links/0")
# Geometries whose reads need their link arrays, and those whose objects are implicitly sequential paths.
LINKED = frozenset({"graph", "skeleton", "mesh"})
SEQUENTIAL = md.SEQUENTIAL_GEOMETRIES


def _fixed_paths() -> list[str]:
    """Paths (relative to a level) of the fixed-name array documents wave 1 asks for."""
    return [p for fam in OPEN_FIXED for p in FIXED_DOCS[fam]]


async def open_level(ex: Executor, root_key: str | None, index: int, fetched: Fetched | None = None
                     ) -> tuple[Doc | None, LevelParts]:
    """Wave 1 of opening a level: (optionally) the root, the level document and every fixed-name array
    document, asked for at once (those in ``fetched`` came already); :func:`finish_level` does the rest."""
    fixed = _fixed_paths()
    wave1 = await ex.gather(
        [_get_json(ex, root_key, fetched) if root_key else _none(), _get_json(ex, f"{index}/zarr.json", fetched)]
        + [_get_json(ex, f"{index}/{p}/zarr.json", fetched) for p in fixed]
    )
    root_doc, level_doc = wave1[:2]
    return root_doc, (level_doc, dict(zip(fixed, wave1[2:])))


class FirstWave:
    """Wave 1 of opening a remote store (root, level 0, its fixed-name array documents), started on the
    handle's transport before the dataset's executor exists: the executor's set-up -- in a fresh process it
    imports anyio's asyncio backend, ~25 ms -- then runs while the requests are on the wire (issue 26: a cold
    process's open started its first request ~45 ms after the call).  A request that failed is made again
    through the executor (its retries, its errors); the others count in the executor's stats as the one round
    trip they were."""

    def __init__(self, handle: StoreHandle) -> None:
        self.keys = ["zarr.json", "0/zarr.json", *(f"0/{p}/zarr.json" for p in _fixed_paths())]
        self.sent = asyncio.get_running_loop().time()  # anyio.current_time() under asyncio (the DEBUG lines)
        self.tasks = [asyncio.ensure_future(handle.transport.get(k)) for k in self.keys]

    @classmethod
    async def start(cls, handle: StoreHandle) -> FirstWave | None:
        """The wave, in flight -- or None for a local store (nothing to wait for) or one whose concurrency limit
        is below the wave's size (the executor keeps to it)."""
        if not handle.is_remote or handle.concurrency < 2 + len(_fixed_paths()):
            return None
        wave = cls(handle)
        try:
            await asyncio.sleep(0)  # one turn of the loop: every request is sent
        except BaseException:
            for task in wave.tasks:
                task.cancel()
            raise
        return wave

    async def fetched(self, ex: Executor) -> dict[str, bytes | None]:
        """The documents that came (None: absent), counted in ``ex``'s stats and logged as its requests are."""
        results = await asyncio.gather(*self.tasks, return_exceptions=True)
        ex.count_sent_before(self.keys, results, self.sent)
        return {key: r for key, r in zip(self.keys, results) if not isinstance(r, BaseException)}


async def _none() -> Doc | None:
    """No document (the root, when wave 1 does not ask for it)."""
    return None


async def finish_level(ex: Executor, root: md.RootMeta, index: int, level_doc: Doc | None,
                       fixed_docs: dict[str, Doc | None]) -> Level:
    """A level ready for bbox queries and object reads: the attribute and delta-0 link groups listed (from
    the trusted section: no request), then the documents they name fetched beside the object index's
    prefetch.  Other families (cross-level links, object attributes, ...) load on first use."""
    if level_doc is None:
        raise FormatError(f"{ex.handle.url}/{index}/zarr.json: level {index} is listed by the root but missing")
    level = make_level(root, index, level_doc, fixed_docs.get("vertices"))
    _add_docs(level, ex, list(fixed_docs), list(fixed_docs.values()))
    vert = level.array("vertices")
    if vert is None:
        raise FormatError(f"{ex.handle.url}/{index}/vertices/zarr.json: missing or not an array")
    if vert.meta.ndim != level.key_ndim:
        what = f"chunk_dims {list(level.meta.chunk_dims or ())}" if level.categories is not None else f"{root.ndim}-D"
        raise FormatError(f"{index}/vertices/zarr.json: a rank-{vert.meta.ndim} chunk grid does not fit a "
                          f"{what} level (an attribute-chunked level names chunk_attribute_name and _values)")
    level.loaded.update(OPEN_FIXED)
    listings = await ex.gather([_list_tree(ex, f"{index}/{g}/", 1) for g in OPEN_LISTED])
    listed = dict(zip(OPEN_LISTED, listings))
    deltas = listed["links"] if root.geometry_type in LINKED else []
    paths = listed["vertex_attributes"] + (["links", *deltas, *listed["links/0"]] if deltas else [])
    if level.array("object_index/manifests") is not None:
        from .object_index import ObjectIndex  # here: a level without objects never loads the object index

        level.object_index = ObjectIndex(ex, level, level.key_ndim)
        frag = level.array("vertex_fragments")
        # fragment-index shards beside the object index's (zvf's layout shards them apart, ~64 chunks a shard:
        # the default 16 covers a 1 024-chunk level; larger levels read the rest on first use)
        shards = tuning().open_prefetch_shards
        prefetch = [level.object_index.prefetch()] + ([frag.prefetch_indexes(shards)] if frag else [])
        jobs: list[Awaitable[Doc | None]] = [_get_json(ex, f"{index}/{p}/zarr.json") for p in paths]
        wave2 = await ex.gather([*jobs, *prefetch])
        docs = wave2[:len(paths)]  # the documents; the prefetches return None
    else:
        docs = await ex.gather([_get_json(ex, f"{index}/{p}/zarr.json") for p in paths])
    _add_docs(level, ex, paths, docs)
    level.loaded.add("vertex_attributes")
    if level.object_index is None:
        # the shard indexes of a sharded point level (auto layouts: one shard a level), in one wave: the first
        # box then starts with its cells (or its bins' indexes) instead of a round trip for those indexes
        arrays = [level.array(name) for name in ("vertices", "vertex_fragments", *paths)]
        await ex.gather([a.prefetch_indexes(tuning().open_prefetch_shards)
                         for a in arrays if a is not None and a.codec.shard is not None])
    if deltas and set(deltas) <= {"links/0"}:
        level.loaded.add("links")  # no cross-level families: every link document is in
    return level


def _add_docs(level: Level, ex: Executor, paths: Sequence[str], docs: Sequence[Doc | None]) -> None:
    for name, doc in zip(paths, docs):
        if doc is None:
            continue
        key = f"{level.index}/{name}/zarr.json"
        if doc.get("node_type") == "array":
            level.arrays[name] = CellArray(ex, f"{level.index}/{name}", parse.parse_array(doc, key=key),
                                           level.meta.vertex_count)
        else:
            attrs = doc.get("attributes")
            level.groups[name] = attrs if isinstance(attrs, dict) else {}


async def load_root(ex: Executor, url: str, first: FirstWave | None = None) -> tuple[md.RootMeta, Level]:
    """Root and level 0, ready for queries and object reads, in two round trips (the first one ``first``,
    when it was started before ``ex`` existed)."""
    fetched = await first.fetched(ex) if first is not None else None
    root_doc, level_parts = await open_level(ex, "zarr.json", 0, fetched)
    if root_doc is None:
        raise await _diagnose_missing_root(ex, url)
    if root_doc.get("zarr_format") != 3:
        raise NotZvfStoreError(f"{url}/zarr.json: not a Zarr v3 document (zarr_format={root_doc.get('zarr_format')!r})")
    root = parse.parse_root(root_doc, key="zarr.json")
    check_capabilities(root_doc, url)
    _trust_section(ex, root_doc, 0, *level_parts)
    section = _section(ex)
    if section is not None:  # wave 1's documents as the section has them (the trusted copies)
        level_parts = (section.get("0"), {p: section.get(f"0/{p}") for p in level_parts[1]})
    return root, await finish_level(ex, root, 0, *level_parts)


async def load_level(ex: Executor, root: md.RootMeta, index: int) -> Level:
    """A coarser level, in two round trips."""
    _, level_parts = await open_level(ex, None, index)
    return await finish_level(ex, root, index, *level_parts)


def check_level(levels: list[int], level: object) -> int:
    if not isinstance(level, (int, np.integer)) or int(level) not in levels:
        raise InvalidArgumentError(f"level={level!r} is not in this store (levels: {levels})")
    return int(level)
