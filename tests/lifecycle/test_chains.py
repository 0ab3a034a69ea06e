"""Chains of operations checked against a model (issue 23, item 5).

A hypothesis state machine writes one geometry per run (points with or without object ids,
polylines, streamlines, lines, graphs, skeletons, meshes), then applies random operations in
random order: append, build a pyramid (random factors, chunk scales, bins), rechunk, recompress,
reshard, overwrite, convert out to a file and back, and append values the stored dtypes cannot hold;
every new store gets a user root attribute first.  After every step the store must read as the numpy
model of level 0 (tests/support/chain_model.py) says -- full read, random closed boxes, every object in order,
object/vertex attributes with their dtypes, groups, root attributes -- and every coarse level must
answer ``read_all``, ``select().read()``, ``iter_chunks``, ``query`` and ``count`` alike, file every
vertex in the chunk it lies in, and keep what its factors say; ``validate(level=5)`` must pass.

Budget: a few minutes in CI.  ``ZVF_CHAINS_MINUTES=30`` runs fresh random sequences on each backend
until the time is up and reports every distinct failure at the end.  ``ZVF_CHAINS_S3=1`` adds the
in-process S3 server (smaller budget).  The numbers of sequences and steps run are printed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
import time
import traceback
import uuid
import warnings
from collections import Counter

import anyio
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import zvf
from zvf.errors import ZvfError

from ..support.chain_model import (
    CONVERSIONS,
    LINKED,
    NDIM,
    SEQUENTIAL,
    AttrSpec,
    DataSpec,
    Model,
    bins_of,
    converted,
    has_ids,
    inside,
    link_rows,
    make_piece,
    same_rows,
    store_geometry,
    table,
    table_ids_clash,
    thinned_count,
    unique_rows,
)
from ..support.chain_stores import Backend

MINUTES = float(os.environ.get("ZVF_CHAINS_MINUTES", "0") or 0)
SKIP = frozenset(filter(None, os.environ.get("ZVF_CHAINS_SKIP", "").split(",")))
"""Rules and checks left out (while their bug is being fixed): append_uncastable, root_attributes,
consolidated, coarse_boxes, coarse_counts, coarse_bins, fresh_build, validate, layout, and
straddling_bins (build only pyramids whose level bins tile their chunks)."""
RUNS: Counter = Counter()  # sequences, steps, and steps per rule, over this process

VATTRS = (AttrSpec("a_f32", "float32", None), AttrSpec("a_u8", "uint8", None), AttrSpec("a_i16x2", "int16", 2),
          AttrSpec("a_f64", "float64", None))
OATTRS = (AttrSpec("o_i32", "int32", None), AttrSpec("o_f32x2", "float32", 2))
GATTRS = (AttrSpec("g_f64", "float64", None),)
CHUNKS = ((2.5, 2.5, 2.5), (5.0, 5.0, 5.0), (4.0, 2.0, 8.0), (10.0, 10.0, 10.0), (1.0, 1.0, 1.0))
BINS_PER_CHUNK = (None, 1, 2, 4, (2, 1, 2))


# ------------------------------------------------------------------------------------------ strategies
@st.composite
def data_specs(draw) -> DataSpec:
    kind = draw(st.sampled_from(("point_cloud", "point_ids", "polyline", "streamline", "line", "graph", "skeleton",
                                 "mesh")))
    vattrs = tuple(a for a in VATTRS if draw(st.booleans()))
    ids = has_ids(kind)
    oattrs = tuple(a for a in OATTRS if ids and draw(st.booleans()))
    gattrs = tuple(a for a in GATTRS if ids and draw(st.booleans()))
    lo = draw(st.sampled_from(((0.0, 0.0, 0.0), (-7.5, 2.5, -20.0), (100.25, -3.0, 0.0))))
    size = draw(st.sampled_from((3.0, 10.0, 25.0)))
    step = draw(st.sampled_from((None, None, 0.5, 1.25)))
    dtype = draw(st.sampled_from(("float32", "float64")))
    return DataSpec(kind, dtype, vattrs, oattrs, gattrs, lo, size, step)


def _grid(chunk, bpc) -> dict:
    if bpc is None:
        return {"chunk_shape": list(chunk), "bin_shape": None}
    per = np.broadcast_to(np.asarray(bpc, np.float64), (NDIM,))
    return {"chunk_shape": list(chunk), "bin_shape": [c / b for c, b in zip(chunk, per)]}


grids = st.builds(_grid, st.sampled_from(CHUNKS), st.sampled_from(BINS_PER_CHUNK))
compressions = st.sampled_from((None, "zstd", "blosc", "gzip"))
shards = st.sampled_from((None, None, 2, [2, 1, 2], "auto"))
layouts = st.fixed_dictionaries({"grid": grids, "compression": compressions, "shard_shape": shards,
                                 "object_index_layout": st.sampled_from(("sharded", "sharded", "reference"))})
coarsens = st.sampled_from((1, 2, 3, [2, 1, 2]))
pyramids = st.lists(st.tuples(coarsens, st.sampled_from((1, 2, 3)), st.sampled_from((1, 2, 3))), min_size=1,
                    max_size=3)
pyramid_calls = st.tuples(pyramids, st.booleans(), st.sampled_from((0, 0, 7)))  # (levels, chunk-scaled, seed)
maybe_pyramid = st.one_of(st.none(), pyramid_calls, pyramid_calls)  # most stores get levels
seeds = st.integers(0, 2**32 - 1)


# ------------------------------------------------------------------------------------------ the machine
class Chains(RuleBasedStateMachine):
    """One store's life; ``backend`` is where its stores go (set by the runner)."""

    backend: Backend
    kind: str | None = None  # the geometry every run writes (None: drawn)

    def __init__(self) -> None:
        super().__init__()
        RUNS["sequences"] += 1
        self.run = f"r{uuid.uuid4().hex[:10]}"
        self.serial = 0
        self.store = ""  # name of the current store under the backend
        self.model: Model | None = None
        self.layout: dict = {}
        self.pyramid: list[tuple] | None = None  # [(coarsen, sparsity, chunk_scale)] of levels 1..
        self.pyramid_seed = 0
        self.checks = 0
        self.files = tempfile.mkdtemp(prefix="zvf-chain-files-")  # converted files (always local)
        self.foreign = f"{self.run}/foreign/thesis.txt"
        self.backend.put(self.foreign, b"not a store")

    def teardown(self) -> None:
        shutil.rmtree(self.files, ignore_errors=True)

    # ------------------------------------------------------------------ helpers
    def _step(self, name: str) -> None:
        RUNS["steps"] += 1
        RUNS[name] += 1

    def _new_store(self) -> str:
        self.serial += 1
        return f"{self.run}/s{self.serial}"

    @property
    def url(self) -> str:
        return self.backend.url(self.store)

    def _write_opts(self, layout: dict) -> dict:
        return {"chunk_shape": layout["grid"]["chunk_shape"], "bin_shape": layout["grid"]["bin_shape"],
                "compression": layout["compression"], "shard_shape": layout["shard_shape"],
                "object_index_layout": layout["object_index_layout"], **self.backend.options()}

    def _write(self, store: str, model: Model, layout: dict, *, overwrite: bool = False) -> None:
        piece = _as_piece(model)
        name, args, kw = piece.writer_call(model.spec, append=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            getattr(zvf, name)(self.backend.url(store), *args, **kw, **self._write_opts(layout),
                               overwrite=overwrite)

    def _tag_root(self) -> None:
        """A user attribute on the new current store's root (as ``zarr.open_group(...).attrs[...] = ...``
        writes it): every later operation on the store must carry it."""
        attr = {"run": self.run, "store": self.store, "nested": [1, 2.5, "x"]}
        self.backend.set_root_attribute(self.store, "chain_user", attr)
        self.model.root_attrs["chain_user"] = attr

    def _open(self, url: str | None = None, mode: str = "r"):
        return zvf.open(url or self.url, mode=mode, **self.backend.options())

    # ------------------------------------------------------------------ rules
    @initialize(spec=data_specs(), seed=seeds, scale=st.integers(1, 120), layout=layouts, pyramid=maybe_pyramid)
    def write(self, spec, seed, scale, layout, pyramid):
        self._step("write")
        if self.kind and spec.kind != self.kind:
            ids = has_ids(self.kind)
            spec = dataclasses.replace(spec, kind=self.kind, oattrs=spec.oattrs if ids else (),
                                       gattrs=spec.gattrs if ids else ())
        RUNS[f"kind {spec.kind}"] += 1
        note(f"writing {spec}")
        rng = np.random.default_rng(seed)
        self.model = make_piece(rng, spec, scale).as_model(spec)
        self.layout = layout
        self.store = self._new_store()
        self._write(self.store, self.model, layout)
        self._tag_root()
        self._build_pyramid(pyramid)

    @rule(seed=seeds, scale=st.integers(1, 60))
    def append(self, seed, scale):
        self._step("append")
        m = self.model
        rng = np.random.default_rng(seed)
        top = int(m.ids.max()) if len(m.ids) else -1
        first = top + 1 if m.kind == "point_ids" else 0
        piece = make_piece(rng, m.spec, scale, first_id=first)
        shift = 0 if m.kind in ("point_cloud", "point_ids") else top + 1
        name, args, kw = piece.writer_call(m.spec, append=True, store_gattrs=bool(m.gattrs))
        with self._open(mode="a") as ds:
            summary = getattr(ds, name)(*args, **kw)
        self.model = m.extended(piece, shift)
        if self.pyramid and "fresh_build" not in SKIP:
            assert summary.get("pyramid_rebuilt") == list(range(1, len(self.pyramid) + 1)), summary
            self._check_against_fresh_build("append")

    @precondition(lambda self: self.pyramid is None)
    @rule(pyramid=pyramid_calls)
    def build_pyramid(self, pyramid):
        self._step("build_pyramid")
        self._build_pyramid(pyramid)

    def _build_pyramid(self, pyramid: tuple | None) -> None:
        """Build ``pyramid`` = (levels, scaled, seed) on the current store (None: leave it at level 0)."""
        if pyramid is None:
            return
        levels, scaled, seed = pyramid
        self.pyramid = [(c, s, k if scaled else 1) for c, s, k in levels]
        if "straddling_bins" in SKIP and not all(_tiles(*self._level_grid(n)) for n in range(1, len(levels) + 1)):
            self.pyramid = None
            return
        RUNS["pyramids built"] += 1
        zvf.build_pyramid(self.url, [(c, s) for c, s, _ in levels],
                          chunk_scale_factors=[k for _, _, k in levels] if scaled else None, seed=seed,
                          **self.backend.options())
        self.pyramid_seed = seed

    @rule(change=st.one_of(st.fixed_dictionaries({"grid": grids}), st.fixed_dictionaries({"compression": compressions}),
                           st.fixed_dictionaries({"shard_shape": shards})), pyramid=maybe_pyramid)
    def rechunk(self, change, pyramid):
        """Rechunk, recompress or reshard into a new store, which becomes the current one (level 0 only)."""
        what = next(iter(change))
        self._step({"grid": "rechunk", "compression": "recompress", "shard_shape": "reshard"}[what])
        if what == "grid":
            kw = {"chunk_shape": change["grid"]["chunk_shape"], "bin_shape": change["grid"]["bin_shape"]}
        else:
            kw = dict(change)
        dst = self._new_store()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zvf.rechunk(self.url, self.backend.url(dst), storage_options=self.backend.storage_options,
                        target_storage_options=self.backend.storage_options, **kw)
        self.store, self.pyramid = dst, None
        self.layout = dict(self.layout, **change)
        self._tag_root()
        self._build_pyramid(pyramid)

    @rule(seed=seeds, scale=st.integers(1, 120), layout=layouts, pyramid=maybe_pyramid)
    def overwrite(self, seed, scale, layout, pyramid):
        """A new store of the same geometry over the current one: a new life (root attributes go too).
        The same write onto a prefix holding a file that is no store is refused and leaves it as it was."""
        self._step("overwrite")
        target = self.foreign.rsplit("/", 1)[0]
        with pytest.raises(ZvfError):
            self._write(target, self.model, self.layout, overwrite=True)
        left = self.backend.keys(target + "/")
        assert left == [self.foreign], f"a refused overwrite left {left} under {target}"
        model = make_piece(np.random.default_rng(seed), self.model.spec, scale).as_model(self.model.spec)
        self._write(self.store, model, layout, overwrite=True)
        self.model, self.layout, self.pyramid = model, layout, None
        self._tag_root()
        self._build_pyramid(pyramid)

    @precondition(lambda self: self.model.kind in CONVERSIONS)
    @rule(which=st.integers(0, 2), grid=grids)
    def convert_round_trip(self, which, grid):
        """Out to a file and back into a new store (``grid`` its layout), which becomes the current one."""
        fmt = CONVERSIONS[self.model.kind][which % len(CONVERSIONS[self.model.kind])]
        self._step(f"convert {fmt}")
        path = os.path.join(self.files, f"s{self.serial}.{fmt}")
        opts = {"storage_options": self.backend.storage_options} if self.backend.storage_options else {}
        spec = self.model.spec
        if fmt == "ply" and any(a.channels for a in (*spec.vattrs, *spec.oattrs)):
            with pytest.raises(ZvfError, match="channels"):  # PLY properties are scalar: refused, said why
                zvf.convert(self.url, path, **opts)
            return
        if fmt in ("parquet", "csv") and table_ids_clash(self.model):
            with pytest.raises(ZvfError, match="object_id"):  # would merge objects in the file
                zvf.convert(self.url, path, **opts)
            return
        if fmt == "ply" and spec.kind == "mesh" and any(not (self.model.owners == oid).any() for oid in self.model.ids):
            with pytest.raises(ZvfError, match="no vertices"):  # a PLY mesh names its objects by their vertices
                zvf.convert(self.url, path, **opts)
            return
        if fmt == "trx" and any(not (self.model.owners == oid).any() for oid in self.model.ids):
            with pytest.raises(ZvfError, match="without vertices"):  # TRX readers drop them: refused, said why
                zvf.convert(self.url, path, **opts)
            assert not os.path.exists(path)
            return
        zvf.convert(self.url, path, **opts)
        dst = self._new_store()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zvf.convert(path, self.backend.url(dst), chunk_shape=grid["chunk_shape"], bin_shape=grid["bin_shape"],
                        compression=self.layout["compression"], **opts)
        self.model = converted(self.model, fmt)
        self.store, self.pyramid = dst, None
        self.layout = dict(self.layout, grid=grid, shard_shape=None, object_index_layout="sharded")
        source = self.backend.root_doc(dst).get("attributes", {}).get("zvf_source")
        if source is not None:  # what the file knew: every later operation must carry it
            self.model.root_attrs["zvf_source"] = source
        self._tag_root()

    @precondition(lambda self: "append_uncastable" not in SKIP
                  and any(np.dtype(a.dtype).kind in "iu" for a in self.model.spec.vattrs))
    @rule(seed=seeds)
    def append_uncastable(self, seed):
        """Values the stored integer dtype cannot hold exactly are refused, and the store is unchanged."""
        self._step("append_uncastable")
        m = self.model
        top = int(m.ids.max()) if len(m.ids) else -1
        rng = np.random.default_rng(seed)
        piece = make_piece(rng, m.spec, 4, first_id=top + 1 if m.kind == "point_ids" else 0)
        while not len(piece.positions):  # four objects may all be empty: nothing to refuse then
            piece = make_piece(rng, m.spec, 4, first_id=top + 1 if m.kind == "point_ids" else 0)
        victim = next(a for a in m.spec.vattrs if np.dtype(a.dtype).kind in "iu")
        bad = piece.attrs[victim.name].astype(np.float64)
        bad.reshape(-1)[0] = 0.7  # not an integer
        if bad.size > 1:
            bad.reshape(-1)[1] = float(np.iinfo(np.dtype(victim.dtype)).max) + 45  # out of range
        piece.attrs[victim.name] = bad
        name, args, kw = piece.writer_call(m.spec, append=True, store_gattrs=bool(m.gattrs))
        with self._open(mode="a") as ds, pytest.raises(ZvfError, match=victim.name):
            getattr(ds, name)(*args, **kw)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def level0_reads_as_the_model(self):
        if self.model is None:
            return
        self.checks += 1
        rng = np.random.default_rng(self.checks)
        with self._open() as ds:
            check_level0(ds, self.model, rng)

    @invariant()
    def root_carries_what_it_must(self):
        if self.model is None:
            return
        doc = self.backend.root_doc(self.store)
        attrs = doc.get("attributes", {})
        for k, v in self.model.root_attrs.items():
            if "root_attributes" in SKIP:
                break
            assert attrs.get(k) == v, f"root attribute {k!r}: {attrs.get(k)!r}, expected {v!r}"
        if self.layout["object_index_layout"] != "reference" and "consolidated" not in SKIP:
            assert doc.get("consolidated_metadata"), "the root lost its consolidated_metadata"

    @invariant()
    def coarse_levels_agree(self):
        if self.model is None:
            return
        rng = np.random.default_rng(10_000 + self.checks)
        with self._open() as ds:
            want = list(range(len(self.pyramid or []) + 1))
            assert ds.levels == want, f"levels {ds.levels}, expected {want}"
            for level in want[1:]:
                check_coarse_level(ds, self.model, level, self._level_grid(level), self.pyramid[level - 1], rng)

    @invariant()
    def foreign_keys_survive(self):
        assert self.backend.get(self.foreign) == b"not a store", f"{self.foreign} was deleted or changed"

    @invariant()
    def validates_at_level_5(self):
        if self.model is None or "validate" in SKIP:
            return
        report = zvf.validate(self.url, level=5, **self.backend.options())
        assert report.ok, report.summary()

    # ------------------------------------------------------------------ coarse-level oracles
    def _level_grid(self, level: int) -> tuple[np.ndarray, np.ndarray]:
        """(chunk shape, bin shape) of ``level`` from the layout and the factors the pyramid was built with."""
        chunk = np.asarray(self.layout["grid"]["chunk_shape"], np.float64)
        b = self.layout["grid"]["bin_shape"]
        binv = chunk.copy() if b is None else np.asarray(b, np.float64)
        for coarsen, _, scale in (self.pyramid or [])[:level]:
            binv = binv * np.broadcast_to(np.asarray(coarsen, np.float64), (NDIM,))
            chunk = chunk * scale
        return chunk, binv

    def _check_against_fresh_build(self, after: str) -> None:
        """The appended store's levels equal those of one write of its level 0 with the same pyramid."""
        oracle = self._new_store()
        with self._open() as ds:
            base = ds.read_all()
        model = self.model.copy()
        if model.kind in ("point_cloud", "point_ids"):  # the store's row order (the thinning draws follow it)
            model.positions, model.attrs = base.positions, base.attributes
            if model.owners is not None:
                model.owners = base.object_ids
        elif model.kind in LINKED:  # each object's vertices in the store's order (its coarse path follows it)
            with self._open() as ds:
                parts = ds.read_objects(model.ids)
            model.positions = np.concatenate([p.positions for p in parts]).astype(model.spec.dtype)
            model.attrs = {n: np.concatenate([p.attributes[n] for p in parts]) for n in model.attrs}
            model.owners = np.repeat(model.ids, [len(p) for p in parts])
            width = 3 if model.kind == "mesh" else 2
            found = {int(oid): p.faces if model.kind == "mesh" else p.edges for oid, p in zip(model.ids, parts)}
            model.links = {oid: np.zeros((0, width), np.int64) if rows is None else rows.astype(np.int64)
                           for oid, rows in found.items()}
        self._write(oracle, model, self.layout)
        zvf.build_pyramid(self.backend.url(oracle), [(c, s) for c, s, _ in self.pyramid],
                          chunk_scale_factors=[k for _, _, k in self.pyramid], seed=self.pyramid_seed,
                          **self.backend.options())
        with self._open() as ds, self._open(self.backend.url(oracle)) as fresh:
            names = sorted(ds.read_all().attributes)
            for level in range(1, len(self.pyramid) + 1):
                got, want = ds.read_all(level=level), fresh.read_all(level=level)
                diff = same_rows(table(got.positions, got.attributes, names),
                                 table(want.positions, want.attributes, names), atol=1e-5)
                assert diff is None, f"after {after}, level {level} differs from a fresh build: {diff}"


def _tiles(chunk: np.ndarray, binv: np.ndarray) -> bool:
    """Bins tile chunks (a whole number of bins per chunk)."""
    q = chunk / binv
    return bool(np.allclose(q, np.round(q)) and (np.round(q) >= 1).all())


def _as_piece(model: Model):
    from ..support.chain_model import Piece

    return Piece(model.positions, model.attrs, model.owners, model.ids, model.links, model.oattrs, model.groups,
                 model.gattrs)


# ------------------------------------------------------------------------------------------ level-0 checks
def check_level0(ds, m: Model, rng: np.random.Generator) -> None:
    spec = m.spec
    names = sorted(a.name for a in spec.vattrs)
    assert ds.geometry_type == store_geometry(m.kind)
    full = ds.read_all()
    assert full.positions.dtype == np.dtype(spec.dtype), f"positions {full.positions.dtype}, stored {spec.dtype}"
    assert sorted(full.attributes) == names, f"vertex attributes {sorted(full.attributes)}, expected {names}"
    for a in spec.vattrs:
        assert full.attributes[a.name].dtype == np.dtype(a.dtype), \
            f"vertex attribute {a.name}: {full.attributes[a.name].dtype}, written {a.dtype}"
    owners = m.owners if has_ids(m.kind) else None
    got_owners = full.object_ids if has_ids(m.kind) else None
    want = table(m.positions, m.attrs, names, owners)
    diff = same_rows(table(full.positions, full.attributes, names, got_owners), want)
    assert diff is None, f"read_all: {diff}"
    for what, sel in (("select().read()", ds.select().read()),
                      ("iter_chunks", _concat(list(ds.iter_chunks(batch_chunks=3)), names, full))):
        sel_owners = sel.object_ids if has_ids(m.kind) else None
        diff = same_rows(table(sel.positions, sel.attributes, names, sel_owners), want)
        assert diff is None, f"{what}: {diff}"
    # extent
    if len(m.positions):
        lo, hi = ds.bounds
        p = m.positions.astype(np.float64)
        assert (lo <= p.min(0)).all() and (hi >= p.max(0)).all(), f"bounds {lo}..{hi} miss the data"
    # objects, tables, groups
    if has_ids(m.kind):
        assert np.array_equal(ds.object_ids(), m.ids), f"object_ids {ds.object_ids()}, expected {m.ids}"
        have = sorted(ds.info().get("object_attributes", {}))
        assert have == sorted(a.name for a in spec.oattrs), f"object attributes {have}, expected {spec.oattrs}"
        for a in spec.oattrs:
            got = ds.object_attribute(a.name)
            assert got.dtype == np.dtype(a.dtype), f"object attribute {a.name}: {got.dtype}, written {a.dtype}"
            assert np.array_equal(got, m.oattrs[a.name]), f"object attribute {a.name} values differ"
        groups = ds.groups()
        assert [sorted(g.tolist()) for g in groups] == [sorted(g.tolist()) for g in m.groups], \
            f"groups {groups}, expected {m.groups}"
        for a in spec.gattrs:
            if a.name in m.gattrs:
                got = ds.group_attribute(a.name)
                assert got.dtype == np.dtype(a.dtype) and np.array_equal(got, m.gattrs[a.name]), \
                    f"group attribute {a.name}: {got!r}, expected {m.gattrs[a.name]!r}"
        for oid in m.ids:
            check_object(ds, m, int(oid), names)
        if len(m.ids):  # all objects at once: the same rows, grouped by offsets in the order asked
            order = m.ids[::-1]
            both = ds.read_objects(order, combined=True)
            assert both.objects is not None and np.array_equal(both.objects, order), \
                f"read_objects(combined=True): objects {both.objects}, asked {order}"
            for k, oid in enumerate(order):
                rows = m.rows_of(int(oid))
                part = slice(both.offsets[k], both.offsets[k + 1])
                have = table(both.positions[part], {n: v[part] for n, v in both.attributes.items()}, names)
                want = table(m.positions[rows], {n: v[rows] for n, v in m.attrs.items()}, names)
                if m.kind in SEQUENTIAL:
                    assert np.array_equal(have, want), f"read_objects(combined=True), object {oid}: rows or order"
                else:
                    diff = same_rows(have, want)
                    assert diff is None, f"read_objects(combined=True), object {oid}: {diff}"
    for lo, hi in boxes(rng, m, ds):
        check_box0(ds, m, lo, hi, names)


def check_object(ds, m: Model, oid: int, names: list[str]) -> None:
    got = ds.read_object(oid)
    rows = m.rows_of(oid)
    want = table(m.positions[rows], {k: v[rows] for k, v in m.attrs.items()}, names)
    have = table(got.positions, got.attributes, names)
    what = f"read_object({oid})"
    if m.kind in SEQUENTIAL:
        assert np.array_equal(have, want), f"{what}: rows or order differ from the model ({len(have)} vs {len(want)})"
        if len(rows) > 1:
            assert got.edges is not None and np.array_equal(
                got.edges, np.stack([np.arange(len(rows) - 1), np.arange(1, len(rows))], 1)), f"{what}: edges"
        return
    diff = same_rows(have, want)
    assert diff is None, f"{what}: {diff}"
    if m.kind in LINKED:
        links = got.faces if m.kind == "mesh" else got.edges
        assert links is not None, f"{what}: no connectivity"
        diff = same_rows(link_rows(have, links, m.kind), link_rows(want, m.links[oid], m.kind))
        assert diff is None, f"{what}: {'faces' if m.kind == 'mesh' else 'edges'}: {diff}"


def boxes(rng: np.random.Generator, m: Model, ds) -> list[tuple[np.ndarray, np.ndarray]]:
    """A few closed boxes: on the chunk grid's half-steps (edges land on chunk and bin boundaries),
    anywhere, one degenerate box on a vertex, and the whole extent."""
    lo0 = np.asarray(m.spec.lo, np.float64) - 1
    span = m.spec.size + 2
    step = np.asarray(ds.chunk_shape, np.float64) / 4
    out = []
    for _ in range(2):
        a = np.floor((lo0 + rng.uniform(0, span, NDIM)) / step) * step
        b = np.floor((lo0 + rng.uniform(0, span, NDIM)) / step) * step
        out.append((np.minimum(a, b), np.maximum(a, b)))
    a, b = lo0 + rng.uniform(0, span, NDIM), lo0 + rng.uniform(0, span, NDIM)
    out.append((np.minimum(a, b), np.maximum(a, b)))
    if len(m.positions):
        v = m.positions[rng.integers(0, len(m.positions))].astype(np.float64)
        out.append((v, v.copy()))
    out.append((lo0, lo0 + span))
    return out


def check_box0(ds, m: Model, lo, hi, names: list[str]) -> None:
    what = f"query(({lo.tolist()}, {hi.tolist()}))"
    q = ds.query((lo, hi))
    count = ds.select(bbox=(lo, hi)).count()
    assert count == len(q), f"{what}: count() {count}, read() {len(q)} rows"
    ins = inside(m.positions, lo, hi)
    if m.kind in ("point_cloud", "point_ids"):
        owners = m.owners[ins] if m.owners is not None else None
        want = table(m.positions[ins], {k: v[ins] for k, v in m.attrs.items()}, names, owners)
        got = table(q.positions, q.attributes, names, q.object_ids if owners is not None else None)
        diff = same_rows(got, want)
        assert diff is None, f"{what}: {diff}"
        return
    hit = np.unique(m.owners[ins])
    if m.kind in SEQUENTIAL:  # whole objects with a vertex inside, ascending id, traversal order
        assert q.objects is not None and np.array_equal(q.objects, hit), f"{what}: objects {q.objects}, expected {hit}"
        rows = np.concatenate([m.rows_of(o) for o in hit]) if len(hit) else np.zeros(0, np.int64)
        want = table(m.positions[rows], {k: v[rows] for k, v in m.attrs.items()}, names)
        assert np.array_equal(table(q.positions, q.attributes, names), want), f"{what}: rows or order differ"
        c = ds.query((lo, hi), clip=True)
        diff = same_rows(table(c.positions, c.attributes, names),
                         table(m.positions[ins], {k: v[ins] for k, v in m.attrs.items()}, names))
        assert diff is None, f"{what} clip=True: {diff}"
        return
    # graphs, skeletons, meshes: the vertices inside and the links among them
    want = table(m.positions[ins], {k: v[ins] for k, v in m.attrs.items()}, names, m.owners[ins])
    have = table(q.positions, q.attributes, names, q.object_ids)
    diff = same_rows(have, want)
    assert diff is None, f"{what}: {diff}"
    full_rows = table(m.positions, m.attrs, names, m.owners)
    want_links = []
    for oid in m.ids:
        rows = m.rows_of(oid)
        lk = m.links[int(oid)]
        keep = ins[rows][lk].all(axis=1) if len(lk) else np.zeros(0, bool)
        want_links.append(link_rows(full_rows[rows], lk[keep], m.kind))
    links = q.faces if m.kind == "mesh" else q.edges
    width = (3 if m.kind == "mesh" else 2) * full_rows.shape[1]
    want_l = np.concatenate(want_links) if want_links else np.zeros((0, width))
    got_l = link_rows(have, links if links is not None else np.zeros((0, 2)), m.kind)
    diff = same_rows(got_l.reshape(-1, width), want_l.reshape(-1, width))
    assert diff is None, f"{what}: links among the vertices inside: {diff}"


def _concat(sels: list, names: list[str], like):
    """The selections one after the other; none holding a row: ``like`` (a read of the same level) emptied, so
    an attribute of several channels keeps its width."""
    from zvf import Selection

    sels = [s for s in sels if len(s)]
    if not sels:
        return Selection(like.positions[:0], {k: like.attributes[k][:0] for k in names},
                         None if like.object_ids is None else like.object_ids[:0])
    ids = [s.object_ids for s in sels]
    return Selection(np.concatenate([s.positions for s in sels]),
                     {k: np.concatenate([s.attributes[k] for s in sels]) for k in names},
                     None if any(i is None for i in ids) else np.concatenate(ids))


# ------------------------------------------------------------------------------------------ coarse levels
def check_coarse_level(ds, m: Model, level: int, grid, factors, rng: np.random.Generator) -> None:
    """Every read path of a coarse level gives the same vertices, filed where they lie, as many as the
    level's factors keep."""
    chunk, binv = grid
    coarsen, sparsity, _ = factors
    names = sorted(a.name for a in m.spec.vattrs)
    points = m.kind == "point_cloud"
    at = f"level {level}"
    full = ds.read_all(level=level)
    rows = table(full.positions, full.attributes, names)
    # points: every vertex once; objects: metavertices are shared between objects, compare as sets
    key = (lambda r: r) if m.kind in ("point_cloud", "point_ids") else unique_rows
    per_chunk = list(ds.iter_chunks(level=level, batch_chunks=1))
    chunked = _concat(per_chunk, names, full)
    for what, sel in (("select(level).read()", ds.select(level=level).read()), ("iter_chunks", chunked)):
        diff = same_rows(key(table(sel.positions, sel.attributes, names)), key(rows))
        assert diff is None, f"{at}: {what} vs read_all: {diff}"
    seen: set = set()
    for k, sel in enumerate(per_chunk if "layout" not in SKIP else ()):
        cells = {tuple(c) for c in np.floor(np.asarray(sel.positions, np.float64) / chunk).astype(np.int64).tolist()}
        assert len(cells) <= 1, f"{at}: iter_chunks batch {k} (one chunk) holds vertices of chunks {sorted(cells)}" \
                                f" of the level's grid {chunk.tolist()}"
        assert not (cells & seen), f"{at}: chunk {cells} listed twice"
        seen |= cells
    for lo, hi in _coarse_boxes(rng, full.positions, chunk, binv) if "coarse_boxes" not in SKIP else ():
        what = f"{at} query(({lo.tolist()}, {hi.tolist()}))"
        ins = inside(full.positions, lo, hi)
        clip = {} if m.kind in ("point_cloud", "point_ids") else {"clip": True}
        q = ds.query((lo, hi), level=level, **clip)
        diff = same_rows(key(table(q.positions, q.attributes, names)), key(rows[ins]))
        assert diff is None, f"{what}: vs the vertices of read_all(level) inside: {diff}"
        for c in ({}, clip) if clip else ({},):
            sel = ds.select(bbox=(lo, hi), level=level, **c)
            n, got = sel.count(), len(sel.read())
            assert n == got, f"{what} {c}: count() {n}, read() {got}"
    if points and "coarse_counts" not in SKIP:
        below = ds.read_all(level=level - 1).positions
        want = thinned_count(below, binv, coarsen, sparsity)
        assert len(full) == want, f"{at}: {len(full)} vertices; its factors ({coarsen}, {sparsity}) on bins " \
                                  f"{binv.tolist()} keep {want} of level {level - 1}'s {len(below)}"
    if points or "coarse_bins" in SKIP:
        return
    ids = ds.object_ids(level=level)
    union = []
    for oid in ids:
        coarse = ds.read_object(int(oid), level=level)
        if not len(coarse):
            continue
        union.append(coarse.positions)
        fine = ds.read_object(int(oid), level=level - 1)
        assert len(fine), f"{at}: object {oid} has vertices here but none at level {level - 1}"
        got, want = bins_of(coarse.positions, binv), bins_of(fine.positions, binv)
        assert got == want, f"{at}: object {oid} crosses bins {sorted(got)} of {binv.tolist()}, its level " \
                            f"{level - 1} vertices cross {sorted(want)}"
    allpos = np.concatenate(union) if union else np.zeros((0, NDIM))
    diff = same_rows(unique_rows(allpos), unique_rows(full.positions))
    assert diff is None, f"{at}: the objects' vertices vs read_all(level): {diff}"


def _coarse_boxes(rng, positions, chunk, binv) -> list[tuple[np.ndarray, np.ndarray]]:
    if not len(positions):
        return []
    p = np.asarray(positions, np.float64)
    lo0, hi0 = p.min(0) - 1, p.max(0) + 1
    out = []
    for unit in (chunk / 2, chunk / 2, binv / 2, binv / 2, None):
        a, b = rng.uniform(lo0, hi0), rng.uniform(lo0, hi0)
        if unit is not None:
            a, b = np.floor(a / unit) * unit, np.floor(b / unit) * unit
        out.append((np.minimum(a, b), np.maximum(a, b)))
    return out


# ------------------------------------------------------------------------------------------ runners
CI_PLAN = {"local": ("point_cloud", "polyline", "graph", "mesh"),
           "memory": ("point_ids", "streamline", "line", "skeleton"),
           "s3": ("point_cloud", "streamline", "mesh")}
"""The geometries each backend runs in CI (every geometry on one of local and memory)."""


def _budget(backend: str) -> tuple[int, int]:
    """(rule sequences per geometry, steps per sequence) in CI (``ZVF_CHAINS_BUDGET=2,8`` overrides)."""
    if os.environ.get("ZVF_CHAINS_BUDGET"):
        examples, steps = os.environ["ZVF_CHAINS_BUDGET"].split(",")
        return int(examples), int(steps)
    return (1, 6) if backend == "s3" else (2, 8)


def _settings(examples: int, steps: int, *, ci: bool) -> settings:
    shrink = os.environ.get("ZVF_CHAINS_SHRINK", "1") != "0"
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None, derandomize=ci, database=None,
                    phases=(Phase.explicit, Phase.generate) + ((Phase.shrink,) if shrink else ()),
                    suppress_health_check=list(HealthCheck), report_multiple_bugs=False)


