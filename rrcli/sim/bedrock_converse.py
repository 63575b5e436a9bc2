"""Bedrock's Converse API as ``rrcli sim`` answers it: ``/model/{modelId}/converse``, and
``/converse-stream`` in AWS event-stream frames (``application/vnd.amazon.eventstream``).

Requests are signed with SigV4: with ``--api-key`` the sim takes each key as a secret access
key and checks the signature with botocore's own signer (the canonical request of the headers
the ``Authorization`` header names, the ``X-Amz-Date`` it was made at); a signature no key makes
is refused 403 ``InvalidSignatureException``, an unsigned request 403
``MissingAuthenticationTokenException``, as Bedrock does. Errors are Bedrock's: ``{"message"}``
with the exception in the ``x-amzn-ErrorType`` header (``ThrottlingException`` for a 429,
``ServiceUnavailableException`` for a 503...). A body field Converse does not have, a blank text
block and tool blocks without a ``toolConfig`` are a 400 ``ValidationException``, as Bedrock
refuses them. A stream is ``messageStart``, a ``contentBlockStart`` for a tool call,
``contentBlockDelta`` events (text, reasoning text and signature, a tool's input JSON pieces),
``contentBlockStop``, ``messageStop`` and ``metadata`` (usage); the mid-stream error is an
exception frame.
"""

from __future__ import annotations

import hmac
import re
from typing import Any, ClassVar

import orjson

from rrcli.errors import InvalidSimRequest
from rrcli.providers.converse import CONVERSE_FIELDS
from rrcli.providers.eventstream import encode_frame
from rrcli.sim.replies import chat_reply
from rrcli.sim.wire import Wire
from rrcli.vocabulary import anthropic_stop_reason

__all__ = ["BedrockWire", "signature_ok"]

_NAMESPACE = ":http://internal.amazon.com/coral/com.amazon.bedrock/"
_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}
_AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,\s*"
    r"SignedHeaders=([a-z0-9;-]+),\s*Signature=([0-9a-f]{64})"
)
_SIGNATURE = "sim-signature"


def signature_ok(
    method: str, url: str, headers: Any, body: bytes, secrets: tuple[str, ...]
) -> bool | None:
    """Whether the request's SigV4 signature is one of ``secrets``' (botocore's signer makes
    the expected one); None when it carries no SigV4 ``Authorization`` at all."""
    found = _AUTH.fullmatch(headers.get("authorization", ""))
    if found is None:
        return None
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    access_key, day, region, service, signed, signature = found.groups()
    stamp = headers.get("x-amz-date", "")
    if not stamp.startswith(day):
        return False
    names = signed.split(";")
    request = AWSRequest(
        method=method, url=url, data=body, headers={n: headers.get(n, "") for n in names}
    )
    request.context["timestamp"] = stamp
    for secret in secrets:
        signer = SigV4Auth(Credentials(access_key, secret), service, region)
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        if hmac.compare_digest(expected, signature):
            return True
    return False


def _frame(kind: str, data: dict[str, Any]) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return encode_frame(headers, orjson.dumps({**data, "p": "abcdefghij"}))


