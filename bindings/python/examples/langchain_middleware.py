"""A LangChain v1 agent (``create_agent``) with toolonce's middleware, offline (LangChain's
``GenericFakeChatModel`` plays the model).

The model asks for the same email twice in one turn (two tool calls with different ids, as
models do) beside a read tool call; then the whole run is retried on the same thread, as a
client does after a timeout. The email is sent once: every duplicate is answered from the
stored result (``toolonce/outcome: replayed``) without calling the tool, while the read tool
runs every time.

    python examples/langchain_middleware.py [STORE_URL]   # default: a SQLite file in a temp dir

Needs, beside toolonce (``pip install ./bindings/python``), LangChain:

    pip install -r requirements-examples.txt   # langchain==1.5.2 and what it pins
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import StructuredTool, tool
from langgraph.checkpoint.memory import InMemorySaver

import toolonce
from toolonce.langchain import ToolonceMiddleware

OUTBOX: list = []  # the side effect: what the "mail server" received
LOOKUPS: list = []  # calls of the read tool


@tool
def send_email(to: str, subject: str) -> str:
    """Send an email."""
    # A real tool would pass toolonce.current_key() to the mail API as its Idempotency-Key.
    OUTBOX.append((to, subject))
    return f"sent message {len(OUTBOX)} to {to} ({toolonce.current_key()})"


def look_order_up(order_id: str) -> str:
    """Look an order up."""
    LOOKUPS.append(order_id)
    return f"order {order_id}: shipped"


# A read tool, marked by its tag: it runs every time, untouched.
lookup_order = StructuredTool.from_function(look_order_up, name="lookup_order", tags=["toolonce:read"])


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, scripted; it takes the agent's tools and ignores them."""

    def bind_tools(self, tools, **kwargs):
        return self


def script() -> ScriptedChatModel:
    email = {"to": "ada@example.com", "subject": "Your order shipped"}
    turns = [
        AIMessage(
            content="",
            tool_calls=[
                {"name": "lookup_order", "args": {"order_id": "o-1042"}, "id": "call_1"},
                {"name": "send_email", "args": email, "id": "call_2"},
                {"name": "send_email", "args": email, "id": "call_3"},  # the duplicate
            ],
        ),
        AIMessage(content="Email sent."),
    ]
    return ScriptedChatModel(messages=iter(turns))


def run_once(store: toolonce.Store, checkpointer: InMemorySaver) -> list:
    agent = create_agent(
        model=script(),
        tools=[lookup_order, send_email],
        # Wait: the duplicate in the same turn (run in parallel) waits for the first's result.
        middleware=[ToolonceMiddleware(store, in_flight=toolonce.Wait(30))],
        checkpointer=checkpointer,
    )
    config = {"configurable": {"thread_id": "support-thread-7"}}  # the scope of the keys
    state = agent.invoke({"messages": [("user", "Tell Ada order o-1042 shipped.")]}, config)
    return [m for m in state["messages"] if m.type == "tool"]


def main(url: str) -> int:
    checkpointer = InMemorySaver()
    with toolonce.open_store(url) as store:
        first = run_once(store, checkpointer)
        retried = run_once(store, checkpointer)  # the client retries the request: same thread
    ok = True
    for message in first + retried[len(first):]:
        outcome = message.response_metadata.get("toolonce/outcome", "untouched (read)")
        print(f"{message.tool_call_id} {message.name}: {outcome}: {message.content}")
    emails = [m for m in retried if m.name == "send_email"]
    # One answer, four calls: a replay's content is the recorded one, then a note for the model
    # (response_metadata["toolonce/note"]) saying it already took effect and when.
    recorded = {
        m.content.removesuffix("\n\n" + m.response_metadata.get("toolonce/note", "")) for m in emails
    }
    ok &= len(emails) == 4 and len(recorded) == 1
    ok &= len(LOOKUPS) == 2  # the read tool ran in both runs
    print(f"lookups: {len(LOOKUPS)} (expected 2)")
    print(f"effects: {len(OUTBOX)} (expected 1)")
    return 0 if ok and len(OUTBOX) == 1 else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        store_url = sys.argv[1]
    else:
        store_url = f"sqlite://{Path(tempfile.mkdtemp()) / 'toolonce.db'}"
    sys.exit(main(store_url))
