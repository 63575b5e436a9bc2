"""What each provider is, in one place: its name, adapter, defaults, auth header and endpoints.

Profile defaults, validation, ``rrcli init``, the runner and the trace all read this table; none
keeps a copy. It is pure data importing nothing of rrcli's, so every part may read it (config
and providers alike): the adapter is named by module and class (``"module:Class"``), and
``providers.make_provider`` imports it only when a run needs it, so ``rrcli validate`` and
``rrcli --help`` stay light and the registry never imports the adapters it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "ANTHROPIC_MAX_TOKENS",
    "BATCH_URLS",
    "BEDROCK_URL",
    "ENDPOINTS",
    "NAMES",
    "REGISTRY",
    "UNSTREAMED",
    "ProviderInfo",
    "count_inputs",
    "info",
    "server_address",
]

#: The endpoints a job may name: chat (``/chat/completions``; Anthropic's ``/v1/messages``) and
#: the other endpoints of OpenAI's Batch API, each ``POST {base_url}/<name>``
ENDPOINTS: tuple[str, ...] = ("chat", "embeddings", "responses", "completions", "moderations")
#: An OpenAI Batch input line's ``url`` → the endpoint it names
BATCH_URLS: dict[str, str] = {
    "/v1/chat/completions": "chat",
    "/v1/embeddings": "embeddings",
    "/v1/responses": "responses",
    "/v1/completions": "completions",
    "/v1/moderations": "moderations",
}
#: The ``max_tokens`` an Anthropic request is sent with when the job sets none (the API requires it)
ANTHROPIC_MAX_TOKENS = 1024
#: Bedrock's runtime endpoint in a region (a backend's ``region`` fills it in)
BEDROCK_URL = "https://bedrock-runtime.{region}.amazonaws.com"
#: Endpoints whose API has no streamed form: ``--stream`` leaves their calls plain
UNSTREAMED = frozenset({"embeddings", "moderations"})


def count_inputs(value: object) -> int:
    """How many answers an endpoint's request input asks for: one a text, a token array or a
    list of content parts (one multimodal input); one an item of any other list."""
    if isinstance(value, list) and value:
        first = value[0]
        if isinstance(first, int | dict):
            return 1
        return len(value)
    return 1


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    """One provider. ``auth_header``: the header its key travels in (None: no key at all);
    ``endpoints``: the endpoints it can serve; ``default_endpoints``: what a backend serves when
    its profile says nothing; ``dialect``: the request shape its API speaks (``"openai"`` chat
    completions, ``"anthropic"`` Messages), None for one that takes a job as written (sim), so a
    job of another shape is translated (``providers.translate``)."""

    name: str
    adapter: str  # "module:Class", imported lazily by make_provider
    default_base_url: str
    default_model: str
    auth_header: str | None
    request_id_header: str | None
    endpoints: tuple[str, ...] = ("chat",)
    default_endpoints: tuple[str, ...] = ("chat",)
    needs_network: bool = True
    dialect: str | None = "openai"


REGISTRY: dict[str, ProviderInfo] = {
    "openai": ProviderInfo(
        name="openai",
        adapter="rrcli.providers.openai:OpenAIProvider",
        default_base_url="https://api.openai.com/v1",
        default_model="gpt-4o-mini",
        auth_header="authorization",
        request_id_header="x-request-id",
        endpoints=ENDPOINTS,
    ),
    "anthropic": ProviderInfo(
        name="anthropic",
        adapter="rrcli.providers.anthropic:AnthropicProvider",
        default_base_url="https://api.anthropic.com",
        default_model="claude-3-5-haiku-latest",
        auth_header="x-api-key",
        request_id_header="request-id",
        dialect="anthropic",
    ),
    "bedrock": ProviderInfo(
        name="bedrock",
        adapter="rrcli.providers.bedrock:BedrockProvider",
        default_base_url=BEDROCK_URL,
        default_model="anthropic.claude-3-haiku-20240307-v1:0",
        auth_header=None,  # SigV4: the AWS credentials sign each request (providers.bedrock)
        request_id_header="x-amzn-requestid",
        dialect="anthropic",  # reached through the Messages shape (providers.converse)
    ),
    "sim": ProviderInfo(
        name="sim",
        adapter="rrcli.sim.provider:SimProvider",
        default_base_url="sim://local",
        default_model="sim-small",
        auth_header=None,
        request_id_header=None,
        endpoints=ENDPOINTS,
        needs_network=False,
        dialect=None,
    ),
}

#: provider names in the order messages list them
NAMES: tuple[str, ...] = tuple(REGISTRY)


def info(name: str) -> ProviderInfo:
    """The registry entry for ``name``; KeyError for an unknown provider (validation reports
    those before anything asks)."""
    return REGISTRY[name]


def server_address(provider: str, base_url: str) -> str | None:
    """``host[:port]`` of a backend's endpoint, as traces write it (``server_address`` and the
    run record's ``host``): no user info, path or query; an IPv6 host in brackets; the port only
    when the URL names one. None for a provider that needs no network (sim)."""
    entry = REGISTRY.get(provider)
    if entry is not None and not entry.needs_network:
        return None
    parts = urlsplit(base_url)
    host = parts.hostname
    if host is None:
        return None
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # validation refuses such a URL; a trace still names its host
        port = None
    return f"{host}:{port}" if port else host
