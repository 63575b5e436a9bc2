"""Which backends may take a job for an endpoint, and where a Responses continuation goes: pure
answers computed once per pool; the memory of response creators stays bounded."""

from __future__ import annotations

import asyncio

from rrcli.config.profile import Backend, RetrySettings
from rrcli.providers import make_provider
from rrcli.providers.base import Call
from rrcli.records.origins import ResponseOrigins
from rrcli.routing.serving import Serving

CHAT = Backend(id="chat")
EMBED = Backend(id="embed", endpoints=("embeddings",))
BOTH = Backend(id="both", endpoints=("chat", "responses"))


def test_an_all_chat_pool_excludes_nothing_for_chat():
    """A chat job on a pool of chat backends is excluded from no backend and refused nowhere."""
    assert (frozenset(), None) == Serving([CHAT, Backend(id="other")]).check("chat")


def test_a_job_is_routed_only_among_the_backends_of_its_endpoint():
    """Each endpoint excludes the backends that do not serve it; where none does, every backend
    is excluded and the reason names the endpoint, what each backend serves, and the fix."""
    serving = Serving([CHAT, EMBED, BOTH])
    assert (frozenset({"embed"}), None) == serving.check("chat")
    assert (frozenset({"chat", "both"}), None) == serving.check("embeddings")
    excluded, reason = serving.check("moderations")
    assert frozenset({"chat", "embed", "both"}) == excluded
    assert (
        "no backend serves the moderations endpoint (chat serves chat; embed serves embeddings; "
        'both serves chat, responses) — add "moderations" to the endpoints of a backend whose '
        "model serves it"
    ) == reason


def test_a_continuation_is_pinned_to_its_creator_or_refused_naming_why():
    """Every backend but the creator is excluded; a creator gone from the pool, or no longer
    serving responses, refuses the continuation naming the response and the backend."""
    serving = Serving([CHAT, BOTH, Backend(id="more", endpoints=("responses",))])
    assert (frozenset({"chat", "more"}), None) == serving.pinned("resp_1", "both")
    _, gone = serving.pinned("resp_1", "old")
    assert gone is not None and 'created by backend "old", which is no longer in the pool' in gone
    _, moved = serving.pinned("resp_1", "chat")
    assert moved is not None and 'backend "chat", which serves no responses' in moved


def test_response_origins_keep_the_most_recent():
    """The memory of response creators holds the last ``limit`` ids; a repeated id counts as
    recent again."""
    origins = ResponseOrigins(limit=3)
    origins.update([("r1", "a"), ("r2", "b"), ("r3", "a")])
    origins.remember("r1", "a")
    origins.remember("r4", "b")
    assert (None, "a", "a", "b", 3) == (
        origins.origin("r2"),
        origins.origin("r1"),
        origins.origin("r3"),
        origins.origin("r4"),
        len(origins),
    )


def test_the_sim_provider_answers_every_endpoint():
    """The in-process sim embeds (a unit vector per input, ``dimensions`` long), answers the
    Responses API with a response id, completes and moderates, offline."""
    backend = Backend(id="s", provider="sim", base_url="sim://local", model="sim-small")
    provider = make_provider(backend, None, retry=RetrySettings(), seed=0)

    def send(endpoint: str, value: object, **params: object):
        return asyncio.run(provider.send(Call([], params, endpoint=endpoint, input=value)))

    vectors = send("embeddings", ["a", "b"], dimensions=8).embeddings
    assert vectors is not None and [8, 8] == [len(v) for v in vectors]
    assert all(abs(sum(x * x for x in v) - 1.0) < 1e-6 for v in vectors)
    response = send("responses", "hi")
    assert response.output and (response.response_id or "").startswith("resp_")
    assert send("completions", "hi").output
    assert [False, False] == [m["flagged"] for m in send("moderations", ["a", "b"]).moderations]


def test_route_rules_compose_the_endpoint_and_the_expressible_params():
    """A chat job is judged only among the backends that serve chat: ``n = 2`` excludes the
    Anthropic one and the embeddings one, and where only Anthropic serves chat it is refused
    naming it; an embeddings job is not judged by chat's params rule."""
    import io

    from rrcli.records.jobs import iter_jobs
    from rrcli.routing.serving import RouteRules

    claude = Backend(id="claude", provider="anthropic", base_url="https://api.anthropic.com")
    lines = (
        b'{"id": "n2", "prompt": "hi", "params": {"n": 2}}\n'
        b'{"id": "e", "endpoint": "embeddings", "input": "x", "params": {"n": 2}}\n'
    )
    chat_job, embed_job = iter_jobs(io.BytesIO(lines), "jobs.jsonl")
    mixed = RouteRules([claude, CHAT, EMBED])
    assert (frozenset({"claude", "embed"}), None) == mixed.check(chat_job)
    assert (frozenset({"claude", "chat"}), None) == mixed.check(embed_job)
    excluded, reason = RouteRules([claude, EMBED]).check(chat_job)
    assert frozenset({"claude", "embed"}) == excluded
    assert reason is not None and reason.startswith(
        "n = 2 cannot be sent to anthropic backend claude"
    )
