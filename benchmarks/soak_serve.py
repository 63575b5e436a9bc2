"""A soak of `rrcli serve`: sessions of several turns through the gateway for minutes while its
backends die, come back and have their key revoked and restored; what a client and an operator
would check afterwards.

``--backends`` `rrcli sim` processes (each with ``--api-key``, ``--latency-ms``) are pooled by
`rrcli serve` (its own process, ``binding = "session"``, ``[health] recover_after`` of
``--recover-after`` seconds, the default retries unless ``--retries``, a trace file).
``--clients`` clients (the official openai SDK's AsyncOpenAI, ``max_retries=0`` so every
failure is seen) send ``--requests`` chat requests, paced evenly over ``--minutes``, in named
sessions (``x-rrcli-session``) of ``--turns`` turns, the history growing each turn. Meanwhile
every ``--kill-every`` seconds one backend (in turn) is killed (SIGKILL) and restarted on its
port ``--down-seconds`` later, and once, between two kills, a backend's server is restarted
with another key for ``--revoked-seconds``, then with the right one again (with 3 backends or
more: one neither neighbouring kill takes).

Before the soak, a baseline in the same run: the same clients, sessions and pace straight to
one more sim (``--baseline-requests``, nothing killed); the soak's figures are printed against it.

It checks, and exits 1 when one fails:
  - no request lost but those that overlapped a kill or the revocation (from the kill to the
    server's return); the failed ones counted, and those in flight at the moment of a kill;
  - each failed request answered in the API's shape (JSON ``{"error": {"message", "type"}}``),
    naming no backend address or key;
  - each session the clients saw move (its answers from another deployment) traced with
    ``binding: "rebound"``;
  - serve's RSS at the end within 10 % of its value after the first minute;
  - each backend taken down came back (trace ``backend`` ``up``) no later than the first probe
    after its server returned (probes at ``recover_after`` after the down, the wait doubling),
    and ``/metrics`` (``rrcli_deployment_state``) and ``/ready`` agree at the end;
and prints requests sent / ok / failed, throughput, p50/p99 against the baseline, the load
average. A short run to try it: ``--minutes 1 --requests 2000 --kill-every 20``; with
``--retries 0`` and a slower backend (``--latency-ms 400``) the requests in flight at a kill
fail, which checks their answers' shape.

    python benchmarks/soak_serve.py [--requests 20000] [--minutes 10] [--clients 32]
        [--turns 5] [--backends 4] [--latency-ms 50] [--recover-after 5] [--kill-every 60]
        [--down-seconds 10] [--revoked-seconds 15] [--baseline-requests 2000] [--retries N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx2
import openai
import orjson
import tomli_w
from _common import ROOT, free_port

KEY = "sk-soak-right-key-0123456789"
WRONG_KEY = "sk-soak-another-key-9876543210"
KEY_VAR = "RR_SOAK_KEY"
SLACK = 2.0  # seconds a probe's own call and a loaded machine may add to the probe schedule
SESSIONS = re.compile(r"^rrcli_deployment_sessions\{[^}]*\} (\S+)$", re.M)
STATE = re.compile(r'^rrcli_deployment_state\{deployment="([^"]+)",state="(\w+)"\} 1\.0$', re.M)


def wait_listening(port: int, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on port {port}")


class Sim:
    """One `rrcli sim` server on a port of its own, which the soak kills and starts again."""

    def __init__(self, latency_ms: float) -> None:
        self.port = free_port()
        self.latency_ms = latency_ms
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, key: str = KEY) -> float:
        """Started with ``key`` as the one key it accepts; the time it listens (epoch s)."""
        argv = [sys.executable, "-m", "rrcli", "sim", "--port", str(self.port),
                "--latency-ms", str(self.latency_ms), "--api-key", key]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_listening(self.port)
        return time.time()

    def stop(self, sig: int = signal.SIGTERM) -> float:
        """Stopped (``SIGKILL``: killed, its connections cut); the time it was signalled."""
        assert self.proc is not None
        at = time.time()
        self.proc.send_signal(sig)
        self.proc.wait(15)
        self.proc = None
        return at


@dataclass
class Event:
    """A kill or a revocation of one backend: from ``start`` (its server killed or stopped)
    to ``returned`` (its server listening with the right key again)."""

    kind: str
    deployment: str
    start: float
    returned: float = 0.0


@dataclass
class Sent:
    """One request as its client saw it."""

    session: str
    turn: int
    start: float
    end: float
    ok: bool
    deployment: str | None = None
    status: int | None = None
    shaped: bool = True  # a failure answered as {"error": {"message": ..., "type": ...}}
    leaked: bool = False  # a failure naming a backend's address or key
    error: str = ""


@dataclass
class Watch:
    """What the watcher thread sampled every second: serve's RSS and /metrics' states."""

    rss: list[tuple[float, int]] = field(default_factory=list)  # (epoch s, KiB)
    states: dict[str, list[tuple[float, str]]] = field(default_factory=lambda: defaultdict(list))
    loads: list[float] = field(default_factory=list)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def watch(pid: int, base: str, into: Watch, stop: threading.Event) -> None:
    """Every second until ``stop``: serve's RSS and each deployment's state in /metrics (each
    change kept), the load average every minute."""
    last_load = 0.0
    with httpx2.Client(timeout=10) as client:
        while not stop.wait(1.0):
            now = time.time()
            into.rss.append((now, rss_kib(pid)))
            with contextlib.suppress(httpx2.HTTPError):
                for dep, state in STATE.findall(client.get(base + "/metrics").text):
                    seen = into.states[dep]
                    if not seen or seen[-1][1] != state:
                        seen.append((now, state))
            if now - last_load >= 60:
                into.loads.append(os.getloadavg()[0])
                last_load = now


def write_profile(path: Path, sims: list[Sim], recover_after: float, retries: int | None) -> Path:
    backends = [
        {
            "id": f"b{i}", "provider": "openai", "base_url": sim.url, "model": "sim",
            "credentials": {"api_key_env": KEY_VAR}, "allow_private": True,
            "max_concurrency": 64,
        }
        for i, sim in enumerate(sims)
    ]  # fmt: skip
    profile = {
        "name": "pool", "binding": "session", "health": {"recover_after": recover_after},
        "backends": backends,
    }  # fmt: skip
    if retries is not None:
        profile["retry"] = {"max_retries": retries}
    path.write_text(tomli_w.dumps(profile))
    return path


@contextlib.contextmanager
def serve(profile: Path, traces: Path, log: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    argv = [sys.executable, "-m", "rrcli", "serve", "-p", str(profile), "--port", str(port),
            "--no-auth", "-q", "--traces", str(traces)]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, env={**os.environ, KEY_VAR: KEY}, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_listening(port)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def load(
    base_url: str, model: str, args: argparse.Namespace, requests: int, seconds: float,
    secrets: tuple[str, ...], tag: str,
) -> list[Sent]:  # fmt: skip
    """``requests`` chat requests from ``args.clients`` clients in sessions of ``args.turns``,
    paced evenly over ``seconds``; each as its client saw it."""
    rate = requests / seconds
    sent: list[Sent] = []
    t0 = time.monotonic()

    async def client(c: int) -> None:
        api = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=60)
        async with api:
            j, s = c, 0
            while j < requests:
                session, history = f"{tag}-c{c}-s{s}", []
                for turn in range(args.turns):
                    if j >= requests:
                        break
                    delay = t0 + j / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    history.append({"role": "user", "content": f"Turn {turn}: say a number."})
                    sent.append(await one(api, model, session, turn, history, secrets))
                    j += args.clients
                s += 1

    await asyncio.gather(*(client(c) for c in range(args.clients)))
    return sent


async def one(
    api: openai.AsyncOpenAI, model: str, session: str, turn: int, history: list[dict],
    secrets: tuple[str, ...],
) -> Sent:  # fmt: skip
    """One turn of ``session``: its answer appended to ``history``; a failure leaves the turn's
    question in it (the agent goes on)."""
    start = time.time()
    try:
        raw = await api.chat.completions.with_raw_response.create(
            model=model, messages=history, extra_headers={"x-rrcli-session": session}
        )
    except openai.APIStatusError as e:
        text = e.response.text
        try:
            err = orjson.loads(text).get("error")
        except orjson.JSONDecodeError:
            err = None
        shaped = (
            isinstance(err, dict)
            and isinstance(err.get("message"), str)
            and isinstance(err.get("type"), str)
        )
        leaked = any(s in text for s in secrets)
        return Sent(session, turn, start, time.time(), False, None, e.status_code, shaped, leaked,
                    text[:300])  # fmt: skip
    except openai.APIError as e:  # no answer at all: a connection cut, a timeout
        return Sent(session, turn, start, time.time(), False, shaped=False, error=repr(e))
    end = time.time()
    answer = raw.parse().choices[0].message
    history.append({"role": "assistant", "content": answer.content or ""})
    return Sent(session, turn, start, end, True, raw.headers.get("x-rrcli-deployment"))


def chaos(sims: list[Sim], args: argparse.Namespace, t0: float, events: list[Event],
          done: threading.Event) -> None:  # fmt: skip
    """Every ``kill_every`` seconds (from half of it) one backend in turn killed and restarted
    ``down_seconds`` later; once, halfway between two kills in the middle of the run, another
    backend's server restarted with the wrong key and ``revoked_seconds`` later the right one."""
    duration = args.minutes * 60
    kills = [args.kill_every * (k + 0.5) for k in range(10_000)]
    kills = [t for t in kills if t + args.down_seconds + 5 < duration]
    revoke_k = len(kills) // 2
    plan = [(t, "kill", k % len(sims)) for k, t in enumerate(kills)]
    if len(kills) >= 2 and len(sims) >= 3:  # a backend neither neighbouring kill takes
        plan.append((args.kill_every * (revoke_k + 1), "revoke", (revoke_k + 2) % len(sims)))
    pending = sorted(plan)  # (when, what, backend), the returns added as the kills happen
    while pending and not done.is_set():
        at, kind, b = pending.pop(0)
        if done.wait(max(0.0, t0 + at - time.time())):
            break
        sim, dep = sims[b], f"b{b}"
        if kind == "kill":
            events.append(Event("kill", dep, sim.stop(signal.SIGKILL)))
            pending.append((at + args.down_seconds, "return", b))
        elif kind == "revoke":
            events.append(Event("revoke", dep, sim.stop()))
            sim.start(WRONG_KEY)
            pending.append((at + args.revoked_seconds, "restore", b))
        else:
            if kind == "restore":
                sim.stop()
            back = sim.start(KEY)
            for e in reversed(events):
                if e.deployment == dep and not e.returned:
                    e.returned = back
                    break
        pending.sort()


