"""A provider for rrcli from another package: an OpenAI-compatible API that wants a header of
its own on every request. Registered under the entry point group ``rrcli.providers`` twice: as a
``ProviderInfo`` (``demo``) and as the adapter class alone (``democlass``, its defaults read
from the class's attributes)."""

from __future__ import annotations

from typing import ClassVar

from rrcli.providers.openai import OpenAIProvider
from rrcli.registry import ProviderInfo


class DemoProvider(OpenAIProvider):
    """OpenAI's chat completions, each request marked as this plugin's."""

    api_headers: ClassVar[dict[str, str]] = {"x-demo-plugin": "demo"}
    default_base_url = "http://127.0.0.1:9/v1"
    default_model = "demo-class-model"
    auth_header = "authorization"
    request_id_header = "x-request-id"


PROVIDER = ProviderInfo(
    name="demo",
    adapter="rrcli_demo_provider:DemoProvider",
    default_base_url="http://127.0.0.1:9/v1",
    default_model="demo-model",
    auth_header="authorization",
    request_id_header="x-request-id",
)
