"""The address policy's gaps, through the CLI (docs/reliability.md): the cloud metadata and
container credential addresses refused always (a Redis gate's URL too), carrier-grade NAT treated
as private, and a host name that resolves elsewhere at connect time than when the profile was
validated (DNS rebinding) refused by the address its connection reached, before a byte is sent.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from hostile import chat
from runkit import ROOT, read_jsonl, rrcli, write_jobs, write_profile


def validate(tmp_path: Path, backend: dict, **top) -> dict:
    profile = write_profile(tmp_path / "p.toml", [{"id": "b", **backend}], **top)
    return orjson.loads(rrcli("validate", profile, "--json", cwd=tmp_path).stdout)


def codes(report: dict, where: str) -> list[str]:
    return [e["code"] for e in report["errors"] if e["path"].endswith(where)]


@pytest.mark.parametrize(
    "url",
    [
        "http://100.100.100.200/v1",  # Alibaba Cloud metadata
        "http://169.254.170.2/v1",  # ECS task credentials
        "http://169.254.170.23/v1",  # EKS pod identity
        "http://[fd00:ec2::23]/v1",
        "http://[::ffff:100.100.100.200]/v1",
    ],
)
def test_every_cloud_metadata_address_is_refused_even_with_allow_private(tmp_path, url):
    """A base_url at a metadata or container credentials address is an error even with
    ``allow_private = true``; ``run`` sends nothing (exit 2)."""
    report = validate(tmp_path, {"base_url": url, "allow_private": True})
    assert ["metadata_address"] == codes(report, "base_url")
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    assert 2 == rrcli("run", jobs, "-p", tmp_path / "p.toml", cwd=tmp_path).returncode


def test_carrier_grade_nat_needs_allow_private(tmp_path):
    """100.64.0.0/10 (shared address space) is a private network: an error without
    ``allow_private``, ok with it."""
    url = "http://100.64.12.34/v1"
    refused = validate(tmp_path, {"base_url": url, "allow_private": False})
    assert ["private_address"] == codes(refused, "base_url")
    assert "carrier-grade NAT" in refused["errors"][0]["message"]
    assert [] == validate(tmp_path, {"base_url": url, "allow_private": True})["errors"]


@pytest.mark.parametrize("host", ["169.254.169.254", "100.100.100.200", "[fd00:ec2::254]"])
def test_a_redis_gate_at_a_metadata_address_is_refused(tmp_path, hostile_server, host):
    """``[gate] url`` at a metadata address is a profile error at ``gate.url``; a private Redis
    (127.0.0.1) is fine."""
    server = hostile_server(lambda _: chat())
    backend = {"base_url": server.openai_url}
    gate = {"kind": "redis", "url": f"redis://:pw@{host}:6379/0"}
    assert ["metadata_address"] == codes(validate(tmp_path, backend, gate=gate), "gate.url")
    local = {"kind": "redis", "url": "redis://127.0.0.1:6379/0"}
    assert [] == validate(tmp_path, backend, gate=local)["errors"]


#: A resolver for the rrcli process: ``rebind.test`` is a public address the first time it is
#: looked up (when the profile is validated), and 127.0.0.1 every time after (when connecting).
REBINDING = """
import socket
_real = socket.getaddrinfo
_seen = []

def getaddrinfo(host, *args, **kwargs):
    if host in ("rebind.test", b"rebind.test"):  # anyio passes bytes
        _seen.append(host)
        host = "93.184.216.34" if len(_seen) == 1 else "127.0.0.1"
    return _real(host, *args, **kwargs)

socket.getaddrinfo = getaddrinfo
"""


@pytest.mark.parametrize("allow_private", [False, True])
def test_a_name_rebound_to_a_private_address_is_refused_at_connect(
    tmp_path, hostile_server, allow_private
):
    """A host that resolved to a public address when the profile was validated and to 127.0.0.1
    when the call connects: without ``allow_private`` the connection is closed before a byte is
    written (the server sees nothing), and the job's error names the address and the rule and
    is not retried; with ``allow_private`` the same call succeeds."""
    server = hostile_server(lambda _: chat())
    port = server.url.rsplit(":", 1)[1]
    resolver = tmp_path / "resolver"
    resolver.mkdir()
    (resolver / "sitecustomize.py").write_text(REBINDING)
    backend = {
        "id": "b",
        "base_url": f"http://rebind.test:{port}/v1",
        "allow_private": allow_private,
    }
    profile = write_profile(tmp_path / "p.toml", [backend], retry={"max_retries": 3})
    jobs = write_jobs(tmp_path / "jobs.jsonl", 1)
    env = {"PYTHONPATH": os.pathsep.join([str(resolver), str(ROOT)])}
    result = rrcli("run", jobs, "-p", profile, cwd=tmp_path, env=env)
    (line,) = read_jsonl(tmp_path / "jobs.results.jsonl")
    if allow_private:
        assert (0, "ok", 1) == (result.returncode, line["status"], len(server.requests))
        return
    assert 1 == result.returncode, result.stderr
    assert [] == server.requests
    assert ("forbidden_address", 1) == (line["error"]["type"], line["attempts"])
    assert "127.0.0.1" in line["error"]["message"]
    assert "allow_private" in line["error"]["message"]
