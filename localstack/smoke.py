"""Smoke check of an S3 endpoint for the operations zvf relies on.

Run with the repo venv (needs boto3 and obstore). The endpoint and keys come from the same
variables the test suite reads:

    ZVF_TEST_S3_ENDPOINT=http://127.0.0.1:4566 ZVF_TEST_S3_ACCESS_KEY=test \
    ZVF_TEST_S3_SECRET_KEY=test .venv/bin/python localstack/smoke.py

`--moto` starts an in-process moto server instead, to compare behaviours. Required checks
fail the run (exit 1); optional ones (If-Match on e_tag) are only reported, because servers
differ there and callers must cope with either answer.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import logging
import os
import sys
import time
import uuid
from datetime import timedelta

import boto3
import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import S3Store

MIB = 1024 * 1024

# obstore's tokio threads may still be inside asyncio's call_soon_threadsafe when the
# interpreter finalizes; on Python 3.11 that aborts the process (SIGABRT, exit 134) in a
# fraction of runs. A short GIL-releasing pause at exit lets them finish.
atexit.register(time.sleep, 0.05)


class Report:
    """Collects PASS/FAIL lines; optional checks never fail the run."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def line(self, status: str, name: str, detail: str = "") -> None:
        print(f"  {status:<11} {name}{': ' + detail if detail else ''}", flush=True)

    def check(self, name: str, ok: bool, detail: str = "", optional: bool = False) -> None:
        if ok:
            self.line("PASS", name, detail)
        elif optional:
            self.line("UNSUPPORTED", name, detail)
        else:
            self.line("FAIL", name, detail)
            self.failed.append(name)


def make_store(endpoint: str, key: str, secret: str, bucket: str) -> S3Store:
    return S3Store(
        bucket,
        endpoint=endpoint,
        access_key_id=key,
        secret_access_key=secret,
        region="us-east-1",
        virtual_hosted_style_request=False,
        client_options={"allow_http": True, "timeout": "30s", "connect_timeout": "2s"},
        retry_config={"max_retries": 2, "retry_timeout": timedelta(seconds=10)},
    )


