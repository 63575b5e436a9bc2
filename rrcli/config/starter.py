"""``rrcli init``: a starter profile whose only missing piece is its keys.

For a provider that takes a key it names one environment variable per backend
(``OPENAI_API_KEY_1``..., after the registry's key variable: ``GROQ_API_KEY_1``...), so the only
errors ``rrcli validate`` gives on it are the variables not yet exported, and ``next_step``
names them; for azure, each backend's resource and deployment are placeholders to replace too;
for bedrock, a backend a region, signed by the AWS credentials the machine has; for vertex, a
backend a region of one placeholder project, its token from Application Default Credentials;
for a local server (ollama, vllm, sglang, llamacpp) it is a pool at the server's usual address
with no key; for sim it is a pool of simulated backends of different speeds that runs offline at
once.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rrcli.errors import UsageError
from rrcli.registry import info

__all__ = ["key_variables", "next_step", "starter_profile", "starter_text", "write_starter"]

_SIM_SPEEDS = ((20, 4), (60, 4), (150, 8))  # (latency_ms, max_concurrency), cycled
_AWS_REGIONS = ("us-east-1", "us-west-2", "eu-central-1")  # a bedrock pool's, cycled
_GOOGLE_REGIONS = ("us-central1", "europe-west4", "asia-northeast1")  # a vertex pool's, cycled


def key_variables(provider: str, backends: int) -> list[str]:
    """The key variable of each starter backend, one per backend (none for sim or a local
    server)."""
    entry = info(provider)
    if entry.auth_header is None or not entry.key_required:
        return []
    stem = entry.key_env or f"{provider.upper()}_API_KEY"
    return [f"{stem}_{n}" for n in range(1, backends + 1)]


def next_step(path: Path, provider: str, backends: int, environ: Mapping[str, str]) -> str:
    """What ``rrcli init`` says once it wrote ``path``: the pool, and the key variables still
    to export (the only thing left before the profile validates), then the check to run."""
    pool = f"{backends} {provider} backend" + ("s" if backends > 1 else "")
    unset = [name for name in key_variables(provider, backends) if not environ.get(name)]
    resources = (
        "; write your resources' endpoints in base_url and their deployment names in deployment"
        if provider == "azure"
        else ""
    )
    if not unset:
        return f"wrote {path} ({pool}){resources}; next: rrcli validate {path}"
    return (
        f"wrote {path} ({pool}){resources}; the only thing left: export {', '.join(unset)} "
        f"(unset now; one key per backend), then: rrcli validate {path}"
    )


def starter_profile(provider: str = "openai", backends: int = 3) -> dict[str, Any]:
    """The starter profile as TOML-ready data: a pool of ``backends`` of one provider."""
    pool = []
    for n in range(1, backends + 1):
        backend: dict[str, Any] = {"id": f"{provider}-{n}"}
        if provider == "sim":
            latency, cap = _SIM_SPEEDS[(n - 1) % len(_SIM_SPEEDS)]
            backend["max_concurrency"] = cap
            backend["sim"] = {
                "latency_ms": latency,
                "jitter_ms": latency // 4,
                "error_rate": 0.0,
                "rate_limit_rate": 0.0,
                "output_tokens": 32,
            }
        elif provider == "bedrock":  # one region a backend; the AWS credential chain signs
            backend["region"] = _AWS_REGIONS[(n - 1) % len(_AWS_REGIONS)]
            backend["max_concurrency"] = 4
        elif provider == "vertex":  # one region a backend; google-auth finds the token
            backend["project"] = "my-project"
            backend["region"] = _GOOGLE_REGIONS[(n - 1) % len(_GOOGLE_REGIONS)]
            backend["max_concurrency"] = 4
        elif provider == "azure":  # each deployment its own resource: placeholders to replace
            backend["base_url"] = f"https://my-resource-{n}.openai.azure.com"
            backend["deployment"] = info(provider).default_model
            backend["max_concurrency"] = 4
            backend["credentials"] = {"api_key_env": key_variables(provider, backends)[n - 1]}
        else:
            # written out (not left to the default) so a user sees where to point it elsewhere
            backend["base_url"] = info(provider).default_base_url
            backend["max_concurrency"] = 4
            variables = key_variables(provider, backends)
            if variables:
                backend["credentials"] = {"api_key_env": variables[n - 1]}
            else:  # a server on this machine: no key, and its private address allowed
                backend["allow_private"] = True
        pool.append(backend)
    return {
        "name": f"{provider}-pool",
        "strategy": "least_loaded",
        "binding": "request",
        "defaults": {
            "provider": provider,
            "model": info(provider).default_model,
            "timeout": 60.0,
        },
        "retry": {"max_retries": 3, "max_retry_time": 120.0, "backoff_initial": 0.5},
        "backends": pool,
    }


def starter_text(provider: str = "openai", backends: int = 3) -> str:
    """The starter profile as TOML, with a short header saying what to do next."""
    import tomli_w

    if provider == "sim":
        next_step = "# Simulated backends: no network, no key. Try: rrcli validate <this file>"
    elif provider == "bedrock":
        next_step = (
            "# Signed with your AWS credentials (AWS_ACCESS_KEY_ID..., a profile, a role); "
            "pip install 'rrcli[bedrock]'.\n# Then: rrcli validate <this file>"
        )
    elif provider == "vertex":
        next_step = (
            "# Replace my-project with your Google Cloud project's id. The token comes from "
            "Application Default\n# Credentials (gcloud auth application-default login); "
            "pip install 'rrcli[vertex]'. Then: rrcli validate <this file>"
        )
    elif not key_variables(provider, backends):
        next_step = f"# {provider} on this machine, no key. Try: rrcli validate <this file>"
    else:
        names = ", ".join(key_variables(provider, backends))
        next_step = f"# Export {names} (one key per backend), then: rrcli validate <this file>"
        if provider == "azure":
            next_step += (
                "\n# Replace each base_url with your resource's endpoint and each deployment "
                "with its deployment name."
            )
    header = (
        "# rrcli profile: a pool of backends and how to route across it.\n"
        f"{next_step}\n"
        "# Every key is described in `man 5 rrcli-profile`.\n\n"
    )
    return header + tomli_w.dumps(starter_profile(provider, backends))


def write_starter(
    path: Path, provider: str = "openai", backends: int = 3, force: bool = False
) -> Path:
    """Write the starter profile to ``path``; never over an existing file without ``force``."""
    if path.is_dir():
        raise UsageError(
            f"{path} is a directory — name the profile file, e.g. {path / 'rrcli.toml'}"
        )
    if path.exists() and not force:
        raise UsageError(f"{path} exists — pass --force to overwrite it, or name another path")
    if not path.parent.is_dir():
        raise UsageError(f"{path.parent} does not exist — create the folder first")
    try:
        path.write_text(starter_text(provider, backends), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from exc
    return path
