"""A Pydantic AI agent whose tools are wrapped in toolonce's ``WrapperToolset``, offline
(Pydantic AI's ``FunctionModel`` plays the model).

The model asks for the same refund twice in one response (two tool calls with different ids)
beside a read tool call; then the run is retried in the same conversation, by a second agent
on the same store (a restarted worker). The refund is issued once: every duplicate gets the
first call's result without calling the tool, while the read tool runs every time.

    python examples/pydantic_ai_toolset.py [STORE_URL]   # default: a SQLite file in a temp dir

Needs, beside toolonce (``pip install ./bindings/python``), Pydantic AI:

    pip install -r requirements-examples.txt   # pydantic-ai-slim==2.68.0 and what it pins
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

import toolonce
from toolonce.pydantic_ai import ToolonceToolset

REFUNDS: list = []  # the side effect: what the "payment API" received
LOOKUPS: list = []  # calls of the read tool


def issue_refund(order_id: str, cents: int) -> dict:
    """Refund an order."""
    # A real tool would send toolonce.current_key() to the payment API as Idempotency-Key.
    REFUNDS.append((order_id, cents))
    return {"refund_id": f"re_{len(REFUNDS)}", "order_id": order_id, "cents": cents}


def lookup_order(order_id: str) -> str:
    """Look an order up."""
    LOOKUPS.append(order_id)
    return f"order {order_id}: paid 2500 cents"


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The scripted model: the tool calls first, then a text answer."""
    if any(isinstance(p, ToolReturnPart) for m in messages[-1:] for p in m.parts):
        return ModelResponse(parts=[TextPart("Refunded.")])
    refund = {"order_id": "o-1042", "cents": 2500}
    return ModelResponse(
        parts=[
            ToolCallPart("lookup_order", {"order_id": "o-1042"}, tool_call_id="call_1"),
            ToolCallPart("issue_refund", refund, tool_call_id="call_2"),
            ToolCallPart("issue_refund", refund, tool_call_id="call_3"),  # the duplicate
        ]
    )


def build_agent(store: toolonce.Store) -> Agent:
    tools = FunctionToolset([issue_refund, lookup_order])
    # Wait: the duplicate in the same response (run concurrently) waits for the first's result.
    toolset = ToolonceToolset(
        tools, store=store, reads={"lookup_order"}, in_flight=toolonce.Wait(30)
    )
    return Agent(FunctionModel(model), toolsets=[toolset])


async def main(url: str) -> int:
    outputs = []
    with toolonce.open_store(url) as store:
        for attempt in ("first", "retried"):
            agent = build_agent(store)  # a fresh agent, as a restarted worker builds
            result = await agent.run("Refund order o-1042.", conversation_id="conv-o-1042")
            returns = [
                p
                for m in result.new_messages()
                for p in m.parts
                if isinstance(p, ToolReturnPart) and p.tool_name == "issue_refund"
            ]
            for part in returns:
                print(f"{attempt} {part.tool_call_id}: {part.content}")
            outputs += [part.content for part in returns]
    ok = len(outputs) == 4 and all(o == outputs[0] for o in outputs)  # one answer, four calls
    ok &= len(LOOKUPS) == 2  # the read tool ran in both runs
    print(f"lookups: {len(LOOKUPS)} (expected 2)")
    print(f"effects: {len(REFUNDS)} (expected 1)")
    return 0 if ok and len(REFUNDS) == 1 else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        store_url = sys.argv[1]
    else:
        store_url = f"sqlite://{Path(tempfile.mkdtemp()) / 'toolonce.db'}"
    sys.exit(asyncio.run(main(store_url)))
