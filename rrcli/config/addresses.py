"""The base_url address policy: where a backend may send its key.

A profile can be shared, so a base_url is input we do not trust: a host that is (or resolves to)
a loopback, private, link-local or unspecified address needs the backend's own
``allow_private = true``; the cloud metadata address is refused always, in every spelling
(IPv4-mapped and NAT64 IPv6 forms, integer and hex IPv4 forms the resolver accepts, hosts that
resolve to it). Resolution runs in daemon threads under one short budget so ``validate`` never
hangs; a host that does not resolve is a warning, not an error.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from rrcli.config.redaction import redacted_url

__all__ = [
    "Finding",
    "Resolver",
    "UrlCheck",
    "address_kind",
    "check_base_urls",
    "forbidden",
    "no_lookup",
    "resolve_hosts",
]


#: ``resolve(host) -> addresses``; raises OSError when the host does not resolve.
Resolver = Callable[[str], Sequence[str]]

RESOLVE_BUDGET = 2.0  # seconds, for every host of a profile together
#: Where clouds serve instance and container credentials: AWS, GCP, Azure, Oracle (IPv4 and
#: IPv6), ECS task credentials, EKS pod identity, Alibaba, Tencent.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",
        "fd00:ec2::254",
        "169.254.170.2",
        "169.254.170.23",
        "fd00:ec2::23",
        "100.100.100.200",
        "169.254.0.23",
    )
)
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog"})
#: Shared address space (RFC 6598): private to a carrier's network, not the internet.
CARRIER_NAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True, slots=True)
class UrlCheck:
    """One backend's base_url to check; ``path`` is where a finding is reported."""

    path: str
    url: str
    allow_private: bool
    sends_key: bool
    http: bool = True  # a backend's base_url; False: another service's URL (the Redis gate)


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str
    path: str
    message: str
    fix: str
    code: str


def address_kind(text: str) -> str | None:
    """``metadata``, ``loopback``, ``unspecified``, ``link-local``, ``private``, ``carrier-grade
    NAT``, or None (public).

    Raises ValueError when ``text`` is not an IP address.
    """
    addr = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        elif addr in _NAT64:
            addr = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        elif 1 < int(addr) < 2**32:  # deprecated IPv4-compatible form ::a.b.c.d
            addr = ipaddress.IPv4Address(int(addr))
    if addr in METADATA_ADDRESSES:
        return "metadata"
    for kind in ("loopback", "unspecified", "link_local", "private"):
        if getattr(addr, f"is_{kind}"):
            return kind.replace("_", "-")
    if addr in CARRIER_NAT:
        return "carrier-grade NAT"
    return None


def forbidden(kind: str | None, allow_private: bool) -> bool:
    """Whether an address of ``kind`` (``address_kind``) is refused: metadata always, the other
    non-public kinds unless the backend allows private addresses."""
    return kind == "metadata" or (kind is not None and not allow_private)


def no_lookup(host: str) -> Sequence[str]:
    """A resolver that asks no one (``validate`` without ``--probe`` sends nothing): a
    ``localhost`` name is loopback, as such names never reach DNS; any other name has no
    address to check, and no warning says it did not resolve."""
    name = host.rstrip(".").lower()
    return ["127.0.0.1"] if name == "localhost" or name.endswith(".localhost") else []


def _system_resolve(host: str) -> Sequence[str]:
    return sorted({info[4][0] for info in socket.getaddrinfo(host, None)})


def resolve_hosts(
    hosts: Iterable[str],
    resolve: Resolver | None = None,
    budget: float = RESOLVE_BUDGET,
) -> dict[str, Sequence[str] | str]:
    """Each host's addresses, or a string saying why it has none (failure or time out).

    Every lookup runs in a daemon thread; together they get ``budget`` seconds, after which
    the unfinished ones are abandoned (a daemon thread never holds the process open).
    """
    resolve = resolve or _system_resolve
    results: dict[str, Sequence[str] | str] = {}

    def work(host: str) -> None:
        try:
            results[host] = list(resolve(host))
        except (OSError, UnicodeError, ValueError) as exc:
            results[host] = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__

    threads = {h: threading.Thread(target=work, args=(h,), daemon=True) for h in hosts}
    for thread in threads.values():
        thread.start()
    deadline = time.monotonic() + budget
    for thread in threads.values():
        thread.join(max(0.0, deadline - time.monotonic()))
    return {h: results.get(h, f"no answer within {budget:g} s") for h in threads}


