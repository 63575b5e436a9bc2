"""``rrcli serve`` as a library call: the pools opened, the app on uvicorn, the signals.

SIGTERM (and Ctrl-C) stop taking connections and let the requests in flight finish, for up to
the drain timeout, then the pools close (their traces flushed) and the call returns. SIGHUP
reopens the trace files (after a log rotation moved them) and reads each pool's profile again:
a valid one is applied with no request dropped (``Pool.reload``), an invalid one logged and
the pool kept as it was. With no client key configured a
random one is made and shown once; ``no_auth`` is refused on any host but loopback, since the
pool spends its owner's keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import ipaddress
import os
import secrets
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from rrcli.config.load import load_profile
from rrcli.config.profile import Profile
from rrcli.errors import RRCLIError, UsageError
from rrcli.logs import get_logger
from rrcli.pool.pool import Pool
from rrcli.serve.app import build_app
from rrcli.serve.gateway import Gateway, Settings, pool_name
from rrcli.serve.protocol import BoundedHttpTools, Connections, allowed_connections

__all__ = ["ServeOptions", "client_keys", "event_loop", "serve"]

log = get_logger("rrcli")

SWEEP_INTERVAL = 30.0  # the most seconds between looks for idle sessions


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """What ``rrcli serve`` was asked: where to listen, the trace file, the client keys'
    variable (``--key-env``), ``no_auth``, the drain timeout, the body limit, the sessions'
    idle time in seconds, whether /metrics is open without a key, and the connections' bounds
    (``protocol.Connections``): the seconds a request's head may take, the seconds a kept-alive
    connection may stay idle, the most connections open and from one address (0: half of them)."""

    host: str = "127.0.0.1"
    port: int = 8787
    traces: Path | None = None
    key_env: str | None = None
    no_auth: bool = False
    drain_timeout: float = 30.0
    max_body_bytes: int = 32 << 20
    session_idle: float = 3600.0
    open_metrics: bool = False
    head_timeout: float = 10.0
    idle_timeout: float = 30.0
    max_connections: int = 4096
    max_connections_per_address: int = 0


def client_keys(options: ServeOptions, environ: Mapping[str, str]) -> tuple[frozenset[str], bool]:
    """The keys clients must send, and whether the key was made now (``serve`` shows it once
    it listens): those of ``key_env`` (comma-separated), else one made now; none with
    ``no_auth`` (loopback only)."""
    if options.no_auth:
        if not _loopback(options.host):
            raise UsageError(
                f"--no-auth on {options.host}: only a loopback host may serve without keys "
                "(anyone reaching it would spend the pool's keys) — set --key-env instead"
            )
        return frozenset(), False
    if options.key_env:
        value = environ.get(options.key_env, "")
        keys = frozenset(k.strip() for k in value.split(",") if k.strip())
        if not keys:
            raise UsageError(
                f"--key-env {options.key_env}: the variable is unset or empty — export it "
                "with the client keys (comma-separated)"
            )
        return keys, False
    return frozenset({"sk-rrcli-" + secrets.token_urlsafe(24)}), True


def event_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop serve runs on: uvloop's where it is installed (about a quarter less CPU
    a request than asyncio's own), else None (asyncio's)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _trace_paths(profiles: Sequence[Profile], traces: Path | None) -> list[Path | None]:
    """One trace file a pool: ``traces`` itself for one pool, else named after each pool."""
    if traces is None or len(profiles) == 1:
        return [traces] * len(profiles)
    return [
        traces.with_name(f"{traces.stem}.{p.name or i}{traces.suffix}")
        for i, p in enumerate(profiles)
    ]


async def serve(
    profiles: Sequence[Profile],
    options: ServeOptions,
    *,
    keys: frozenset[str],
    made: bool = False,
    environ: Mapping[str, str] | None = None,
    echo: Callable[[str], None] = print,
    sock: socket.socket | None = None,
    on_start: Callable[[Gateway], None] | None = None,
) -> None:
    """Serve the pools of ``profiles`` until SIGTERM or Ctrl-C, then drain and return;
    ``made``: the one key of ``keys`` was made at start, shown once the port is bound (never
    when binding fails); ``on_start`` is handed the gateway once it listens (the live display
    reads it). The process's objects at that point are frozen out of the cyclic collector
    (``gc.freeze``)."""
    environ = os.environ if environ is None else environ
    paths = _trace_paths(profiles, options.traces)
    pools = [Pool(p, environ=environ, traces=t) for p, t in zip(profiles, paths, strict=True)]
    settings = Settings(keys, options.max_body_bytes, options.session_idle, options.open_metrics)
    opened: list[Pool] = []
    try:
        for pool in pools:
            await pool.open()
            opened.append(pool)
        gateway = Gateway(pools, settings)
        # what startup made (modules, the pools, the app: ~80,000 objects) lives as long as the
        # server: moved out of the collector's reach, a full collection walks only what requests
        # left behind (its longest pause at 64 in flight: 16 ms, not 69 ms)
        gc.freeze()
        await _run(gateway, options, echo, sock, on_start, made, environ)
    finally:
        for pool in opened:
            await pool.close()


async def _run(
    gateway: Gateway,
    options: ServeOptions,
    echo: Callable[[str], None],
    sock: socket.socket | None,
    on_start: Callable[[Gateway], None] | None,
    made: bool,
    environ: Mapping[str, str],
) -> None:
    total = allowed_connections(options.max_connections)
    per_address = min(options.max_connections_per_address or max(1, total // 2), total)
    connections = Connections(total, per_address, options.head_timeout)
    config = uvicorn.Config(
        build_app(gateway),
        host=options.host,
        port=options.port,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=max(1, round(options.drain_timeout)),
        timeout_keep_alive=options.idle_timeout,  # type: ignore[arg-type]
        http=functools.partial(BoundedHttpTools, connections=connections),  # type: ignore[arg-type]
        proxy_headers=False,  # the client's address is never read: no middleware to rewrite it
        server_header=False,
    )
    server = _Server(config)
    loop = asyncio.get_running_loop()
    main = threading.current_thread() is threading.main_thread()
    reloads: set[asyncio.Task[None]] = set()
    if main:
        loop.add_signal_handler(signal.SIGHUP, _on_hangup, gateway, environ, reloads)
    sweeper = asyncio.create_task(_sweep(gateway))
    if sock is None:
        family = socket.AF_INET6 if ":" in options.host else socket.AF_INET
        sock = socket.create_server((options.host, options.port), family=family)
    # the accepted connections inherit TCP_NODELAY; asyncio sets it only on sockets made with
    # proto=IPPROTO_TCP, and without it a stream's first event waits ~40 ms behind its head
    # for the client's delayed ACK (Nagle), as does a plain answer's body
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    names = ", ".join(pool_name(p) for p in gateway.pools)
    echo(f"rrcli serve: http://{_name(sock)} (pools: {names})")
    if made:
        echo(f"client key (shown once): {next(iter(gateway.settings.keys))}")
    if on_start is not None:
        on_start(gateway)
    try:
        await server.serve(sockets=[sock])
    finally:
        gateway.draining = True
        sweeper.cancel()
        if main:
            loop.remove_signal_handler(signal.SIGHUP)


class _Server(uvicorn.Server):
    """uvicorn's server, its SIGTERM and SIGINT handled on the loop: the first drains, the
    second stops at once, and the process then ends as its caller says (exit 0), where uvicorn
    would raise the signal again once drained."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)


