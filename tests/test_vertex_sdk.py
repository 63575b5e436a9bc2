"""``rrcli sim`` speaks Vertex AI as Vertex AI does, for both publishers: Google's SDK
(``google-genai`` with ``vertexai=True``) and Anthropic's (``anthropic.AnthropicVertex``)
pointed at it generate, stream and read its errors, with a bearer token. rrcli's vertex tests
(tests/test_vertex_run.py) then run against the same sim."""

from __future__ import annotations

import pytest

genai = pytest.importorskip("google.genai")
errors = pytest.importorskip("google.genai.errors")
oauth = pytest.importorskip("google.oauth2.credentials")
anthropic = pytest.importorskip("anthropic")

TOKEN = "ya29.vertex-sdk-token-0123456789"
PROJECT, REGION = "my-project-1", "us-east5"
CLAUDE = "claude-3-5-haiku@20241022"


def google(sim, token: str = TOKEN, headers: dict[str, str] | None = None):
    """google-genai on Vertex AI at ``sim``, its credentials a ready token."""
    options = {"base_url": sim.url, "retry_options": {"attempts": 1}, "headers": headers or {}}
    credentials = oauth.Credentials(token=token)
    return genai.Client(
        vertexai=True,
        project=PROJECT,
        location=REGION,
        credentials=credentials,
        http_options=options,
    )


def claude(sim, token: str = TOKEN, **options):
    return anthropic.AnthropicVertex(
        project_id=PROJECT,
        region=REGION,
        access_token=token,
        base_url=f"{sim.url}/v1",
        max_retries=0,
        **options,
    )


def test_genai_generates_and_streams_on_vertex_paths(sim_server):
    """generate_content and its stream at the project's Gemini path, with the bearer token."""
    sim = sim_server(api_keys=(TOKEN,))
    client = google(sim)  # kept: the client closes its connections when collected
    models = client.models
    plain = models.generate_content(model="gemini-2.5-flash", contents="Hello")
    chunks = list(models.generate_content_stream(model="gemini-2.5-flash", contents="Hello"))
    assert plain.text
    assert plain.text == "".join(c.text or "" for c in chunks)
    first, second = sim.received()
    path = f"/projects/{PROJECT}/locations/{REGION}/publishers/google/models/gemini-2.5-flash"
    assert f"/v1beta1{path}:generateContent" == first["path"]
    assert f"/v1beta1{path}:streamGenerateContent" == second["path"]


def test_genai_reads_an_unknown_token_and_exhausted_quota(sim_server):
    """Another token: 401 UNAUTHENTICATED; a 429: RESOURCE_EXHAUSTED, as the SDK names them."""
    sim = sim_server(api_keys=(TOKEN,))
    refusing = google(sim, token="ya29.not-this-one")
    with pytest.raises(errors.ClientError) as refused:
        refusing.models.generate_content(model="gemini-2.5-flash", contents="Hi")
    assert (401, "UNAUTHENTICATED") == (refused.value.code, refused.value.status)
    limiting = google(sim, headers={"x-sim-status": "429"})
    with pytest.raises(errors.ClientError) as limited:
        limiting.models.generate_content(model="gemini-2.5-flash", contents="Hi")
    assert (429, "RESOURCE_EXHAUSTED") == (limited.value.code, limited.value.status)


def test_anthropic_vertex_creates_and_streams(sim_server):
    """AnthropicVertex: a message at :rawPredict, a stream at :streamRawPredict, the body
    without model and with Vertex's anthropic_version."""
    sim = sim_server(api_keys=(TOKEN,))
    client = claude(sim)
    message = client.messages.create(
        model=CLAUDE, max_tokens=32, messages=[{"role": "user", "content": "Hello"}]
    )
    with client.messages.stream(
        model=CLAUDE, max_tokens=32, messages=[{"role": "user", "content": "Hello"}]
    ) as stream:
        streamed = stream.get_final_message()
    assert message.content[0].text
    assert "end_turn" == streamed.stop_reason
    first, second = sim.received()
    path = f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/anthropic/models/{CLAUDE}"
    assert f"{path}:rawPredict" == first["path"]
    assert f"{path}:streamRawPredict" == second["path"]
    assert "model" not in first["body"]
    assert "anthropic_version" in first["body"]


def test_anthropic_vertex_reads_errors(sim_server):
    """An unknown token: the SDK's AuthenticationError; a 429: its RateLimitError."""
    sim = sim_server(api_keys=(TOKEN,))
    ask = {"model": CLAUDE, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    with pytest.raises(anthropic.AuthenticationError):
        claude(sim, token="ya29.not-this-one").messages.create(**ask)
    with pytest.raises(anthropic.RateLimitError) as limited:
        claude(sim, default_headers={"x-sim-status": "429"}).messages.create(**ask)
    assert "RESOURCE_EXHAUSTED" == limited.value.body["error"]["status"]