def trace_records(path: Path) -> tuple[list[dict], list[dict]]:
    """(call records, backend records) of serve's trace, with ``t`` as epoch seconds."""
    calls, backends = [], []
    for line in path.read_bytes().splitlines():
        rec = orjson.loads(line)
        if rec["event"] == "call":
            rec["t"] = datetime.fromisoformat(rec["ts_end"]).timestamp()
            calls.append(rec)
        elif rec["event"] == "backend":
            rec["t"] = datetime.fromisoformat(rec["ts"]).timestamp()
            backends.append(rec)
    return calls, backends


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000


def summary(name: str, sent: list[Sent]) -> tuple[float, float, float]:
    """(throughput, p50 ms, p99 ms) of the answered requests, printed."""
    ok = [s for s in sent if s.ok]
    span = max(s.end for s in sent) - min(s.start for s in sent)
    times = [s.end - s.start for s in ok]
    rate, p50, p99 = len(ok) / span, pct(times, 50), pct(times, 99)
    print(
        f"{name}: {len(sent):,} sent, {len(ok):,} ok, {len(sent) - len(ok):,} failed in "
        f"{span:.0f} s: {rate:.1f} req/s answered, p50 {p50:.1f} ms, p99 {p99:.1f} ms",
        flush=True,
    )
    return rate, p50, p99


