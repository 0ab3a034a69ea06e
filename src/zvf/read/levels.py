"""The level model the reader and the validator share.

A level is its index, its arrays by path under the level and its groups'
attributes; ``zvf.read.load.Level`` adds the parsed metadata, grid and
readable cell arrays, and the validator's ``LevelInfo`` adds what it counts
while walking a store that may be broken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..errors import FormatError

A = TypeVar("A")


@dataclass
class LevelNodes(Generic[A]):
    """Arrays (by path relative to the level) and group attributes of one resolution level."""

    index: int
    arrays: dict[str, A] = field(default_factory=dict, kw_only=True)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict, kw_only=True)  # group path -> attributes

    def array(self, name: str) -> A | None:
        return self.arrays.get(name)

    def need(self, name: str) -> A:
        """The array ``name``, which the caller's read cannot do without (FormatError naming it if absent)."""
        arr = self.arrays.get(name)
        if arr is None:
            raise FormatError(f"{self.index}/{name}: missing or not an array")
        return arr

    def named(self, family: str) -> list[str]:
        """Names of the arrays in a family group such as ``vertex_attributes``."""
        prefix = family + "/"
        return sorted(n[len(prefix):] for n in self.arrays if n.startswith(prefix) and "/" not in n[len(prefix):])
