"""Every script in examples/ runs to completion (they assert their own results)."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script, tmp_path):
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr


async def test_service_caps_its_answers(tmp_path):
    """A box over the whole store is a 413 naming the limit, read only up to the rows that fit; the default cap
    is 16 MiB and smaller answers are unchanged."""
    import importlib.util

    import numpy as np
    from aiohttp.test_utils import TestClient, TestServer

    import zvf

    spec = importlib.util.spec_from_file_location("service_example", EXAMPLES[0].parent / "service.py")
    service = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(service)
    assert service.MAX_RESPONSE_BYTES == 16 << 20
    pos = np.random.default_rng(1).uniform(0, 100, (40_000, 3)).astype(np.float32)
    zvf.write_points(str(tmp_path / "s"), pos, chunk_shape=(10, 10, 10))
    limit = 200_000
    async with TestClient(TestServer(service.make_app(str(tmp_path / "s"), max_response_bytes=limit))) as client:
        ds = client.app[service.DATASET]
        r = await client.get("/bbox?lo=0,0,0&hi=100,100,100")
        assert r.status == 413 and f"limit of {limit} bytes" in await r.text()
        assert ds.stats.bytes < 40_000 * 12 / 4  # a bounded read: the rows that fit, not the whole store
        r = await client.get("/bbox?lo=10,10,10&hi=20,20,20")
        body = await r.json()
        assert r.status == 200 and body["count"] == int(np.all((pos >= 10) & (pos <= 20), axis=1).sum())
        assert len(await r.read()) <= limit
