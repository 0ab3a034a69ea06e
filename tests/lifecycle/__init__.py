"""Tests of zvf's store lifecycle: append, pyramids, rechunk, layout, versions."""
