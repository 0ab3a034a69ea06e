"""Cold start of a fresh process: ``import zvf; zvf.open(url).query(small box)`` (issue 26).

A serverless function pays for every import on its first call.  This writes N uniform points
(default 200 k, 1 km cube, 250 m chunks, zstd) to a temporary local store, then starts fresh
Python processes one after another, in two modes:

* ``bytecode``: every module's ``.pyc`` ready (a wheel install: pip compiles them), kept under a
  temporary ``PYTHONPYCACHEPREFIX`` filled by a warm-up run;
* ``source``: ``PYTHONDONTWRITEBYTECODE=1`` and no ``.pyc`` for zvf (an editable install run so, or a
  bundle shipped without ``__pycache__``): zvf's modules are compiled on every start, the others
  keep their installed ``.pyc``.

For each it prints the median of ``--runs`` of:

* the whole process (interpreter start, ``import zvf``, ``zvf.open``, one 50 m box query);
* the same work timed inside the process (from before ``import zvf`` to the answer);
* ``import zvf`` alone, and a bare interpreter (``python -c pass``) to subtract;
* the top 10 imports of the first query by self time (``-X importtime``, median over the runs),
  their cumulative time beside, and each top-level package's total self time.

Every answer (count and an order-free checksum of the positions) is checked against numpy; the
exit status is 1 if any is wrong.  No network.  ~1 min on 2 quiet cores.

    .venv/bin/python benchmarks/cold_start.py [--runs 7] [--points 200000]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
sys.path.insert(0, str(SRC))

import numpy as np  # noqa: E402 - after the sys.path setup

import zvf  # noqa: E402 - after the sys.path setup

BOX = ([100.0, 100.0, 100.0], [150.0, 150.0, 150.0])
CHILD = """
import time
t0 = time.perf_counter()
import zvf
ds = zvf.open({url!r})
sel = ds.query(({lo!r}, {hi!r}))
t = time.perf_counter() - t0
import json, numpy as np
p = sel.positions.astype("float64")
print(json.dumps({{"seconds": t, "count": len(sel), "checksum": float(p.sum()), "square": float((p * p).sum())}}))
"""
IMPORT_ONLY = "import time; t0 = time.perf_counter(); import zvf; print(time.perf_counter() - t0)"


def load_avg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[0]


def child_env(mode: str, cache: str) -> dict[str, str]:
    """The environment of a fresh process: zvf from this checkout first on the path, bytecode per ``mode``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    if mode == "bytecode":
        env["PYTHONPYCACHEPREFIX"] = cache
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def fresh(code: str, env: dict[str, str], *flags: str) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall and CPU seconds of a new interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, done


def import_costs(stderr: str) -> dict[str, tuple[int, int]]:
    """module -> (self, cumulative) microseconds from ``-X importtime`` output."""
    costs = {}
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            own, cumulative, name = line[len("import time:"):].split("|")
            costs[name.strip()] = (int(own), int(cumulative))
    return costs


def measure(args: argparse.Namespace) -> int:
    rng = np.random.default_rng(26)
    points = rng.uniform(0, 1000, (args.points, 3)).astype(np.float32)
    inside = np.all((points >= BOX[0]) & (points <= BOX[1]), axis=1)
    expected = points[inside].astype(np.float64)
    wrong = 0
    print(f"{args.points:,} points, box of {int(expected.shape[0]):,}; median of {args.runs} fresh processes "
          f"(wall and CPU seconds); load average beside each mode (the machine is shared)")
    if (SRC / "zvf" / "__pycache__").exists():
        print(f"  note: {SRC / 'zvf' / '__pycache__'} exists: the source mode reads zvf's .pyc from it")
    with tempfile.TemporaryDirectory(prefix="zvf-cold-start-") as tmp:
        url = str(Path(tmp) / "cold.zarrvectors")
        zvf.write_points(url, points, chunk_shape=(250.0, 250.0, 250.0), compression="zstd")
        query = CHILD.format(url=url, lo=BOX[0], hi=BOX[1])
        for mode in ("bytecode", "source"):
            env = child_env(mode, str(Path(tmp) / "pycache"))
            fresh(query, env)  # warm-up: fills the bytecode cache (and the page cache) before timing
            rows: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
            inner, imports, loads = [], [], [load_avg()]
            profiles: list[dict[str, tuple[int, int]]] = []
            for _ in range(args.runs):  # interleaved, so load changes hit every row alike
                wall, cpu, done = fresh(query, env)
                answer = json.loads(done.stdout)
                ok = (answer["count"] == len(expected)
                      and np.isclose(answer["checksum"], expected.sum(), rtol=1e-9)
                      and np.isclose(answer["square"], (expected * expected).sum(), rtol=1e-9))
                wrong += not ok
                rows["query"].append((wall, cpu))
                inner.append(answer["seconds"])
                wall, cpu, done = fresh(IMPORT_ONLY, env)
                rows["import"].append((wall, cpu))
                imports.append(float(done.stdout))
                wall, cpu, _ = fresh("pass", env)
                rows["bare"].append((wall, cpu))
                profiles.append(import_costs(fresh(query, env, "-X", "importtime")[2].stderr))
            loads.append(load_avg())
            report(mode, rows, inner, imports, loads, profiles)
    print(f"answers {'all right' if not wrong else f'{wrong} WRONG'} (count and checksum vs numpy)")
    return 1 if wrong else 0


def report(mode: str, rows: dict[str, list[tuple[float, float]]], inner: list[float], imports: list[float],
           loads: list[str], profiles: list[dict[str, tuple[int, int]]]) -> None:
    med = statistics.median

    def cell(name: str) -> str:
        return f"wall {med(w for w, _ in rows[name]):6.3f} s  cpu {med(c for _, c in rows[name]):6.3f} s"

    print(f"{mode}: load {' -> '.join(loads)}")
    print(f"  import + open + query   process {cell('query')}   in-process wall {med(inner):6.3f} s")
    print(f"  import zvf              process {cell('import')}   in-process wall {med(imports):6.3f} s")
    print(f"  bare interpreter        process {cell('bare')}")
    modules = set().union(*profiles)
    own = {m: med(p.get(m, (0, 0))[0] for p in profiles) for m in modules}
    cumulative = {m: med(p.get(m, (0, 0))[1] for p in profiles) for m in modules}
    print("  top 10 imports of the first query (-X importtime, median ms: self, cumulative):")
    for name in sorted(own, key=own.__getitem__, reverse=True)[:10]:
        print(f"    {own[name] / 1e3:7.1f} {cumulative[name] / 1e3:8.1f}  {name}")
    packages: collections.Counter[str] = collections.Counter()
    for name, us in own.items():
        packages[name.split(".")[0]] += us
    print(f"  {len(modules)} modules imported ({sum(m.startswith('zvf') for m in modules)} of zvf); "
          "self time by package (ms): " + ", ".join(f"{p} {us / 1e3:.0f}" for p, us in packages.most_common(6)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="fresh processes per row (median)")
    ap.add_argument("--points", type=int, default=200_000)
    return measure(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
