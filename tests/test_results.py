"""The results file (SPEC §4): three formats, refusing to clobber, resume with torn lines."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runkit import rrcli

from rrcli.errors import OutputExistsError, UsageError
from rrcli.records.results import ResultWriter, prepare_output

OK = {
    "id": "q1",
    "status": "ok",
    "deployment": "openai-a",
    "model": "gpt-4o-mini",
    "output": "4",
    "finish_reason": "stop",
    "usage": {"input_tokens": 12, "output_tokens": 1},
    "attempts": 1,
    "latency_ms": 231.5,
    "metadata": {},
}
HTTP_ERROR = {
    "id": 2,
    "status": "error",
    "deployment": "openai-b",
    "attempts": 4,
    "error": {"type": "http_503", "message": "busy", "status_code": 503, "retryable": True},
}
NO_RESPONSE = {
    "id": "q3",
    "status": "error",
    "deployment": "openai-b",
    "attempts": 4,
    "error": {
        "type": "connect_error",
        "message": "refused",
        "status_code": None,
        "retryable": True,
    },
}
INVALID = {
    "id": "line-7",
    "status": "invalid",
    "error": {"type": "invalid_job", "message": "line 7: x"},
}


def write(path: Path, results: list[dict], fmt: str = "rrcli", **kwargs) -> list[dict]:
    with ResultWriter(path, fmt=fmt, append=True, clock=lambda: 1_800_000_000.5) as writer:
        for result in results:
            writer.write(result, **kwargs)
    return [json.loads(line) for line in path.read_bytes().split(b"\n")[:-1]]


def test_rrcli_format_keeps_the_dict_and_key_order(tmp_path):
    """The rrcli format writes the runner's dict as it is, keys in order, one line each."""
    lines = write(tmp_path / "r.jsonl", [OK, HTTP_ERROR, INVALID])
    assert [OK, HTTP_ERROR, INVALID] == lines
    assert list(OK) == list(lines[0])


def test_openai_batch_ok_builds_a_chat_completion(tmp_path):
    """openai-batch: an ok result without a body gets a faithful chat.completion with usage."""
    (line,) = write(tmp_path / "r.jsonl", [OK], fmt="openai-batch", request_id="req_1")
    assert ["id", "custom_id", "response", "error"] == list(line)
    assert line["id"].startswith("batch_req_")
    assert ("q1", None) == (line["custom_id"], line["error"])
    assert (200, "req_1") == (line["response"]["status_code"], line["response"]["request_id"])
    body = line["response"]["body"]
    assert ("chat.completion", 1_800_000_000, "gpt-4o-mini") == (
        body["object"],
        body["created"],
        body["model"],
    )
    choice = body["choices"][0]
    assert ({"role": "assistant", "content": "4", "refusal": None}, "stop") == (
        choice["message"],
        choice["finish_reason"],
    )
    assert {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13} == body["usage"]


def test_openai_batch_uses_the_provider_body(tmp_path):
    """openai-batch: the provider's own chat.completion body is written unchanged when whole;
    one lacking fields the SDK requires keeps its own and gains the missing ones (created from
    the clock, the result's model, the usage total)."""
    whole = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
             "choices": [], "usage": None}  # fmt: skip
    partial = {"id": "chatcmpl-2", "object": "chat.completion", "choices": [],
               "usage": {"prompt_tokens": 3, "completion_tokens": 4}}  # fmt: skip
    (line,) = write(tmp_path / "a.jsonl", [OK], fmt="openai-batch", body=whole)
    assert whole == line["response"]["body"]
    (line,) = write(tmp_path / "b.jsonl", [OK], fmt="openai-batch", body=partial)
    usage = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    expected = {**partial, "created": 1_800_000_000, "model": "gpt-4o-mini", "usage": usage}
    assert expected == line["response"]["body"]


def test_openai_batch_errors(tmp_path):
    """openai-batch: an HTTP error keeps status and an error body; no response → error object."""
    http, transport, invalid = write(
        tmp_path / "r.jsonl", [HTTP_ERROR, NO_RESPONSE, INVALID], fmt="openai-batch"
    )
    assert ("2", None, 503) == (http["custom_id"], http["error"], http["response"]["status_code"])
    expected = {"message": "busy", "type": "server_error", "param": None, "code": "http_503"}
    assert expected == http["response"]["body"]["error"]
    assert (None, {"code": "connect_error", "message": "refused"}) == (
        transport["response"],
        transport["error"],
    )
    assert {"code": "invalid_job", "message": "line 7: x"} == invalid["error"]


def test_anthropic_batch_format(tmp_path):
    """anthropic-batch: succeeded with a message object; errored with an error response."""
    ok, err, invalid = write(tmp_path / "r.jsonl", [OK, HTTP_ERROR, INVALID], fmt="anthropic-batch")
    assert ["custom_id", "result"] == list(ok)
    message = ok["result"]["message"]
    assert ("succeeded", "message", "assistant") == (
        ok["result"]["type"],
        message["type"],
        message["role"],
    )
    assert ([{"type": "text", "text": "4"}], "end_turn") == (
        message["content"],
        message["stop_reason"],
    )
    assert {"input_tokens": 12, "output_tokens": 1} == message["usage"]
    assert {
        "type": "errored",
        "error": {"type": "error", "error": {"type": "api_error", "message": "busy"}},
    } == err["result"]
    assert "invalid_request_error" == invalid["result"]["error"]["error"]["type"]


