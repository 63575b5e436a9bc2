"""The live display of ``rrcli serve`` on a terminal (a pseudo-terminal, as a user sees it):
requests in flight, answered a second, ok and failed, a row per deployment; none with
--quiet, none off a terminal."""

from __future__ import annotations

import re
import signal

import httpx2
from runkit import Terminal, write_profile
from servekit import Served, openai_backends

CHAT = {"model": "pool", "messages": [{"role": "user", "content": "Hi"}]}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _profile(tmp_path, sim):
    backends = openai_backends(sim.openai_url, max_concurrency=4)
    return write_profile(tmp_path / "pool.toml", backends, name="pool")


def _serve_on_a_terminal(tmp_path, sim, *args):
    """``rrcli serve`` on a terminal, sent five requests, then SIGTERM: the screen's text."""
    terminal = Terminal("serve", "-p", _profile(tmp_path, sim), "--no-auth", "--port", "0",
                        *args, cwd=tmp_path)  # fmt: skip
    try:
        assert terminal.wait_for("rrcli serve: http://")
        url = re.search(r"rrcli serve: (http://\S+)", terminal.text).group(1)
        with httpx2.Client(timeout=30) as client:
            codes = [client.post(url + "/v1/chat/completions", json=CHAT).status_code
                     for _ in range(5)]  # fmt: skip
        terminal.wait_for("ok 5", timeout=5)
    finally:
        terminal.proc.send_signal(signal.SIGTERM)
        code = terminal.finish()
    assert ([200] * 5, 0) == (codes, code)
    return ANSI.sub("", terminal.text).replace("\r", "")


def test_the_display_shows_the_requests_and_each_deployment(tmp_path, sim_server):
    """On a terminal the display's head counts the answered requests and their rate, and a
    row shows the deployment with its calls in flight of its cap and its ok calls."""
    screen = _serve_on_a_terminal(tmp_path, sim_server())
    assert "ok 5  errors 0" in screen and "req/s" in screen
    assert re.search(r"b0\s+0 / 4\s+5\s+0\s+0", screen)


def test_quiet_has_no_display(tmp_path, sim_server):
    """``--quiet`` on a terminal: the address is printed, the display is not."""
    screen = _serve_on_a_terminal(tmp_path, sim_server(), "--quiet")
    assert "rrcli serve: http://" in screen
    assert "req/s" not in screen and "in flight / cap" not in screen


def test_off_a_terminal_there_is_no_display(tmp_path, sim_server):
    """With its output to pipes, ``rrcli serve`` draws no display."""
    served = Served(_profile(tmp_path, sim_server()), tmp_path, "--no-auth")
    with httpx2.Client(timeout=30) as client:
        ok = client.post(served.url + "/v1/chat/completions", json=CHAT).status_code
    code, err = served.stop()
    assert (200, 0) == (ok, code)
    assert "req/s" not in err and "in flight / cap" not in err
