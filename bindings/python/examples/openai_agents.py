"""The OpenAI Agents SDK with a toolonce write tool, offline (a scripted fake model).

The model asks for the same email twice in one turn (two tool calls with different call ids,
as models do), and the whole run is then retried, as an agent loop does after a timeout. The
email is sent once; every duplicate gets the first send's result.

    python examples/openai_agents.py [STORE_URL]      # default: a SQLite file in a temp dir

Needs, beside toolonce (``pip install ./bindings/python``), the OpenAI Agents SDK:

    pip install -r requirements-examples.txt   # openai-agents==0.24.0, openai==3.57.0

(no API key is used).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import toolonce

OUTBOX: list = []  # the side effect: what the "mail server" received


class ScriptedModel(Model):
    """A model that calls send_email twice with the same arguments, then answers."""

    async def get_response(self, system_instructions, input, *args, **kwargs):
        called = any(
            isinstance(item, dict) and item.get("type") == "function_call_output" for item in input
        )
        if not called:
            arguments = json.dumps({"to": "ada@example.com", "subject": "Your order shipped"})
            output = [
                ResponseFunctionToolCall(
                    id=f"fc_{n}", call_id=f"call_{n}", name="send_email",
                    arguments=arguments, type="function_call", status="completed",
                )
                for n in (1, 2)
            ]
        else:
            output = [
                ResponseOutputMessage(
                    id="msg_1", role="assistant", status="completed", type="message",
                    content=[ResponseOutputText(text="Email sent.", type="output_text", annotations=[])],
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("this example does not stream")


def build_agent(store: toolonce.Store) -> Agent:
    # Wait: the duplicate call in the same turn waits for the first and gets its result.
    @toolonce.write(store, name="send_email", in_flight=toolonce.Wait(30))
    async def send_email(to: str, subject: str) -> dict:
        """Send an email.

        Args:
            to: The recipient's address.
            subject: The subject line.
        """
        # A real tool would pass toolonce.current_key() to the mail API as Idempotency-Key.
        OUTBOX.append((to, subject))
        return {"message_id": f"msg-{len(OUTBOX)}", "key": toolonce.current_key()}

    return Agent(
        name="mailer",
        instructions="Send the email the user asks for.",
        model=ScriptedModel(),
        model_settings=ModelSettings(parallel_tool_calls=True),
        tools=[function_tool(send_email)],
    )


async def main(url: str) -> int:
    set_tracing_disabled(True)
    with toolonce.open_store(url) as store:
        agent = build_agent(store)
        with toolonce.scope("order-1042"):  # one scope per logical run, kept across retries
            first = await Runner.run(agent, "Tell Ada her order shipped.")
            retried = await Runner.run(agent, "Tell Ada her order shipped.")
    outputs = [
        item.output
        for result in (first, retried)
        for item in result.new_items
        if item.type == "tool_call_output_item"
    ]
    print(f"tool outputs: {outputs}")
    # Four calls, one answer.
    ok = len(outputs) == 4
    ok &= len({json.dumps(o, sort_keys=True, default=str) for o in outputs}) == 1
    print(f"effects: {len(OUTBOX)} (expected 1)")
    return 0 if ok and len(OUTBOX) == 1 else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        store_url = sys.argv[1]
    else:
        store_url = f"sqlite://{Path(tempfile.mkdtemp()) / 'toolonce.db'}"
    sys.exit(asyncio.run(main(store_url)))
