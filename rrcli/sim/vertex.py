"""Vertex AI as ``rrcli sim`` answers it: Gemini and Claude models under a project and region.

Paths: ``/{v1,v1beta1}/projects/{project}/locations/{location}/publishers/google/models/
{model}:generateContent`` (``:streamGenerateContent?alt=sse``), Gemini's bodies and answers
(``rrcli.sim.gemini``); ``…/publishers/anthropic/models/{model}:rawPredict``
(``:streamRawPredict``), Anthropic's Messages (``rrcli.sim.anthropic_messages``) with
``anthropic_version: "vertex-2023-10-16"`` (or a later dated version) in the body and no
``model`` (a request without the
one, or with the other, is a 400). The credential is ``Authorization: Bearer <token>``; a
token the sim does not know (``api_keys``) is a 401 ``UNAUTHENTICATED``. Errors are Google's
document for both publishers but a Claude request's own refusals (a 400), which are
Anthropic's: a 429 is ``RESOURCE_EXHAUSTED``.

``POST /token`` is an OAuth token endpoint for google-auth's service-account flow (a
``credentials.file`` or ``GOOGLE_APPLICATION_CREDENTIALS`` whose ``token_uri`` points here): a
JWT-bearer grant whose assertion asks for the cloud-platform scope gets the sim's first API key
as its access token, for an hour. The assertion's signature is not checked.
"""

from __future__ import annotations

import base64
import re
from typing import Any
from urllib.parse import parse_qs

import orjson

from rrcli.errors import InvalidSimRequest
from rrcli.sim.anthropic_messages import AnthropicWire
from rrcli.sim.gemini import GeminiFamily, GeminiWire

__all__ = ["TOKEN_LIFE", "VertexClaudeWire", "VertexGeminiWire", "issue_token", "vertex_routes"]

ANTHROPIC_VERSION = "vertex-2023-10-16"
_DATED = re.compile(r"\d{4}-\d{2}-\d{2}")  # a later API version, as newer SDKs send it
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
TOKEN_LIFE = 3600  # seconds a token the sim issues lasts
_UNAUTHENTICATED = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
    "cookie or other valid authentication credential."
)
_GOOGLE = GeminiFamily()


def _bearer(headers: Any) -> str | None:
    value = headers.get("authorization", "")
    return value[7:] if value.startswith("Bearer ") else None


def _refused(wire: Any, headers: Any, secrets: Any) -> tuple[int, str, str] | None:
    if wire.key(headers) in secrets:
        return None
    return 401, "UNAUTHENTICATED", _UNAUTHENTICATED


class VertexGeminiWire(GeminiWire):
    """Gemini's wire with a bearer token for its key."""

    def key(self, headers: Any) -> str | None:
        return _bearer(headers)

    def refused(
        self, method: str, url: str, headers: Any, raw: bytes, secrets: Any
    ) -> tuple[int, str, str] | None:
        return _refused(self, headers, secrets)


class VertexClaudeWire(AnthropicWire):
    """Anthropic's Messages at ``:rawPredict`` / ``:streamRawPredict`` (``stream``)."""

    request_id_header = "x-request-id"  # not "request-id": no anthropic-version header needed

    def __init__(self, stream: bool) -> None:
        self.stream = stream

    def key(self, headers: Any) -> str | None:
        return _bearer(headers)

    def refused(
        self, method: str, url: str, headers: Any, raw: bytes, secrets: Any
    ) -> tuple[int, str, str] | None:
        return _refused(self, headers, secrets)

    def streamed(self, path: str, body: dict[str, Any]) -> bool:
        return self.stream

    def reply(self, sim: Any, body: dict[str, Any], modes: str) -> dict[str, Any]:
        if "model" in body:
            raise InvalidSimRequest("model: Extra inputs are not permitted")
        version = body.get("anthropic_version")
        if version != ANTHROPIC_VERSION and not _DATED.fullmatch(str(version)):
            raise InvalidSimRequest(
                f"anthropic_version: {version!r}; expected {ANTHROPIC_VERSION!r}"
            )
        rest = {k: v for k, v in body.items() if k != "anthropic_version"}
        return super().reply(sim, rest, modes)

    def error_response(
        self,
        status: int,
        kind: str | None,
        message: str,
        code: str | None,
        param: str | None,
        headers: dict[str, str] | None,
    ) -> tuple[bytes, dict[str, str] | None]:
        """Anthropic's error for a request it refuses (400); Google's for the rest."""
        if status == 400:
            return super().error_response(status, kind, message, code, param, headers)
        google_kind = kind if kind == "UNAUTHENTICATED" else None
        return _GOOGLE.error_response(status, google_kind, message, code, param, headers)


def vertex_routes() -> list[tuple[str, Any]]:
    """Each Vertex AI path and the wire that answers it."""
    wires = {
        "google": {
            "generateContent": VertexGeminiWire(stream=False),
            "streamGenerateContent": VertexGeminiWire(stream=True),
        },
        "anthropic": {
            "rawPredict": VertexClaudeWire(stream=False),
            "streamRawPredict": VertexClaudeWire(stream=True),
        },
    }
    return [
        (
            f"/{version}/projects/{{project}}/locations/{{location}}/publishers/{publisher}"
            f"/models/{{model}}:{method}",
            wire,
        )
        for version in ("v1", "v1beta1")  # rrcli's is v1; google-genai's v1beta1
        for publisher, methods in wires.items()
        for method, wire in methods.items()
    ]


def issue_token(form: bytes, keys: tuple[str, ...]) -> tuple[int, dict[str, Any]]:
    """(status, body) of the token endpoint for a form-encoded grant ``form``."""
    fields = {k: v[0] for k, v in parse_qs(form.decode("latin-1")).items()}
    if fields.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
        return 400, {"error": "unsupported_grant_type"}
    claims = _claims(fields.get("assertion", ""))
    if claims is None or SCOPE not in str(claims.get("scope", "")).split():
        return 400, {"error": "invalid_grant", "error_description": "Invalid JWT or scope."}
    token = keys[0] if keys else "sim-vertex-token"
    return 200, {"access_token": token, "expires_in": TOKEN_LIFE, "token_type": "Bearer"}


def _claims(assertion: str) -> dict[str, Any] | None:
    """A JWT's payload (its signature not checked), or None when it is not one."""
    parts = assertion.split(".")
    if len(parts) != 3:
        return None
    try:
        data = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