def check_base_urls(checks: Sequence[UrlCheck], resolve: Resolver | None = None) -> list[Finding]:
    """Every finding for these base_urls: scheme, host, private addresses, metadata, clear text."""
    findings: list[Finding] = []
    hosts: dict[str, str] = {}  # path -> host name to resolve
    literal: dict[str, str | None] = {}  # path -> address kind of an IP literal host
    parsed: dict[str, str] = {}
    for check in checks:
        host = _parse(check, findings)
        if host is None:
            continue
        parsed[check.path] = host
        try:
            literal[check.path] = address_kind(host)
        except ValueError:
            hosts[check.path] = host
    answers = resolve_hosts(hosts.values(), resolve) if hosts else {}
    unresolved_reported: set[str] = set()
    for check in checks:
        host = parsed.get(check.path)
        if host is None:
            continue
        if check.path in literal:
            kinds = {host: literal[check.path]}
        elif host.rstrip(".").lower() in METADATA_HOSTS:
            kinds = {host: "metadata"}
        else:
            answer = answers[host]
            if isinstance(answer, str):
                if host not in unresolved_reported:  # once per host, at its first backend
                    findings.append(_unresolved(check.path, host, answer))
                unresolved_reported.add(host)
                kinds = {}
            else:
                kinds = {a: _kind_or_none(a) for a in answer}
        findings.extend(_policy(check, host, kinds))
    return findings


def _kind_or_none(address: str) -> str | None:
    try:
        return address_kind(address)
    except ValueError:
        return None


def _parse(check: UrlCheck, findings: list[Finding]) -> str | None:
    def error(message: str, fix: str, code: str) -> None:
        findings.append(Finding("error", check.path, message, fix, code))

    example = 'e.g. "https://api.openai.com/v1"'
    control = next((i for i, c in enumerate(check.url) if c <= " " or c == "\x7f"), None)
    if control is not None:
        char = f"U+{ord(check.url[control]):04X}"
        error(
            f"has {char} (a control character or space) at character {control + 1}",
            f"write the URL without it, {example}",
            "bad_url",
        )
        return None
    try:
        parts = urlsplit(check.url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError as exc:
        error(f"not a valid URL ({exc})", f"write a full URL, {example}", "bad_url")
        return None
    if not check.http:
        return parts.hostname or None
    if parts.scheme not in ("http", "https"):
        shown = f'scheme "{parts.scheme}"' if parts.scheme else "no scheme"
        error(
            f"{shown}: only http and https are supported", f"write a full URL, {example}", "bad_url"
        )
        return None
    if parts.username is not None or parts.password is not None:
        error(
            "carries a user name or password",
            "remove it; put the key in credentials",
            "url_userinfo",
        )
        return None
    if not parts.hostname or not port_ok:
        shown = redacted_url(check.url)
        error(f'"{shown}" has no host or a bad port', f"write a full URL, {example}", "bad_url")
        return None
    return parts.hostname


def _unresolved(path: str, host: str, why: str) -> Finding:
    return Finding(
        "warning",
        path,
        f'host "{host}" did not resolve ({why}), so it was not checked for private addresses',
        "check the host name and your network; the call will fail if it still does not resolve",
        "host_unresolved",
    )


def _policy(check: UrlCheck, host: str, kinds: dict[str, str | None]) -> list[Finding]:
    out = []
    resolved = list(kinds) != [host]

    def what(address: str) -> str:
        return f'host "{host}" resolves to {address}, ' if resolved else f'host "{host}" is '

    for address, kind in kinds.items():
        if kind == "metadata":
            out.append(
                Finding(
                    "error",
                    check.path,
                    f"{what(address)}the cloud metadata address",
                    "rrcli never sends requests there, not even with allow_private; "
                    "point base_url at the API itself",
                    "metadata_address",
                )
            )
            return out
    private = [(a, k) for a, k in kinds.items() if k is not None]
    if private and not check.allow_private:
        address, kind = private[0]
        out.append(
            Finding(
                "error",
                check.path,
                f"{what(address)}a {kind} address",
                "set allow_private = true on this backend if you mean to reach a server on your "
                "own machine or network",
                "private_address",
            )
        )
    loopback = bool(kinds) and all(k == "loopback" for k in kinds.values())
    if check.url.lower().startswith("http:") and check.sends_key and not loopback:
        out.append(
            Finding(
                "warning",
                check.path,
                f'plain http to "{host}": the API key crosses the network in clear text',
                "use https://",
                "clear_text",
            )
        )
    return out