async def run_checks(store: S3Store, s3, bucket: str, r: Report) -> None:
    data = bytes(range(256)) * 40  # 10240 bytes with a recognisable pattern

    res = await obstore.put_async(store, "small/a.bin", data)
    r.check("put", bool(res.get("e_tag")), f"e_tag={res.get('e_tag')}")

    got = await (await obstore.get_async(store, "small/a.bin")).bytes_async()
    r.check("get", bytes(got) == data, f"{len(got)} bytes")

    meta = await obstore.head_async(store, "small/a.bin")
    r.check("head", meta["size"] == len(data), f"size={meta['size']} e_tag={meta['e_tag']}")

    rng = await obstore.get_range_async(store, "small/a.bin", start=1000, end=1100)
    r.check("ranged get [1000,1100)", bytes(rng) == data[1000:1100], f"{len(rng)} bytes")

    many = await obstore.get_ranges_async(
        store, "small/a.bin", starts=[0, 5000, 10000], ends=[16, 5100, 10240], coalesce=0
    )
    want = [data[0:16], data[5000:5100], data[10000:10240]]
    r.check("get_ranges (3 ranges)", [bytes(b) for b in many] == want)

    suf = await obstore.get_async(store, "small/a.bin", options={"range": {"suffix": 100}})
    sb = bytes(await suf.bytes_async())
    r.check("suffix get (last 100)", sb == data[-100:], f"range={suf.range}")

    off = await obstore.get_async(store, "small/a.bin", options={"range": {"offset": 10200}})
    ob = bytes(await off.bytes_async())
    r.check("offset get (from 10200)", ob == data[10200:], f"range={off.range}")

    try:
        await obstore.get_async(store, "small/missing.bin")
        r.check("404 -> FileNotFoundError", False, "no error")
    except FileNotFoundError:
        r.check("404 -> FileNotFoundError", True)

    # Multipart: 12 MiB with 5 MiB parts -> 3 parts; S3 marks the ETag with "-<parts>".
    big = os.urandom(12 * MIB)
    t = time.perf_counter()
    await obstore.put_async(store, "big/mp.bin", big, chunk_size=5 * MIB, use_multipart=True)
    dt = time.perf_counter() - t
    h = s3.head_object(Bucket=bucket, Key="big/mp.bin")
    etag = h["ETag"].strip('"')
    back = bytes(await (await obstore.get_async(store, "big/mp.bin")).bytes_async())
    r.check(
        "multipart put 12 MiB (5 MiB parts)",
        back == big and etag.endswith("-3"),
        f"ETag={etag} in {dt * 1000:.0f} ms",
    )
    tail = await obstore.get_range_async(store, "big/mp.bin", start=12 * MIB - 10, end=12 * MIB)
    r.check("ranged get across multipart object", bytes(tail) == big[-10:])

    async with obstore.open_writer_async(store, "big/stream.bin", buffer_size=5 * MIB) as w:
        for i in range(0, len(big), 3 * MIB):
            await w.write(big[i : i + 3 * MIB])
    back = bytes(await (await obstore.get_async(store, "big/stream.bin")).bytes_async())
    r.check("open_writer streamed 12 MiB", back == big)

    # Conditional create (If-None-Match: *).
    await obstore.put_async(store, "cond/c.json", b"first", mode="create")
    r.check("put mode=create on new key", True)
    try:
        await obstore.put_async(store, "cond/c.json", b"second", mode="create")
        r.check("put mode=create twice -> AlreadyExistsError", False, "second put succeeded")
    except AlreadyExistsError as e:
        r.check("put mode=create twice -> AlreadyExistsError", True, type(e).__name__)
    except Exception as e:
        r.check("put mode=create twice -> AlreadyExistsError", False, repr(e)[:200])
    body = bytes(await (await obstore.get_async(store, "cond/c.json")).bytes_async())
    r.check("create did not overwrite", body == b"first", repr(body))

    # Compare-and-swap on e_tag (If-Match).
    cur = (await obstore.head_async(store, "cond/c.json"))["e_tag"]
    try:
        res = await obstore.put_async(store, "cond/c.json", b"v2", mode={"e_tag": cur})
        ok = bytes(await (await obstore.get_async(store, "cond/c.json")).bytes_async()) == b"v2"
        r.check("put mode={e_tag: current} succeeds", ok, f"new e_tag={res.get('e_tag')}",
                optional=True)
    except Exception as e:
        r.check("put mode={e_tag: current} succeeds", False, repr(e)[:200], optional=True)
    try:
        await obstore.put_async(store, "cond/c.json", b"v3", mode={"e_tag": cur})
        body = bytes(await (await obstore.get_async(store, "cond/c.json")).bytes_async())
        r.check("put mode={e_tag: stale} -> PreconditionError", False,
                f"stale put succeeded (body now {body!r})", optional=True)
    except PreconditionError as e:
        r.check("put mode={e_tag: stale} -> PreconditionError", True, type(e).__name__,
                optional=True)
    except Exception as e:
        r.check("put mode={e_tag: stale} -> PreconditionError", False, repr(e)[:200],
                optional=True)

    # Listing with a delimiter, then bulk delete.
    lst = await obstore.list_with_delimiter_async(store)
    prefixes = sorted(lst["common_prefixes"])
    r.check("list_with_delimiter", prefixes == ["big", "cond", "small"], f"prefixes={prefixes}")

    paths = ["small/a.bin", "big/mp.bin", "big/stream.bin", "cond/c.json"]
    await obstore.delete_async(store, paths)
    left = [m["path"] async for batch in obstore.list(store) for m in batch]
    r.check("bulk delete", left == [], f"left={left}")

    # Rough request rate, for comparison between servers only.
    await obstore.put_async(store, "rate/x.bin", data)
    n = 300
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with sem:
            await obstore.get_range_async(store, "rate/x.bin", start=i % 100, end=i % 100 + 64)

    t = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    dt = time.perf_counter() - t
    r.line("INFO", "small ranged GETs", f"{n} in {dt:.2f} s = {n / dt:.0f}/s (16 in flight)")
    await obstore.delete_async(store, "rate/x.bin")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moto", action="store_true", help="start an in-process moto server")
    args = ap.parse_args()

    server = None
    if args.moto:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint, key, secret = f"http://{host}:{port}", "test", "test"
    else:
        endpoint = os.environ.get("ZVF_TEST_S3_ENDPOINT")
        if not endpoint:
            print("smoke.py: set ZVF_TEST_S3_ENDPOINT (or pass --moto)", file=sys.stderr)
            return 2
        key = os.environ.get("ZVF_TEST_S3_ACCESS_KEY", "test")
        secret = os.environ.get("ZVF_TEST_S3_SECRET_KEY", "test")

    bucket = f"zvf-smoke-{uuid.uuid4().hex[:12]}"
    print(f"S3 smoke check against {endpoint} (bucket {bucket})", flush=True)
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
        region_name="us-east-1",
    )
    r = Report()
    t0 = time.perf_counter()
    try:
        s3.create_bucket(Bucket=bucket)
        r.check("create bucket (boto3)", True)
        asyncio.run(run_checks(store=make_store(endpoint, key, secret, bucket), s3=s3,
                               bucket=bucket, r=r))
    except Exception as e:
        r.check("smoke run", False, repr(e)[:300])
    finally:
        try:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if objs:
                    s3.delete_objects(Bucket=bucket, Delete={"Objects": objs})
            s3.delete_bucket(Bucket=bucket)
        except Exception as e:
            print(f"  (cleanup of {bucket} failed: {e!r})")
        if server is not None:
            server.stop()
    dt = time.perf_counter() - t0
    if r.failed:
        print(f"smoke: FAILED {len(r.failed)} check(s) in {dt:.1f} s: {', '.join(r.failed)}")
        return 1
    print(f"smoke: all required checks passed in {dt:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
