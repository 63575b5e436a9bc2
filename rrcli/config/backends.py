"""One backend built from its ``[[backends]]`` table and ``[defaults]``.

A backend's fields are its own, else ``[defaults]``', else its provider's defaults from the
provider registry. Its credentials are its own or ``[defaults]``', never a merge of the two, and
no message shows a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rrcli.config.aws import aws_credentials, aws_endpoint
from rrcli.config.gcp import google_credentials, vertex_endpoint
from rrcli.config.profile import (
    DEFAULT_PROVIDER,
    MAX_RESPONSE_BYTES,
    Backend,
    Credentials,
    Price,
    SimSettings,
)
from rrcli.config.redaction import looks_like_key
from rrcli.config.schema import PRICE, SIM, as_floats
from rrcli.config.walk import Checker, unsendable
from rrcli.registry import AZURE_API_VERSION, ProviderInfo, info

__all__ = ["build_backend"]


def build_backend(
    check: Checker,
    i: int,
    raw: Mapping[str, Any],
    defaults: Mapping[str, Any],
    environ: Mapping[str, str],
) -> Backend:
    """``backends[i]`` with ``[defaults]`` under it; every problem reported to ``check``."""
    path = f"backends[{i}]"
    own = check.backend_fields(raw, path)
    merged = {**defaults, **own}
    if "id" not in raw:
        check.add(
            "error",
            f"{path}.id",
            "missing",
            'give every backend a unique id, e.g. id = "openai-a"',
            "missing_id",
        )
    try:
        provider = info(merged.get("provider", DEFAULT_PROVIDER))
    except LookupError as exc:  # another package's provider that cannot be loaded
        problem, _, fix = str(exc).partition(" — ")
        check.add("error", f"{path}.provider", problem, fix, "provider_unloadable")
        provider = info(DEFAULT_PROVIDER)
    if "sim" in merged and provider.name != "sim":
        check.add(
            "warning",
            f"{path}.sim",
            f'ignored: provider is "{provider.name}", not "sim"',
            'remove it, or set provider = "sim"',
            "ignored_key",
        )
    own_creds = "credentials" in raw or "auth" in raw
    values, written_at = (own, path) if own_creds else (defaults, "defaults")
    if provider.name == "bedrock":  # AWS credentials, region and botocore (config.aws)
        credentials = aws_credentials(check, values, path)
        merged = {**merged, **aws_endpoint(check, merged, path, environ)}
    elif provider.name == "vertex":  # a Google OAuth token, project and region (config.gcp)
        table = values.get("credentials", {})
        if "token_env" in table or "token_command" in table:
            credentials = _credentials(check, provider.name, values, path, written_at, environ)
        else:
            credentials = google_credentials(check, values, path)
        merged = {**merged, **vertex_endpoint(check, merged, path, environ)}
    elif provider.auth_header is None:  # a provider that takes no key has no credentials
        credentials = Credentials(auth="none")
    elif not provider.key_required and "credentials" not in values and "auth" not in values:
        credentials = Credentials(auth="none")  # a local server: no key unless one is given
    else:
        credentials = _credentials(check, provider.name, values, path, written_at, environ)
    endpoints = tuple(merged.get("endpoints", provider.default_endpoints))
    _check_endpoints(check, provider, endpoints, f"{path}.endpoints")
    _check_azure(check, provider, merged, path)
    if "drop_params" in own and provider.dialect != "openai":
        check.add(
            "warning",
            f"{path}.drop_params",
            f"ignored: {provider.name} backends send only their own API's fields already",
            "remove it",
            "ignored_key",
        )
    return _backend(own.get("id", path), provider, merged, credentials, endpoints)


#: an Azure resource's endpoint, as the portal shows it
_AZURE_BASE = "https://<resource>.openai.azure.com"


def _check_azure(
    check: Checker, provider: ProviderInfo, merged: Mapping[str, Any], path: str
) -> None:
    """An azure backend names its resource's base_url; deployment and api_version are azure's
    alone, and api_version goes with a deployment (the v1 API takes none)."""
    if provider.name != "azure":
        for key in ("deployment", "api_version"):
            if key in merged:
                check.add(
                    "warning",
                    f"{path}.{key}",
                    f'ignored: provider is "{provider.name}", not "azure"',
                    'remove it, or set provider = "azure"',
                    "ignored_key",
                )
        return
    if not merged.get("base_url"):
        check.add(
            "error",
            f"{path}.base_url",
            "missing: an azure backend calls its own resource",
            f'set base_url = "{_AZURE_BASE}" (the endpoint the Azure portal shows)',
            "azure_base_url",
        )
    if "api_version" in merged and "deployment" not in merged:
        check.add(
            "warning",
            f"{path}.api_version",
            "ignored: without a deployment the backend calls Azure's v1 API, which takes no "
            "api-version",
            'set deployment = "<deployment name>", or remove api_version',
            "ignored_key",
        )


def _check_endpoints(
    check: Checker, provider: ProviderInfo, endpoints: tuple[str, ...], where: str
) -> None:
    """A backend serves at least one endpoint, each one its provider's API has, once."""
    if not endpoints:
        check.add(
            "error",
            where,
            "empty: the backend would serve no job",
            'list what its model serves, e.g. endpoints = ["embeddings"], or leave it out for chat',
            "no_endpoints",
        )
    served = ", ".join(provider.endpoints)
    for n, endpoint in enumerate(endpoints):
        if endpoint not in provider.endpoints:
            check.add(
                "error",
                f"{where}[{n}]",
                f'{provider.name} backends serve {served} only, not "{endpoint}"',
                f'remove "{endpoint}", or serve it from an openai backend (any '
                "OpenAI-compatible server)",
                "endpoint_not_served",
            )
        elif endpoint in endpoints[:n]:
            check.add(
                "warning",
                f"{where}[{n}]",
                f'"{endpoint}" is listed twice',
                "list each endpoint once",
                "duplicate_endpoint",
            )


