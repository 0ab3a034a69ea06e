"""What a query asks for, as a value: validated narrowings that intersect.

``Spec`` holds no store and does no I/O, so ``query.select(...)`` is a pure
intersection (boxes intersect, id sets intersect, ``where`` terms AND
together, the smaller limit wins) and a query can be built in one place and
run in another.

``where`` keys name a vertex or object attribute; a multi-channel attribute
needs its channel, by index or by channel name: ``"rgb[1]"``, ``"rgb[g]"``.
Values: a scalar (equality), a 2-tuple ``(lo, hi)`` (closed range; ``None``
leaves a side open) or a list/set/array of values (membership).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeAlias, TypedDict

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ...errors import InvalidArgumentError
from ...format.grid import check_bbox
from ..rowops import unique_ints

BBox: TypeAlias = tuple[ArrayLike, ArrayLike]
"""A closed box ``(lo, hi)``: two sequences of ``ndim`` coordinates."""
Ids: TypeAlias = int | np.integer[Any] | Iterable[int | np.integer[Any]]
"""Object or group ids: one, or any collection of them (a numpy array too)."""
Number: TypeAlias = float | np.number[Any]
WhereValue: TypeAlias = Number | tuple[Number | None, Number | None] | Sequence[Number] | Set[Number] | NDArray[Any]
"""A ``where`` test: equal to a value, in a closed ``(lo, hi)`` range (None: open side), or one of values."""


class SelectArgs(TypedDict, total=False):
    """The keywords of every ``select`` (a dataset's, a query's, async or blocking); each narrows.

    ``bbox`` closed box ``(lo, hi)``; ``near=(center, radius)`` closed ball; ``objects``/``groups``
    id sets; ``where={name: value | (lo, hi) | [values]}`` on vertex or object attributes
    (``"rgb[1]"`` picks a channel); ``level`` a level number, or ``"auto"`` with ``max_vertices``
    (the finest level that fits); ``attributes`` the vertex attributes to read (None: all);
    ``clip`` only the matching vertices of polylines; ``limit`` at most this many vertices
    (point clouds) or objects.
    """

    bbox: BBox | None
    near: tuple[ArrayLike, float] | None
    objects: Ids | None
    groups: Ids | None
    where: Mapping[str, WhereValue] | None
    level: int | Literal["auto"]
    attributes: str | Sequence[str] | None
    clip: bool
    limit: int | None
    max_vertices: int | None


_KEY = re.compile(r"^(?P<name>[^\[\]]+?)(?:\[(?P<channel>[^\[\]]+)\])?$")


@dataclass(frozen=True)
class Term:
    """One ``where`` clause: attribute ``name`` (channel ``channel``) tested by ``kind``."""

    name: str
    channel: int | str | None
    kind: str  # "eq" | "range" | "in"
    values: tuple[Number | None, ...]

    @property
    def label(self) -> str:
        key = self.name if self.channel is None else f"{self.name}[{self.channel}]"
        if self.kind == "range":
            lo, hi = self.values
            return f"{'-inf' if lo is None else lo} <= {key} <= {'inf' if hi is None else hi}"
        if self.kind == "eq":
            return f"{key} == {self.values[0]}"
        return f"{key} in {list(self.values)}"

    def column(self, rows: np.ndarray, channel_names: Sequence[str] | None) -> np.ndarray:
        """The tested values of attribute ``rows`` (N,) or (N, C)."""
        if not len(rows):
            return np.zeros(0, rows.dtype)
        if rows.ndim == 1 or (rows.ndim == 2 and rows.shape[1] == 1 and self.channel in (None, 0)):
            if self.channel not in (None, 0):
                raise InvalidArgumentError(f"where {self.name}[{self.channel}]: {self.name!r} has one channel")
            return rows.reshape(len(rows))
        width = int(np.prod(rows.shape[1:]))
        if self.channel is None:
            raise InvalidArgumentError(
                f"where {self.name!r}: the attribute has {width} channels; name one, e.g. '{self.name}[0]'")
        ch = self.channel
        if isinstance(ch, str):
            names = list(channel_names or [])
            if ch not in names:
                raise InvalidArgumentError(f"where {self.name}[{ch}]: no channel {ch!r} (channels: {names})")
            ch = names.index(ch)
        if not 0 <= ch < width:
            raise InvalidArgumentError(f"where {self.name}[{ch}]: channel out of range (it has {width})")
        return rows.reshape(len(rows), width)[:, ch]

    def test(self, values: np.ndarray) -> np.ndarray:
        """Rows that pass (NaN never passes)."""
        v = np.asarray(values)
        if self.kind == "eq":
            equal: np.ndarray = v == self.values[0]
            return equal
        if self.kind == "in":
            return np.isin(v, np.asarray(self.values))
        lo, hi = self.values
        keep = ~np.isnan(v) if v.dtype.kind == "f" else np.ones(v.shape, dtype=bool)
        if lo is not None:
            keep &= v >= lo
        if hi is not None:
            keep &= v <= hi
        return keep


def parse_where(where: Mapping[str, WhereValue] | None) -> tuple[Term, ...]:
    if where is None:
        return ()
    if not isinstance(where, Mapping):
        raise InvalidArgumentError(f"where must be a dict {{name: value | (lo, hi) | [values]}}, got {where!r}")
    out = []
    for key, value in where.items():
        m = _KEY.match(str(key)) if isinstance(key, str) else None
        if m is None:
            raise InvalidArgumentError(f"where key {key!r} must be 'name' or 'name[channel]'")
        ch = m.group("channel")
        if ch is not None:
            ch = int(ch) if ch.strip().lstrip("-").isdigit() else ch.strip()
        out.append(Term(m.group("name").strip(), ch, *_condition(key, value)))
    return tuple(out)


def _number(key: object, v: object) -> Number | None:
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise InvalidArgumentError(f"where {key!r}: {v!r} is not a number")
    return v.item() if isinstance(v, np.generic) else v


def _condition(key: object, value: object) -> tuple[str, tuple[Number | None, ...]]:
    if isinstance(value, tuple):
        if len(value) != 2:
            raise InvalidArgumentError(f"where {key!r}: a range is a pair (lo, hi), got {value!r}")
        lo, hi = (_number(key, v) for v in value)
        if lo is not None and hi is not None and lo > hi:
            raise InvalidArgumentError(f"where {key!r}: range lo {lo} > hi {hi}")
        return "range", (lo, hi)
    if isinstance(value, (list, set, frozenset, np.ndarray)):
        vals = tuple(_number(key, v) for v in np.asarray(list(value) if isinstance(value, (set, frozenset))
                                                          else value).reshape(-1).tolist())
        return "in", vals
    if value is None:
        raise InvalidArgumentError(f"where {key!r}: give a value, a (lo, hi) range or a list of values")
    return "eq", (_number(key, value),)


def _ids(value: Ids | None, what: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes, bool)):
        raise InvalidArgumentError(f"{what} must be integer ids, got {value!r}")
    a = np.asarray(list(value) if isinstance(value, Iterable) and not np.isscalar(value) else [value])
    if a.size and (a.dtype == bool or a.dtype.kind not in "iu"):
        raise InvalidArgumentError(f"{what} must be integer ids, got {value!r}")
    return tuple(int(x) for x in unique_ints(a.astype(np.int64))) if a.size else ()


@dataclass(frozen=True)
class Spec:
    """The narrowings of one query (immutable; ``and_`` intersects two)."""

    ndim: int
    bbox: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    near: tuple[tuple[float, ...], float] | None = None  # (center, radius)
    objects: tuple[int, ...] | None = None
    groups: tuple[int, ...] | None = None
    where: tuple[Term, ...] = ()
    level: int | str = 0
    attributes: tuple[str, ...] | None = None
    clip: bool = False
    limit: int | None = None
    max_vertices: int | None = None

    @classmethod
    def build(cls, ndim: int, *, bbox: BBox | None = None, near: tuple[ArrayLike, float] | None = None,
              objects: Ids | None = None, groups: Ids | None = None, where: Mapping[str, WhereValue] | None = None,
              level: int | Literal["auto"] = 0, attributes: str | Sequence[str] | None = None, clip: bool = False,
              limit: int | None = None, max_vertices: int | None = None) -> Spec:
        """The narrowings of ``select(**SelectArgs)``, checked (``InvalidArgumentError`` naming the keyword)."""
        box = None
        if bbox is not None:
            lo, hi = check_bbox(bbox, ndim)
            box = (tuple(lo.tolist()), tuple(hi.tolist()))
        ball = None
        if near is not None:
            try:
                center, radius = near
                c = np.asarray(center, dtype=np.float64).reshape(-1)
                r = float(radius)
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"near must be (center, radius), got {near!r}") from None
            if c.size != ndim or not np.all(np.isfinite(c)):
                raise InvalidArgumentError(f"near center must be {ndim} finite numbers, got {center!r}")
            if not np.isfinite(r) or r < 0:
                raise InvalidArgumentError(f"near radius must be a finite number >= 0, got {radius!r}")
            ball = (tuple(c.tolist()), r)
        if level != "auto" and (isinstance(level, bool) or not isinstance(level, (int, np.integer))):
            raise InvalidArgumentError(f"level must be a level number or 'auto', got {level!r}")
        if max_vertices is not None:
            if isinstance(max_vertices, bool) or not isinstance(max_vertices, (int, np.integer)) or max_vertices < 0:
                raise InvalidArgumentError(f"max_vertices must be an integer >= 0, got {max_vertices!r}")
            if level != "auto":
                raise InvalidArgumentError("max_vertices picks a level: use it with level='auto'")
        if level == "auto" and max_vertices is None:
            raise InvalidArgumentError("level='auto' needs max_vertices=N (the vertex budget)")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 0):
            raise InvalidArgumentError(f"limit must be an integer >= 0, got {limit!r}")
        if attributes is not None:
            attributes = (attributes,) if isinstance(attributes, str) else tuple(attributes)
        return cls(ndim, box, ball, _ids(objects, "objects"), _ids(groups, "groups"), parse_where(where),
                   level if level == "auto" else int(level), attributes, bool(clip),
                   None if limit is None else int(limit), None if max_vertices is None else int(max_vertices))

    def and_(self, other: Spec) -> Spec:
        """Both narrowings at once; ``other``'s level/attributes/clip win when it sets them."""
        bbox = self.bbox
        if other.bbox is not None:
            bbox = other.bbox if bbox is None else (
                tuple(np.maximum(bbox[0], other.bbox[0]).tolist()), tuple(np.minimum(bbox[1], other.bbox[1]).tolist()))
        near = self.near
        if other.near is not None:
            if near is not None and near != other.near:
                raise InvalidArgumentError("select(near=...) twice with different balls: one query holds one ball")
            near = other.near
        limits = [x for x in (self.limit, other.limit) if x is not None]
        return replace(
            self, bbox=bbox, near=near,
            objects=_meet(self.objects, other.objects), groups=_meet(self.groups, other.groups),
            where=self.where + tuple(t for t in other.where if t not in self.where),
            level=other.level if other.level != 0 or other.max_vertices is not None else self.level,
            max_vertices=other.max_vertices if other.max_vertices is not None else self.max_vertices,
            attributes=other.attributes if other.attributes is not None else self.attributes,
            clip=self.clip or other.clip, limit=min(limits) if limits else None,
        )

    # ------------------------------------------------------------- derived
    def box(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The box that bounds every match: bbox intersected with the ball's box."""
        lo: np.ndarray | None = None
        hi: np.ndarray | None = None
        if self.bbox is not None:
            lo, hi = np.asarray(self.bbox[0], np.float64), np.asarray(self.bbox[1], np.float64)
        if self.near is not None:
            c, r = np.asarray(self.near[0], np.float64), self.near[1]
            lo = c - r if lo is None else np.maximum(lo, c - r)
            hi = c + r if hi is None else np.minimum(hi, c + r)
        return None if lo is None or hi is None else (lo, hi)

    def is_empty(self) -> bool:
        b = self.box()
        return (b is not None and bool(np.any(b[0] > b[1]))) or self.objects == () or self.groups == () \
            or self.limit == 0

    def vertex_mask(self, positions: np.ndarray) -> np.ndarray:
        """Rows inside the bbox and the closed ball (float64 arithmetic)."""
        p = np.asarray(positions, dtype=np.float64)
        keep = np.ones(len(p), dtype=bool)
        if self.bbox is not None:
            keep &= np.all((p >= self.bbox[0]) & (p <= self.bbox[1]), axis=1)
        if self.near is not None:
            d = p - np.asarray(self.near[0])
            keep &= np.einsum("ij,ij->i", d, d) <= self.near[1] ** 2
        return keep

    def describe(self) -> str:
        bits = []
        if self.bbox is not None:
            bits.append(f"bbox {list(self.bbox[0])}..{list(self.bbox[1])}")
        if self.near is not None:
            bits.append(f"within {self.near[1]} of {list(self.near[0])}")
        if self.objects is not None:
            bits.append(f"{len(self.objects)} object id(s)")
        if self.groups is not None:
            bits.append(f"{len(self.groups)} group(s)")
        bits += [f"where {t.label}" for t in self.where]
        if self.clip:
            bits.append("clipped")
        if self.limit is not None:
            bits.append(f"limit {self.limit}")
        return ", ".join(bits) or "everything"


def _meet(a: tuple[int, ...] | None, b: tuple[int, ...] | None) -> tuple[int, ...] | None:
    if a is None:
        return b
    if b is None:
        return a
    return tuple(sorted(set(a) & set(b)))
