"""The ``vertex`` provider: Gemini and Claude models on Google Cloud's Vertex AI.

Both live under one project and region,
``{base_url}/v1/projects/{project}/locations/{region}/publishers/{publisher}/models/{model}``,
and which API a backend speaks is its model's publisher (``registry.vertex_publisher``): a
``claude-*`` model is Anthropic's, reached by ``:rawPredict`` (``:streamRawPredict`` when
streamed) with Anthropic's Messages body, less ``model`` (it is in the path) and with
``anthropic_version: "vertex-2023-10-16"`` (``anthropic.py`` reads the answers); any other is
Google's, reached by ``:generateContent`` (``:streamGenerateContent?alt=sse``) with Gemini's
body (``gemini.py`` builds and reads it). The base_url is the region's endpoint
(``https://{region}-aiplatform.googleapis.com``), or the global one for ``region = "global"``.

The credential is a Google OAuth token in ``Authorization: Bearer``: from
``credentials.token_env`` or ``credentials.token_command`` (``gcloud auth print-access-token``,
run again before it expires), else found by google-auth (the ``vertex`` extra, imported when
the first call needs it): Application Default Credentials, or the credentials JSON named in
``credentials.file``. google-auth's lookup and refresh are network I/O: they run off the event
loop, once however many calls wait, and again when the token is about to expire or a 401 says
it is no longer taken. Each token is reported (``report_secrets_to``) before it is sent, so no
record shows it.

Errors are Google's document for both publishers (``_from_gemini.gemini_status_error``):
``RESOURCE_EXHAUSTED`` (429) is a rate limit, ``UNAUTHENTICATED`` (401) and
``PERMISSION_DENIED`` (403) take the backend down, ``UNAVAILABLE`` (503) is retried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import quote

import httpx2

from rrcli.config.gcp import EXTRA_HINT
from rrcli.config.profile import Backend, RetrySettings
from rrcli.config.urls import endpoint_url
from rrcli.errors import ProviderError
from rrcli.providers._from_gemini import gemini_status_error
from rrcli.providers.anthropic import AnthropicProvider
from rrcli.providers.azure import TokenCommand
from rrcli.providers.base import Call, Reply
from rrcli.providers.gemini import GeminiProvider
from rrcli.registry import vertex_publisher

__all__ = ["ANTHROPIC_VERTEX_VERSION", "SCOPE", "vertex_provider"]

#: the ``anthropic_version`` a Claude model on Vertex AI is asked with (in the body)
ANTHROPIC_VERTEX_VERSION = "vertex-2023-10-16"
#: the OAuth scope a Vertex AI token is asked for
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
#: seconds before a google-auth token's expiry it is refreshed
REFRESH_MARGIN = 300.0


def vertex_provider(
    backend: Backend,
    api_key: str | None,
    *,
    retry: RetrySettings,
    seed: int | None = None,
    **options: Any,
) -> HTTPVertex:
    """The adapter of ``backend``'s model: its publisher's API at Vertex AI's address."""
    adapter = VertexClaude if vertex_publisher(backend.model) == "anthropic" else VertexGemini
    return adapter(backend, api_key, retry=retry, seed=seed, **options)


def _unheard(secret: str) -> None:
    """No one to tell (a provider made without ``make_provider``'s masking)."""


def _google_auth() -> Any:
    """google-auth's modules (the ``vertex`` extra)."""
    try:
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.requests
        import google.oauth2.service_account
    except ImportError:
        raise ProviderError(
            "vertex backends find their token with google-auth, which is not installed — "
            f"{EXTRA_HINT}, or give a token in credentials.token_env",
            type="authentication_error",
            transient=False,
            backend_down=True,
        ) from None
    return google


class _Tokens:
    """Where a backend's bearer token comes from: a fixed one (``token_env``), a command, or
    google-auth's credentials (refreshed when they are about to expire)."""

    def __init__(self, backend: Backend, fixed: str | None) -> None:
        self._backend = backend
        self._fixed = fixed
        command = backend.credentials.token_command
        self._command = TokenCommand(command) if command is not None else None
        self._google: Any = None  # google-auth's credentials, found at the first call
        self._lock = asyncio.Lock()  # the first calls wait for one lookup, not one each

    async def token(self) -> str:
        if self._fixed is not None:
            return self._fixed
        if self._command is not None:
            return await self._command.token()
        found = self._google
        if found is not None and found.token and not _expiring(found):
            return str(found.token)
        google = _google_auth()
        async with self._lock:
            if self._google is None:
                self._google = await asyncio.to_thread(self._find, google)
            found = self._google
            if not found.token or _expiring(found):
                await asyncio.to_thread(self._refresh, google, found)
            return str(found.token)

    def expire(self) -> None:
        """A 401: the token is no longer taken; the next call asks for another."""
        if self._command is not None:
            self._command.expire()
        elif self._google is not None:
            self._google.expiry = None
            self._google.token = None

    def _find(self, google: Any) -> Any:
        """Application Default Credentials, or those of ``credentials.file``."""
        path = self._backend.credentials.file
        try:
            if path is not None:
                found, _ = google.auth.load_credentials_from_file(path, scopes=[SCOPE])
            else:
                found, _ = google.auth.default(scopes=[SCOPE])
        except google.auth.exceptions.GoogleAuthError as exc:
            raise self._no_token(_first_line(exc)) from None
        return found

    def _refresh(self, google: Any, found: Any) -> None:
        try:
            found.refresh(google.auth.transport.requests.Request())
        except google.auth.exceptions.GoogleAuthError as exc:
            raise self._no_token(f"its refresh failed: {_first_line(exc)}") from None

    def _no_token(self, why: str) -> ProviderError:
        where = self._backend.credentials.file or "Application Default Credentials"
        return ProviderError(
            f"no Google Cloud token for backend {self._backend.id!r} from {where} ({why}) — "
            "run `gcloud auth application-default login`, set GOOGLE_APPLICATION_CREDENTIALS "
            "to a service account's JSON, or name one in credentials.file",
            type="authentication_error",
            transient=False,
            backend_down=True,
        )


