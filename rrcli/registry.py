"""What each provider is, in one place: its name, adapter, defaults, auth header and endpoints.

Profile defaults, validation, ``rrcli init``, the runner and the trace all read this table; none
keeps a copy. It is pure data importing nothing of rrcli's, so every part may read it (config
and providers alike): the adapter is named by module and class (``"module:Class"``), and
``providers.make_provider`` imports it only when a run needs it, so ``rrcli validate`` and
``rrcli --help`` stay light and the registry never imports the adapters it names.

Besides the APIs rrcli speaks itself, the table holds the OpenAI-compatible hosts of
``config/data/presets.toml`` (the ``openai`` adapter with a host's base URL, key variable and the
request fields it does not take), and the providers other packages register under the entry
point group ``rrcli.providers`` (``name = "module:Class"``, or ``"module:attr"`` naming a
``ProviderInfo``): their names are listed at import, each is loaded when first asked for.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from importlib import import_module, metadata
from pathlib import Path
from urllib.parse import urlsplit

__all__ = [
    "ANTHROPIC_MAX_TOKENS",
    "AZURE_API_VERSION",
    "BATCH_URLS",
    "BEDROCK_URL",
    "ENDPOINTS",
    "ENTRY_POINT_GROUP",
    "NAMES",
    "PRESETS",
    "REGISTRY",
    "UNSTREAMED",
    "VERTEX_GLOBAL_URL",
    "VERTEX_URL",
    "ProviderInfo",
    "api_dialect",
    "count_inputs",
    "info",
    "server_address",
    "vertex_publisher",
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
#: The api-version of an Azure deployment's calls when its profile names none (the latest GA)
AZURE_API_VERSION = "2024-10-21"
#: The ``max_tokens`` an Anthropic request is sent with when the job sets none (the API requires it)
ANTHROPIC_MAX_TOKENS = 1024
#: Bedrock's runtime endpoint in a region (a backend's ``region`` fills it in)
BEDROCK_URL = "https://bedrock-runtime.{region}.amazonaws.com"
#: Vertex AI's endpoint in a region, and its global one (``region = "global"``)
VERTEX_URL = "https://{region}-aiplatform.googleapis.com"
VERTEX_GLOBAL_URL = "https://aiplatform.googleapis.com"
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
    job of another shape is translated (``providers.translate``). ``key_env``: the variable
    its key is usually kept in (what ``rrcli init`` names); ``key_required``: False for a server
    that usually runs with no key (a local one: a backend without credentials sends none);
    ``drops``: the request fields the host does not take, dropped before a call is sent;
    ``prices_id``: genai-prices' name of the provider, when its prices are the provider's
    whatever the base URL (None: genai-prices tells the provider by the base URL)."""

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
    key_env: str | None = None
    key_required: bool = True
    drops: tuple[str, ...] = ()
    prices_id: str | None = None


