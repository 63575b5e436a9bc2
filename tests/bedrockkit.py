"""Helpers for the bedrock tests: fake AWS credentials kept away from the machine's own, the
official boto3 ``bedrock-runtime`` client pointed at a sim, and a bedrock backend's profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomli_w

ACCESS_KEY = "AKIDSIMEXAMPLE000001"
SECRET = "sim/Secret+Access+Key+0123456789abcdefgh"
MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
#: the environment a run signs with: these credentials only, no shared files, no instance role
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": SECRET,
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def boto_client(url: str, secret: str = SECRET) -> Any:
    """boto3's bedrock-runtime client for the sim at ``url`` (no retries of its own)."""
    import boto3
    import botocore.config

    return boto3.client(
        "bedrock-runtime",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=secret,
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )


def bedrock_profile(path: Path, url: str, **extra: Any) -> Path:
    """A profile of one bedrock backend ``br`` at the sim ``url`` (region us-east-1)."""
    backend = {
        "id": "br",
        "provider": "bedrock",
        "base_url": url,
        "region": "us-east-1",
        "model": MODEL,
        "allow_private": True,
        **extra,
    }
    retry = {"backoff_initial": 0.01, "backoff_max": 0.05}
    path.write_bytes(tomli_w.dumps({"retry": retry, "backends": [backend]}).encode())
    return path