def _name(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _on_hangup(gateway: Gateway, environ: Mapping[str, str], tasks: set[asyncio.Task]) -> None:
    """SIGHUP: the trace files reopened now, the profiles read again and reloaded in a task
    (one at a time)."""
    _reopen(gateway)
    task = asyncio.ensure_future(_reload(gateway, environ, [t for t in tasks if not t.done()]))
    tasks.add(task)
    task.add_done_callback(tasks.discard)


def _reopen(gateway: Gateway) -> None:
    for pool in gateway.pools:
        try:
            pool.reopen()
        except RRCLIError as exc:  # its folder gone, say: the lines go on to the file as it was
            log.error("rrcli.traces_not_reopened", error=str(exc))


async def _reload(
    gateway: Gateway, environ: Mapping[str, str], before: list[asyncio.Task[None]]
) -> None:
    """Each pool's profile read again from its file and, when it is valid, applied; an invalid
    one is logged (its file, every error) and the pool goes on as it was."""
    await asyncio.gather(*before, return_exceptions=True)
    for pool in gateway.pools:
        source = pool.profile.source
        try:
            profile = await asyncio.to_thread(load_profile, Path(source), environ=environ)
            reloaded = pool.reload(profile)
        except RRCLIError as exc:
            log.error("rrcli.profile_not_reloaded", path=source, error=str(exc))
            continue
        gateway.remap()  # before the next pool's file is read: requests pick from it now
        log.warning(
            "rrcli.profile_reloaded",
            path=source,
            added=list(reloaded.added),
            removed=list(reloaded.removed),
            changed=list(reloaded.changed),
        )


async def _sweep(gateway: Gateway) -> None:
    """Forget the idle sessions, looking often enough that none outlives its idle time by more
    than half of it."""
    interval = min(SWEEP_INTERVAL, gateway.settings.session_idle / 2)
    while True:
        await asyncio.sleep(interval)
        gateway.forget_idle()
