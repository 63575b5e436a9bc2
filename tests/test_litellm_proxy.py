"""``rrcli run`` against a server no one here wrote: LiteLLM's proxy, its models mocked.

The proxy runs on a free loopback port with a config whose models answer from ``mock_response``
and ``mock_tool_calls`` (no upstream, no network: the cost map is the bundled one). It serves
chat, chat with tool calls, embeddings and the Responses API; the CLI reaches it as an openai
backend with the proxy's master key.

LiteLLM is not a dependency: ``RRCLI_LITELLM_PYTHON`` names a Python that has
``litellm[proxy]`` (e.g. a venv's), else the ``litellm`` command on PATH is used, else the module
is skipped. Its install takes about a minute (``pip install 'litellm[proxy]'``, ~60 s here).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from runkit import read_jsonl, rrcli, write_profile

from rrcli.registry import info


def _proxy_command() -> list[str] | None:
    python = os.environ.get("RRCLI_LITELLM_PYTHON")
    if python:
        return [python, "-m", "litellm.proxy.proxy_cli"]
    found = shutil.which("litellm")
    return [found] if found else None


COMMAND = _proxy_command()
pytestmark = pytest.mark.skipif(
    COMMAND is None,
    reason="LiteLLM's proxy is not installed (pip install 'litellm[proxy]', ~60 s; or set "
    "RRCLI_LITELLM_PYTHON to a Python that has it): skipped",
)
needs_endpoints = pytest.mark.skipif(
    "embeddings" not in info("openai").endpoints, reason="endpoints not on main"
)

KEY = "sk-rrcli-test"
CHAT_TEXT = "Hello from the mock."
VECTOR = [0.25, -0.5, 0.75]
TOOL_CALLS = [
    {
        "id": "call_1",
        "type": "function",
        "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
    }
]
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
CONFIG = f"""\
model_list:
  - model_name: mock-chat
    litellm_params:
      model: openai/gpt-4o-mini
      api_key: unused
      mock_response: "{CHAT_TEXT}"
  - model_name: mock-tools
    litellm_params:
      model: openai/gpt-4o-mini
      api_key: unused
      mock_response: ""
      mock_tool_calls: {orjson.dumps(TOOL_CALLS).decode()}
  - model_name: mock-embed
    litellm_params:
      model: openai/text-embedding-3-small
      api_key: unused
      mock_response: {orjson.dumps(VECTOR).decode()}
general_settings:
  master_key: {KEY}
"""
OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_PROXY": "*", "no_proxy": "*"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_live(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"LiteLLM's proxy exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health/liveliness", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.25)
    pytest.fail(f"LiteLLM's proxy did not answer in {timeout:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """LiteLLM's proxy on a free loopback port with the mock config; its ``/v1`` URL."""
    assert COMMAND is not None
    folder = tmp_path_factory.mktemp("litellm")
    (folder / "config.yaml").write_text(CONFIG)
    port = _free_port()
    log = folder / "proxy.log"
    args = ["--config", "config.yaml", "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*COMMAND, *args],
            cwd=folder,
            env={**os.environ, **OFFLINE},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_live(url, proc, log)
        yield f"{url}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def run_one(
    tmp_path: Path, url: str, model: str, job: dict[str, Any], code: int = 0, **backend: Any
) -> dict:
    """``rrcli run`` of one job on one openai backend at the proxy (exit status ``code``); its
    result line."""
    entry = {
        "id": "litellm",
        "provider": "openai",
        "base_url": url,
        "model": model,
        "credentials": {"api_key_env": "LITELLM_KEY"},
        **backend,
    }
    profile = write_profile(tmp_path / "p.toml", [entry], retry={"max_retries": 1})
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(orjson.dumps(job) + b"\n")
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path, env={"LITELLM_KEY": KEY})
    assert code == result.returncode, result.stderr
    (line,) = read_jsonl(tmp_path / "jobs.results.jsonl")
    return line


def test_chat_gets_the_mock_text(tmp_path: Path, proxy: str) -> None:
    """A chat job through the proxy, authorised by its master key: ok, the mock's text as output
    and its usage counted."""
    line = run_one(tmp_path, proxy, "mock-chat", {"id": "c", "prompt": "Say hello."})
    assert ("ok", CHAT_TEXT) == (line["status"], line["output"])
    assert 0 < line["usage"]["output_tokens"]


def test_tools_job_gets_tool_calls_in_openai_shape(tmp_path: Path, proxy: str) -> None:
    """A tools job: the proxy's mocked tool calls come back in OpenAI's shape (id, type,
    function name and its arguments as JSON text)."""
    job = {"id": "t", "prompt": "Weather in Paris?", "params": {"tools": TOOLS}}
    line = run_one(tmp_path, proxy, "mock-tools", job)
    assert ("ok", TOOL_CALLS) == (line["status"], line["tool_calls"])


@needs_endpoints
def test_embeddings_job_gets_the_mock_vector(tmp_path: Path, proxy: str) -> None:
    """An embeddings job on a backend that serves embeddings: the proxy's mock vector. LiteLLM's
    mock answers one vector whatever the number of inputs, so the job embeds one input."""
    job = {"id": "e", "endpoint": "embeddings", "input": ["a"]}
    line = run_one(tmp_path, proxy, "mock-embed", job, endpoints=["embeddings"])
    assert ("ok", [VECTOR]) == (line["status"], line["embeddings"])


@needs_endpoints
def test_embeddings_short_of_the_inputs_are_refused(tmp_path: Path, proxy: str) -> None:
    """Two inputs and the mock's one vector: the answer is not taken as a result; the job fails
    as an invalid response after its retry."""
    job = {"id": "e", "endpoint": "embeddings", "input": ["a", "b"]}
    line = run_one(tmp_path, proxy, "mock-embed", job, code=1, endpoints=["embeddings"])
    assert ("error", "invalid_response", 2) == (
        line["status"],
        line["error"]["type"],
        line["attempts"],
    )


@needs_endpoints
def test_responses_job_gets_the_mock_text(tmp_path: Path, proxy: str) -> None:
    """A Responses API job on a backend that serves responses: the mock's text as output."""
    job = {"id": "r", "endpoint": "responses", "input": "Say hello."}
    line = run_one(tmp_path, proxy, "mock-chat", job, endpoints=["responses"])
    assert ("ok", CHAT_TEXT) == (line["status"], line["output"])
