"""A ``@toolonce.write`` function as an OpenAI Agents SDK tool (``function_tool``) in a real
agent run, offline (a scripted model): the tool reads its operation key
(``toolonce.current_key()``) and sends it to a real local HTTP service as ``Idempotency-Key``;
a duplicate call and a retried run are replayed without a second request, under the key
``derive_key`` gives for (scope, tool, args)."""

from __future__ import annotations

import asyncio
import json

from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

import toolonce

EMAIL = {"to": "ada@example.com", "subject": "Your order shipped"}


class TwiceThenDone(Model):
    """Calls send_email twice with the same arguments in one turn, then answers."""

    async def get_response(self, system_instructions, input, *args, **kwargs):
        called = any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in input)
        if called:
            text = ResponseOutputText(text="sent", type="output_text", annotations=[])
            output = [ResponseOutputMessage(id="m", role="assistant", status="completed", type="message", content=[text])]
        else:
            output = [
                ResponseFunctionToolCall(
                    id=f"fc_{n}", call_id=f"call_{n}", name="send_email",
                    arguments=json.dumps(EMAIL), type="function_call", status="completed",
                )
                for n in (1, 2)
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("not streamed here")


def outputs_of_two_runs(tool, scope: str) -> list:
    set_tracing_disabled(True)
    agent = Agent(
        name="mailer", model=TwiceThenDone(), tools=[function_tool(tool)],
        model_settings=ModelSettings(parallel_tool_calls=True),
    )

    async def main():
        with toolonce.scope(scope):
            results = [await Runner.run(agent, "mail Ada"), await Runner.run(agent, "mail Ada")]
        return [i.output for r in results for i in r.new_items if i.type == "tool_call_output_item"]

    return asyncio.run(main())


def test_an_async_tool_sends_the_operation_key_downstream_and_duplicates_send_nothing(
    store, run_id, downstream
):
    @toolonce.write(store, name="send_email", in_flight=toolonce.Wait(30))
    async def send_email(to: str, subject: str) -> str:
        """Send an email.

        Args:
            to: The recipient.
            subject: The subject line.
        """
        return await asyncio.to_thread(downstream.send, toolonce.current_key())

    outputs = outputs_of_two_runs(send_email, run_id)
    assert downstream.keys == [toolonce.derive_key(run_id, "send_email", EMAIL)]
    assert outputs == ["rcpt_1"] * 4


def test_a_sync_tool_sends_the_operation_key_downstream_and_duplicates_send_nothing(
    store, run_id, downstream
):
    @toolonce.write(store, name="send_email", in_flight=toolonce.Wait(30))
    def send_email(to: str, subject: str) -> str:
        """Send an email.

        Args:
            to: The recipient.
            subject: The subject line.
        """
        return downstream.send(toolonce.current_context().idempotency_header[1])

    outputs = outputs_of_two_runs(send_email, run_id)
    assert downstream.keys == [toolonce.derive_key(run_id, "send_email", EMAIL)]
    assert outputs == ["rcpt_1"] * 4