def test_append_mode_and_truncate_mode(tmp_path):
    """append=True adds to the file; append=False starts it afresh."""
    path = tmp_path / "r.jsonl"
    write(path, [OK])
    assert 2 == len(write(path, [OK]))
    ResultWriter(path, append=False).close()
    assert "" == path.read_text()


def test_stdout(capsysbinary):
    """path None writes the lines to standard output."""
    with ResultWriter(None, append=True) as writer:
        writer.write(OK)
    assert OK == json.loads(capsysbinary.readouterr().out)


def test_unknown_format():
    """An unknown format is a usage error naming the accepted ones."""
    with pytest.raises(UsageError, match="rrcli, openai-batch, anthropic-batch"):
        ResultWriter(None, fmt="csv", append=True)


def test_existing_file_refused(tmp_path):
    """An existing results file without --resume/--overwrite is refused (exit 2), naming both."""
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(OK) + "\n")
    with pytest.raises(OutputExistsError) as info:
        prepare_output(path, resume=False, overwrite=False)
    assert 2 == info.value.exit_code
    assert "--resume" in str(info.value) and "--overwrite" in str(info.value)


def test_empty_existing_file_is_not_refused(tmp_path):
    """An empty results file holds nothing to lose: no flag needed."""
    path = tmp_path / "r.jsonl"
    path.write_text("")
    assert 0 == len(prepare_output(path, resume=False, overwrite=False).ok)


def test_overwrite_truncates(tmp_path):
    """--overwrite empties the file before the run."""
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(OK) + "\n")
    prepare_output(path, resume=False, overwrite=True)
    assert "" == path.read_text()


def test_unusable_paths(tmp_path):
    """A missing folder, a folder as the path, or an unwritable file: UsageError naming the path."""
    unwritable = tmp_path / "read-only.jsonl"
    unwritable.write_text("")
    unwritable.chmod(0o400)
    if os.geteuid() == 0:  # root writes anyway; a sysfs file refuses even root
        unwritable = Path("/sys/kernel/notes")
    missing = tmp_path / "nope" / "r.jsonl"
    with pytest.raises(UsageError, match=f"folder {tmp_path / 'nope'} does not exist"):
        prepare_output(missing, resume=False, overwrite=False)
    with pytest.raises(UsageError, match="it is a folder"):
        prepare_output(tmp_path, resume=False, overwrite=False)
    with pytest.raises(
        UsageError, match=f"cannot write results to {unwritable}: Permission denied"
    ):
        prepare_output(unwritable, resume=False, overwrite=True)
    with pytest.raises(UsageError, match="--out"):
        prepare_output(None, resume=True, overwrite=False)


def test_resume_state(tmp_path):
    """Resume collects the ok keys (int ids as strings), session bindings and counts."""
    path = tmp_path / "r.jsonl"
    session = {**OK, "id": 5, "session": "s1", "deployment": "openai-b"}
    write(path, [OK, HTTP_ERROR, INVALID, session, {**NO_RESPONSE, "session": "s2"}])
    state = prepare_output(path, resume=True, overwrite=False)
    assert ("q1" in state.ok, "5" in state.ok, "2" in state.ok, "q3" in state.ok) == (
        True,
        True,
        False,
        False,
    )
    assert {"s1": "openai-b", "s2": "openai-b"} == state.sessions
    assert {"ok": 2, "error": 2, "invalid": 1, "malformed": 0} == state.counts
    assert ("rrcli", 0) == (state.fmt, state.dropped_bytes)


@pytest.mark.parametrize("fmt", ["openai-batch", "anthropic-batch"])
def test_resume_reads_batch_formats(tmp_path, fmt):
    """A batch-format file resumes too: a 200 response / a succeeded result is an ok."""
    path = tmp_path / "r.jsonl"
    write(path, [OK, HTTP_ERROR, NO_RESPONSE], fmt=fmt)
    state = prepare_output(path, resume=True, overwrite=False, fmt=fmt)
    assert (1, True, False) == (len(state.ok), "q1" in state.ok, "2" in state.ok)
    assert fmt == state.fmt


def test_resume_refuses_another_format(tmp_path):
    """Resuming a file written in another format is a usage error naming the format to use."""
    path = tmp_path / "r.jsonl"
    write(path, [OK])
    with pytest.raises(UsageError, match="--format rrcli"):
        prepare_output(path, resume=True, overwrite=False, fmt="openai-batch")


