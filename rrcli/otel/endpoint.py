"""Where spans go: the OTLP/HTTP traces URL from ``--otlp`` or the standard environment.

Light on purpose (no OpenTelemetry import): a bad URL is a usage error before anything is sent.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from urllib.parse import urlsplit

from rrcli.config.redaction import redacted_url
from rrcli.config.urls import endpoint_url
from rrcli.errors import UsageError

__all__ = ["TRACES_PATH", "require_sdk", "traces_url"]

TRACES_PATH = "/v1/traces"  # the OTLP/HTTP path of traces, added to a base URL
ENV_TRACES = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"  # a full URL, used as it is
ENV_BASE = "OTEL_EXPORTER_OTLP_ENDPOINT"  # a base URL, TRACES_PATH added
_SDK = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter")


def traces_url(option: str | None, environ: Mapping[str, str]) -> str:
    """The traces URL: ``option`` (a base URL gets ``/v1/traces``, a URL with a path is used as
    it is), else $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT plus
    ``/v1/traces``. UsageError (exit 2) when none is given or it is not an http(s) URL."""
    if option:
        return _checked("--otlp", option, base=True)
    if environ.get(ENV_TRACES):
        return _checked(ENV_TRACES, environ[ENV_TRACES], base=False)
    if environ.get(ENV_BASE):
        return _checked(ENV_BASE, environ[ENV_BASE], base=True, always_add=True)
    raise UsageError(
        f"no OTLP endpoint: give --otlp URL (e.g. http://localhost:4318) or set {ENV_BASE}"
    )


def _checked(source: str, url: str, *, base: bool, always_add: bool = False) -> str:
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError as exc:
        raise UsageError(f"{source} {redacted_url(url)!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"{source} {redacted_url(url)!r}: expected an http:// or https:// URL of an OTLP/HTTP "
            "collector, e.g. http://localhost:4318"
        )
    url = url.strip()
    if base and (always_add or parts.path in ("", "/")):
        return endpoint_url(url, TRACES_PATH)
    return url


def require_sdk() -> None:
    """UsageError (exit 2) unless the OpenTelemetry SDK and its OTLP/HTTP exporter import."""
    for name in _SDK:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:  # a parent package is missing
            found = False
        if not found:
            raise UsageError(
                f"OpenTelemetry export needs the otel extra ({name} is missing): "
                "pip install 'rrcli[otel]'"
            )
