"""The ``gemini`` provider: the Gemini API's own wire, with an API key.

``POST {base_url}/v1beta/models/{model}:generateContent``, ``:streamGenerateContent?alt=sse``
when streaming, ``:embedContent`` for one embeddings input and ``:batchEmbedContents`` for a
list. The key travels in the ``x-goog-api-key`` header only: never in the URL (Gemini also takes
``?key=``, which would put it in every proxy's and server's access log). Every job is translated:
an OpenAI-shaped one by ``_to_gemini``, an Anthropic-shaped one to the OpenAI shape first
(``providers.translate``). Answers and errors are read by ``_from_gemini``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx2

from rrcli.config.urls import endpoint_url
from rrcli.errors import ProviderError
from rrcli.providers._from_gemini import GeminiStream, gemini_reply, gemini_status_error
from rrcli.providers._http import HTTPProvider, NewStream, Parse, invalid_answer
from rrcli.providers.base import Call, Reply, invalid_response
from rrcli.providers.translate import to_gemini, to_openai
from rrcli.registry import count_inputs

__all__ = ["GeminiProvider"]


class GeminiProvider(HTTPProvider):
    """``x-goog-api-key``; the model and the method in the path."""

    path = "/v1beta/models"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        model = quote(self.backend.model.removeprefix("models/"), safe="")
        self._method = f"{self.path}/{model}:"
        self._plain_url = httpx2.URL(self._method_url("generateContent"))
        stream = httpx2.URL(self._method_url("streamGenerateContent"))
        self._stream_url = stream.copy_merge_params({"alt": "sse"})

    def _method_url(self, method: str) -> str:
        """The model's ``method`` at base_url (its query, if it has one, kept after the path)."""
        return endpoint_url(self._base_url, self._method + method)

    def chat_url(self, call: Call) -> httpx2.URL | str:
        return self._stream_url if call.stream else self._plain_url

    def build_body(self, call: Call) -> dict[str, Any]:
        messages, params = call.messages, call.params
        if call.dialect == "anthropic":
            params = to_openai(messages, params)
            messages = params.pop("messages")
        return to_gemini(messages, params)

    def parse_body(self, data: dict[str, Any]) -> Reply:
        return gemini_reply(data, self._key)

    def new_stream(self) -> GeminiStream:
        return GeminiStream(self._key)

    def _status_error(self, response: httpx2.Response, content: bytes) -> ProviderError:
        return gemini_status_error(super()._status_error(response, content), content, self._key)

    def endpoint_request(self, call: Call) -> tuple[str, dict[str, Any], Parse, NewStream]:
        """Embeddings: one text by ``embedContent``, a list by ``batchEmbedContents``;
        ``dimensions`` as ``outputDimensionality``."""
        if call.endpoint != "embeddings":
            return super().endpoint_request(call)
        options: dict[str, Any] = {}
        dimensions = call.params.get("dimensions")
        if dimensions is not None:
            options["outputDimensionality"] = dimensions
        if not isinstance(call.input, list):
            body = {"content": _content(call.input), **options}
            return self._method_url("embedContent"), body, self._one_vector, _no_stream
        model = f"models/{self.backend.model.removeprefix('models/')}"
        requests = [{"model": model, "content": _content(text), **options} for text in call.input]
        expected = count_inputs(call.input)

        def vectors(data: dict[str, Any]) -> Reply:
            return self._embedded(data, data.get("embeddings"), expected)

        body = {"requests": requests}
        return self._method_url("batchEmbedContents"), body, vectors, _no_stream

    def _one_vector(self, data: dict[str, Any]) -> Reply:
        return self._embedded(data, [data.get("embedding")], 1)

    def _embedded(self, data: dict[str, Any], items: Any, expected: int) -> Reply:
        """The vectors of ``items`` (``{"values": [...]}`` each), ``expected`` of them."""
        if not isinstance(items, list):
            raise invalid_answer("no embeddings list in the body", data, self._key)
        vectors = []
        for item in items:
            values = item.get("values") if isinstance(item, dict) else None
            if not isinstance(values, list):
                raise invalid_answer("an embedding has no values", data, self._key)
            vectors.append(values)
        if len(vectors) != expected:
            raise invalid_response(f"{len(vectors)} embeddings for {expected} inputs")
        return Reply(output="", body=data, embeddings=vectors)


def _content(text: Any) -> dict[str, Any]:
    return {"parts": [{"text": text if isinstance(text, str) else str(text)}]}


def _no_stream() -> GeminiStream:
    raise ProviderError("/embeddings has no streamed form", type="invalid_request", transient=False)