class BedrockWire(Wire):
    """The Converse wire format."""

    request_id_header = "x-amzn-RequestId"
    stream_media_type: ClassVar[str] = "application/vnd.amazon.eventstream"

    def streamed(self, path: str, body: dict[str, Any]) -> bool:
        return path.endswith("/converse-stream")

    def refused(
        self, method: str, url: str, headers: Any, raw: bytes, secrets: Any
    ) -> tuple[int, str, str] | None:
        try:
            verdict = signature_ok(method, url, headers, raw, tuple(secrets))
        except ImportError:
            return 500, "InternalServerException", "install botocore: pip install 'rrcli[bedrock]'"
        if verdict is None:
            return 403, "MissingAuthenticationTokenException", "Missing Authentication Token"
        if not verdict:
            return (
                403,
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you "
                "provided. Check your AWS Secret Access Key and signing method. Consult the "
                "service documentation for details.",
            )
        return None

    def error_type(self, status: int) -> str:
        fallback = "InternalServerException" if status >= 500 else "ValidationException"
        return _TYPES.get(status, fallback)

    def error(self, kind: str, message: str, code: str | None, param: str | None) -> dict:
        return {"message": message}

    def error_headers(self, kind: str) -> dict[str, str]:
        return {"x-amzn-errortype": kind + _NAMESPACE}

    def limit_headers(self, spec: str) -> dict[str, str]:
        return {}  # Bedrock sends no rate-limit headers

    def reply(self, sim: Any, body: dict[str, Any], modes: str) -> dict[str, Any]:
        r = chat_reply(sim, _as_messages(body), modes, anthropic=True)
        r["id"] = sim.next_id("sim-bedrock-")
        return r

    def _usage(self, r: dict[str, Any]) -> dict[str, int]:
        cached = r["cached"]
        usage = {
            "inputTokens": r["input"] - cached,
            "outputTokens": r["output"],
            "totalTokens": r["input"] + r["output"],
        }
        if cached:
            usage["cacheReadInputTokens"] = cached
            usage["cacheWriteInputTokens"] = 0
        return usage

    def _content(self, r: dict[str, Any]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if r["reasoning"]:
            text = {"text": r["reasoning"], "signature": _SIGNATURE}
            blocks.append({"reasoningContent": {"reasoningText": text}})
        tool = r["tool"]
        if tool is not None:
            done = r["finish"] != "length"
            use = {"toolUseId": tool["id"], "name": tool["name"]}
            blocks.append({"toolUse": {**use, "input": tool["input"] if done else {}}})
        else:
            blocks.append({"text": "".join(r["pieces"])})
        return blocks

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        return {
            "output": {"message": {"role": "assistant", "content": self._content(r)}},
            "stopReason": anthropic_stop_reason(r["finish"]),
            "usage": self._usage(r),
            "metrics": {"latencyMs": 1},
        }

    def head(self, r: dict[str, Any]) -> bytes:
        return _frame("messageStart", {"role": "assistant"})

    def first(self, r: dict[str, Any]) -> bytes:
        out = b""
        if r["reasoning"]:
            reasoning = [{"text": r["reasoning"]}, {"signature": _SIGNATURE}]
            for delta in reasoning:
                block = {"contentBlockIndex": 0, "delta": {"reasoningContent": delta}}
                out += _frame("contentBlockDelta", block)
            out += _frame("contentBlockStop", {"contentBlockIndex": 0})
        tool = r["tool"]
        if tool is not None:
            start = {"toolUse": {"toolUseId": tool["id"], "name": tool["name"]}}
            out += _frame(
                "contentBlockStart", {"contentBlockIndex": r["text_index"], "start": start}
            )
        return out

    def deltas(self, r: dict[str, Any], start: int, end: int) -> bytes:
        index, pieces = r["text_index"], r["pieces"][start:end]
        tool = r["tool"] is not None
        return b"".join(
            _frame(
                "contentBlockDelta",
                {
                    "contentBlockIndex": index,
                    "delta": {"toolUse": {"input": p}} if tool else {"text": p},
                },
            )
            for p in pieces
        )

    def tail(self, r: dict[str, Any]) -> bytes:
        stop = {"stopReason": anthropic_stop_reason(r["finish"])}
        metadata = {"usage": self._usage(r), "metrics": {"latencyMs": 1}}
        return (
            _frame("contentBlockStop", {"contentBlockIndex": r["text_index"]})
            + _frame("messageStop", stop)
            + _frame("metadata", metadata)
        )

    def error_event(self, r: dict[str, Any]) -> bytes:
        headers = {
            ":exception-type": "internalServerException",
            ":content-type": "application/json",
            ":message-type": "exception",
        }
        return encode_frame(headers, orjson.dumps({"message": "simulated failure mid-stream"}))


def _as_messages(body: dict[str, Any]) -> dict[str, Any]:
    """A Converse request as the Messages-shaped request the reply model reads (a field
    Converse does not have: a 400, as Bedrock's ``extraneous key`` refusal)."""
    for key in body:
        if key not in CONVERSE_FIELDS:
            raise InvalidSimRequest(f"extraneous key [{key}] is not permitted")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidSimRequest("The model returned the following errors: messages: required")
    out: dict[str, Any] = {"messages": [_message(m) for m in messages]}
    config = body.get("toolConfig") or {}
    kinds = {b["type"] for m in out["messages"] for b in m["content"]}
    if not config and kinds & {"tool_use", "tool_result"}:
        raise InvalidSimRequest(
            "The toolConfig field must be defined when using toolUse and toolResult content blocks."
        )
    tools = [t["toolSpec"] for t in config.get("tools", ()) if "toolSpec" in t]
    if tools:
        out["tools"] = [
            {"name": t.get("name"), "input_schema": (t.get("inputSchema") or {}).get("json")}
            for t in tools
        ]
        choice = config.get("toolChoice") or {}
        if "tool" in choice:
            out["tool_choice"] = {"type": "tool", "name": choice["tool"].get("name")}
    cap = (body.get("inferenceConfig") or {}).get("maxTokens")
    if cap is not None:
        out["max_tokens"] = cap
    thinking = (body.get("additionalModelRequestFields") or {}).get("thinking")
    if thinking is not None:
        out["thinking"] = thinking
    return out


def _message(message: Any) -> dict[str, Any]:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise InvalidSimRequest("a message needs a role and a content list")
    blocks = []
    for block in message["content"]:
        if "text" in block and not str(block["text"]).strip():
            raise InvalidSimRequest("The text field in the ContentBlock object is blank.")
        if "text" in block:
            blocks.append({"type": "text", "text": block["text"]})
        elif "toolUse" in block:
            use = block["toolUse"]
            blocks.append({"type": "tool_use", "id": use.get("toolUseId"), "name": use.get("name")})
        elif "toolResult" in block:
            result = block["toolResult"]
            if any("text" in b and not str(b["text"]).strip() for b in result.get("content", ())):
                raise InvalidSimRequest("The text field in the ToolResultContentBlock is blank.")
            blocks.append({"type": "tool_result", "tool_use_id": result.get("toolUseId")})
    return {"role": message.get("role"), "content": blocks}
