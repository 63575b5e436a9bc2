"""What Bedrock's Converse API refuses, from its published service model: botocore's own
validator over the ``bedrock-runtime`` model's Converse input shape (every field's name, type
and bounds), and the rules the shape cannot say: a text block is never blank (a tool result's
neither), and tool blocks need a toolConfig."""

from __future__ import annotations

from typing import Any

import botocore.session
from botocore.validate import ParamValidator

_SHAPE = (
    botocore.session.get_session()
    .get_service_model("bedrock-runtime")
    .operation_model("Converse")
    .input_shape
)


def converse_problem(body: dict[str, Any]) -> str | None:
    """Why Bedrock would refuse ``body`` (a Converse request body), or None."""
    report = ParamValidator().validate({"modelId": "m", **body}, _SHAPE)
    if report.has_errors():
        return report.generate_report()
    blocks = [*body.get("system", ())]
    for message in body.get("messages", ()):
        for block in message["content"]:
            blocks.append(block)
            blocks.extend((block.get("toolResult") or {}).get("content", ()))
    for block in blocks:
        if "text" in block and not block["text"].strip():
            return "The text field in the ContentBlock object is blank."
    if "toolConfig" not in body and any("toolUse" in b or "toolResult" in b for b in blocks):
        return "toolConfig field must be defined when using toolUse and toolResult content blocks."
    return None
