"""Docs that can drift are tested: every shipped profile validates, and the demo is one file."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from rrcli.config.load import demo_profile_path, validate_profile

ROOT = Path(__file__).resolve().parent.parent
PROFILES = sorted((ROOT / "profiles").glob("*.toml"))
# Allowed on any machine: hosts this machine cannot resolve.
ENVIRONMENT_WARNINGS = {"host_unresolved"}


def key_variables(path: Path) -> dict[str, str]:
    """Every api_key_env the profile names, set to a placeholder key (as a user exports them)."""
    data = tomllib.loads(path.read_text())
    tables = [data.get("defaults", {}), *data.get("backends", [])]
    names = {t.get("credentials", {}).get("api_key_env") for t in tables}
    return {name: "sk-placeholder" for name in names if name}


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_every_profile_in_the_folder_validates(path):
    """With its key variables exported: no errors, and warnings only for hosts without DNS
    here; without them, the only errors are the unset variables, each named."""
    environ = key_variables(path)
    report = validate_profile(path, environ=environ)
    assert [] == [str(d) for d in report.errors]
    assert set() == {w.code for w in report.warnings} - ENVIRONMENT_WARNINGS
    bare = validate_profile(path, environ={})
    assert len(environ) <= len(bare.errors)
    assert {"env_unset"} >= {d.code for d in bare.errors}


def test_the_folder_has_the_documented_profiles():
    """demo, openai-keys, local-vllm and mixed are all there."""
    names = {p.stem for p in PROFILES}
    assert {"demo", "openai-keys", "local-vllm", "mixed"} <= names


def test_profiles_demo_is_the_built_in_demo():
    """profiles/demo.toml is byte for byte the demo shipped in the package."""
    assert demo_profile_path().read_bytes() == (ROOT / "profiles" / "demo.toml").read_bytes()


def test_demo_is_three_sim_backends_of_different_speeds():
    """The demo pool: three sim backends, distinct latencies, caps 4/4/8."""
    backends = validate_profile(demo_profile_path()).profile.backends
    assert ["sim", "sim", "sim"] == [b.provider for b in backends]
    assert [20.0, 60.0, 150.0] == [b.sim.latency_ms for b in backends]
    assert [4, 4, 8] == [b.max_concurrency for b in backends]


def test_demo_jobs_cover_every_job_shape():
    """demo-jobs.jsonl: about 20 objects with prompts, messages, sessions and batch lines."""
    lines = (ROOT / "profiles" / "demo-jobs.jsonl").read_text().splitlines()
    jobs = [json.loads(line) for line in lines]
    shapes = {next(k for k in ("prompt", "messages", "turns", "body") if k in j) for j in jobs}
    assert {"prompt", "messages", "turns", "body"} == shapes
    assert 18 <= len(jobs) <= 25
    ids = [j.get("id", j.get("custom_id")) for j in jobs]
    assert len(ids) == len(set(ids))
