"""ToolonceMiddleware in a real LangChain v1 agent (create_agent, LangChain's fake chat model):
it reaches toolonce's layer (a duplicate is answered `replayed`, keyed as derive_key keys it),
leaves read tools untouched, and scopes the keys by the run's thread."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import pytest
from counting import Counter
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool, ToolException, tool
from langgraph.types import Command

import toolonce
from toolonce.langchain import ToolonceMiddleware


class ScriptedChatModel(GenericFakeChatModel):
    def bind_tools(self, tools, **kwargs):
        return self


def scripted(*calls: dict) -> ScriptedChatModel:
    """A model that makes these tool calls in one turn, then answers."""
    turn = [{"id": f"call_{n}", **call} for n, call in enumerate(calls)]
    return ScriptedChatModel(messages=iter([AIMessage("", tool_calls=turn), AIMessage("done")]))


def tool_messages(state) -> list:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def recorded(message) -> str:
    """The recorded content of a tool message: a replay's content without its note."""
    note = message.response_metadata.get("toolonce/note")
    return message.content if note is None else message.content.removesuffix(f"\n\n{note}")


def run_agent(middleware, tools, *calls, thread="t-1", config=None):
    agent = create_agent(model=scripted(*calls), tools=tools, middleware=[middleware])
    config = config if config is not None else {"configurable": {"thread_id": thread}}
    return tool_messages(agent.invoke({"messages": [("user", "go")]}, config))


def email_tool(sent: Counter):
    @tool
    def send_email(to: str, subject: str) -> str:
        """Send an email."""
        n = sent.add((to, subject))
        return f"message {n} ({toolonce.current_key()})"

    return send_email


EMAIL = {"name": "send_email", "args": {"to": "ada@example.com", "subject": "hi"}}


def test_a_duplicate_call_in_a_later_run_is_answered_replayed_by_the_layer(store, run_id):
    sent = Counter()
    send_email = email_tool(sent)
    middleware = ToolonceMiddleware(store)
    [first] = run_agent(middleware, [send_email], EMAIL, thread=run_id)
    [again] = run_agent(middleware, [send_email], EMAIL, thread=run_id)
    assert len(sent.calls) == 1
    assert first.response_metadata["toolonce/outcome"] == "executed"
    assert again.response_metadata["toolonce/outcome"] == "replayed"
    key = toolonce.derive_key(run_id, "send_email", EMAIL["args"])
    assert first.response_metadata["toolonce/key"] == key == again.response_metadata["toolonce/key"]
    assert key in first.content  # the tool ran under that key (toolonce.current_key())
    # The model reads the recorded content, then the core's note.
    assert again.content == f"{first.content}\n\n{again.response_metadata['toolonce/note']}"
    assert again.tool_call_id == "call_0"


def test_two_calls_in_one_turn_run_the_tool_once_when_the_duplicate_waits(store, run_id):
    sent = Counter()
    middleware = ToolonceMiddleware(store, in_flight=toolonce.Wait(30))
    messages = run_agent(middleware, [email_tool(sent)], EMAIL, EMAIL, EMAIL, thread=run_id)
    assert len(sent.calls) == 1
    assert sorted(m.response_metadata["toolonce/outcome"] for m in messages) == [
        "executed", "replayed", "replayed"
    ]
    assert len({recorded(m) for m in messages}) == 1
    assert [m.tool_call_id for m in messages] == ["call_0", "call_1", "call_2"]


def test_a_duplicate_while_the_first_runs_raises_in_flight_as_a_write_call_does(run_id):
    started, release = threading.Event(), threading.Event()

    @tool
    def slow_write(n: int) -> str:
        """Blocks until released."""
        started.set()
        release.wait(10)
        return "ok"

    with toolonce.open_store("memory://") as store:
        middleware = ToolonceMiddleware(store)
        first = threading.Thread(
            target=run_agent, args=(middleware, [slow_write], {"name": "slow_write", "args": {"n": 1}}),
            kwargs={"thread": run_id},
        )
        first.start()
        try:
            assert started.wait(10)
            with pytest.raises(toolonce.InFlightError):
                run_agent(middleware, [slow_write], {"name": "slow_write", "args": {"n": 1}}, thread=run_id)
        finally:
            release.set()
            first.join(10)


def test_two_threads_with_the_same_arguments_are_two_effects(store, run_id):
    sent = Counter()
    send_email = email_tool(sent)
    middleware = ToolonceMiddleware(store)
    [a] = run_agent(middleware, [send_email], EMAIL, thread=f"{run_id}-a")
    [b] = run_agent(middleware, [send_email], EMAIL, thread=f"{run_id}-b")
    assert len(sent.calls) == 2
    assert a.response_metadata["toolonce/outcome"] == b.response_metadata["toolonce/outcome"] == "executed"
    assert a.response_metadata["toolonce/key"] != b.response_metadata["toolonce/key"]