def _backend(
    backend_id: str,
    provider: ProviderInfo,
    merged: Mapping[str, Any],
    credentials: Credentials,
    endpoints: tuple[str, ...],
) -> Backend:
    price, sim = merged.get("price"), merged.get("sim", {})
    deployment = merged.get("deployment") if provider.name == "azure" else None
    return Backend(
        id=backend_id,
        provider=provider.name,
        base_url=merged.get("base_url", provider.default_base_url),
        model=merged.get("model", provider.default_model),
        credentials=credentials,
        max_concurrency=merged.get("max_concurrency", 8),
        rpm=merged.get("rpm"),
        tpm=merged.get("tpm"),
        weight=float(merged.get("weight", 1.0)),
        timeout=float(merged.get("timeout", 60.0)),
        stream_idle_timeout=float(idle) if (idle := merged.get("stream_idle_timeout")) else None,
        max_response_bytes=merged.get("max_response_bytes", MAX_RESPONSE_BYTES),
        headers=dict(merged.get("headers", {})),
        params=dict(merged.get("params", {})),
        allow_private=merged.get("allow_private", False),
        gate_scope=merged.get("gate_scope", ""),
        reasoning_feedback=merged.get("reasoning_feedback", False),
        price=Price(**as_floats(price, PRICE)) if price is not None else None,
        sim=SimSettings(**as_floats(sim, SIM)) if provider.name == "sim" else None,
        endpoints=endpoints,
        prefix_cache_tokens=merged.get("prefix_cache_tokens"),
        prompt_cache_key=merged.get("prompt_cache_key"),
        max_tokens_per_image=merged.get("max_tokens_per_image"),
        deployment=deployment,
        api_version=merged.get("api_version", AZURE_API_VERSION) if deployment else None,
        drop_params=tuple(merged.get("drop_params", provider.drops)),
        region=merged.get("region"),
        project=merged.get("project"),
    )


def _credentials(
    check: Checker,
    provider: str,
    values: Mapping[str, Any],
    path: str,
    written_at: str,
    environ: Mapping[str, str],
) -> Credentials:
    """The credentials of backend ``path``, from ``values``: its own table, or ``[defaults]``
    when it has none (``written_at`` says which). Never a merge of the two."""
    where = f"{path}.credentials"
    table = values.get("credentials", {})
    auth = table.get("auth", values.get("auth", "key"))
    env, key = table.get("api_key_env"), table.get("api_key")
    if "profile" in table:
        check.add(
            "error",
            f"{where}.profile",
            f"an AWS profile, but this is an {provider} backend",
            'remove it; it names the AWS credentials of a provider = "bedrock" backend',
            "ignored_key",
        )
    tokens = {k: table[k] for k in ("token_env", "token_command") if k in table}
    if tokens:
        return _token(check, provider, env, key, tokens, where, environ)
    if auth == "none":
        if env is not None or key is not None:
            check.add(
                "error",
                where,
                'auth = "none" but a key is set too',
                'remove the key, or remove auth = "none"',
                "credentials_conflict",
            )
        return Credentials(auth="none")
    reported = check.reported(f"{written_at}.credentials")
    _key_source(check, provider, env, key, where, missing_reported=reported)
    if env is not None and key is None:
        _key_variable(check, f"{where}.api_key_env", env, environ.get(env))
    if isinstance(key, str) and key != key.strip():
        check.add(
            "warning",
            f"{where}.api_key",
            "the key has whitespace around it; it is sent without",
            "remove the spaces or line breaks around the key",
            "key_whitespace",
        )
    if isinstance(key, str) and (bad := unsendable(key.strip(), spaces=False)) is not None:
        _unsendable_key(check, f"{where}.api_key", "the key", bad)
    return Credentials(api_key_env=env, api_key=key)


