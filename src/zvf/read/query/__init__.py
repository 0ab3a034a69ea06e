"""Composable queries (``ds.select(...)``): ``spec`` what a selection asks, ``resolve`` it against the
store, ``points`` / ``objects`` / ``chunked`` read it per geometry (``run`` picks the reader), ``count`` the other
terminals, ``plan`` the requests ``explain()`` describes, ``chain`` the ``AsyncQuery`` users hold."""

from .chain import AsyncQuery
from .spec import BBox, SelectArgs

__all__ = ["AsyncQuery", "BBox", "SelectArgs"]
