"""``rrcli serve`` against clients whose request heads are hostile: headers sent without end
are cut at the head limit with a 431, while a large body sent with its head is no head."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx2
import pytest
from runkit import write_profile
from servekit import Served, openai_backends

CHAT = {"model": "pool", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture
def served(tmp_path, sim_server):
    sim = sim_server()
    path = write_profile(tmp_path / "pool.toml", openai_backends(sim.openai_url), name="pool")
    server = Served(path, tmp_path, "--no-auth")
    yield server
    server.stop()


def _trickle_headers(url: str, total: int) -> bytes:
    """Send a request head that never ends, a header of 1 KiB at a time up to ``total``
    bytes (or until the server closes); what the server answered before it closed."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: pool\r\n")
        sent = 0
        try:
            while sent < total:
                sock.sendall(b"x-pad-%d: %s\r\n" % (sent, b"a" * 1000))
                sent += 1000
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    return answer


def test_headers_without_end_are_answered_431_and_the_server_stays_up(served):
    """A client sending headers past 64 KiB (the head never complete) is answered 431 and its
    connection closed; the next client is served."""
    answer = _trickle_headers(served.url, 1 << 20)
    with httpx2.Client(timeout=30) as client:
        after = client.post(served.url + "/v1/chat/completions", json=CHAT)
    assert b"HTTP/1.1 431 " == answer[:13]
    assert 200 == after.status_code


def test_headers_under_the_limit_and_a_body_over_it_are_served(served):
    """Headers of 40 KiB are served, as is a body of 1 MiB sent in one piece with its head
    (the body is not counted as head)."""
    padding = {f"x-pad-{i}": "a" * 1000 for i in range(40)}
    big = {**CHAT, "messages": [{"role": "user", "content": "Hi " * 350_000}]}
    with httpx2.Client(timeout=30) as client:
        url = served.url + "/v1/chat/completions"
        padded = client.post(url, json=CHAT, headers=padding)
        large = client.post(url, json=big)
    assert (200, 200) == (padded.status_code, large.status_code)
