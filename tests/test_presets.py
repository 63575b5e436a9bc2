"""The OpenAI-compatible hosts as presets: ``provider = "groq"`` sets the host's base_url, key
variable and the fields it does not take, which are dropped before a call is sent; a backend's
own keys override each."""

from __future__ import annotations

import tomllib

import orjson
import pytest
from runkit import read_jsonl, rrcli

from rrcli.config.load import validate_profile
from rrcli.registry import PRESETS, info

HOSTED = ("openrouter", "groq", "together", "fireworks", "deepseek", "mistral", "xai")
LOCAL = ("ollama", "vllm", "sglang", "llamacpp")


def test_every_host_the_issue_names_is_a_preset_of_the_data_file() -> None:
    """The data file holds each host once, with a base URL and a model; the hosted ones name
    their key variable, the local ones none (they take no key)."""
    assert set(HOSTED + LOCAL) == set(PRESETS)
    for name in HOSTED:
        assert info(name).key_env and info(name).key_required, name
    for name in LOCAL:
        assert (None, False) == (info(name).key_env, info(name).key_required), name
    assert all(info(n).default_base_url.startswith("http") for n in PRESETS)


def profile(tmp_path, backend: str):
    path = tmp_path / "p.toml"
    path.write_text(f'[[backends]]\nid = "a"\n{backend}')
    return validate_profile(path, environ={"GROQ_API_KEY": "gsk-0123456789abcdef"})


def test_a_preset_sets_the_hosts_facts_and_a_backends_own_keys_win(tmp_path) -> None:
    """``provider = "groq"``: Groq's base URL, model and dropped fields; a backend's own
    base_url and drop_params override them."""
    creds = 'credentials = { api_key_env = "GROQ_API_KEY" }\n'
    preset = profile(tmp_path, f'provider = "groq"\n{creds}').profile.backends[0]
    own = profile(
        tmp_path,
        f'provider = "groq"\nbase_url = "https://gw.example.com/v1"\ndrop_params = []\n{creds}',
    ).profile.backends[0]
    assert ("https://api.groq.com/openai/v1", "llama-3.1-8b-instant") == (
        preset.base_url,
        preset.model,
    )
    assert ("logprobs", "logit_bias", "top_logprobs", "n") == preset.drop_params
    assert ("https://gw.example.com/v1", ()) == (own.base_url, own.drop_params)


def test_a_local_server_takes_no_key_unless_given_one(tmp_path) -> None:
    """A vllm backend without credentials validates and sends no key; a hosted preset without
    one is an error naming credentials."""
    local = profile(tmp_path, 'provider = "vllm"\nallow_private = true\n')
    hosted = profile(tmp_path, 'provider = "groq"\n')
    assert ([], "none") == (list(local.errors), local.profile.backends[0].credentials.auth)
    assert ["backends[0].credentials"] == [
        e.path for e in hosted.errors if e.code == "credentials_missing"
    ]


PARAMS = {"logprobs": True, "top_logprobs": 2, "n": 1, "temperature": 0.5, "seed": 7}


@pytest.mark.parametrize(
    ("provider", "extra", "stream", "sent"),
    [
        ("groq", "", False, {"temperature", "seed"}),
        (
            "groq",
            "drop_params = []\n",
            False,
            {"logprobs", "top_logprobs", "n", "temperature", "seed"},
        ),
        ("mistral", "", True, {"n", "temperature", "stream"}),
        ("ollama", "", False, {"logprobs", "top_logprobs", "temperature", "seed"}),
    ],
)
def test_the_fields_a_host_does_not_take_never_reach_it(
    sim_server, tmp_path, provider, extra, stream, sent
) -> None:
    """A job's fields the host does not take are dropped from what is sent (Mistral's
    stream_options too, a streamed call still answered); the others arrive as written."""
    server = sim_server()
    path = tmp_path / "p.toml"
    path.write_text(
        f'[[backends]]\nid = "a"\nprovider = "{provider}"\nbase_url = "{server.openai_url}"\n'
        f'allow_private = true\nauth = "none"\n{extra}'
    )
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(orjson.dumps({"id": "j", "prompt": "hi", "params": PARAMS}) + b"\n")
    flags = ["--stream"] if stream else []
    done = rrcli("run", jobs, "-p", path, *flags, cwd=tmp_path)
    (request,) = server.received("/v1/chat/completions")
    assert "ok" == read_jsonl(tmp_path / "jobs.results.jsonl")[0]["status"], done.stderr
    assert sent == set(request["body"]) - {"model", "messages"}


def test_the_data_file_says_why_for_each_dropped_field() -> None:
    """Each preset that drops fields carries a comment above its list (where it is documented,
    or that it is unsure): the list is never a guess left unexplained."""
    from rrcli import registry

    text = registry._PRESETS_FILE.read_text()
    table = tomllib.loads(text)
    for name, host in table.items():
        if host.get("drops"):
            section = text.split(f"[{name}]", 1)[1].split("drops =", 1)[0]
            assert "#" in section, name


def test_drop_params_on_an_api_that_drops_nothing_is_a_warning(tmp_path) -> None:
    """drop_params acts on the OpenAI-shaped APIs; on an anthropic backend validate says it is
    ignored."""
    report = profile(
        tmp_path,
        'provider = "anthropic"\ndrop_params = ["n"]\n'
        'credentials = { api_key_env = "GROQ_API_KEY" }\n',
    )
    assert ["backends[0].drop_params"] == [
        w.path for w in report.warnings if w.code == "ignored_key"
    ]
