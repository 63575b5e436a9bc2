"""Providers from other packages: the small package in tests/plugin registers two under the
entry point group ``rrcli.providers`` (a ProviderInfo, and an adapter class alone) and one that
cannot be loaded; installed on the path of a real ``rrcli`` process, its providers serve a run
against ``rrcli sim`` and the broken one is a clear validation error."""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path

import pytest
import tomli_w
from runkit import ROOT, read_jsonl, rrcli, write_jobs

PLUGIN = Path(__file__).parent / "plugin"


@pytest.fixture
def installed(tmp_path) -> dict[str, str]:
    """The plugin installed into a folder of its own, as ``pip install --target`` lays it out
    (its module and a dist-info with the entry points of its pyproject.toml); the environment
    of a process that has it on its path."""
    target = tmp_path / "site"
    target.mkdir()
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    shutil.copy(PLUGIN / "rrcli_demo_provider.py", target)
    info = target / f"rrcli_demo_provider-{project['version']}.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    points = project["entry-points"]["rrcli.providers"]
    lines = "".join(f"{name} = {value}\n" for name, value in points.items())
    info.joinpath("entry_points.txt").write_text(f"[rrcli.providers]\n{lines}")
    return {"PYTHONPATH": os.pathsep.join([str(ROOT), str(target)]), "DEMO_KEY": "demo-k-01234567"}


def test_a_plugins_providers_serve_a_run(sim_server, tmp_path, installed) -> None:
    """``provider = "demo"`` (a ProviderInfo) and ``provider = "democlass"`` (a class) are
    accepted by validate and send every call through the plugin's adapter (its own header on
    each request), with the plugin's default model."""
    server = sim_server()
    backends = [
        {
            "id": name,
            "provider": name,
            "base_url": server.openai_url,
            "allow_private": True,
            "credentials": {"api_key_env": "DEMO_KEY"},
        }
        for name in ("demo", "democlass")
    ]
    profile = tmp_path / "p.toml"
    profile.write_text(tomli_w.dumps({"backends": backends}))
    jobs = write_jobs(tmp_path / "jobs.jsonl", 4)
    checked = rrcli("validate", profile, cwd=tmp_path, env=installed)
    done = rrcli("run", jobs, "-p", profile, cwd=tmp_path, env=installed)
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    received = server.received("/v1/chat/completions")
    assert 0 == checked.returncode, checked.stdout + checked.stderr
    assert {"ok"} == {r["status"] for r in results}, done.stderr
    assert ["demo"] * 4 == [r["headers"].get("x-demo-plugin") for r in received]
    assert {"demo-model", "demo-class-model"} == {r["body"]["model"] for r in received}


def test_a_plugin_that_cannot_be_loaded_is_a_validation_error(tmp_path, installed) -> None:
    """A provider whose module is gone: validate names the backend's provider key, the
    package's entry and the fix, with no traceback."""
    profile = tmp_path / "p.toml"
    profile.write_text(
        '[[backends]]\nid = "a"\nprovider = "broken"\ncredentials = { api_key_env = "DEMO_KEY" }\n'
    )
    checked = rrcli("validate", profile, cwd=tmp_path, env=installed)
    said = checked.stdout + checked.stderr
    assert 1 == checked.returncode, said
    assert 'backends[0] (id "a"): provider: "broken"' in said
    assert "rrcli_demo_provider_missing:Nothing" in said
    assert "reinstall the package" in said
    assert "Traceback" not in said


def test_without_the_plugin_its_names_are_unknown(tmp_path) -> None:
    """Without the package on the path, ``provider = "demo"`` is an unknown provider."""
    profile = tmp_path / "p.toml"
    profile.write_text('[[backends]]\nid = "a"\nprovider = "demo"\n')
    checked = rrcli("validate", profile, cwd=tmp_path)
    assert 1 == checked.returncode
    assert '"demo" is not accepted here' in checked.stdout + checked.stderr
