"""``rrcli sim`` speaks Bedrock's Converse wire as Bedrock does: the official boto3
``bedrock-runtime`` client, pointed at it with fake credentials, converses, streams (its own
event-stream parser reading the sim's frames), round-trips a tool call, and gets Bedrock's
errors (a wrong secret refused 403 by the sim's botocore check of the SigV4 signature,
throttling as ThrottlingException). rrcli's own event-stream reader is held to botocore's."""

from __future__ import annotations

import asyncio

import botocore.eventstream
import pytest
from bedrockkit import AWS_ENV, MODEL, SECRET, boto_client
from botocore.exceptions import ClientError
from hypothesis import given
from hypothesis import strategies as st

from rrcli.config.profile import Backend, Credentials, RetrySettings
from rrcli.errors import InvalidResponseError, ProviderError
from rrcli.providers import make_provider
from rrcli.providers.base import Call
from rrcli.providers.eventstream import FrameParser, encode_frame

HELLO = [{"role": "user", "content": [{"text": "hello"}]}]
WEATHER = {
    "tools": [
        {
            "toolSpec": {
                "name": "get_weather",
                "description": "The weather in a city",
                "inputSchema": {
                    "json": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    }
                },
            }
        }
    ]
}


def test_boto3_converses_with_the_sim(sim_server):
    """converse: the answer's message, stop reason and usage in Bedrock's shape."""
    sim = sim_server(api_keys=[SECRET])
    answer = boto_client(sim.url).converse(
        modelId=MODEL, messages=HELLO, inferenceConfig={"maxTokens": 5}
    )
    usage = answer["usage"]
    assert "max_tokens" == answer["stopReason"]
    assert 5 == usage["outputTokens"]
    assert usage["inputTokens"] + usage["outputTokens"] == usage["totalTokens"]
    assert 5 == len(answer["output"]["message"]["content"][0]["text"].split())
    assert [f"/model/{MODEL}/converse"] == [r["path"] for r in sim.received()]


def test_boto3_reads_the_sims_stream(sim_server):
    """converse_stream: botocore parses the sim's event-stream frames into messageStart, the
    text deltas, messageStop and metadata; the text equals the plain answer's."""
    sim = sim_server(api_keys=[SECRET])
    client = boto_client(sim.url)
    plain = client.converse(modelId=MODEL, messages=HELLO)
    events = list(client.converse_stream(modelId=MODEL, messages=HELLO)["stream"])
    names = [next(iter(e)) for e in events]
    text = "".join(
        e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e
    )
    assert ["messageStart", "contentBlockStop", "messageStop", "metadata"] == [
        n for n in names if n != "contentBlockDelta"
    ]
    assert plain["output"]["message"]["content"][0]["text"] == text
    assert plain["usage"] == events[-1]["metadata"]["usage"]


def test_boto3_tool_round_trip(sim_server):
    """A toolConfig gets a toolUse (stop reason tool_use, input by the tool's schema); the
    toolResult sent back gets a text answer."""
    sim = sim_server(api_keys=[SECRET])
    client = boto_client(sim.url)
    first = client.converse(modelId=MODEL, messages=HELLO, toolConfig=WEATHER)
    message = first["output"]["message"]
    use = message["content"][0]["toolUse"]
    assert ("tool_use", "get_weather") == (first["stopReason"], use["name"])
    assert isinstance(use["input"]["city"], str)
    result = {"toolResult": {"toolUseId": use["toolUseId"], "content": [{"text": "sunny"}]}}
    history = [*HELLO, message, {"role": "user", "content": [result]}]
    second = client.converse(modelId=MODEL, messages=history, toolConfig=WEATHER)
    assert "end_turn" == second["stopReason"]
    assert second["output"]["message"]["content"][0]["text"]


def test_a_wrong_secret_is_refused_as_bedrock_refuses_it(sim_server):
    """The sim checks the SigV4 signature with botocore's signer: a client signing with
    another secret gets 403 InvalidSignatureException, in the x-amzn-ErrorType header."""
    sim = sim_server(api_keys=[SECRET])
    with pytest.raises(ClientError) as caught:
        boto_client(sim.url, secret="not/the/secret").converse(modelId=MODEL, messages=HELLO)
    error = caught.value.response
    assert 403 == error["ResponseMetadata"]["HTTPStatusCode"]
    assert "InvalidSignatureException" == error["Error"]["Code"]
    assert "signature" in error["Error"]["Message"]


