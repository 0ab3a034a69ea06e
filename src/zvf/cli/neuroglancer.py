"""``zvf neuroglancer export TARGET OUT`` and ``zvf neuroglancer serve TARGET``: a store in Neuroglancer."""

from __future__ import annotations

import contextlib
import json

from .progress import ProgressBar


def cmd_export(args) -> int:
    import anyio

    import zvf

    from ..neuroglancer.export import export
    from .main import _options

    bar = ProgressBar("neuroglancer export", unit="chunks or objects", quiet=args.quiet)

    async def run() -> dict:
        ds = await zvf.aio.open(args.target, storage_options=_options(args.option))
        try:
            return await export(ds, args.out, level=args.level, unit=args.unit, limit=args.limit, progress=bar.update)
        finally:
            await ds.close()

    with bar:
        summary = anyio.run(run, backend="asyncio")
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"wrote {summary['annotations']:,} annotations, {summary['skeletons']:,} skeletons, "
              f"{summary['meshes']:,} meshes -> {summary['out']}")
        for source in summary["sources"].values():
            print(f"  {source}")
    return 0


def cmd_serve(args) -> int:
    try:
        from aiohttp import web
    except ImportError:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("zvf neuroglancer serve needs aiohttp: pip install 'zvf[neuroglancer]'") from None
    import asyncio

    import zvf

    from ..neuroglancer.serve import LAYERS, make_app
    from .main import _options

    async def run() -> None:
        ds = await zvf.aio.open(args.target, storage_options=_options(args.option))
        runner = None
        try:
            app = make_app(ds, level=args.level, unit=args.unit)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, args.host, args.port)
            await site.start()
            port = runner.addresses[0][1]
            for layer in app[LAYERS]:
                print(f"precomputed://http://{args.host}:{port}/{layer}", flush=True)
            await asyncio.Event().wait()
        finally:
            if runner is not None:
                await runner.cleanup()
            await ds.close()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


def register(sub, target) -> None:
    p = sub.add_parser("neuroglancer", help="view a store in Neuroglancer: export precomputed files, or serve them")
    ng = p.add_subparsers(dest="ng_command", required=True)

    def common(q) -> None:
        target(q)
        q.add_argument("--level", type=int, default=0)
        q.add_argument("--unit", default="nm", help="the store's coordinate unit: nm (default), um, mm, m, ...")

    q = ng.add_parser("export", help="write annotations (sharded, multi-level spatial index), skeletons and meshes")
    common(q)
    q.add_argument("out", help="new local directory to write")
    q.add_argument("--limit", type=int, default=5000, help="annotations per spatial cell above the finest level")
    q.add_argument("--json", action="store_true", help="print the summary as JSON")
    q.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    q.set_defaults(func=cmd_export)

    q = ng.add_parser("serve", help="serve the precomputed views of a store over HTTP, computed per request")
    common(q)
    q.add_argument("--host", default="127.0.0.1")
    q.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    q.set_defaults(func=cmd_serve)