def _expiring(credentials: Any) -> bool:
    """Whether google-auth's ``credentials`` expire within REFRESH_MARGIN (none said: no)."""
    expiry = getattr(credentials, "expiry", None)
    if expiry is None:
        return False
    left = expiry.replace(tzinfo=UTC) - datetime.now(UTC)
    return left.total_seconds() < REFRESH_MARGIN


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:200]


class HTTPVertex:
    """What both publishers share: the model's address, the bearer token, Google's errors."""

    publisher: ClassVar[str]
    _key: str | None
    _base_url: str
    backend: Backend

    def _vertex_init(self, api_key: str | None) -> None:
        backend = self.backend
        model = quote(backend.model.rpartition("/")[2], safe="@.-_")
        region = quote(backend.region or "global", safe="")
        project = quote(backend.project or "", safe="")
        self._model_path = (
            f"/v1/projects/{project}/locations/{region}/publishers/{self.publisher}/models/{model}:"
        )
        self._tokens = _Tokens(backend, api_key)
        self._learn: Callable[[str], None] = _unheard

    def report_secrets_to(self, learn: Callable[[str], None]) -> None:
        """Tell ``learn`` each token before a request carries it (``scrub``)."""
        self._learn = learn

    def _vertex_url(self, method: str) -> str:
        """The model's ``method`` at base_url."""
        return endpoint_url(self._base_url, self._model_path + method)

    async def prepare(self, request: httpx2.Request) -> httpx2.Request:
        """``request`` with the current token as its bearer."""
        token = await self._tokens.token()
        if token != self._key:
            self._learn(token)
            self._key = token
        request.headers["authorization"] = f"Bearer {token}"
        return request

    async def _sent(self, send: Any, call: Call, on_text: Any) -> Reply:
        try:
            return await send(call, on_text)
        except ProviderError as exc:
            if exc.status_code == 401:
                self._tokens.expire()  # the next call (a health probe's) asks for another
            raise


class VertexGemini(HTTPVertex, GeminiProvider):
    """A Gemini model: ``:generateContent``, ``:streamGenerateContent?alt=sse``."""

    publisher = "google"

    def __init__(self, backend: Backend, api_key: str | None, **options: Any) -> None:
        super().__init__(backend, None, **options)
        self._vertex_init(api_key)
        self._url = self._vertex_url("generateContent")
        self._plain_url = httpx2.URL(self._url)
        stream = httpx2.URL(self._vertex_url("streamGenerateContent"))
        self._stream_url = stream.copy_merge_params({"alt": "sse"})

    async def send(self, call: Call, on_text: Callable[[str], None] | None = None) -> Reply:
        return await self._sent(super().send, call, on_text)

    def endpoint_request(self, call: Call) -> Any:
        """Embeddings on Vertex AI are another API (``:predict``): chat only here."""
        return super(GeminiProvider, self).endpoint_request(call)


class VertexClaude(HTTPVertex, AnthropicProvider):
    """A Claude model: ``:rawPredict``, ``:streamRawPredict``; Anthropic's body and answers."""

    publisher = "anthropic"
    api_headers: ClassVar[Mapping[str, str]] = {}  # the version is in the body

    def __init__(self, backend: Backend, api_key: str | None, **options: Any) -> None:
        super().__init__(backend, None, **options)
        self._vertex_init(api_key)
        self._url = self._vertex_url("rawPredict")
        self._plain_url = httpx2.URL(self._url)
        self._stream_url = httpx2.URL(self._vertex_url("streamRawPredict"))

    def chat_url(self, call: Call) -> httpx2.URL:
        return self._stream_url if call.stream else self._plain_url

    def build_body(self, call: Call) -> dict[str, Any]:
        body = super().build_body(call)
        del body["model"]
        return {"anthropic_version": ANTHROPIC_VERTEX_VERSION, **body}

    async def count_tokens(self, body: Mapping[str, Any]) -> int:
        """Vertex AI counts Claude's tokens at another address: not asked here."""
        raise ProviderError(
            "vertex backends do not count tokens", type="endpoint_not_served", transient=False
        )

    async def send(self, call: Call, on_text: Callable[[str], None] | None = None) -> Reply:
        return await self._sent(super().send, call, on_text)

    def _status_error(self, response: httpx2.Response, content: bytes) -> ProviderError:
        return gemini_status_error(super()._status_error(response, content), content, self._key)
