"""What a span sender says at its end (light: no OpenTelemetry import)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["URL_VARIABLE", "SendReport"]


@dataclass(frozen=True, slots=True)
class SendReport:
    """What reached the collector: ``sent`` spans, ``dropped`` spans that did not (a failed or
    abandoned batch, a full queue), and the exporter's last ``error``."""

    endpoint: str
    sent: int
    dropped: int
    error: str | None


#: the environment variable that hands the span process (``otel.child``) the collector's URL
URL_VARIABLE = "RRCLI_OTLP_URL"
