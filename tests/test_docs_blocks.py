"""Every fenced code block of README.md and docs/*.md runs as written.

How a block runs -- what a reader following the page would do:

* ``python`` blocks: each in a fresh interpreter (variables never carry over, so every block can be
  pasted on its own). A block with ``await`` at top level runs as in a notebook or
  ``python -m asyncio``. Tracebacks name the page and its line.
* ``bash`` / ``sh`` blocks: ``bash -e -o pipefail`` with the venv's ``zvf`` first on PATH;
  ``console`` blocks: the lines after a ``$ `` prompt, the others are output.
* Python's warnings are shown (``PYTHONWARNINGS=default``, so an unclosed dataset's ResourceWarning
  too). A block passes when it exits 0 without printing a traceback or a warning of zvf's or its own.
* A page's blocks run in order in one fresh working directory, so a later block may use the files and
  stores an earlier one made (a test of one block first runs the blocks above it).
* ``s3://bucket/...`` is the in-process S3 server (tests/conftest.py ``s3_endpoint``): the blocks
  get it the way README documents, from ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` and
  ``AWS_SECRET_ACCESS_KEY``; the bucket ``bucket`` is created empty for each page.
* A block that cannot run as written (a template of placeholders, a real cloud account, a server you
  start yourself) carries ``<!-- not-run: why -->`` on the line before its fence; ``text`` blocks
  are diagrams, not code. A fence without a language is refused, so no block
  escapes by omission. The count of blocks run and the list of those not run end the session.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN_LANGUAGES = {"python", "bash", "sh", "console"}
NOT_CODE = "text"
BUCKET = "bucket"
BLOCK_TIMEOUT_S = 120

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)(?P<info>.*)$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(?P<why>.+?)\s*-->\s*$")
# What a reader would take for something gone wrong, though the block exited 0: a traceback, or a warning
# raised by zvf or by the block itself (third-party warnings, such as dask's "port in use", are the
# machine's business).
_ALARM = re.compile(r"^Traceback \(most recent call last\)|^(?!.*site-packages)\S+:\d+: \w*Warning: ", re.M)

# The interpreter a python block runs in: top-level await allowed, tracebacks show the page's lines.
_PYTHON_DRIVER = """
import ast, asyncio, inspect, linecache, sys
name, first_line = sys.argv[1], int(sys.argv[2])
source = "\\n" * (first_line - 1) + sys.stdin.read()
linecache.cache[name] = (len(source), None, source.splitlines(True), name)
result = eval(compile(source, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), {"__name__": "__main__"})
if inspect.iscoroutine(result):
    asyncio.run(result)
"""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the first line of code (the fence's line + 1)
    language: str
    code: str
    not_run: str | None  # the marker's reason

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of one markdown page, with the not-run marker on the line before each."""
    lines = page.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m["indent"], m["fence"], m["info"].strip()
        marker = _NOT_RUN.match(lines[i - 1]) if i else None
        end = next((j for j in range(i + 1, len(lines))
                    if lines[j].strip().startswith(fence) and not lines[j].strip()[len(fence):].strip()), None)
        if end is None:
            raise AssertionError(f"{page.relative_to(REPO)}:{i + 1}: fence never closed")
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:end]]
        blocks.append(Block(page, i + 2, info.split()[0].lower() if info else "", "\n".join(body) + "\n",
                            marker["why"] if marker else None))
        i = end + 1
    return blocks


BLOCKS = [b for page in PAGES for b in blocks_of(page)]
RUNNABLE = [b for b in BLOCKS if b.language in RUN_LANGUAGES and b.not_run is None]


def _console_commands(code: str) -> str:
    return "\n".join(ln[2:] for ln in code.splitlines() if ln.startswith("$ ")) + "\n"


@dataclass
class Outcome:
    returncode: int
    output: str
    seconds: float
    cpu_seconds: float  # of the block's processes: the cost on a loaded machine, where seconds mislead


