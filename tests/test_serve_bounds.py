"""``rrcli serve`` against clients that hold its connections or send without end: heads
trickled on more connections than it has files, endless bodies after their answer, bodies over
the limit however they are framed; and the key, the model's backends and the metrics' buckets
that such requests must not get around."""

from __future__ import annotations

import os
import re
import resource
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
import pytest
from runkit import rrcli, write_profile
from servekit import Served, openai_backends

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

HI = [{"role": "user", "content": "Hi"}]
CHAT = {"model": "pool", "messages": HI}
FILES = 1024  # the serve process's open-files limit under attack
SLOW_HEADS = 1100


def _files_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILES, FILES))


def _cpu_seconds(pid: int) -> float:
    """The user and system CPU seconds the process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


class _SlowHeads:
    """``n`` connections, each sending a request's head one byte a second and opened again
    whenever the server closes it, from a thread, until ``stop()``."""

    HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: pool\r\n" + b"x-slow: a\r\n" * 1000

    def __init__(self, address: tuple[str, int], n: int) -> None:
        self._address = address
        self._stop = threading.Event()
        self.socks = [self._open() for _ in range(n)]
        self._sent = 1
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    def _open(self) -> socket.socket:
        sock = socket.create_connection(self._address, timeout=5)
        sock.sendall(self.HEAD[:1])
        return sock

    def _trickle(self) -> None:
        while not self._stop.wait(1.0):
            byte = self.HEAD[self._sent : self._sent + 1]
            self._sent += 1
            for i, sock in enumerate(self.socks):
                try:
                    sock.sendall(byte)
                except OSError:
                    sock.close()
                    try:
                        self.socks[i] = self._open()
                    except OSError:
                        pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        for sock in self.socks:
            sock.close()


def test_a_client_is_served_within_2_s_while_1100_slow_heads_are_open(tmp_path, sim_server):
    """With serve at 1,024 open files and 1,100 connections trickling their heads a byte a
    second from the same address (opened again when closed), a client of the OpenAI SDK on a
    new connection is answered within 2 s, each of three times."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < SLOW_HEADS + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * SLOW_HEADS), hard))
    sim = sim_server()
    path = write_profile(tmp_path / "pool.toml", openai_backends(sim.openai_url), name="pool")
    served = Served(path, tmp_path, "--no-auth", preexec_fn=_files_limit)
    attack = _SlowHeads(_address(served.url), SLOW_HEADS)
    took, held = [], []
    try:
        time.sleep(1.5)  # the heads have begun to trickle
        for _ in range(3):
            held.append(len(list(Path(f"/proc/{served.proc.pid}/fd").iterdir())))
            client = openai.OpenAI(
                base_url=served.url + "/v1", api_key="none", max_retries=0, timeout=10
            )
            started = time.monotonic()
            reply = client.chat.completions.create(model="pool", messages=HI)
            took.append(time.monotonic() - started)
            client.close()
            assert reply.choices[0].message.content
    finally:
        attack.stop()
        code, err = served.stop()
    assert all(n > FILES // 4 for n in held), held  # the server held slow heads open
    assert all(t < 2.0 for t in took), took
    assert 0 == code, err


_CHUNK = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"


def _endless_body_cpu(served: Served, head: bytes, chunked: bool) -> tuple[bytes, float]:
    """Send ``head`` then a body without end (64 KiB pieces) while reading the answer; once
    the answer's status line came, go on sending for 2 s (or until the server stops taking
    it). The answer's status line and the CPU seconds the serve process spent meanwhile."""
    pid = served.proc.pid
    piece = _CHUNK if chunked else b"a" * 0x10000
    answer, pending = b"", piece
    with socket.create_connection(_address(served.url), timeout=10) as sock:
        sock.sendall(head)
        sock.setblocking(False)
        answered_at, cpu_then = None, 0.0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if answered_at is None:
                try:
                    answer += sock.recv(65536)
                except BlockingIOError:
                    pass
                if b"\r\n" in answer:
                    answered_at, cpu_then = time.monotonic(), _cpu_seconds(pid)
            elif time.monotonic() - answered_at > 2.0:
                break
            try:
                pending = pending[sock.send(pending) :] or piece
            except BlockingIOError:
                time.sleep(0.001)
            except OSError:  # the server closed the connection
                break
        if answered_at is None:  # closed before the answer was read here: it is in the socket
            sock.settimeout(5)
            answer += sock.recv(65536)
            answered_at, cpu_then = time.monotonic(), _cpu_seconds(pid)
    time.sleep(0.3)
    assert answered_at is not None, "no answer"
    return answer.split(b"\r\n", 1)[0], _cpu_seconds(pid) - cpu_then


@pytest.fixture
def keyed(tmp_path, sim_server):
    sim = sim_server()
    path = write_profile(
        tmp_path / "pool.toml",
        openai_backends(sim.openai_url),
        name="pool",
        serve={"max_body_bytes": 1 << 20},
    )
    server = Served(path, tmp_path, "--key-env", "KEYS", env={"KEYS": "k1"})
    yield server
    server.stop()


_CHUNKED, _KEY = b"transfer-encoding: chunked\r\n", b"x-api-key: k1\r\n"


@pytest.mark.parametrize(
    ("path", "headers", "chunked", "status"),
    [
        ("/v1/chat/completions", _CHUNKED, True, b"401"),
        ("/v1/chat/completions", _CHUNKED + _KEY, True, b"413"),
        ("/v1/chat/completions", b"content-length: 99999999999\r\n" + _KEY, False, b"413"),
        ("/v1/nothing", _CHUNKED + _KEY, True, b"404"),
    ],
    ids=["no key", "chunked past the limit", "content-length past the limit", "no such path"],
)
def test_an_endless_body_costs_the_server_nothing_after_its_answer(
    keyed, path, headers, chunked, status
):
    """A body without end, refused before it is read (no key, an unknown path, a
    content-length over the limit) or at the limit (1 MiB, chunked): the answer comes with its
    status, and the 2 s of sending after it cost the server under 0.1 s of CPU (the
    connection closed, the rest never read)."""
    head = b"POST %s HTTP/1.1\r\nhost: pool\r\n%s\r\n" % (path.encode(), headers)
    line, cpu = _endless_body_cpu(keyed, head, chunked)
    assert status == line.split()[1]
    assert cpu < 0.1, cpu


def test_a_chunked_body_over_the_limit_is_413(keyed):
    """A body of 2 MiB sent chunked (no content-length) is answered 413 under a 1 MiB
    limit, as one with its length is; a chunked body under it is served."""

    def pieces(n: int):
        yield b'{"model": "pool", "messages": [{"role": "user", "content": "'
        for _ in range(n):
            yield b"a" * 65536
        yield b'"}]}'

    url = keyed.url + "/v1/chat/completions"
    with httpx2.Client(timeout=30, headers={"x-api-key": "k1"}) as client:
        big = client.post(url, content=pieces(32))
        small = client.post(url, content=pieces(2))
    assert (413, 200) == (big.status_code, small.status_code)
    assert "over 1048576 bytes" in big.json()["error"]["message"]


def test_count_tokens_needs_the_client_key(keyed):
    """``messages.count_tokens`` without the key, or with a wrong one, is refused 401 in
    Anthropic's shape; with it, it is counted."""
    client = anthropic.Anthropic(base_url=keyed.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.count_tokens(model="pool", messages=HI)
    bare = httpx2.post(
        keyed.url + "/v1/messages/count_tokens", json={"model": "pool", "messages": HI}
    )
    keyed_client = anthropic.Anthropic(base_url=keyed.url, api_key="k1", max_retries=0)
    counted = keyed_client.messages.count_tokens(model="pool", messages=HI)
    assert (401, "error") == (bare.status_code, bare.json()["type"])
    assert counted.input_tokens > 0


def test_a_model_id_is_served_by_its_own_backends_only(tmp_path, sim_server):
    """A pool of two backends of different models: every request naming one model is
    served by that model's backend, every request naming the pool by both in turn."""
    sim = sim_server()
    backends = [
        {**openai_backends(sim.openai_url)[0], "id": "small", "model": "m-small"},
        {**openai_backends(sim.openai_url)[0], "id": "large", "model": "m-large"},
    ]
    path = write_profile(tmp_path / "pool.toml", backends, name="pool")
    served = Served(path, tmp_path, "--no-auth")
    url = served.url + "/v1/chat/completions"
    try:
        with httpx2.Client(timeout=30) as client:
            large = [
                client.post(url, json={**CHAT, "model": "m-large"}).headers["x-rrcli-deployment"]
                for _ in range(6)
            ]
            pool = {client.post(url, json=CHAT).headers["x-rrcli-deployment"] for _ in range(4)}
    finally:
        served.stop()
    assert ["large"] * 6 == large
    assert {"small", "large"} == pool


def test_metrics_histogram_buckets_are_cumulative(tmp_path, sim_server):
    """``rrcli_serve_first_byte_seconds``'s buckets count the answers at or under each bound:
    they never fall as the bound grows, +Inf counts every answer, and answers of 0.3 s are
    counted from the 0.5 s bucket on, not in the 0.25 s one."""
    fast, slow = sim_server(), sim_server(latency_ms=300)
    backends = [
        {**openai_backends(fast.openai_url)[0], "id": "fast", "model": "m-fast"},
        {**openai_backends(slow.openai_url)[0], "id": "slow", "model": "m-slow"},
    ]
    path = write_profile(tmp_path / "pool.toml", backends, name="pool")
    served = Served(path, tmp_path, "--no-auth")
    url = served.url + "/v1/chat/completions"
    try:
        with httpx2.Client(timeout=30) as client:
            for model in ("m-fast", "m-fast", "m-fast", "m-slow", "m-slow"):
                assert 200 == client.post(url, json={**CHAT, "model": model}).status_code
            metrics = client.get(served.url + "/metrics").text
    finally:
        served.stop()
    buckets = {
        re.search(r'le="([^"]+)"', line)[1]: float(line.rsplit(" ", 1)[1])  # type: ignore[index]
        for line in metrics.splitlines()
        if line.startswith("rrcli_serve_first_byte_seconds_bucket{") and 'streamed="false"' in line
    }
    counts = list(buckets.values())
    assert counts == sorted(counts)
    assert (3.0, 5.0, 5.0) == (buckets["0.25"], buckets["0.5"], buckets["+Inf"])


def test_a_head_late_or_a_connection_idle_is_closed(tmp_path, sim_server):
    """With ``head_timeout = 1`` and ``idle_timeout = 1``: a connection that sends part of a
    head and stops is answered 408 and closed, one that sends nothing is closed, and a
    kept-alive connection idle after its answer is closed, each within a few seconds."""
    sim = sim_server()
    path = write_profile(
        tmp_path / "pool.toml",
        openai_backends(sim.openai_url),
        name="pool",
        serve={"head_timeout": 1, "idle_timeout": 1},
    )
    served = Served(path, tmp_path, "--no-auth")
    body = b'{"model": "pool", "messages": [{"role": "user", "content": "Hi"}]}'
    request = b"POST /v1/chat/completions HTTP/1.1\r\nhost: pool\r\ncontent-length: %d\r\n\r\n%s"
    try:
        with (
            socket.create_connection(_address(served.url), timeout=10) as partial,
            socket.create_connection(_address(served.url), timeout=10) as silent,
            socket.create_connection(_address(served.url), timeout=10) as kept,
        ):
            partial.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: po")
            kept.sendall(request % (len(body), body))
            late, nothing, idle = _until_closed(partial), _until_closed(silent), _until_closed(kept)
    finally:
        served.stop()
    assert b"HTTP/1.1 408 " == late[:13]
    assert b"" == nothing
    assert b"HTTP/1.1 200 " == idle[:13]


def _until_closed(sock: socket.socket) -> bytes:
    """What the server sent on ``sock`` until it closed it (a timeout fails the test)."""
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def test_connections_past_an_address_share_push_out_its_oldest_idle_one(tmp_path, sim_server):
    """With ``max_connections_per_address = 3``: three requests in flight from the address
    leave no room, and a fourth connection is answered 503 with Retry-After; three
    connections holding unfinished heads make room, the oldest closed for a new client,
    which is served."""
    sim = sim_server(latency_ms=1500)
    path = write_profile(
        tmp_path / "pool.toml",
        openai_backends(sim.openai_url),
        name="pool",
        serve={"max_connections_per_address": 3},
    )
    served = Served(path, tmp_path, "--no-auth")
    url = served.url + "/v1/chat/completions"
    statuses: list[int] = []

    def one() -> None:
        with httpx2.Client(timeout=30) as client:
            statuses.append(client.post(url, json=CHAT).status_code)

    try:
        threads = [threading.Thread(target=one) for _ in range(3)]
        for t in threads:
            t.start()
        while sim.stats()["requests"] < 3:
            time.sleep(0.01)
        with socket.create_connection(_address(served.url), timeout=10) as fourth:
            full = _until_closed(fourth)
        for t in threads:
            t.join(30)
        heads = [socket.create_connection(_address(served.url), timeout=10) for _ in range(3)]
        for sock in heads:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
        with httpx2.Client(timeout=30) as client:
            served_after = client.post(url, json=CHAT).status_code
        oldest = _until_closed(heads[0])
        for sock in heads:
            sock.close()
    finally:
        served.stop()
    assert [200] * 3 == statuses
    assert b"HTTP/1.1 503 " == full[:13] and b"\r\nretry-after: 1\r\n" in full
    assert (200, b"") == (served_after, oldest)


def test_validate_names_a_bad_connection_bound_and_its_fix(tmp_path, sim_server):
    """``rrcli validate`` reports each bad ``[serve]`` connection bound with its field and
    the fix (exit 1), and takes good ones."""
    sim = sim_server()
    bad = {
        "head_timeout": 0,
        "idle_timeout": "long",
        "max_connections": 0,
        "max_connections_per_address": -1,
    }
    good = {k: 1 for k in bad}
    backends = openai_backends(sim.openai_url, sim.openai_url)
    bad_path = write_profile(tmp_path / "bad.toml", backends, name="pool", serve=bad)
    good_path = write_profile(tmp_path / "good.toml", backends, name="pool", serve=good)
    refused = rrcli("validate", bad_path, cwd=tmp_path)
    taken = rrcli("validate", good_path, cwd=tmp_path)
    assert (1, 0) == (refused.returncode, taken.returncode), taken.stdout + taken.stderr
    out = refused.stdout + refused.stderr
    assert "serve.head_timeout: must be greater than 0, got 0" in out
    assert 'serve.idle_timeout: expected a number, got "long"' in out
    assert "serve.max_connections: must be at least 1, got 0 — use 1 or more" in out
    assert "serve.max_connections_per_address: must be at least 0, got -1" in out
