"""The repeat ordinal (issue 43) in real agent loops, each framework's own scripted test model:
the model pays Bob 5 EUR twice on purpose (``repeat: 2``: two effects, two keys downstream) and
retries another payment (the same call again: replayed, one effect, and the model reads the
core's note); a bad ordinal is told to the model and runs nothing; a tool with its own
``repeat`` parameter keeps it. The model is shown the ordinal with the core's description."""

from __future__ import annotations

import asyncio
import json

import pytest
from counting import Counter

import toolonce
from toolonce import _native

PAY = {"to": "bob", "cents": 500}
CAROL = {"to": "carol", "cents": 700}
BAD = [0, -1, 1.5, "2", 10**30, True]
DESCRIPTION = _native.text("repeat_description", {})


def refusal_head() -> str:
    template = _native.templates()["repeat_invalid"]
    return template[: template.index("{max}")].replace("{repeat}", "repeat")


def note_tail(tool: str, next_ordinal: int) -> str:
    return _native.text("repeat_hint", {"tool": tool, "repeat": "repeat", "next": str(next_ordinal)})


# -- LangChain (create_agent, on LangGraph) ----------------------------------------------------

langchain = pytest.importorskip("langchain")
from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool as lc_tool  # noqa: E402

from toolonce.langchain import ToolonceMiddleware  # noqa: E402


class BoundChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, remembering the tools it was bound."""

    bound: list = []

    def bind_tools(self, tools, **kwargs):
        BoundChatModel.bound = list(tools)
        return self


def lc_turns(*turns: list) -> BoundChatModel:
    """A model that makes each turn's tool calls in turn, then answers."""
    messages, n = [], 0
    for calls in turns:
        made = []
        for name, args in calls:
            made.append({"id": f"call_{n}", "name": name, "args": args})
            n += 1
        messages.append(AIMessage("", tool_calls=made))
    messages.append(AIMessage("done"))
    return BoundChatModel(messages=iter(messages))


def lc_run(middleware, tools, *turns, thread: str) -> list:
    agent = create_agent(model=lc_turns(*turns), tools=tools, middleware=[middleware])
    state = agent.invoke({"messages": [("user", "pay")]}, {"configurable": {"thread_id": thread}})
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def lc_pay(paid: Counter):
    @lc_tool
    def pay(to: str, cents: int) -> str:
        """Pay someone."""
        n = paid.add((to, cents, toolonce.current_key()))
        return f"payment {n}"

    return pay


def test_langchain_a_payment_repeated_on_purpose_runs_twice_and_a_retried_one_is_replayed_with_the_note(
    store, run_id
):
    paid = Counter()
    middleware = ToolonceMiddleware(store)
    messages = lc_run(
        middleware,
        [lc_pay(paid)],
        [("pay", PAY)],
        [("pay", {**PAY, "repeat": 2})],
        [("pay", CAROL)],
        [("pay", CAROL)],  # a retry: the model asks again
        thread=run_id,
    )
    assert [c[:2] for c in paid.calls] == [("bob", 500), ("bob", 500), ("carol", 700)]
    assert paid.calls[0][2] != paid.calls[1][2]  # each its own Idempotency-Key
    outcomes = [m.response_metadata["toolonce/outcome"] for m in messages]
    assert outcomes == ["executed", "executed", "executed", "replayed"]
    retried = messages[3]
    assert retried.content.startswith("payment 3\n\n") and retried.content.endswith(note_tail("pay", 2))
    assert retried.response_metadata["toolonce/note"] in retried.content
    # The model was shown the ordinal with the core's description.
    [shown] = BoundChatModel.bound
    repeat = shown["function"]["parameters"]["properties"]["repeat"]
    assert repeat["description"] == DESCRIPTION and repeat["maximum"] == _native.REPEAT_MAX


def test_langchain_a_retry_of_a_repeat_is_replayed_and_the_note_offers_the_next_ordinal(store, run_id):
    paid = Counter()
    messages = lc_run(
        ToolonceMiddleware(store),
        [lc_pay(paid)],
        [("pay", {**PAY, "repeat": 2})],
        [("pay", {**PAY, "repeat": 2})],
        thread=run_id,
    )
    assert len(paid.calls) == 1
    assert messages[1].response_metadata["toolonce/outcome"] == "replayed"
    assert messages[1].content.endswith(note_tail("pay", 3))


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_langchain_a_bad_ordinal_is_told_to_the_model_and_nothing_runs(store, run_id, bad):
    paid = Counter()
    [refused] = lc_run(ToolonceMiddleware(store), [lc_pay(paid)], [("pay", {**PAY, "repeat": bad})], thread=run_id)
    assert paid.calls == []
    assert refused.status == "error" and refused.content.startswith(refusal_head())


