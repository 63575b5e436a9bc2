"""A vertex backend's Google Cloud settings: its project, its region and the endpoint that
region gives, and where its OAuth token comes from.

A vertex backend sends a bearer token. By default google-auth finds it, as Google's own
clients do (Application Default Credentials: ``GOOGLE_APPLICATION_CREDENTIALS``, the file
``gcloud auth application-default login`` writes, the metadata server of a Google Cloud
machine); ``credentials.file`` names a credentials JSON (a service account's key) instead.
google-auth is the ``vertex`` extra: validation says so when it is missing, before a run would
fail at its first call. A token from ``credentials.token_env`` or ``credentials.token_command``
(``gcloud auth print-access-token``) needs no extra.

The project is the backend's ``project``, else ``GOOGLE_CLOUD_PROJECT``; the region its
``region``, else ``CLOUD_ML_REGION``; ``region = "global"`` calls the global endpoint. The
base_url defaults to the region's endpoint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rrcli.config.profile import Credentials
from rrcli.config.walk import Checker, need_module, refuse_keys
from rrcli.registry import VERTEX_GLOBAL_URL, VERTEX_URL

__all__ = ["EXTRA_HINT", "google_credentials", "vertex_endpoint"]

EXTRA_HINT = "pip install 'rrcli[vertex]'"
_REGION = re.compile(r"global|[a-z]+(?:-[a-z]+)*\d+")
_PROJECT = re.compile(r"[a-z][a-z0-9.:-]{4,61}[a-z0-9]")
_KEYS = ("api_key_env", "api_key", "profile")


def google_credentials(check: Checker, values: Mapping[str, Any], path: str) -> Credentials:
    """The credentials of vertex backend ``path`` that finds its token by google-auth: the
    credentials JSON its table names (None: Application Default Credentials). A key is
    refused: Vertex AI takes OAuth tokens."""
    refuse_keys(
        check,
        values,
        path,
        _KEYS,
        "a vertex backend sends a Google OAuth token; it takes no key or AWS profile",
        "remove it; leave credentials out for Application Default Credentials, name a "
        "service account's JSON in credentials.file, or a token in credentials.token_env",
    )
    need_module(
        check,
        path,
        "google.auth",
        "vertex backends find their token with google-auth, which is not installed",
        f"{EXTRA_HINT}, or give a token in credentials.token_env",
    )
    return Credentials(auth="none", file=values.get("credentials", {}).get("file"))


def vertex_endpoint(
    check: Checker, merged: Mapping[str, Any], path: str, environ: Mapping[str, str]
) -> dict[str, str]:
    """The backend's ``project``, ``region`` and ``base_url`` (see the module docstring)."""
    out: dict[str, str] = {}
    project = merged.get("project") or environ.get("GOOGLE_CLOUD_PROJECT")
    if not project:
        check.add(
            "error",
            f"{path}.project",
            "missing: a vertex backend calls a model in a Google Cloud project",
            'set project = "my-project" (its id), or export GOOGLE_CLOUD_PROJECT',
            "project_missing",
        )
    elif not _PROJECT.fullmatch(project):
        check.add(
            "error",
            f"{path}.project",
            f"{project!r} is not a Google Cloud project id",
            "write the project's id (lower case letters, digits and dashes), not its name",
            "project_invalid",
        )
    else:
        out["project"] = project
    region = merged.get("region") or environ.get("CLOUD_ML_REGION")
    if not region:
        check.add(
            "error",
            f"{path}.region",
            "missing: a vertex backend calls a region's endpoint, or the global one",
            'set region = "us-central1" (where the model is served), or region = "global"',
            "region_missing",
        )
        return out
    if not _REGION.fullmatch(region):
        check.add(
            "error",
            f"{path}.region",
            f"{region!r} is not a Google Cloud region",
            'write a region, e.g. region = "us-central1", or region = "global"',
            "region_invalid",
        )
        return out
    out["region"] = region
    if merged.get("base_url") is None:
        out["base_url"] = (
            VERTEX_GLOBAL_URL if region == "global" else VERTEX_URL.format(region=region)
        )
    return out
