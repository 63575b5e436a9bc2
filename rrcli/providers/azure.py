"""The ``azure`` provider: Azure OpenAI, whose bodies are OpenAI's (``openai.py`` reads them).

What differs is around the body. The address: a deployment's
``{base_url}/openai/deployments/{deployment}/chat/completions?api-version=…`` (its embeddings
likewise; responses at ``/openai/responses?api-version=…``), or without a deployment Azure's v1
API, ``{base_url}/openai/v1/…``, which takes no api-version and reads the model from the body.
The credential: the resource's key in ``api-key``, or an Entra ID bearer token, from
``credentials.token_env`` or printed by ``credentials.token_command`` (run again shortly before
the token expires, or after a 401). Its rate-limit headers say what is left
(``x-ratelimit-remaining-requests``/``-tokens``) without a reset: a budget spent pauses the
backend for Azure's shortest window, one second. Its content filter: a prompt refused is a 400
``content_filter`` (``base.error_from_status``), an answer cut by it a 200 whose finish reason
is ``content_filter``: both errors that are not retried and name the categories.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx2
import orjson

from rrcli.config.profile import Backend, RetrySettings
from rrcli.config.redaction import command_secrets, redact_each
from rrcli.config.urls import endpoint_url
from rrcli.errors import ProviderError
from rrcli.providers._http import NewStream, Parse
from rrcli.providers.base import Call, Reply, error_body, filter_refusal
from rrcli.providers.endpoints import endpoint_request
from rrcli.providers.openai import OpenAIProvider
from rrcli.registry import AZURE_API_VERSION

__all__ = ["AzureProvider", "TokenCommand", "azure_api_root"]

#: seconds a budget Azure says is spent holds the backend (its headers give no reset; Azure
#: counts requests over windows of one or ten seconds)
LIMIT_WINDOW = 1.0
#: seconds before a token's expiry it is renewed; a token without one is kept this long
RENEW_MARGIN = 120.0
PLAIN_TOKEN_LIFE = 600.0
#: seconds a token command may run
COMMAND_TIMEOUT = 60.0
_ROOT_ENDINGS = ("/openai/v1", "/openai")


def azure_api_root(base_url: str) -> str:
    """The resource's address without what rrcli adds (``/openai``, ``/openai/v1``)."""
    root = base_url.split("?", 1)[0].rstrip("/")
    for ending in _ROOT_ENDINGS:
        if root.endswith(ending):
            return root[: -len(ending)]
    return root