REGISTRY: dict[str, ProviderInfo] = {
    "openai": ProviderInfo(
        name="openai",
        adapter="rrcli.providers.openai:OpenAIProvider",
        default_base_url="https://api.openai.com/v1",
        default_model="gpt-4o-mini",
        auth_header="authorization",
        request_id_header="x-request-id",
        endpoints=ENDPOINTS,
        key_env="OPENAI_API_KEY",
    ),
    "anthropic": ProviderInfo(
        name="anthropic",
        adapter="rrcli.providers.anthropic:AnthropicProvider",
        default_base_url="https://api.anthropic.com",
        default_model="claude-3-5-haiku-latest",
        auth_header="x-api-key",
        request_id_header="request-id",
        dialect="anthropic",
        key_env="ANTHROPIC_API_KEY",
    ),
    "gemini": ProviderInfo(
        name="gemini",
        adapter="rrcli.providers.gemini:GeminiProvider",
        default_base_url="https://generativelanguage.googleapis.com",
        default_model="gemini-2.5-flash",
        auth_header="x-goog-api-key",
        request_id_header=None,  # the body's responseId
        endpoints=("chat", "embeddings"),
        dialect="gemini",
        prices_id="google",
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
    "vertex": ProviderInfo(
        name="vertex",
        adapter="rrcli.providers.vertex:vertex_provider",
        default_base_url=VERTEX_URL,
        default_model="gemini-2.5-flash",
        auth_header=None,  # a Google OAuth token, fetched by the adapter (providers.vertex)
        request_id_header=None,  # the body's responseId (Gemini), its id (Anthropic)
        dialect="gemini",  # Claude models speak Anthropic's Messages: api_dialect
        prices_id="google-vertex",
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
    "azure": ProviderInfo(
        name="azure",
        adapter="rrcli.providers.azure:AzureProvider",
        default_base_url="",  # each resource has its own: https://<resource>.openai.azure.com
        default_model="gpt-4o-mini",
        auth_header="api-key",
        request_id_header="apim-request-id",
        endpoints=("chat", "embeddings", "responses"),
        key_env="AZURE_OPENAI_API_KEY",
        prices_id="azure",
    ),
}


def api_dialect(provider: str, model: str) -> str | None:
    """The request shape a backend of ``provider`` serving ``model`` speaks: its provider's,
    but Anthropic's Messages for a Claude model on Vertex AI (published by Anthropic)."""
    if provider == "vertex" and vertex_publisher(model) == "anthropic":
        return "anthropic"
    return info(provider).dialect


def vertex_publisher(model: str) -> str:
    """Who publishes ``model`` on Vertex AI: ``anthropic`` for a Claude model, else ``google``."""
    name = model.rpartition("/")[2].lower()
    return "anthropic" if name.startswith("claude") else "google"


#: the OpenAI-compatible hosts' facts, one table a host
_PRESETS_FILE = Path(__file__).parent / "config" / "data" / "presets.toml"
#: the adapter every preset uses: the hosts speak OpenAI's chat completions
_OPENAI_ADAPTER = REGISTRY["openai"].adapter


def _presets() -> dict[str, ProviderInfo]:
    """The hosts of presets.toml as registry entries."""
    with _PRESETS_FILE.open("rb") as stream:
        table = tomllib.load(stream)
    return {
        name: ProviderInfo(
            name=name,
            adapter=_OPENAI_ADAPTER,
            default_base_url=host["base_url"],
            default_model=host["model"],
            auth_header="authorization",
            request_id_header=host.get("request_id_header", "x-request-id"),
            endpoints=ENDPOINTS,
            key_env=host.get("key_env"),
            key_required="key_env" in host,
            drops=tuple(host.get("drops", ())),
            prices_id=host.get("prices_id"),
        )
        for name, host in table.items()
    }


#: the OpenAI-compatible hosts' names, in the data file's order
PRESETS: tuple[str, ...] = tuple(_presets_table := _presets())
REGISTRY.update(_presets_table)

#: the group other packages register providers in (``[project.entry-points."rrcli.providers"]``)
ENTRY_POINT_GROUP = "rrcli.providers"


def _entry_points() -> dict[str, metadata.EntryPoint]:
    """The providers other packages register, by name; a built-in name is never taken over."""
    found = metadata.entry_points(group=ENTRY_POINT_GROUP)
    return {ep.name: ep for ep in found if ep.name not in REGISTRY}


_PLUGINS = _entry_points()

#: provider names in the order messages list them: rrcli's own, the hosts, then the plugins'
NAMES: tuple[str, ...] = (*REGISTRY, *_PLUGINS)


def info(name: str) -> ProviderInfo:
    """The registry entry for ``name`` (a plugin's is loaded at its first use); KeyError for an
    unknown provider (validation reports those before anything asks)."""
    entry = REGISTRY.get(name)
    if entry is None:
        entry = REGISTRY[name] = _plugin(_PLUGINS[name])
    return entry


def _plugin(point: metadata.EntryPoint) -> ProviderInfo:
    """A plugin's entry: its ``ProviderInfo`` (named as registered), or for an adapter class
    one built from the class's attributes (``default_base_url``, ``default_model``,
    ``auth_header``, ``request_id_header``, ``endpoints``, ``dialect``, ``needs_network``).
    LookupError naming the package when it cannot be loaded."""
    module, _, attr = point.value.partition(":")
    try:
        loaded = getattr(import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise LookupError(
            f'"{point.name}" ({point.value}) cannot be loaded: {exc} — reinstall the '
            "package that registers it, or remove it"
        ) from None
    if isinstance(loaded, ProviderInfo):
        return replace(loaded, name=point.name)
    endpoints = tuple(getattr(loaded, "endpoints", ("chat",)))
    return ProviderInfo(
        name=point.name,
        adapter=point.value,
        default_base_url=getattr(loaded, "default_base_url", ""),
        default_model=getattr(loaded, "default_model", ""),
        auth_header=getattr(loaded, "auth_header", "authorization"),
        request_id_header=getattr(loaded, "request_id_header", None),
        endpoints=endpoints,
        default_endpoints=endpoints[:1],
        needs_network=getattr(loaded, "needs_network", True),
        dialect=getattr(loaded, "dialect", "openai"),
    )


def server_address(provider: str, base_url: str) -> str | None:
    """``host[:port]`` of a backend's endpoint, as traces write it (``server_address`` and the
    run record's ``host``): no user info, path or query; an IPv6 host in brackets; the port only
    when the URL names one. None for a provider that needs no network (sim)."""
    entry = REGISTRY.get(provider)  # a plugin not loaded yet: by its URL, as any host
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