def test_langchain_a_tool_with_its_own_repeat_parameter_keeps_it(store, run_id):
    rung = Counter()

    @lc_tool
    def ring(bell: str, repeat: int) -> str:
        """Ring a bell some times."""
        rung.add((bell, repeat))
        return f"rang {repeat}"

    messages = lc_run(
        ToolonceMiddleware(store), [ring], [("ring", {"bell": "a", "repeat": 3})], [("ring", {"bell": "a", "repeat": 0})],
        thread=run_id,
    )
    assert rung.calls == [("a", 3), ("a", 0)]
    assert [m.status for m in messages] == ["success", "success"]
    [shown] = BoundChatModel.bound
    assert getattr(shown, "name", None) == "ring"  # bound as it is: its own schema


def test_langchain_the_repeat_argument_can_be_switched_off(store, run_id):
    paid = Counter()
    messages = lc_run(ToolonceMiddleware(store, repeat_argument=None), [lc_pay(paid)], [("pay", PAY)], [("pay", PAY)], thread=run_id)
    assert len(paid.calls) == 1
    assert messages[1].content.endswith(_native.text("repeat_off", {}))
    assert getattr(BoundChatModel.bound[0], "name", None) == "pay"


# -- Pydantic AI -----------------------------------------------------------------------------

pydantic_ai = pytest.importorskip("pydantic_ai")
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import FunctionModel  # noqa: E402
from pydantic_ai.toolsets import FunctionToolset  # noqa: E402

from toolonce.pydantic_ai import ToolonceToolset  # noqa: E402


def pa_turns(shown: list, *turns: list) -> FunctionModel:
    """A model that makes each turn's tool calls in turn, then answers; ``shown`` gets the tool
    definitions it was given."""
    queue = list(turns)
    n = iter(range(1000))

    def respond(messages, info):
        shown[:] = info.function_tools
        if not queue:
            return ModelResponse(parts=[TextPart("done")])
        calls = queue.pop(0)
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"call_{next(n)}") for name, args in calls])

    return FunctionModel(respond)


def pa_run(toolset, shown, *turns, conversation: str) -> list:
    agent = Agent(pa_turns(shown, *turns), toolsets=[toolset])
    result = asyncio.run(agent.run("pay", conversation_id=conversation))
    kinds = (ToolReturnPart, RetryPromptPart, UserPromptPart)
    return [p for m in result.new_messages() for p in m.parts if isinstance(p, kinds)][1:]


def pa_pay(paid: Counter) -> FunctionToolset:
    def pay(to: str, cents: int) -> str:
        """Pay someone."""
        n = paid.add((to, cents, toolonce.current_key()))
        return f"payment {n}"

    return FunctionToolset([pay])


def test_pydantic_ai_a_payment_repeated_on_purpose_runs_twice_and_a_retried_one_is_replayed_with_the_note(
    store, run_id
):
    paid, shown = Counter(), []
    parts = pa_run(
        ToolonceToolset(pa_pay(paid), store=store),
        shown,
        [("pay", PAY)],
        [("pay", {**PAY, "repeat": 2})],
        [("pay", CAROL)],
        [("pay", CAROL)],
        conversation=run_id,
    )
    assert [c[:2] for c in paid.calls] == [("bob", 500), ("bob", 500), ("carol", 700)]
    assert paid.calls[0][2] != paid.calls[1][2]
    returns = [p for p in parts if isinstance(p, ToolReturnPart)]
    assert [r.content for r in returns] == ["payment 1", "payment 2", "payment 3", "payment 3"]
    assert returns[3].metadata["toolonce/outcome"] == "replayed"
    # The model reads the note beside the replayed return.
    notes = [p.content for p in parts if isinstance(p, UserPromptPart)]
    assert len(notes) == 1 and notes[0] == returns[3].metadata["toolonce/note"]
    assert notes[0].endswith(note_tail("pay", 2))
    [tool_def] = shown
    repeat = tool_def.parameters_json_schema["properties"]["repeat"]
    assert repeat["description"] == DESCRIPTION


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_pydantic_ai_a_bad_ordinal_is_told_to_the_model_and_nothing_runs(store, run_id, bad):
    paid = Counter()
    parts = pa_run(ToolonceToolset(pa_pay(paid), store=store), [], [("pay", {**PAY, "repeat": bad})], conversation=run_id)
    assert paid.calls == []
    # ModelRetry: the model reads the core's refusal and may call again.
    [retry] = [p for p in parts if getattr(p, "outcome", None) == "retried" or isinstance(p, RetryPromptPart)]
    assert str(retry.content).startswith(refusal_head())