def probe_bound(down: float, returned: float, recover_after: float) -> float:
    """The first probe after ``returned`` of a backend down at ``down``: probes at
    ``recover_after`` after the down, each wait doubling (up to 600 s)."""
    at, wait = down + recover_after, recover_after
    while at < returned:
        wait = max(recover_after, min(600.0, wait * 2))
        at += wait
    return at


def check_backends(
    events: list[Event], records: list[dict], recover_after: float, end: float
) -> list[str]:
    """Each down matched to the event it fell in; its up no later than the first probe after
    the server returned (plus SLACK). The failures, printed as they are found."""
    failures = []
    downs: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        downs[r["deployment"]].append(r)
    for e in events:
        mine = [r for r in downs[e.deployment] if e.start <= r["t"] <= (e.returned or end) + 10]
        down = next((r for r in mine if r["state"] == "down"), None)
        if down is None:
            print(f"  {e.kind} of {e.deployment}: never taken down (no request met it)")
            continue
        up = next(
            (r for r in downs[e.deployment] if r["state"] == "up" and r["t"] > down["t"]), None
        )
        bound = probe_bound(down["t"], e.returned, recover_after)
        line = (
            f"  {e.kind} of {e.deployment} at +{e.start - events[0].start:.0f} s: down "
            f"{down['t'] - e.start:.1f} s after ({down['reason']}), server back after "
            f"{e.returned - e.start:.1f} s"
        )
        if up is None:
            failures.append(f"{e.deployment} never came back after its {e.kind}")
            print(line + ", never up")
            continue
        lag = up["t"] - e.returned
        print(
            line + f", up {lag:.1f} s after its return (first probe after it due "
            f"{bound - e.returned:.1f} s after)"
        )
        if up["t"] > bound + SLACK:
            failures.append(
                f"{e.deployment} back {lag:.1f} s after its {e.kind} ended, past the probe "
                f"due {bound - e.returned:.1f} s after"
            )
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--backends", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--recover-after", type=float, default=5.0, help="[health] seconds")
    parser.add_argument("--kill-every", type=float, default=60.0, help="seconds between kills")
    parser.add_argument("--down-seconds", type=float, default=10.0, help="a killed one's time")
    parser.add_argument("--revoked-seconds", type=float, default=15.0)
    parser.add_argument("--baseline-requests", type=int, default=2000)
    parser.add_argument(
        "--retries", type=int, help="[retry] max_retries (default: the profile's default, 3)"
    )
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = str(ROOT)
    seconds = args.minutes * 60
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min)", flush=True)
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        direct = Sim(args.latency_ms)
        direct.start()
        try:
            base_s = seconds * args.baseline_requests / args.requests
            baseline = asyncio.run(
                load(direct.url, "sim", args, args.baseline_requests, base_s, (), "direct")
            )
        finally:
            direct.stop()
        b_rate, b_p50, b_p99 = summary("baseline (straight to one sim, same pace)", baseline)
        sims = [Sim(args.latency_ms) for _ in range(args.backends)]
        for sim in sims:
            sim.start()
        traces, log = Path(tmp) / "serve.traces.jsonl", Path(tmp) / "serve.log"
        profile = write_profile(Path(tmp) / "pool.toml", sims, args.recover_after, args.retries)
        events: list[Event] = []
        seen = Watch()
        secrets = (KEY, WRONG_KEY, KEY_VAR, *(f"127.0.0.1:{s.port}" for s in sims))
        try:
            with serve(profile, traces, log) as (base, proc):
                stop = threading.Event()
                watcher = threading.Thread(target=watch, args=(proc.pid, base, seen, stop))
                t0 = time.time()
                chaos_thread = threading.Thread(target=chaos, args=(sims, args, t0, events, stop))
                watcher.start()
                chaos_thread.start()
                try:
                    sent = asyncio.run(
                        load(base + "/v1", "pool", args, args.requests, seconds, secrets, "soak")
                    )
                finally:
                    stop.set()
                    chaos_thread.join()
                    watcher.join()
                ended = time.time()
                settled = settle(base, events, traces, args.recover_after)
                ready = httpx2.get(base + "/ready", timeout=10).json().get("ready")
                metrics = httpx2.get(base + "/metrics", timeout=10).text
                states = dict(STATE.findall(metrics))
                bound = sum(float(n) for n in SESSIONS.findall(metrics))
        finally:
            for sim in sims:
                if sim.proc is not None:
                    sim.stop()
        print(f"load average after: {os.getloadavg()[0]:.2f} (1 min); each minute: "
              + ", ".join(f"{x:.1f}" for x in seen.loads))  # fmt: skip
        rate, p50, p99 = summary("soak (through serve, backends killed)", sent)
        print(
            f"against the baseline: throughput {rate / b_rate:.3f} x, p50 {p50 - b_p50:+.1f} ms, "
            f"p99 {p99 - b_p99:+.1f} ms"
        )
        failures += check_requests(sent, events, ended)
        calls, backend_records = trace_records(traces)
        failures += check_sessions(sent, calls)
        failures += check_rss(seen, t0, seconds)
        print(f"backends ({len(events)} events; recover_after {args.recover_after:g} s):")
        failures += check_backends(events, backend_records, args.recover_after, ended)
        if not settled:
            failures.append("a backend was still down a minute after the load ended")
        print(f"/metrics at the end: {states}, {bound:,.0f} sessions bound; /ready {ready}")
        if set(states.values()) != {"up"} or ready is not True:
            failures.append(f"at the end /metrics says {states} and /ready {ready}")
        if failures:
            print("serve's log, last lines:\n" + "\n".join(log.read_text().splitlines()[-20:]))
    for f in failures:
        print(f"FAILED: {f}")
    print("every invariant held" if not failures else f"{len(failures)} invariant(s) failed")
    sys.exit(1 if failures else 0)


