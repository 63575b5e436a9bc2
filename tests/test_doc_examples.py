"""Every example in the README and the guides runs, so none can rot: each ```sh block as a bash
script (``set -e``: every command must succeed), each page's ```python blocks as one script in
their order (a block with a top-level ``await`` runs inside ``asyncio.run``), in a folder holding
the files the examples name (``pool.toml`` and ``rrcli.toml``: two backends on a real
``rrcli sim`` on loopback; ``jobs.jsonl``, ``eval.jsonl``, ``batch.jsonl``; the results of a
sharded run), with ``rrcli`` on PATH.

A comment on the line before a block changes how it runs:

- ``<!-- docs-test: skip REASON -->``: not run (a real key, a second host...); the test is
  skipped with REASON, so the summary counts them, and their number is held below.
- ``<!-- docs-test: background PORT -->``: started in the background before the page's later
  blocks run (a server), once PORT answers; stopped when the page is done.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from conftest import RunningSim

from rrcli.sim.behaviour import config_from_options

ROOT = Path(__file__).resolve().parent.parent
PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "index.md",
    ROOT / "docs" / "getting-started.md",
    ROOT / "docs" / "faq.md",
    ROOT / "docs" / "stats.md",
    ROOT / "docs" / "redis.md",
    *sorted((ROOT / "docs" / "guides").glob("*.md")),
]
FENCE = re.compile(
    r"^(?:<!-- docs-test: (?P<mark>skip|background) (?P<arg>[^\n]*?) -->\n)?"
    r"```(?P<lang>\w*)\n(?P<code>.*?)^```",
    re.S | re.M,
)
RUN = {"sh": "sh", "bash": "sh", "python": "python"}
#: at most this many blocks may be marked skip: a new one needs a reason good enough to raise it
MAX_SKIPPED = 6
TIMEOUT = 120


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    mark: str | None
    arg: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        if m["lang"] in RUN:
            line = text.count("\n", 0, m.start("lang")) + 1
            found.append(Block(page, line, RUN[m["lang"]], m["code"], m["mark"], m["arg"] or ""))
    return found


BLOCKS = {page: blocks_of(page) for page in PAGES}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """The folder every example starts in: a profile on a real sim and the files examples name."""
    sim = RunningSim(config_from_options(latency_ms=5))
    folder = tmp_path_factory.mktemp("examples")
    bin_dir = folder / ".bin"
    bin_dir.mkdir()
    (bin_dir / "rrcli").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rrcli "$@"\n')
    (bin_dir / "rrcli").chmod(0o755)
    backend = f"""
base_url = "{sim.openai_url}"
model = "sim-model"
auth = "none"
allow_private = true
max_concurrency = 4
endpoints = ["chat", "embeddings", "responses"]
price = {{ input = 1.0, output = 2.0 }}
params = {{ max_tokens = 64 }}
"""
    profile = f'name = "pool"\n\n[[backends]]\nid = "a"{backend}\n[[backends]]\nid = "b"{backend}'
    for name in ("pool.toml", "rrcli.toml"):
        (folder / name).write_text(profile)
    jobs = [{"id": f"j{i}", "prompt": f"question {i}"} for i in range(4)]
    lines = b"".join(orjson.dumps(j) + b"\n" for j in jobs)
    (folder / "jobs.jsonl").write_bytes(lines)
    (folder / "eval.jsonl").write_bytes(lines)
    batch = (
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "sim-model", "messages": [{"role": "user", "content": "Hi"}]},
        }
        for i in range(2)
    )
    (folder / "batch.jsonl").write_bytes(b"".join(orjson.dumps(b) + b"\n" for b in batch))
    env = environ(folder)
    for i in range(2):  # the files `rrcli results` examples read
        subprocess.run(
            f"rrcli run jobs.jsonl -p pool.toml --shard {i}/2 -q --out shard{i}.jsonl".split(),
            cwd=folder,
            env=env,
            check=True,
            timeout=TIMEOUT,
        )
    shutil.copy(folder / "shard0.jsonl", folder / "batch.results.jsonl")
    yield folder
    sim.stop()


def environ(folder: Path) -> dict[str, str]:
    path = f"{folder / '.bin'}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def python_script(blocks: list[Block]) -> str:
    parts = []
    for block in blocks:
        if re.search(r"^(?:await |async with |async for )", block.code, re.M):
            body = "".join(f"    {line}\n" for line in block.code.splitlines())
            parts.append(f"async def _block():\n{body}\nasyncio.run(_block())\n")
        else:
            parts.append(block.code)
    return "import asyncio\n" + "\n".join(parts)


def run(args: list[str], folder: Path, what: str) -> None:
    done = subprocess.run(
        args, cwd=folder, env=environ(folder), capture_output=True, text=True, timeout=TIMEOUT
    )
    assert 0 == done.returncode, f"{what} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if BLOCKS[p]], ids=lambda p: p.name)
def test_every_example_of_the_page_runs(page, workspace, tmp_path):
    """The page's shell blocks succeed one by one and its Python blocks as one script, each in a
    fresh copy of the workspace; a block marked background serves the page's later blocks."""
    folder = tmp_path / "w"
    shutil.copytree(workspace, folder, symlinks=True)
    background = []
    try:
        for block in BLOCKS[page]:
            if block.mark == "background":
                port = int(block.arg)
                if port_open(port):
                    pytest.skip(f"{block.name}: port {port} is taken on this machine")
                proc = subprocess.Popen(
                    ["bash", "-c", block.code],
                    cwd=folder,
                    env=environ(folder),
                    start_new_session=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
                background.append(proc)
                deadline = time.monotonic() + 30
                while not port_open(port):
                    assert proc.poll() is None, f"{block.name} ended: {proc.stderr.read()}"
                    assert time.monotonic() < deadline, f"{block.name}: {port} never answered"
                    time.sleep(0.1)
            elif block.lang == "sh" and block.mark is None:
                run(["bash", "-c", "set -e\n" + block.code], folder, block.name)
        python = [b for b in BLOCKS[page] if b.lang == "python" and b.mark is None]
        if python:
            script = folder / "_page.py"
            script.write_text(python_script(python))
            run([sys.executable, str(script)], folder, f"the Python blocks of {page.name}")
    finally:
        for proc in background:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)


SKIPPED = [b for blocks in BLOCKS.values() for b in blocks if b.mark == "skip"]


@pytest.mark.parametrize("block", SKIPPED, ids=lambda b: b.name)
def test_a_block_marked_skip_is_counted(block):
    """Each block marked skip shows in the summary as a skipped test, with its reason."""
    pytest.skip(f"{block.name} not run: {block.arg}")


def test_few_examples_are_marked_not_to_run():
    """The blocks marked skip are counted: at most MAX_SKIPPED, each with a reason."""
    assert all(b.arg.strip() for b in SKIPPED)
    assert len(SKIPPED) <= MAX_SKIPPED, [b.name for b in SKIPPED]


def test_the_fence_reader_finds_the_examples():
    """Every page with examples has its shell and Python blocks found, with their marks."""
    found = {p.name: [(b.lang, b.mark) for b in bs] for p, bs in BLOCKS.items() if bs}
    assert ("sh", None) in found["running.md"]
    assert ("python", None) in found["pool.md"]
    assert sum(len(bs) for bs in BLOCKS.values()) >= 12