class AzureProvider(OpenAIProvider):
    """Azure OpenAI: OpenAI's bodies at Azure's addresses with Azure's credentials."""

    def __init__(
        self,
        backend: Backend,
        api_key: str | None,
        *,
        retry: RetrySettings,
        seed: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(backend, api_key, retry=retry, seed=seed, clock=clock, transport=transport)
        root = azure_api_root(backend.base_url)
        if backend.deployment:
            version = backend.api_version or AZURE_API_VERSION
            query = f"?api-version={quote(version, safe='')}"
            self._bases = {
                "deployment": f"{root}/openai/deployments/{quote(backend.deployment, safe='')}"
                + query,
                "responses": f"{root}/openai{query}",
            }
        else:
            v1 = f"{root}/openai/v1"
            self._bases = {"deployment": v1, "responses": v1}
        self._url = endpoint_url(self._bases["deployment"], self.path)
        self._chat_url = httpx2.URL(self._url)
        credentials = backend.credentials
        self._learn: Callable[[str], None] = _unheard
        self._command = None
        if credentials.token_command is not None:
            self._command = TokenCommand(credentials.token_command)
        if credentials.token_env is not None or self._command is not None:
            self._client.headers.pop("api-key", None)
            if api_key:
                self._client.headers["authorization"] = f"Bearer {api_key}"

    def report_secrets_to(self, learn: Callable[[str], None]) -> None:
        """Tell ``learn`` each token the command prints, before it is sent (``scrub``)."""
        self._learn = learn

    def auth_value(self, api_key: str) -> str:
        return api_key  # the resource key, as it is, in ``api-key``

    def endpoint_request(self, call: Call) -> tuple[str, dict[str, Any], Parse, NewStream]:
        """Embeddings at the deployment (or v1); responses at ``/openai/responses``."""
        base = self._bases["responses" if call.endpoint == "responses" else "deployment"]
        return endpoint_request(call, base, self.backend.model, self._key)

    async def send(self, call: Call, on_text: Callable[[str], None] | None = None) -> Reply:
        if self._command is not None:
            await self._renew()
        try:
            reply = await super().send(call, on_text)
        except ProviderError as exc:
            if self._command is not None and exc.status_code == 401:
                self._command.expire()  # the next call (a health probe's) asks anew
            raise
        if call.endpoint == "chat" and reply.finish_reason == "content_filter":
            raise _filtered_answer(reply, self._key)
        return reply

    async def exchange(self, method: str, url: str, **options: Any) -> bytes:
        if self._command is not None:
            await self._renew()
        return await super().exchange(method, url, **options)

    def batch_base(self) -> str:
        """Where the resource's files and batches are (an api-version with it, or v1)."""
        return self._bases["responses"]

    async def _renew(self) -> None:
        """The command's token in the auth header, asked for again when it is near expiry."""
        assert self._command is not None
        token = await self._command.token()
        if token != self._key:
            self._learn(token)
            self._key = token
            self._client.headers["authorization"] = f"Bearer {token}"
            self._sender.refresh()

    def _finish(self, reply: Reply, response: httpx2.Response) -> Reply:
        reply = super()._finish(reply, response)
        if reply.pause_s is None:
            headers = response.headers
            spent = ("x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens")
            if any((headers.get(name) or "").strip() == "0" for name in spent):
                reply.pause_s = LIMIT_WINDOW
        return reply


def _unheard(secret: str) -> None:
    """Where a provider made without ``make_provider``'s masking reports a token."""


def _filtered_answer(reply: Reply, key: str | None) -> ProviderError:
    """A 200 whose answer the content filter cut: an error naming the categories."""
    choices = (reply.body or {}).get("choices") or [{}]
    first = choices[0] if isinstance(choices[0], dict) else {}
    message = filter_refusal(first.get("content_filter_results"), "the answer")
    body = error_body(orjson.dumps(reply.body), key) if reply.body else None
    return ProviderError(
        message, type="content_filter", transient=False, status_code=200, body=body
    )


class TokenCommand:
    """A command that prints a bearer token (``az account get-access-token``...): its output is
    the token, or JSON with ``accessToken``/``access_token``/``token`` and the expiry
    (``expires_on``: epoch seconds; ``expiresOn``: a local time; ``expires_in``: seconds). Run
    without a shell, once at a time; its output and the token are never logged or shown."""

    def __init__(self, command: str, clock: Callable[[], float] = time.time) -> None:
        self._argv = shlex.split(command)
        self._secrets = command_secrets(command)  # masked in what its stderr says
        self._clock = clock
        self._token: str | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()

    def expire(self) -> None:
        self._expires = 0.0

    async def token(self) -> str:
        if self._token is not None and self._clock() < self._expires - RENEW_MARGIN:
            return self._token
        async with self._lock:
            if self._token is None or self._clock() >= self._expires - RENEW_MARGIN:
                self._token, self._expires = _read_token(await self._run(), self._clock())
            return self._token

    async def _run(self) -> bytes:
        name = self._argv[0] if self._argv else "(empty)"
        try:
            process = await asyncio.create_subprocess_exec(
                *self._argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except (OSError, IndexError) as exc:
            raise _command_failed(f"{name} cannot be started ({exc.__class__.__name__})") from None
        try:
            out, err = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise _command_failed(f"{name} gave no token within {COMMAND_TIMEOUT:g} s") from None
        if process.returncode != 0:
            said = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            said = redact_each(said[0], self._secrets)[:200]
            raise _command_failed(f"{name} exited with {process.returncode}: {said}")
        return out


def _command_failed(why: str) -> ProviderError:
    return ProviderError(
        f"credentials.token_command failed: {why} — run it by hand to see why (a login "
        "expired?), then start again",
        type="token_command",
        transient=False,
        backend_down=True,
    )


def _read_token(out: bytes, now: float) -> tuple[str, float]:
    """(token, expiry in epoch seconds) from a token command's output."""
    text = out.decode("utf-8", "replace").strip()
    if not text.startswith("{"):
        if not text or any(c.isspace() for c in text):
            raise _command_failed("its output is not one token")
        return text, now + PLAIN_TOKEN_LIFE
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise _command_failed("its output is neither a token nor JSON") from None
    token = next(
        (data[k] for k in ("accessToken", "access_token", "token") if isinstance(data.get(k), str)),
        None,
    )
    if not token:
        raise _command_failed("its JSON has no accessToken, access_token or token")
    return token, _expiry(data, now)


def _expiry(data: dict[str, Any], now: float) -> float:
    """The token's expiry from a command's JSON (epoch seconds); PLAIN_TOKEN_LIFE from now when
    it says none that can be read."""
    epoch = data.get("expires_on")
    if isinstance(epoch, str) and epoch.isdigit():
        epoch = int(epoch)
    if isinstance(epoch, int | float) and not isinstance(epoch, bool):
        return float(epoch)
    seconds = data.get("expires_in")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool):
        return now + float(seconds)
    local = data.get("expiresOn")
    if isinstance(local, str):
        try:
            return datetime.fromisoformat(local).timestamp()
        except ValueError:
            pass
    return now + PLAIN_TOKEN_LIFE
