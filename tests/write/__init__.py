"""Tests of zvf's writers (points and objects, in memory, streamed, as tasks)."""
