"""ToolonceToolset in a real Pydantic AI agent (FunctionModel scripts the model): it reaches
toolonce's layer (a duplicate is answered `replayed`, keyed as derive_key keys it), leaves read
tools untouched, and scopes the keys by the run's conversation."""

from __future__ import annotations

import asyncio
import datetime

import pytest
from counting import Counter
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelResponse, RetryPromptPart, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.toolsets import FunctionToolset

import toolonce
from toolonce.pydantic_ai import ToolonceToolset

REFUND = {"order_id": "o-1", "cents": 2500}


def scripted(*calls: tuple) -> FunctionModel:
    """A model that makes these (name, args) tool calls in its first response, then answers."""

    def respond(messages, info):
        if len(messages) > 1:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[ToolCallPart(name, args, tool_call_id=f"call_{n}") for n, (name, args) in enumerate(calls)]
        )

    return FunctionModel(respond)


def refund_tools(issued: Counter) -> FunctionToolset:
    def issue_refund(order_id: str, cents: int) -> dict:
        """Refund an order."""
        n = issued.add((order_id, cents))
        return {"refund_id": f"re_{n}", "key": toolonce.current_key()}

    return FunctionToolset([issue_refund])


def run(toolset, *calls, **run_kwargs) -> list:
    """The tool return parts of one agent run."""
    agent = Agent(scripted(*calls), toolsets=[toolset])
    result = asyncio.run(agent.run("go", **run_kwargs))
    return [p for m in result.new_messages() for p in m.parts if isinstance(p, (ToolReturnPart, RetryPromptPart))]


def outcome_of(store, scope: str, name: str, args: dict) -> str:
    """What the layer answers a plain @toolonce.write call of the same operation: a way to see
    what the toolset stored, through the package's own surface."""

    @toolonce.write(store, name=name)
    def same(**kwargs):
        raise AssertionError("a stored operation is never run again")

    return same.call_detailed(**args, scope=scope).outcome


def test_a_duplicate_in_a_later_run_is_answered_replayed_by_the_layer(store, run_id):
    issued = Counter()
    toolset = ToolonceToolset(refund_tools(issued), store=store)
    [first] = run(toolset, ("issue_refund", REFUND), conversation_id=run_id)
    [again] = run(toolset, ("issue_refund", REFUND), conversation_id=run_id)
    assert len(issued.calls) == 1
    key = toolonce.derive_key(run_id, "issue_refund", REFUND)
    assert first.content == again.content == {"refund_id": "re_1", "key": key}
    assert outcome_of(store, run_id, "issue_refund", REFUND) == "replayed"


def test_two_calls_in_one_response_run_the_tool_once_when_the_duplicate_waits(store, run_id):
    issued = Counter()
    toolset = ToolonceToolset(refund_tools(issued), store=store, in_flight=toolonce.Wait(30))
    parts = run(toolset, *[("issue_refund", REFUND)] * 3, conversation_id=run_id)
    assert len(issued.calls) == 1
    assert [p.tool_call_id for p in parts] == ["call_0", "call_1", "call_2"]
    assert all(p.content == parts[0].content for p in parts)


def test_validated_arguments_that_are_not_json_are_keyed_in_their_json_form(run_id):
    booked = Counter()

    def book(when: datetime.datetime, seats: int) -> str:
        """Book a table."""
        return f"booking {booked.add((when, seats))}"

    args = {"when": "2026-12-24T19:30:00", "seats": 2}
    with toolonce.open_store("memory://") as store:
        toolset = ToolonceToolset(FunctionToolset([book]), store=store)
        [first] = run(toolset, ("book", args), conversation_id=run_id)
        [again] = run(toolset, ("book", args), conversation_id=run_id)
        assert outcome_of(store, run_id, "book", args) == "replayed"
    assert first.content == again.content == "booking 1"
    assert booked.calls == [(datetime.datetime(2026, 12, 24, 19, 30), 2)]


def test_two_conversations_with_the_same_arguments_are_two_effects(store, run_id):
    issued = Counter()
    toolset = ToolonceToolset(refund_tools(issued), store=store)
    [a] = run(toolset, ("issue_refund", REFUND), conversation_id=f"{run_id}-a")
    [b] = run(toolset, ("issue_refund", REFUND), conversation_id=f"{run_id}-b")
    assert len(issued.calls) == 2
    assert a.content["key"] != b.content["key"]


def test_the_run_id_scopes_the_keys_when_asked(run_id):
    issued = Counter()
    with toolonce.open_store("memory://") as store:
        toolset = ToolonceToolset(refund_tools(issued), store=store, scope="run_id")
        # One conversation, two runs: two operations.
        [a] = run(toolset, ("issue_refund", REFUND), conversation_id=run_id, run_id=f"{run_id}-1")
        [b] = run(toolset, ("issue_refund", REFUND), conversation_id=run_id, run_id=f"{run_id}-2")
    assert len(issued.calls) == 2
    assert a.content["key"] == toolonce.derive_key(f"{run_id}-1", "issue_refund", REFUND)


