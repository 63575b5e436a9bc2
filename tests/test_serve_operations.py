"""``rrcli serve`` as an operator runs it: the trace file rotated under it (SIGHUP), and the
sessions it forgets once they go idle."""

from __future__ import annotations

import signal
import time

import httpx2
from runkit import calls, read_jsonl, write_profile
from servekit import Served, openai_backends

CHAT = {"model": "pool", "messages": [{"role": "user", "content": "Hi"}]}


def test_sighup_reopens_the_trace_file_after_a_rotation(tmp_path, sim_server):
    """The trace file moved away (as logrotate does) and SIGHUP sent: the calls before are in
    the moved file, the calls after in a new file at the original path that starts with the
    pool's run record, and no call is lost between the two."""
    sim = sim_server()
    traces = tmp_path / "serve.traces.jsonl"
    moved = tmp_path / "serve.traces.jsonl.1"
    path = write_profile(tmp_path / "pool.toml", openai_backends(sim.openai_url), name="pool")
    served = Served(path, tmp_path, "--no-auth", "--traces", str(traces))
    try:
        with httpx2.Client(timeout=30) as client:
            url = served.url + "/v1/chat/completions"
            before = [client.post(url, json=CHAT).status_code for _ in range(3)]
            traces.rename(moved)
            served.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while not traces.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            after = [client.post(url, json=CHAT).status_code for _ in range(4)]
    finally:
        code, _ = served.stop()
    events = [r["event"] for r in read_jsonl(traces)]
    assert ([200] * 3, [200] * 4, 0) == (before, after, code)
    assert (3, 4) == (len(calls(moved)), len(calls(traces)))
    assert ["run", "call", "call", "call", "call", "run_end"] == events
    assert {r["run_id"] for r in read_jsonl(moved)} == {r["run_id"] for r in read_jsonl(traces)}


def test_a_trace_file_that_cannot_be_reopened_is_kept(tmp_path, sim_server):
    """SIGHUP after the trace file's folder was moved away (its path can no longer be opened):
    the server logs an error naming the path, keeps writing to the file where it now is, and
    goes on answering; no traceback."""
    sim = sim_server()
    (tmp_path / "logs").mkdir()
    traces = tmp_path / "logs" / "serve.traces.jsonl"
    path = write_profile(tmp_path / "pool.toml", openai_backends(sim.openai_url), name="pool")
    served = Served(path, tmp_path, "--no-auth", "--traces", str(traces))
    try:
        with httpx2.Client(timeout=30) as client:
            url = served.url + "/v1/chat/completions"
            before = client.post(url, json=CHAT).status_code
            (tmp_path / "logs").rename(tmp_path / "old")
            served.proc.send_signal(signal.SIGHUP)
            time.sleep(0.5)
            after = client.post(url, json=CHAT).status_code
    finally:
        code, err = served.stop()
    assert (200, 200, 0) == (before, after, code)
    assert "rrcli.traces_not_reopened" in err and str(traces) in err
    assert "Traceback" not in err
    assert 2 == len(calls(tmp_path / "old" / "serve.traces.jsonl"))


def _session_pool(tmp_path, first, second) -> Served:
    """``rrcli serve`` over two sims, sessions bound, round robin, idle after 1 s."""
    path = write_profile(
        tmp_path / "pool.toml",
        openai_backends(first.openai_url, second.openai_url),
        name="pool",
        binding="session",
        strategy="round_robin",
        serve={"session_idle": 1},
    )
    return Served(path, tmp_path, "--no-auth")


def test_an_idle_session_is_forgotten(tmp_path, sim_server):
    """With ``[serve] session_idle = 1``, a session keeps its backend while it is used; once no
    request named it for longer than that, it is routed again as a new one (round robin: the
    other backend)."""
    served = _session_pool(tmp_path, sim_server(), sim_server())
    try:
        with httpx2.Client(timeout=30, headers={"x-rrcli-session": "s1"}) as client:
            url = served.url + "/v1/chat/completions"
            used = [client.post(url, json=CHAT).headers["x-rrcli-deployment"] for _ in range(3)]
            time.sleep(2.5)
            later = client.post(url, json=CHAT).headers["x-rrcli-deployment"]
    finally:
        served.stop()
    assert (["b0"] * 3, "b1") == (used, later)


def test_a_session_is_not_idle_while_its_call_runs(tmp_path, sim_server):
    """With ``[serve] session_idle = 1``, a call that takes 2.5 s does not let its session go
    idle under it: the idle time starts when the call ends, so the session's next request,
    sent right after, stays on its backend (round robin would give a new one the other)."""
    served = _session_pool(tmp_path, sim_server(latency_ms=2500), sim_server())
    try:
        with httpx2.Client(timeout=30, headers={"x-rrcli-session": "s1"}) as client:
            url = served.url + "/v1/chat/completions"
            used = [client.post(url, json=CHAT).headers["x-rrcli-deployment"] for _ in range(2)]
    finally:
        served.stop()
    assert ["b0", "b0"] == used