def test_the_run_id_scopes_the_keys_when_asked(run_id):
    sent = Counter()
    send_email = email_tool(sent)
    with toolonce.open_store("memory://") as store:
        middleware = ToolonceMiddleware(store, scope="run_id")
        for run in ("00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002"):
            for _ in range(2):
                [m] = run_agent(middleware, [send_email], EMAIL, config={"run_id": run})
                assert m.response_metadata["toolonce/key"] == toolonce.derive_key(
                    run, "send_email", EMAIL["args"]
                )
    assert len(sent.calls) == 2


def test_a_surrounding_toolonce_scope_wins_over_the_thread(run_id):
    sent = Counter()
    send_email = email_tool(sent)
    with toolonce.open_store("memory://") as store, toolonce.scope(run_id):
        middleware = ToolonceMiddleware(store)
        run_agent(middleware, [send_email], EMAIL, thread="thread-a")
        [m] = run_agent(middleware, [send_email], EMAIL, thread="thread-b")
    assert len(sent.calls) == 1
    assert m.response_metadata["toolonce/key"] == toolonce.derive_key(run_id, "send_email", EMAIL["args"])


def test_a_call_without_a_thread_or_scope_is_refused_before_the_tool_runs():
    sent = Counter()
    with toolonce.open_store("memory://") as store:
        with pytest.raises(toolonce.InvalidArgumentsError, match="thread_id"):
            run_agent(ToolonceMiddleware(store), [email_tool(sent)], EMAIL, config={})
    assert sent.calls == []


def test_read_tools_run_untouched_even_with_the_store_closed(run_id):
    looked = Counter()

    def tagged(q: str) -> str:
        """A read tool marked by its tag."""
        return f"tag {looked.add(q)}"

    def with_metadata(q: str) -> str:
        """A read tool marked by its metadata."""
        return f"metadata {looked.add(q)}"

    by_tag = StructuredTool.from_function(tagged, tags=["toolonce:read"])
    by_metadata = StructuredTool.from_function(with_metadata, metadata={"toolonce": "read"})

    @tool
    def by_name(q: str) -> str:
        """A read tool named in reads=."""
        return f"name {looked.add(q)}"

    @tool
    @toolonce.read
    def by_decorator(q: str) -> str:
        """A read tool made from a @toolonce.read function."""
        return f"decorator {looked.add(q)}"

    store = toolonce.open_store("memory://")
    middleware = ToolonceMiddleware(store, reads={"by_name"})
    store.close()  # a write call would now fail: a read one never touches the store
    tools = [by_tag, by_metadata, by_name, by_decorator]
    calls = [{"name": t.name, "args": {"q": "x"}} for t in tools]
    for _ in range(2):
        messages = run_agent(middleware, tools, *calls, thread=run_id)
        assert all("toolonce/outcome" not in m.response_metadata for m in messages)
    assert len(looked.calls) == 8


def test_a_tool_error_message_releases_the_operation_and_reaches_the_agent_as_it_is(run_id):
    attempts = Counter()

    @tool
    def flaky(n: int) -> str:
        """Fails the first time."""
        if attempts.add(n) == 1:
            raise ToolException("downstream timed out")
        return "ok"

    flaky.handle_tool_error = True  # the tool answers its failure as an error message
    call = {"name": "flaky", "args": {"n": 1}}
    with toolonce.open_store("memory://") as store:
        middleware = ToolonceMiddleware(store)
        [failed] = run_agent(middleware, [flaky], call, thread=run_id)
        [ran] = run_agent(middleware, [flaky], call, thread=run_id)
        [replayed] = run_agent(middleware, [flaky], call, thread=run_id)
    assert failed.status == "error" and "downstream timed out" in failed.content
    assert "toolonce/outcome" not in failed.response_metadata
    assert ran.response_metadata["toolonce/outcome"] == "executed"
    assert replayed.response_metadata["toolonce/outcome"] == "replayed"
    assert len(attempts.calls) == 2


def test_an_exception_from_a_write_tool_propagates_and_releases_the_operation(run_id):
    attempts = Counter()

    @tool
    def flaky(n: int) -> str:
        """Raises the first time."""
        if attempts.add(n) == 1:
            raise ConnectionError("reset by peer")
        return "ok"

    call = {"name": "flaky", "args": {"n": 1}}
    with toolonce.open_store("memory://") as store:
        middleware = ToolonceMiddleware(store)
        with pytest.raises(ConnectionError):
            run_agent(middleware, [flaky], call, thread=run_id)
        [ran] = run_agent(middleware, [flaky], call, thread=run_id)
    assert ran.response_metadata["toolonce/outcome"] == "executed"
    assert len(attempts.calls) == 2


