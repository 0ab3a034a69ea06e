"""``zvf neuroglancer export TARGET OUT`` and ``zvf neuroglancer serve TARGET``: a store in Neuroglancer.

Both print the sources, a ready viewer state and a viewer URL holding it
(``--json``: as one line of JSON).  ``export --serve`` hosts the written
directory on 127.0.0.1 until interrupted, as ``serve`` does the store.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from . import _args
from .progress import ProgressBar

if TYPE_CHECKING:
    from aiohttp import web

    from ..neuroglancer.http import Access


def _aiohttp() -> None:
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("serving needs aiohttp: pip install 'zvf[neuroglancer]'") from None


def _access(args: argparse.Namespace) -> Access:
    from urllib.parse import urlsplit

    from ..neuroglancer.http import Access

    viewer = urlsplit(args.viewer)
    return Access.create(args.host, [f"{viewer.scheme}://{viewer.netloc}", *args.allow_origin], args.allow_host)


def _print(doc: dict[str, Any], args: argparse.Namespace, head: str) -> None:
    if args.json:
        print(json.dumps(doc), flush=True)
        return
    print(head)
    for source in doc.get("sources", {}).values():
        print(f"  {source}")
    if "url" in doc:
        print(f"open in Neuroglancer:\n  {doc['url']}", flush=True)


def _log_requests(args: argparse.Namespace) -> bool:
    """``--log-requests``: each request's line and status on stderr."""
    if args.log_requests:
        import logging
        import sys

        logger = logging.getLogger("zvf.neuroglancer.requests")
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    return bool(args.log_requests)


async def _forever(runner: web.AppRunner) -> None:
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def cmd_export(args: argparse.Namespace) -> int:
    import zvf

    from ..neuroglancer.export import export
    from ..neuroglancer.state import ready

    if args.serve:
        _aiohttp()
    access = _access(args) if args.serve else None
    bar = ProgressBar("neuroglancer export", unit="chunks or objects", quiet=args.quiet or args.json)

    async def run() -> None:
        ds = await zvf.aio.open(args.target, storage_options=_args.options(args.option))
        try:
            with bar:
                summary = await export(ds, args.out, level=args.level, unit=args.unit, limit=args.limit,
                                       offset=args.offset, label=args.label, progress=bar.update)
        finally:
            await ds.close()
        runner, base = None, args.url_base
        if access is not None:  # --serve
            from ..neuroglancer.http import directory_app, start

            runner, base = await start(directory_app(summary["out"], access), args.host, args.port,
                                       log_requests=_log_requests(args))
        if base is not None:
            summary.update(ready(geometry=summary["geometry_type"], base=base, layers=summary["layers"],
                                 axes=summary["axes"], unit=args.unit, bounds=summary["bounds"],
                                 offset=summary["offset"], segments=summary["segments"], viewer=args.viewer))
        head = (f"wrote {summary['annotations']:,} annotations, {summary['skeletons']:,} skeletons, "
                f"{summary['meshes']:,} meshes -> {summary['out']}")
        if base is None:
            head += "\n  (host it over http(s) and pass --url-base URL for a viewer link, or add --serve)"
        elif runner is not None:
            head += f"\nserving it on {base} (Ctrl-C stops)"
        _print(summary, args, head)
        if runner is not None:
            await _forever(runner)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    _aiohttp()
    import zvf

    from ..config import tuning
    from ..errors import InvalidArgumentError
    from ..neuroglancer.export import axis_names
    from ..neuroglancer.http import start
    from ..neuroglancer.serve import LAYERS, VIEW, make_app
    from ..neuroglancer.state import ready

    access = _access(args)

    async def run() -> None:
        ds = await zvf.aio.open(args.target, storage_options=_args.options(args.option))
        try:
            geometry = ds.geometry_type
            if geometry is None:
                raise InvalidArgumentError(f"{args.target}: the store declares no geometry type; nothing to show")
            app = make_app(ds, level=args.level, unit=args.unit, limit=args.limit, offset=args.offset,
                           label=args.label, access=access)
            runner, base = await start(app, args.host, args.port, log_requests=_log_requests(args))
            view = app[VIEW]
            lo, hi = ds.bounds
            shown = tuning().neuroglancer_max_segments
            segments = view.oids[:shown].tolist() if ds.geometry_type in ("skeleton", "mesh") else []
            layers: list[str] = app[LAYERS]
            doc = ready(geometry=geometry, base=base, layers=layers, axes=axis_names(ds),
                        unit=args.unit, bounds=[lo.tolist(), hi.tolist()], offset=view.offset.tolist(),
                        segments=segments, viewer=args.viewer)
            _print(doc, args, f"serving {args.target} on {base} (Ctrl-C stops)")
            await _forever(runner)
        finally:
            await ds.close()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


def register(sub: _args.Subcommands, target: _args.AddTarget) -> None:
    from ..neuroglancer.state import DEFAULT_VIEWER

    p = sub.add_parser("neuroglancer", help="view a store in Neuroglancer: export precomputed files, or serve them")
    ng = p.add_subparsers(dest="ng_command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        target(q)
        q.add_argument("--level", type=int, default=0)
        q.add_argument("--unit", default="nm", help="the store's coordinate unit: nm (default), um, mm, m, ...")
        q.add_argument("--limit", type=int, default=5000, help="annotations per spatial cell above the finest level")
        q.add_argument("--offset", default="auto",
                       help="subtracted from positions before they become float32: auto (default: the chunk-aligned "
                            "lower corner when coordinates are far from the origin), none, or x,y,z")
        q.add_argument("--viewer", default=DEFAULT_VIEWER, help=f"Neuroglancer to link to (default {DEFAULT_VIEWER})")
        q.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
        q.add_argument("--port", type=int, default=8000, help="0 picks a free port")
        q.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                       help="another origin whose pages may read the data (loopback ones and --viewer's may)")
        q.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                       help="another host name requests may address the server by (e.g. behind a proxy)")
        q.add_argument("--log-requests", action="store_true", help="print each request and its status on stderr")
        q.add_argument("--label", help="object attribute shown beside each object id (skeleton and mesh stores)")
        q.add_argument("--json", action="store_true", help="print sources, viewer state and URL as one line of JSON")

    q = ng.add_parser("export", help="write annotations (sharded, multi-level spatial index), skeletons and meshes")
    common(q)
    q.add_argument("out", help="new local directory to write")
    q.add_argument("--url-base", help="http(s) URL where OUT will be hosted (for the sources and the viewer link)")
    q.add_argument("--serve", action="store_true", help="host OUT on --host:--port after writing it")
    q.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    q.set_defaults(func=cmd_export)

    q = ng.add_parser("serve", help="serve the precomputed views of a store over HTTP, computed per request")
    common(q)
    q.set_defaults(func=cmd_serve)