def test_last_line_not_json_is_dropped(tmp_path):
    """A last line that ends in a newline but is not JSON is torn too and dropped; a bad middle line
    is kept and counted as malformed."""
    path = tmp_path / "r.jsonl"
    good = json.dumps(OK) + "\n"
    path.write_text(good + "garbage\n" + good.replace("q1", "q2") + '{"id": "q3", "sta\n')
    state = prepare_output(path, resume=True, overwrite=False)
    assert good + "garbage\n" + good.replace("q1", "q2") == path.read_text()
    assert (1, len('{"id": "q3", "sta\n')) == (state.counts["malformed"], state.dropped_bytes)


results = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.integers(0, 50) | st.text(min_size=1, max_size=4),
            "status": st.sampled_from(["ok", "error", "invalid"]),
            "output": st.text(max_size=12),
        }
    ),
    min_size=1,
    max_size=5,
)


@pytest.fixture(scope="module")
def memory_dir():
    """A folder in memory where there is one (a tmpfs): the torn-file property opens and cuts a
    file some 15,000 times, and a disk's metadata writes would take most of its time."""
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as folder:
        yield Path(folder)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(results, st.sampled_from(["rrcli", "openai-batch", "anthropic-batch"]))
def test_torn_at_every_offset_keeps_exactly_the_complete_lines(memory_dir, lines, fmt):
    """Cut a results file at every byte offset: resume keeps exactly the complete lines (and the ok
    keys among them), and the file can be appended to afterwards."""
    tmp_path = memory_dir
    full = tmp_path / f"full-{fmt}.jsonl"
    full.unlink(missing_ok=True)
    write(full, lines, fmt=fmt)
    data = full.read_bytes()
    path = tmp_path / "cut.jsonl"
    for cut in range(len(data) + 1):
        path.write_bytes(data[:cut])
        state = prepare_output(path, resume=True, overwrite=False)
        kept = data[: data.rfind(b"\n", 0, cut) + 1]
        assert kept == path.read_bytes()
        complete = lines[: kept.count(b"\n")]
        ok_ids = {str(r["id"]) for r in complete if r["status"] == "ok"}
        assert len(ok_ids) == len(state.ok)
        assert all(key in state.ok for key in ok_ids)
        assert cut - len(kept) == state.dropped_bytes


def test_metadata_with_integers_beyond_64_bits_is_echoed_exactly(tmp_path):
    """A job whose metadata holds an integer beyond 64 bits runs, and its result line echoes
    that metadata digit for digit."""
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"id": "a", "prompt": "x", "metadata": {"n": -9223372036854775809}}\n')
    done = rrcli("run", jobs, "-p", "demo", "-q", "--out", "out.jsonl", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    (result,) = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert ("ok", {"n": -9223372036854775809}) == (result["status"], result["metadata"])


WHOLE = {
    **OK,
    "output": "",
    "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "f", "arguments": '{"a":1}'}}],
    "finish_reason": "tool_calls",
    "usage": {"input_tokens": 40, "output_tokens": 9, "cached_input_tokens": 30,
              "reasoning_tokens": 4},
    "system_fingerprint": "fp_1",
    "reasoning_content": "think",
    "choices": [
        {"output": "", "finish_reason": "tool_calls", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]},
        {"output": "no", "finish_reason": "stop", "tool_calls": None, "refusal": "no"},
    ],
}  # fmt: skip


def test_openai_batch_builds_every_choice_and_count_of_a_result(tmp_path):
    """openai-batch without a provider body: a chat.completion with each choice (tool calls,
    refusal), the cached and reasoning counts as usage details and the fingerprint; the SDK's
    type accepts it."""
    (line,) = write(tmp_path / "r.jsonl", [WHOLE], fmt="openai-batch")
    body = line["response"]["body"]
    pytest.importorskip("openai.types.chat").ChatCompletion.model_validate(body)
    first, second = body["choices"]
    assert (None, WHOLE["tool_calls"], "tool_calls") == (
        first["message"]["content"],
        first["message"]["tool_calls"],
        first["finish_reason"],
    )
    assert ("no", "no", 1) == (second["message"]["content"], second["message"]["refusal"],
                               second["index"])  # fmt: skip
    assert ({"cached_tokens": 30}, {"reasoning_tokens": 4}, "fp_1") == (
        body["usage"]["prompt_tokens_details"],
        body["usage"]["completion_tokens_details"],
        body["system_fingerprint"],
    )


def test_anthropic_batch_builds_thinking_tool_use_and_cache_reads_of_a_result(tmp_path):
    """anthropic-batch of an OpenAI-shaped result: a thinking block, a tool_use block with the
    arguments as input, stop_reason tool_use, and input tokens without the cache reads, which
    are cache_read_input_tokens; the SDK's type accepts it."""
    (line,) = write(tmp_path / "r.jsonl", [WHOLE], fmt="anthropic-batch")
    message = line["result"]["message"]
    pytest.importorskip("anthropic.types").Message.model_validate(message)
    assert [
        {"type": "thinking", "thinking": "think", "signature": ""},
        {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}},
    ] == message["content"]
    assert (
        "tool_use",
        {"input_tokens": 10, "output_tokens": 9, "cache_read_input_tokens": 30},
    ) == (
        message["stop_reason"],
        message["usage"],
    )