def test_a_surrounding_toolonce_scope_wins_over_the_conversation(run_id):
    issued = Counter()
    with toolonce.open_store("memory://") as store, toolonce.scope(run_id):
        toolset = ToolonceToolset(refund_tools(issued), store=store)
        run(toolset, ("issue_refund", REFUND), conversation_id="conv-a")
        [b] = run(toolset, ("issue_refund", REFUND), conversation_id="conv-b")
    assert len(issued.calls) == 1
    assert b.content["key"] == toolonce.derive_key(run_id, "issue_refund", REFUND)


def test_read_tools_run_untouched_even_with_the_store_closed(run_id):
    looked = Counter()

    def by_name(q: str) -> str:
        """A read tool named in reads=."""
        return f"name {looked.add(q)}"

    def by_metadata(q: str) -> str:
        """A read tool marked by its metadata."""
        return f"metadata {looked.add(q)}"

    tools = FunctionToolset([by_name])
    tools.add_function(by_metadata, metadata={"toolonce": "read"})
    store = toolonce.open_store("memory://")
    toolset = ToolonceToolset(tools, store=store, reads={"by_name"})
    store.close()  # a write call would now fail: a read one never touches the store
    for _ in range(2):
        parts = run(toolset, ("by_name", {"q": "x"}), ("by_metadata", {"q": "x"}), conversation_id=run_id)
        assert all(isinstance(p, ToolReturnPart) for p in parts)
    assert len(looked.calls) == 4


def test_a_write_call_with_the_store_closed_is_refused_and_never_runs(run_id):
    issued = Counter()
    store = toolonce.open_store("memory://")
    toolset = ToolonceToolset(refund_tools(issued), store=store)
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        run(toolset, ("issue_refund", REFUND), conversation_id=run_id)
    assert issued.calls == []


def test_model_retry_from_a_write_tool_releases_the_operation(run_id):
    attempts = Counter()

    def flaky(n: int) -> str:
        """Asks the model to retry the first time."""
        if attempts.add(n) == 1:
            raise ModelRetry("try again")
        return "ok"

    with toolonce.open_store("memory://") as store:
        toolset = ToolonceToolset(FunctionToolset([flaky]), store=store)
        [retry] = run(toolset, ("flaky", {"n": 1}), conversation_id=run_id)
        [ran] = run(toolset, ("flaky", {"n": 1}), conversation_id=run_id)
        [replayed] = run(toolset, ("flaky", {"n": 1}), conversation_id=run_id)
    assert retry.outcome == "retried" and retry.content == "try again"  # asked the model again
    assert ran.content == replayed.content == "ok"
    assert len(attempts.calls) == 2


def test_a_permanent_error_is_stored_and_replayed_to_duplicates(run_id):
    attempts = Counter()

    def declined(n: int) -> str:
        """Fails for good."""
        attempts.add(n)
        raise toolonce.PermanentError("card declined")

    with toolonce.open_store("memory://") as store:
        toolset = ToolonceToolset(FunctionToolset([declined]), store=store)
        with pytest.raises(toolonce.PermanentError, match="card declined"):
            run(toolset, ("declined", {"n": 1}), conversation_id=run_id)
        with pytest.raises(toolonce.ReplayedFailure, match="card declined"):
            run(toolset, ("declined", {"n": 1}), conversation_id=run_id)
    assert len(attempts.calls) == 1


def test_bad_settings_are_refused_when_the_toolset_is_made():
    tools = FunctionToolset([])
    with toolonce.open_store("memory://") as store:
        with pytest.raises(toolonce.ConfigError, match="scope"):
            ToolonceToolset(tools, store=store, scope="user")
        with pytest.raises(toolonce.ConfigError, match="on_expired"):
            ToolonceToolset(tools, store=store, on_expired="retry")
    with pytest.raises(toolonce.ConfigError, match="store"):
        ToolonceToolset(tools)


def test_a_sync_tool_sends_the_operation_key_downstream_and_a_duplicate_sends_nothing(
    store, run_id, downstream
):
    def issue_refund(order_id: str, cents: int) -> dict:
        """Refund an order."""
        return {"receipt": downstream.send(toolonce.current_key())}

    toolset = ToolonceToolset(FunctionToolset([issue_refund]), store=store)
    [first] = run(toolset, ("issue_refund", REFUND), conversation_id=run_id)
    [again] = run(toolset, ("issue_refund", REFUND), conversation_id=run_id)
    assert downstream.keys == [toolonce.derive_key(run_id, "issue_refund", REFUND)]
    assert first.content == again.content == {"receipt": "rcpt_1"}


def test_an_async_tool_sends_the_operation_key_downstream_and_a_duplicate_sends_nothing(
    store, run_id, downstream
):
    async def issue_refund(order_id: str, cents: int) -> dict:
        """Refund an order."""
        key = toolonce.current_context().idempotency_header[1]
        return {"receipt": await asyncio.to_thread(downstream.send, key)}

    toolset = ToolonceToolset(FunctionToolset([issue_refund]), store=store, in_flight=toolonce.Wait(30))
    parts = run(toolset, ("issue_refund", REFUND), ("issue_refund", REFUND), conversation_id=run_id)
    assert downstream.keys == [toolonce.derive_key(run_id, "issue_refund", REFUND)]
    assert [p.content for p in parts] == [{"receipt": "rcpt_1"}] * 2
