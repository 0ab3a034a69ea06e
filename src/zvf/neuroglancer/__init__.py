"""Neuroglancer precomputed views of a ZVF store: ``export`` to files, ``make_app`` to serve them.

Formats (annotations, the uint64 sharded key-value store, skeletons, legacy
meshes) are encoded by the pure modules ``annotations``, ``sharded`` and
``objects``; ``export`` and ``serve`` do the I/O.  Nothing here is imported
by ``import zvf``; ``serve`` needs aiohttp (``pip install 'zvf[neuroglancer]'``).
"""