def test_a_write_tool_returning_a_command_is_a_recorded_failure_never_a_release(run_id):
    ran = Counter()

    @tool
    def update_state(n: int, runtime: ToolRuntime) -> Command:
        """Returns a state update."""
        ran.add(n)
        reply = ToolMessage("updated", tool_call_id=runtime.tool_call_id)
        return Command(update={"messages": [reply]})

    call = {"name": "update_state", "args": {"n": 1}}
    with toolonce.open_store("memory://") as store:
        middleware = ToolonceMiddleware(store)
        with pytest.raises(toolonce.PermanentError, match="cannot store and replay"):
            run_agent(middleware, [update_state], call, thread=run_id)
        with pytest.raises(toolonce.ReplayedFailure, match="cannot store and replay"):
            run_agent(middleware, [update_state], call, thread=run_id)
    assert len(ran.calls) == 1


def test_the_async_hook_runs_the_tool_once_per_operation(store, run_id):
    sent = Counter()

    @tool
    async def send_email(to: str, subject: str) -> str:
        """Send an email."""
        return f"message {sent.add((to, subject))}"

    middleware = ToolonceMiddleware(store, in_flight=toolonce.Wait(30))

    async def main():
        outcomes = []
        for _ in range(2):
            agent = create_agent(model=scripted(EMAIL, EMAIL), tools=[send_email], middleware=[middleware])
            state = await agent.ainvoke(
                {"messages": [("user", "go")]}, {"configurable": {"thread_id": run_id}}
            )
            outcomes += [m.response_metadata["toolonce/outcome"] for m in tool_messages(state)]
        return outcomes

    outcomes = asyncio.run(main())
    assert len(sent.calls) == 1
    assert sorted(outcomes) == ["executed", "replayed", "replayed", "replayed"]


def test_a_sync_tool_sends_the_operation_key_downstream_and_a_duplicate_sends_nothing(
    store, run_id, downstream
):
    @tool
    def send_email(to: str, subject: str) -> str:
        """Send an email."""
        return f"receipt {downstream.send(toolonce.current_key())}"

    middleware = ToolonceMiddleware(store)
    [first] = run_agent(middleware, [send_email], EMAIL, thread=run_id)
    [again] = run_agent(middleware, [send_email], EMAIL, thread=run_id)
    key = toolonce.derive_key(run_id, "send_email", EMAIL["args"])
    assert downstream.keys == [key]
    assert first.content == recorded(again) == "receipt rcpt_1"
    assert again.response_metadata["toolonce/outcome"] == "replayed"


def test_an_async_tool_sends_the_operation_key_downstream_and_a_duplicate_sends_nothing(
    store, run_id, downstream
):
    @tool
    async def send_email(to: str, subject: str) -> str:
        """Send an email."""
        key = toolonce.current_context().idempotency_header[1]
        return f"receipt {await asyncio.to_thread(downstream.send, key)}"

    middleware = ToolonceMiddleware(store, in_flight=toolonce.Wait(30))

    async def main():
        for _ in range(2):
            agent = create_agent(model=scripted(EMAIL, EMAIL), tools=[send_email], middleware=[middleware])
            state = await agent.ainvoke(
                {"messages": [("user", "go")]}, {"configurable": {"thread_id": run_id}}
            )
            assert [recorded(m) for m in tool_messages(state)] == ["receipt rcpt_1"] * 2

    asyncio.run(main())
    assert downstream.keys == [toolonce.derive_key(run_id, "send_email", EMAIL["args"])]


def test_bad_settings_are_refused_when_the_middleware_is_made():
    with toolonce.open_store("memory://") as store:
        with pytest.raises(toolonce.ConfigError, match="scope"):
            ToolonceMiddleware(store, scope="user")
        with pytest.raises(toolonce.ConfigError, match="in_flight"):
            ToolonceMiddleware(store, in_flight="wait")
        with pytest.raises(toolonce.ConfigError, match="reads"):
            ToolonceMiddleware(store, reads="search")
    with pytest.raises(toolonce.ConfigError, match="store"):
        ToolonceMiddleware("memory://")


def test_the_core_package_imports_no_agent_framework():
    code = (
        "import sys, toolonce; "
        "loaded = [m for m in ('langchain', 'langchain_core', 'langgraph', 'pydantic_ai') "
        "if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