@dataclass
class PageRun:
    """One page's working directory and bucket; runs its blocks in order, each at most once."""

    page: Path
    workdir: Path
    env: dict[str, str]
    outcomes: dict[int, Outcome] = field(default_factory=dict)

    def run_through(self, block: Block) -> Outcome:
        for earlier in RUNNABLE:
            if earlier.page == self.page and earlier.line <= block.line and earlier.line not in self.outcomes:
                self.outcomes[earlier.line] = self._run(earlier)
        return self.outcomes[block.line]

    def failed_before(self, block: Block) -> list[str]:
        return [f"{self.page.relative_to(REPO)}:{line}" for line, o in self.outcomes.items()
                if line < block.line and o.returncode != 0]

    def _run(self, block: Block) -> Outcome:
        if block.language == "python":
            argv, stdin = [sys.executable, "-c", _PYTHON_DRIVER, str(block.page.relative_to(REPO)), str(block.line)], \
                block.code
        else:
            code = _console_commands(block.code) if block.language == "console" else block.code
            argv, stdin = ["bash", "-e", "-o", "pipefail", "-c", code], ""
        start, cpu = time.monotonic(), _children_cpu()
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, cwd=self.workdir, env=self.env, start_new_session=True)
        try:
            output, _ = proc.communicate(stdin, timeout=BLOCK_TIMEOUT_S)
            returncode = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the block's session: it and what it started (not yet reaped)
            returncode, output = -1, f"timed out after {BLOCK_TIMEOUT_S} s\n{proc.communicate()[0]}"
        return Outcome(returncode, output, time.monotonic() - start, _children_cpu() - cpu)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _reset_bucket(endpoint) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint.endpoint, aws_access_key_id=endpoint.access_key,
                      aws_secret_access_key=endpoint.secret_key, region_name=endpoint.region)
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
            for obj in page.get("Contents", []):
                s3.delete_object(Bucket=BUCKET, Key=obj["Key"])
        s3.delete_bucket(Bucket=BUCKET)
    except s3.exceptions.NoSuchBucket:
        pass
    endpoint.create_bucket(BUCKET)


def _reader_env(endpoint) -> dict[str, str]:
    """The caller's environment without its cloud settings, plus the S3 server and the venv's zvf."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "AZURE_"))}
    env.update(AWS_ENDPOINT_URL=endpoint.endpoint, AWS_ACCESS_KEY_ID=endpoint.access_key,
               AWS_SECRET_ACCESS_KEY=endpoint.secret_key, AWS_REGION=endpoint.region,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               MPLBACKEND="Agg", PYTHONUNBUFFERED="1", PYTHONWARNINGS="default")
    return env


@pytest.fixture(scope="module")
def page_runs(s3_endpoint, tmp_path_factory, request):
    runs: dict[Path, PageRun] = {}

    def run_of(page: Path) -> PageRun:
        if page not in runs:
            _reset_bucket(s3_endpoint)  # pages run one after the other: each starts with an empty bucket
            runs[page] = PageRun(page, tmp_path_factory.mktemp(page.stem), _reader_env(s3_endpoint))
        return runs[page]

    request.config.pluginmanager.register(_Summary(runs), "zvf-docs-blocks-summary")
    return run_of


@dataclass
class _Summary:
    """Prints, at the end of the session, how many blocks ran and which were not run and why."""

    runs: dict[Path, PageRun]

    def pytest_terminal_summary(self, terminalreporter) -> None:
        outcomes = [o for r in self.runs.values() for o in r.outcomes.values()]
        passed = sum(o.returncode == 0 for o in outcomes)
        write = terminalreporter.write_line
        terminalreporter.section("docs code blocks")
        write(f"{passed} of {len(RUNNABLE)} blocks run as written ({len(outcomes)} tried, "
              f"{sum(o.seconds for o in outcomes):.1f} s, {sum(o.cpu_seconds for o in outcomes):.1f} s of CPU)")
        for run in self.runs.values():
            for line, o in run.outcomes.items():
                write(f"  {'ran   ' if o.returncode == 0 else 'FAILED'} {run.page.relative_to(REPO)}:{line} "
                      f"{o.seconds:.1f} s ({o.cpu_seconds:.1f} s CPU)")
        not_run = [b for b in BLOCKS if b.not_run]
        write(f"{len(not_run)} marked not-run:")
        for b in not_run:
            write(f"  {b.name} ({b.language}): {b.not_run}")
        write(f"{sum(b.language == NOT_CODE for b in BLOCKS)} text blocks (diagrams, not code): "
              + ", ".join(b.name for b in BLOCKS if b.language == NOT_CODE))


def test_every_block_declares_what_it_is():
    """A block is code that runs, code marked not-run with a reason, or ``text``: nothing is skipped silently."""
    problems = [f"{b.name}: fence without a language (python, bash, sh, console, or text)"
                for b in BLOCKS if not b.language]
    problems += [f"{b.name}: language {b.language!r} is neither run nor 'text'"
                 for b in BLOCKS if b.language and b.language not in RUN_LANGUAGES | {NOT_CODE}]
    problems += [f"{b.name}: a not-run marker on a text block" for b in BLOCKS if b.language == NOT_CODE and b.not_run]
    assert not problems, "\n".join(problems)
    assert RUNNABLE, "no runnable block found: the parser is broken"


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.name for b in RUNNABLE])
def test_block_runs_as_written(block: Block, page_runs):
    run = page_runs(block.page)
    outcome = run.run_through(block)
    earlier = run.failed_before(block)
    alarm = _ALARM.search(outcome.output)
    assert outcome.returncode == 0 and not alarm, (
        f"{block.name} ({block.language}) exited {outcome.returncode} after {outcome.seconds:.1f} s"
        + (f", printing {alarm[0]!r}" if alarm else "")
        + (f" (earlier blocks of the page failed: {', '.join(earlier)})" if earlier else "")
        + f"\n--- block ---\n{block.code}--- output ---\n{outcome.output[-6000:]}")
