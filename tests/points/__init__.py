"""Acceptance tests of zvf's point-cloud foundation (fixtures, compatibility, S3, errors, facade); fixtures are
in ``conftest.py``."""