def _token(
    check: Checker,
    provider: str,
    env: str | None,
    key: str | None,
    tokens: Mapping[str, str],
    where: str,
    environ: Mapping[str, str],
) -> Credentials:
    """Credentials by a bearer token (Azure's Entra ID): from ``token_env`` or
    ``token_command``, one of them, and no key beside it."""
    if provider not in ("azure", "vertex"):
        name = next(iter(tokens))
        check.add(
            "error",
            f"{where}.{name}",
            f'{name} is for azure and vertex backends (a bearer token), not "{provider}"',
            "use credentials.api_key_env for this backend's key",
            "token_not_taken",
        )
        return Credentials()
    given = [n for n, v in (("api_key_env", env), ("api_key", key)) if v is not None]
    if len(tokens) + len(given) > 1:
        check.add(
            "error",
            where,
            f"{' and '.join([*given, *tokens])} are set: the backend sends one credential",
            "keep one: token_env or token_command for Entra ID, api_key_env for a key",
            "credentials_conflict",
        )
    token_env = tokens.get("token_env")
    if token_env is not None:
        _key_variable(check, f"{where}.token_env", token_env, environ.get(token_env))
    return Credentials(token_env=token_env, token_command=tokens.get("token_command"))


def _unsendable_key(check: Checker, where: str, what: str, bad: str) -> None:
    check.add(
        "error",
        where,
        f"{what} cannot be sent in an HTTP header: it has {bad}",
        "copy the key again; an invisible character came with it",
        "key_unsendable",
    )


def _key_variable(check: Checker, where: str, env: str, value: str | None) -> None:
    """The findings for a key read from variable ``env`` (its ``value``; never printed). A
    name that looks like a key itself is never printed either. An unset variable is an error:
    it stops a run, so ``validate`` (a CI check) says so too."""
    shown = env
    if looks_like_key(env):
        shown = "named here"
        check.add(
            "warning",
            where,
            "this looks like a key, not the name of an environment variable",
            "put the key in a variable (export OPENAI_API_KEY=...) and write its name here",
            "env_looks_like_key",
        )
    if not (value or "").strip():
        check.add(
            "error",
            where,
            f"environment variable {shown} is not set",
            f"export {env if shown == env else 'it'}=... before rrcli run",
            "env_unset",
        )
    elif (bad := unsendable(value.strip(), spaces=False)) is not None:
        _unsendable_key(check, where, f"the key in environment variable {shown}", bad)
    elif value != value.strip():
        check.add(
            "warning",
            where,
            f"environment variable {shown} has whitespace around the key (a line break from "
            "a .env file?); it is sent without",
            f"remove the spaces or line breaks around the value of {shown}",
            "key_whitespace",
        )


def _key_source(
    check: Checker,
    provider: str,
    env: str | None,
    key: str | None,
    where: str,
    missing_reported: bool,
) -> None:
    """Exactly one of api_key_env and api_key; a literal key is a warning."""
    if env is not None and key is not None:
        check.add(
            "error",
            where,
            "both api_key_env and api_key are set",
            "keep one; api_key_env keeps the key out of the file",
            "credentials_conflict",
        )
    elif env is None and key is None and not missing_reported:
        check.add(
            "error",
            where,
            "missing",
            f"{'an' if provider[:1] in 'aeiou' else 'a'} {provider} backend needs "
            "credentials.api_key_env, credentials.api_key "
            'or auth = "none"',
            "credentials_missing",
        )
    if key is not None:
        check.add(
            "warning",
            f"{where}.api_key",
            "a literal API key is stored in the profile",
            "put it in an environment variable and name it in credentials.api_key_env",
            "literal_key",
        )