def test_throttling_is_bedrocks_throttling_exception(sim_server):
    """A forced 429 is ThrottlingException to boto3, a 503 ServiceUnavailableException."""
    sim = sim_server(api_keys=[SECRET])
    client = boto_client(sim.url)
    codes = []
    for status in ("429", "503"):

        def force(request, status=status, **_):
            request.headers["x-sim-status"] = status

        client.meta.events.register_first("before-sign.bedrock-runtime.Converse", force)
        with pytest.raises(ClientError) as caught:
            client.converse(modelId=MODEL, messages=HELLO)
        client.meta.events.unregister("before-sign.bedrock-runtime.Converse", force)
        codes.append(caught.value.response["Error"]["Code"])
    assert ["ThrottlingException", "ServiceUnavailableException"] == codes


def test_a_field_converse_lacks_is_a_validation_exception(sim_server):
    """A body field Converse does not have is refused 400 ValidationException."""
    sim = sim_server()
    client = boto_client(sim.url)

    def smuggle(request, **_):
        request.data = request.data[:-1] + b',"stream":true}'

    client.meta.events.register_first("before-sign.bedrock-runtime.Converse", smuggle)
    with pytest.raises(ClientError) as caught:
        client.converse(modelId=MODEL, messages=HELLO)
    assert "ValidationException" == caught.value.response["Error"]["Code"]
    assert "extraneous key [stream]" in caught.value.response["Error"]["Message"]


_NAMES = st.text(st.characters(codec="ascii", exclude_characters=":\x00"), min_size=1, max_size=20)


@given(
    frames=st.lists(
        st.tuples(
            st.dictionaries(_NAMES, st.text(max_size=40), max_size=4), st.binary(max_size=200)
        ),
        min_size=1,
        max_size=5,
    ),
    cut=st.integers(1, 64),
)
def test_frames_read_as_botocore_reads_them(frames, cut):
    """Frames rrcli writes are read back, in pieces of any size, as botocore's own parser reads
    them: the same headers and payloads."""
    data = b"".join(encode_frame(headers, payload) for headers, payload in frames)
    theirs = botocore.eventstream.EventStreamBuffer()
    theirs.add_data(data)
    expected = [(m.headers, m.payload) for m in theirs]
    parser = FrameParser()
    ours = [f for i in range(0, len(data), cut) for f in parser.feed(data[i : i + cut])]
    assert expected == [(f.headers, f.payload) for f in ours]


def test_a_corrupted_frame_is_an_invalid_answer():
    """A frame whose CRC does not match is refused, not read as an event."""
    data = bytearray(encode_frame({":event-type": "messageStart"}, b'{"role":"assistant"}'))
    data[20] ^= 1
    with pytest.raises(InvalidResponseError, match="CRC"):
        FrameParser().feed(bytes(data))


ERRORS = [
    (429, "ThrottlingException", True, False),
    (429, "ModelNotReadyException", True, False),
    (408, "ModelTimeoutException", True, False),
    (503, "ServiceUnavailableException", True, False),
    (500, "InternalServerException", True, False),
    (403, "AccessDeniedException", False, True),
    (403, "UnrecognizedClientException", False, True),
    (400, "ValidationException", False, False),
]


def failed_call(url: str, headers: dict[str, str], stream: bool = False) -> ProviderError:
    """The error of one call by rrcli's bedrock provider to the sim at ``url``, the sim told
    what to answer by ``headers``."""
    backend = Backend(
        id="br",
        provider="bedrock",
        base_url=url,
        model=MODEL,
        region="us-east-1",
        allow_private=True,
        headers=headers,
        credentials=Credentials(auth="none"),
    )

    async def send() -> ProviderError:
        provider = make_provider(backend, None, retry=RetrySettings(), seed=None)
        try:
            with pytest.raises(ProviderError) as caught:
                await provider.send(Call([{"role": "user", "content": "hi"}], stream=stream))
        finally:
            await provider.aclose()
        return caught.value

    return asyncio.run(send())


@pytest.fixture
def aws_env(monkeypatch):
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(("status", "kind", "transient", "down"), ERRORS)
def test_bedrocks_errors_in_the_one_tree(sim_server, aws_env, status, kind, transient, down):
    """Each Bedrock exception, as the sim answers it (status and x-amzn-ErrorType), is an rrcli
    error named by it, retried or not and taking the backend down or not by rrcli's rules."""
    sim = sim_server(api_keys=[SECRET])
    error = failed_call(sim.url, {"x-sim-status": str(status), "x-sim-error-type": kind})
    assert (transient, down) == (error.transient, error.backend_down)
    assert f"HTTP {status}: {kind}: " in error.message
    assert (status == 429) == error.rate_limited


def test_an_exception_frame_mid_stream_is_the_calls_error(sim_server, aws_env):
    """An exception frame in a 200 stream (internalServerException) ends the attempt with a
    transient error naming it."""
    sim = sim_server(api_keys=[SECRET])
    error = failed_call(sim.url, {"x-sim-mode": "stream-error"}, stream=True)
    assert ("api_error", True) == (error.type, error.transient)
    assert "internalServerException" in error.message
