"""Helpers shared by tests, one module per thing they provide (no fixtures here: those are in the
conftest.py files).  A test module imports helpers from here only, never from another test module,
a conftest or a test package's ``__init__``."""
