"""Compressed jobs files through the CLI: gzip (and zstd with its module) read as they are,
told by their first bytes; what cannot be read is refused once, with the fix, nothing sent."""

from __future__ import annotations

import gzip
import importlib.util
import os
import subprocess
import sys

import orjson
import pytest
from runkit import ROOT, read_jsonl, rrcli, write_profile

LINES = b"".join(orjson.dumps({"id": f"j{i}", "prompt": f"q {i}"}) + b"\n" for i in range(5))
HAS_ZSTD = importlib.util.find_spec("zstandard") is not None
# the CLI under test sees the modules this process sees (zstandard where it is installed)
SAME_PATH = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def sim_profile(tmp_path, sim_server):
    server = sim_server()
    return server, write_profile(tmp_path / "p.toml", [{"id": "a", "base_url": server.openai_url}])


def test_a_gzipped_jobs_file_runs_as_the_plain_one(tmp_path, sim_server):
    """`rrcli run jobs.jsonl.gz` runs every job (outputs named after `jobs`), and
    `validate --jobs` counts a gzip file by its bytes, whatever its name."""
    server, profile = sim_profile(tmp_path, sim_server)
    (tmp_path / "jobs.jsonl.gz").write_bytes(gzip.compress(LINES))
    done = rrcli("run", "jobs.jsonl.gz", "-p", profile, "-q", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    results = read_jsonl(tmp_path / "jobs.results.jsonl")
    assert [f"j{i}" for i in range(5)] == sorted(r["id"] for r in results)
    assert {"ok"} == {r["status"] for r in results}
    assert 5 == server.stats()["requests"]
    (tmp_path / "misnamed.jsonl").write_bytes(gzip.compress(LINES))
    checked = rrcli("validate", profile, "--jobs", "misnamed.jsonl", cwd=tmp_path)
    assert 0 == checked.returncode
    assert "misnamed.jsonl: 5 jobs (prompt 5), 0 invalid" in checked.stdout


def test_gzip_on_standard_input_is_refused_with_the_fix(tmp_path, sim_server):
    """Gzip data piped in is refused before anything is sent: exit 2, the zcat to use."""
    server, profile = sim_profile(tmp_path, sim_server)
    done = subprocess.run(
        [sys.executable, "-m", "rrcli", "run", "-", "-p", str(profile)],
        input=gzip.compress(LINES),
        cwd=tmp_path,
        capture_output=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert 2 == done.returncode
    assert b"gzip-compressed data" in done.stderr and b"zcat FILE | rrcli run -" in done.stderr
    assert 0 == server.stats()["requests"]


def test_a_cut_short_gzip_file_stops_with_its_name_not_a_traceback(tmp_path):
    """A gzip file that ends early says so, naming the file: exit 2, no traceback."""
    (tmp_path / "cut.gz").write_bytes(gzip.compress(LINES * 50)[:60])
    done = rrcli("validate", "demo", "--jobs", "cut.gz", cwd=tmp_path)
    assert 2 == done.returncode
    assert "cut.gz: the compressed jobs file is damaged or ends early" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(HAS_ZSTD, reason="zstandard is installed here")
def test_a_zstd_file_without_the_module_is_refused_up_front(tmp_path, sim_server):
    """Without the zstandard module a zstd file is refused before anything is sent, naming
    both ways on (install the module, or decompress)."""
    server, profile = sim_profile(tmp_path, sim_server)
    (tmp_path / "jobs.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(40))
    done = rrcli("run", "jobs.jsonl.zst", "-p", profile, cwd=tmp_path)
    assert 2 == done.returncode
    assert "pip install zstandard, or decompress it: zstd -d jobs.jsonl.zst" in done.stderr
    assert 0 == server.stats()["requests"]
    assert not (tmp_path / "jobs.results.jsonl").exists()


@pytest.mark.skipif(not HAS_ZSTD, reason="zstandard is not installed")
def test_a_zstd_file_of_several_frames_runs_and_a_cut_one_is_refused(tmp_path, sim_server):
    """With zstandard, a file of two zstd frames runs every job; one cut inside its last
    frame is refused (zstandard alone would end there silently)."""
    import zstandard

    _, profile = sim_profile(tmp_path, sim_server)
    packer = zstandard.ZstdCompressor()
    whole = packer.compress(LINES) + packer.compress(b'{"id": "last", "prompt": "q"}\n')
    (tmp_path / "jobs.jsonl.zst").write_bytes(whole)
    done = rrcli("run", "jobs.jsonl.zst", "-p", profile, "-q", cwd=tmp_path, env=SAME_PATH)
    assert 0 == done.returncode, done.stderr
    assert 6 == len(read_jsonl(tmp_path / "jobs.results.jsonl"))
    (tmp_path / "cut.zst").write_bytes(whole[:-4])
    checked = rrcli("validate", "demo", "--jobs", "cut.zst", cwd=tmp_path, env=SAME_PATH)
    assert 2 == checked.returncode
    assert "cut.zst: the compressed jobs file is damaged or ends early" in checked.stderr
