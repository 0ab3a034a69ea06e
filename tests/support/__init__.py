"""Helpers shared by tests (no fixtures here): the numpy model of a store the chain tests check against."""
