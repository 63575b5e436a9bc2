"""A bedrock backend's AWS settings: its credentials (an AWS profile, or the default chain),
its region and the endpoint that region gives.

A bedrock backend sends no key: botocore's credential chain (the environment, the shared files,
SSO, a role) signs each request, ``credentials.profile`` naming a profile of the shared files.
The region is the backend's ``region``, else ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else the
one a ``bedrock-runtime.{region}.amazonaws.com`` base_url names; the base_url defaults to that
endpoint. botocore is the ``bedrock`` extra: validation says so when it is missing, before a
run would fail at its first call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from rrcli.config.profile import Credentials
from rrcli.config.walk import Checker, need_module, refuse_keys
from rrcli.registry import BEDROCK_URL

__all__ = ["aws_credentials", "aws_endpoint", "region_of"]

_HOST = re.compile(r"bedrock-runtime(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?")
_REGION = re.compile(r"[a-z]{2}(?:-[a-z]+)+-\d+")
_KEYS = ("api_key_env", "api_key", "auth")


def aws_credentials(check: Checker, values: Mapping[str, Any], path: str) -> Credentials:
    """The credentials of bedrock backend ``path``: the AWS profile its table names (None: the
    default chain). A key is refused: Bedrock takes SigV4 signatures, not keys."""
    refuse_keys(
        check,
        values,
        path,
        _KEYS,
        "a bedrock backend signs its requests with AWS credentials; it sends no key",
        "remove it; name an AWS profile in credentials.profile, or leave credentials "
        "out for the default chain (AWS_ACCESS_KEY_ID..., the shared files, a role)",
    )
    need_module(
        check,
        path,
        "botocore",
        "bedrock backends sign their requests with botocore, which is not installed",
        "pip install 'rrcli[bedrock]'",
    )
    return Credentials(auth="none", profile=values.get("credentials", {}).get("profile"))


def region_of(base_url: str) -> str | None:
    """The region a Bedrock runtime endpoint's host names, or None."""
    found = _HOST.fullmatch(urlsplit(base_url).hostname or "")
    return found.group(1) if found else None


def aws_endpoint(
    check: Checker, merged: Mapping[str, Any], path: str, environ: Mapping[str, str]
) -> dict[str, str]:
    """The backend's ``region`` and ``base_url`` (see the module docstring)."""
    base_url = merged.get("base_url")
    region = (
        merged.get("region")
        or environ.get("AWS_REGION")
        or environ.get("AWS_DEFAULT_REGION")
        or (region_of(base_url) if isinstance(base_url, str) else None)
    )
    if not region:
        check.add(
            "error",
            f"{path}.region",
            "missing: a bedrock backend signs its requests for an AWS region",
            'set region = "us-east-1" (the model\'s region), or export AWS_REGION',
            "region_missing",
        )
        return {}
    if not _REGION.fullmatch(region):
        check.add(
            "error",
            f"{path}.region",
            f"{region!r} is not an AWS region",
            'write a region code, e.g. region = "us-east-1"',
            "region_invalid",
        )
        return {}
    out = {"region": region}
    if base_url is None:
        out["base_url"] = BEDROCK_URL.format(region=region)
    return out