class _NoLeaseWaits:
    """``anyio`` for zvf.write.publish with ``sleep`` cut to nothing.

    A change that needs a third chunk-key family reclaims the oldest kept version and first waits out
    its readers' lease (20 s).  No reader holds a version across a step here (every check opens the
    store afresh), and those waits would make most appends cost 20-40 s (stateful_findings.md F8)."""

    def __getattr__(self, name: str):
        return getattr(anyio, name)

    @staticmethod
    async def sleep(seconds: float) -> None:
        await anyio.sleep(0)


def _run(make_backend, label: str, capsys, monkeypatch) -> None:
    """CI: each of the backend's geometries for a fixed (derandomized) budget.  ``ZVF_CHAINS_MINUTES``:
    fresh random runs of any geometry until the time is up, every distinct failure reported at the end."""
    from zvf.write import publish

    monkeypatch.setattr(publish, "anyio", _NoLeaseWaits())
    before = RUNS.copy()
    start = time.monotonic()

    def machine():
        Chains.backend = make_backend()
        return Chains()

    try:
        if not MINUTES:
            examples, steps = _budget(label)
            for kind in CI_PLAN[label]:
                Chains.kind = kind
                run_state_machine_as_test(machine, settings=_settings(examples, steps, ci=True))
            return
        Chains.kind = None
        failures: dict[str, str] = {}
        deadline = start + MINUTES * 60
        while time.monotonic() < deadline:
            lines: list[str] = []
            try:
                with with_reporter(lines.append):
                    run_state_machine_as_test(machine, settings=_settings(10, 25, ci=False))
            except Exception as e:  # collected, reported together at the end
                first = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                steps = getattr(e, "__notes__", [])  # hypothesis reports the rule sequence as notes
                where = "".join(traceback.format_tb(e.__traceback__)[-10:])
                failures.setdefault(re.sub(r"[-\d.e]+", "#", first), "\n".join([first, *lines, *steps, where]))
        if failures:
            pytest.fail(f"{len(failures)} distinct failures:\n\n" + "\n\n".join(failures.values()))
    finally:
        Chains.kind = None
        done = RUNS - before
        with capsys.disabled():
            print(f"\n[chains {label}] {done['sequences']} rule sequences, {done['steps']} steps in "
                  f"{time.monotonic() - start:.0f} s: " + ", ".join(
                      f"{k} {v}" for k, v in sorted(done.items()) if k not in ("sequences", "steps")))


@pytest.mark.parametrize("where", ["local", "memory"])
def test_chains(where, tmp_path, capsys, monkeypatch):
    backends: list[Backend] = []

    def make():
        b = Backend.local(tmp_path / f"b{len(backends)}") if where == "local" else Backend.memory()
        backends.append(b)
        return b

    try:
        _run(make, where, capsys, monkeypatch)
    finally:
        for b in backends:
            b.close()


@pytest.mark.skipif(not os.environ.get("ZVF_CHAINS_S3"), reason="set ZVF_CHAINS_S3=1 for the S3 chains")
def test_chains_s3(s3_endpoint, capsys, monkeypatch):
    from tests.servers import create_bucket

    _run(lambda: Backend.s3(create_bucket(s3_endpoint), s3_endpoint.storage_options()), "s3", capsys, monkeypatch)