def settle(base: str, events: list[Event], traces: Path, recover_after: float) -> bool:
    """Waits (a minute at most) until no deployment is down in /metrics."""
    deadline = time.monotonic() + 60 + recover_after
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx2.HTTPError):
            states = STATE.findall(httpx2.get(base + "/metrics", timeout=10).text)
            if all(state != "down" for _, state in states):
                return True
        time.sleep(0.5)
    return False


def check_requests(sent: list[Sent], events: list[Event], ended: float) -> list[str]:
    """No request failed but those overlapping a kill or the revocation; each failure in the
    API's shape, naming no address or key."""
    failed = [s for s in sent if not s.ok]
    windows = [(e.start, e.returned or ended) for e in events]
    kills = [e.start for e in events if e.kind == "kill"]
    overlapping = [s for s in failed if any(s.start <= b and s.end >= a for a, b in windows)]
    in_flight = [s for s in sent if any(s.start <= k <= s.end for k in kills)]
    statuses = Counter(s.status for s in failed)
    print(
        f"failed: {len(failed)} ({dict(statuses)}); of the {len(in_flight)} requests in flight "
        f"at a kill {sum(not s.ok for s in in_flight)} failed; {len(overlapping)} failed "
        f"overlapping a kill or the revocation; {sum(s.shaped for s in failed)} in the API's "
        "error shape"
    )
    for status in statuses:  # the first failure of each status
        s = next(s for s in failed if s.status == status)
        print(f"  e.g. {s.session} turn {s.turn}: {s.status} {s.error[:200]}")
    problems = []
    if len(overlapping) < len(failed):
        lost = [s for s in failed if all(s is not o for o in overlapping)]
        problems.append(
            f"{len(lost)} request(s) failed outside any kill: first {lost[0].session} "
            f"turn {lost[0].turn} {lost[0].status} {lost[0].error[:200]}"
        )
    if not all(s.shaped for s in failed):
        problems.append(f"{sum(not s.shaped for s in failed)} failure(s) not in the API's shape")
    if any(s.leaked for s in failed):
        problems.append(f"{sum(s.leaked for s in failed)} failure(s) named an address or key")
    return problems


