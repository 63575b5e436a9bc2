"""Reading a profile: finding its file, checking it, and the report.

``validate_profile`` turns a TOML file into a ``ValidationReport``, collecting every diagnostic
(not only the first) with its key path and its fix; ``load_profile`` is the same for a run and
raises ``ProfileError`` naming every error. The rules live in the schema modules (``schema``,
``walk``, ``document``, ``backends``) and the address policy (``addresses``); this module reads
the file and the TOML. No I/O beyond reading the file and resolving hostnames; no await.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rrcli.config._toml_shape import shape_problem
from rrcli.config.addresses import Resolver
from rrcli.config.document import check_document
from rrcli.config.profile import Profile, profile_to_dict
from rrcli.diagnostic import Diagnostic
from rrcli.errors import ProfileError, UsageError

__all__ = [
    "ValidationReport",
    "demo_profile_path",
    "load_profile",
    "read_profile_text",
    "resolve_profile_path",
    "validate_profile",
]

MAX_PROFILE_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """What ``rrcli validate`` prints: every diagnostic, and the profile when it could be built."""

    source: str
    diagnostics: tuple[Diagnostic, ...]
    profile: Profile | None
    readable: bool = True  # False: not a TOML profile at all (missing, binary, syntax): exit 2

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "warning")

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def exit_code(self) -> int:
        """The exit code: 0 ok, 1 the profile has errors, 2 it is not a readable profile at all."""
        return 2 if not self.readable else 0 if self.ok else 1

    def as_dict(self) -> dict[str, Any]:
        """The ``rrcli validate --json`` document; keys redacted."""
        return {
            "ok": self.ok,
            "errors": [d.as_dict() for d in self.errors],
            "warnings": [d.as_dict() for d in self.warnings],
            "profile": profile_to_dict(self.profile) if self.profile is not None else None,
        }

    def plain_lines(self) -> list[str]:
        """One line a diagnostic (``file:line: error: path: message — fix``), then a summary."""
        lines = []
        for d in self.diagnostics:
            subject = f"{d.subject}: " if d.subject else ""
            fix = f" — {d.fix}" if d.fix else ""
            lines.append(f"{d.where}: {d.severity}: {subject}{d.message}{fix}")
        return [*lines, self.summary()]

    def summary(self) -> str:
        def count(n: int, word: str) -> str:
            return f"{n} {word}" + ("" if n == 1 else "s")

        verdict = "ok" if self.ok else "not usable"
        tally = f"{count(len(self.errors), 'error')}, {count(len(self.warnings), 'warning')}"
        pool = ""
        if self.profile is not None:
            n = len(self.profile.backends)
            pool = f"; {count(n, 'backend')}, strategy {self.profile.strategy}"
        return f"{self.source}: {verdict} ({tally}){pool}"


def demo_profile_path() -> Path:
    """The built-in demo pool shipped inside the package."""
    return Path(__file__).parent / "data" / "demo.toml"


def resolve_profile_path(
    option: str | None, environ: Mapping[str, str], cwd: Path | None = None
) -> Path:
    """--profile, else $RRCLI_PROFILE, else ./rrcli.toml, else the XDG profile.

    The name ``demo``, where no such file exists, is the built-in demo pool.
    """
    cwd = cwd or Path.cwd()
    candidate = option or environ.get("RRCLI_PROFILE")
    if candidate:
        path = Path(candidate).expanduser()
        if not path.is_absolute():
            path = cwd / path
        if candidate == "demo" and not path.exists():
            return demo_profile_path()
        return path
    local = cwd / "rrcli.toml"
    if local.exists():
        return local
    xdg = Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "rrcli" / "profile.toml"
    if xdg.exists():
        return xdg
    raise UsageError(
        "no profile found — pass --profile PATH (or -p demo for the built-in simulated pool), "
        f"set RRCLI_PROFILE, create ./rrcli.toml (rrcli init), or create {xdg}"
    )


def validate_profile(
    path: Path | str,
    *,
    environ: Mapping[str, str] | None = None,
    strict: bool = False,
    resolve: Resolver | None = None,
    ignore: frozenset[str] = frozenset(),
) -> ValidationReport:
    """Read and check a profile, collecting every diagnostic. Never raises for bad content.

    ``strict`` turns warnings into errors. Whatever stops a run is an error here too (an
    ``api_key_env`` naming an unset variable among them). ``resolve(host)`` returns the
    host's addresses (default: the system resolver, within a 2 s budget). ``ignore``: codes of
    findings that do not matter to a caller that sends nothing (``env_unset`` for a command
    that only reads Redis).
    """
    source = str(path)
    environ = os.environ if environ is None else environ
    text, problem = read_profile_text(Path(path))
    if problem is not None:
        return ValidationReport(source, (replace(problem, source=source),), None, readable=False)
    shape = shape_problem(text)
    if shape is not None:
        return ValidationReport(source, (_shape_diagnostic(shape, source),), None, readable=False)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return ValidationReport(source, (_syntax_diagnostic(exc, source),), None, readable=False)
    if not data:
        diag = Diagnostic(
            severity="error",
            path="",
            message="the profile is empty",
            fix="add at least one [[backends]] table (rrcli init writes a starter profile)",
            source=source,
            code="empty",
        )
        return ValidationReport(source, (diag,), None, readable=False)
    profile, diagnostics = check_document(data, text, source, environ=environ, resolve=resolve)
    diagnostics = [d for d in diagnostics if d.code not in ignore]
    diagnostics.sort(key=lambda d: (d.line is None, d.line or 0))
    if strict:
        diagnostics = [replace(d, severity="error") for d in diagnostics]
    if any(d.severity == "error" for d in diagnostics):
        profile = None
    return ValidationReport(source, tuple(diagnostics), profile)


def load_profile(
    path: Path | str,
    *,
    environ: Mapping[str, str] | None = None,
    resolve: Resolver | None = None,
    ignore: frozenset[str] = frozenset(),
) -> Profile:
    """The profile at ``path``, or ProfileError naming every error in it (but those of the
    codes in ``ignore``: see ``validate_profile``)."""
    report = validate_profile(path, environ=environ, resolve=resolve, ignore=ignore)
    if not report.ok or report.profile is None:
        lines = "\n".join(f"  {d}" for d in report.errors)
        raise ProfileError(f"{path}: the profile has errors:\n{lines}", report.diagnostics)
    return report.profile


def read_profile_text(path: Path) -> tuple[str, Diagnostic | None]:
    """The file's text, or ONE diagnostic saying why it cannot be a profile (never raises)."""

    def unusable(message: str, fix: str, code: str) -> tuple[str, Diagnostic]:
        problem = Diagnostic(
            severity="error", path="", message=message, fix=fix, source=str(path), code=code
        )
        return "", problem

    try:
        if path.is_dir():
            return unusable("is a directory", "name the profile file inside it", "not_a_file")
        size = path.stat().st_size
        if size > MAX_PROFILE_BYTES:
            return unusable(
                f"is {size / MAX_PROFILE_BYTES:.1f} MiB; a profile is at most 1 MiB",
                "check that this is the profile and not a jobs or results file",
                "too_large",
            )
        raw = path.read_bytes()
    except FileNotFoundError:
        return unusable(
            "no such file", "check the path, or write a starter profile with rrcli init", "missing"
        )
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return unusable(f"cannot be read ({reason})", "check its permissions", "unreadable")
    try:
        return raw.decode("utf-8").removeprefix("\ufeff"), None
    except UnicodeDecodeError as exc:
        return unusable(
            f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            "save the profile as UTF-8 TOML",
            "not_utf8",
        )


def _syntax_diagnostic(exc: tomllib.TOMLDecodeError, source: str) -> Diagnostic:
    text = str(exc)
    match = re.search(r"\(at line (\d+), column (\d+)\)", text)
    message = re.sub(r"\s*\(at line \d+, column \d+\)", "", text) or "invalid TOML"
    line, column = (int(match[1]), int(match[2])) if match else (None, None)
    if "end of document" in text and line is None:
        message = text
    return Diagnostic(
        severity="error",
        path="",
        message=f"not valid TOML: {message}",
        fix="fix the TOML syntax at that place (strings need quotes, tables need [brackets])",
        source=source,
        line=line,
        column=column,
        code="toml_syntax",
    )


def _shape_diagnostic(shape: tuple[int, str], source: str) -> Diagnostic:
    line, message = shape
    return Diagnostic(
        severity="error",
        path="",
        message=f"not a profile rrcli reads: {message}",
        fix="no profile needs this; check that the file is the profile you meant",
        source=source,
        line=line,
        code="toml_shape",
    )