def test_pydantic_ai_a_tool_with_its_own_repeat_parameter_keeps_it(store, run_id):
    rung, shown = Counter(), []

    def ring(bell: str, repeat: int) -> str:
        """Ring a bell some times."""
        rung.add((bell, repeat))
        return f"rang {repeat}"

    parts = pa_run(
        ToolonceToolset(FunctionToolset([ring]), store=store), shown,
        [("ring", {"bell": "a", "repeat": 3})], [("ring", {"bell": "a", "repeat": 0})],
        conversation=run_id,
    )
    assert rung.calls == [("a", 3), ("a", 0)]
    assert [p.content for p in parts if isinstance(p, ToolReturnPart)] == ["rang 3", "rang 0"]
    assert shown[0].parameters_json_schema["properties"]["repeat"]["type"] == "integer"
    assert "description" not in shown[0].parameters_json_schema["properties"]["repeat"]


# -- OpenAI Agents SDK (a @toolonce.write function as a function_tool) -----------------------

agents = pytest.importorskip("agents")
from agents import Agent as OAAgent  # noqa: E402
from agents import Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse as OAResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)


class Turns(Model):
    """Makes each turn's tool calls in turn, then answers."""

    def __init__(self, *turns: list) -> None:
        self.turns = list(turns)
        self.n = 0

    async def get_response(self, system_instructions, input, *args, **kwargs):
        if not self.turns:
            text = ResponseOutputText(text="done", type="output_text", annotations=[])
            msg = ResponseOutputMessage(id="m", role="assistant", status="completed", type="message", content=[text])
            return OAResponse(output=[msg], usage=Usage(), response_id=None)
        output = []
        for name, args in self.turns.pop(0):
            self.n += 1
            output.append(
                ResponseFunctionToolCall(
                    id=f"fc_{self.n}", call_id=f"call_{self.n}", name=name, arguments=json.dumps(args),
                    type="function_call", status="completed",
                )
            )
        return OAResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def oa_run(fn, *turns, scope: str) -> list:
    from toolonce.openai_agents import failure_error_function

    set_tracing_disabled(True)
    tool = function_tool(fn, failure_error_function=failure_error_function)
    agent = OAAgent(name="payer", model=Turns(*turns), tools=[tool])

    async def main():
        with toolonce.scope(scope):
            return await Runner.run(agent, "pay", max_turns=20)

    result = asyncio.run(main())
    return [i.output for i in result.new_items if i.type == "tool_call_output_item"]


def test_openai_agents_a_payment_repeated_on_purpose_runs_twice_and_a_retried_one_is_replayed(store, run_id):
    paid = Counter()

    @toolonce.write(store, name="pay")
    def pay(to: str, cents: int) -> str:
        """Pay someone."""
        n = paid.add((to, cents, toolonce.current_key()))
        return f"payment {n}"

    schema = function_tool(pay).params_json_schema
    assert schema["properties"]["repeat"]["description"] == DESCRIPTION
    outputs = oa_run(pay, [("pay", PAY)], [("pay", {**PAY, "repeat": 2})], [("pay", CAROL)], [("pay", CAROL)], scope=run_id)
    assert [c[:2] for c in paid.calls] == [("bob", 500), ("bob", 500), ("carol", 700)]
    assert paid.calls[0][2] != paid.calls[1][2]
    assert outputs == ["payment 1", "payment 2", "payment 3", "payment 3"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", 10**30, True], ids=repr)
def test_openai_agents_a_bad_ordinal_is_told_to_the_model_and_nothing_runs(store, run_id, bad):
    paid = Counter()

    @toolonce.write(store, name="pay")
    def pay(to: str, cents: int) -> str:
        """Pay someone."""
        paid.add(to)
        return "paid"

    [output] = oa_run(pay, [("pay", {**PAY, "repeat": bad})], scope=run_id)
    assert paid.calls == []
    # The SDK hands the model the tool's error: the core's refusal.
    assert refusal_head() in str(output)


def test_openai_agents_a_retried_payment_is_replayed_and_the_model_reads_the_note(store, run_id):
    from toolonce.openai_agents import function_tool as noted_tool

    paid = Counter()

    @toolonce.write(store, name="pay")
    async def pay(to: str, cents: int) -> dict:
        """Pay someone."""
        return {"payment": paid.add((to, cents))}

    tool = noted_tool(pay)
    assert tool.params_json_schema["properties"]["repeat"]["description"] == DESCRIPTION
    set_tracing_disabled(True)
    agent = OAAgent(name="payer", model=Turns([("pay", PAY)], [("pay", {**PAY, "repeat": 2})], [("pay", PAY)]), tools=[tool])

    async def main():
        with toolonce.scope(run_id):
            return await Runner.run(agent, "pay", max_turns=20)

    result = asyncio.run(main())
    outputs = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
    assert len(paid.calls) == 2
    assert outputs[:2] == [{"payment": 1}, {"payment": 2}]
    assert outputs[2].startswith('{"payment": 1}\n\n') and outputs[2].endswith(note_tail("pay", 2))
