"""Changing a store after its first write: pyramids, appends, rechunking, automatic layout.

Modules load on first use (``zvf.lifecycle.pyramid``, ...): ``import zvf`` never pays for them.
"""