def check_sessions(sent: list[Sent], calls: list[dict]) -> list[str]:
    """Each session whose answers came from more than one deployment has a ``rebound`` call in
    the trace; the counts printed."""
    where: dict[str, list[str]] = defaultdict(list)
    for s in sent:
        if s.ok and s.deployment and (not where[s.session] or where[s.session][-1] != s.deployment):
            where[s.session].append(s.deployment)
    moved = {name for name, deps in where.items() if len(deps) > 1}
    rebound = [c for c in calls if c["binding"] == "rebound"]
    traced = {c["session"] for c in rebound}
    whys = Counter(c["rebound_for"] for c in rebound)
    bindings = Counter(c["binding"] for c in calls if c["outcome"] == "ok")
    print(
        f"sessions: {len(where):,}; {len(moved)} moved (seen by their clients), "
        f"{len(traced)} traced rebound ({len(rebound)} calls, why: {dict(whys)}); "
        f"answers by binding: {dict(bindings)}; calls traced {len(calls):,}"
    )
    answered = {(s.session, s.turn) for s in sent if s.ok}
    turns = {(c["session"], c["turn"]) for c in calls if c["outcome"] == "ok"}
    print(f"answered turns the trace records under their session and turn: "
          f"{len(answered & turns):,} of {len(answered):,}")  # fmt: skip
    problems = []
    if untraced := moved - traced:
        problems.append(
            f"{len(untraced)} session(s) moved with no rebound record: {sorted(untraced)[:3]}"
        )
    if not moved:
        problems.append("no session moved: the kills reached no bound session")
    if answered != turns:
        problems.append(
            f"{len(answered ^ turns)} answered turn(s) traced under another session or turn: "
            f"{sorted(answered ^ turns)[:3]}"
        )
    return problems


def check_rss(seen: Watch, t0: float, seconds: float) -> list[str]:
    """Serve's RSS at the end within 10 % of its value after the first minute (a third of the
    run for a run under 3 minutes)."""
    mark = t0 + min(60.0, seconds / 3)
    first = next((kib for t, kib in seen.rss if t >= mark), seen.rss[-1][1])
    last = seen.rss[-1][1]
    peak = max(kib for _, kib in seen.rss)
    print(
        f"serve RSS: {first / 1024:.1f} MiB after {mark - t0:.0f} s, {last / 1024:.1f} MiB at "
        f"the end ({last / first:.3f} x), peak {peak / 1024:.1f} MiB"
    )
    if last > first * 1.10:
        return [f"serve's RSS grew {last / first:.3f} x from the first minute to the end"]
    return []


if __name__ == "__main__":
    main()
