"""toolonce for LangChain v1 agents: :class:`ToolonceMiddleware`, an agent middleware
(``create_agent(..., middleware=[ToolonceMiddleware(store)])``) that runs every write tool call
through toolonce and leaves read tools untouched.

A write call is keyed by ``(scope, tool name, the call's arguments)`` and runs once per
operation: a duplicate (the model asking again with a new tool call id, a retried or resumed
run, a ``ToolRetryMiddleware`` retry after the tool took effect) is answered from the stored
result without calling the tool, as a ``ToolMessage`` for the new call id whose
``response_metadata`` says ``toolonce/outcome`` (``executed``, ``replayed``) and
``toolonce/key``. The scope is the surrounding ``with toolonce.scope(...)`` if any, else the
run's ``thread_id`` (``config={"configurable": {"thread_id": ...}}``), or its ``run_id`` with
``scope="run_id"``, or what a function of the request returns.

What is stored is the tool message's ``content`` (and ``artifact``, when it has one). A tool
message with ``status="error"`` is the tool's failure: like an exception from a
``@toolonce.write`` function it releases the operation (a duplicate runs the tool again), and
the message goes back to the agent as it is. Other outcomes (``in_flight``, ``unknown``, ...)
raise the exception a ``@toolonce.write`` call raises.

The model is shown each write tool with the optional repeat ordinal (``repeat`` unless
``repeat_argument`` says otherwise, ``None`` for none) among its parameters, described by the
core's text (``wrap_model_call`` binds the tool as its JSON Schema with it, in the function
format every chat model binds): ``repeat=2``, 3, … performs the same action again on purpose
(another operation), and the tool is called without it. A bad ordinal is answered with a
``ToolMessage`` (``status="error"``) holding the core's refusal, and nothing runs. A tool whose
schema has its own property of that name keeps it and gets none (logged). A replay's content
is the recorded content followed by the core's note (the identical call already took effect,
when, and how to perform it again on purpose), a text block after content blocks; its
``response_metadata`` has the note under ``toolonce/note`` and its ``artifact`` is the recorded
one.

This module imports LangChain (``pip install langchain``); ``import toolonce`` does not.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Iterable, Optional, Union

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from . import _native
from ._answer import Answer, Wait
from ._context import Context
from ._errors import ConfigError, PermanentError
from ._framework import (
    KEY_KEY,
    METADATA_KEY,
    NOTE_KEY,
    OUTCOME_KEY,
    READ_TAG,
    Policies,
    Runner,
    is_read_mark,
    read_names,
    refused_ordinal,
    resolve_scope,
    without,
)
from ._store import Store
from ._tool import DEFAULT_REPEAT

__all__ = ["READ_TAG", "ToolonceMiddleware"]

ScopeOf = Union[str, Callable[[Any], Optional[str]]]


class _FailedMessage(Exception):
    """The tool answered with an error message: its failure, which releases the operation;
    carries the message back to the agent."""

    def __init__(self, message: ToolMessage) -> None:
        super().__init__(str(message.content))
        self.tool_message = message


class ToolonceMiddleware(AgentMiddleware):
    """Runs a LangChain agent's write tools once per operation (see the module docs).

    - ``store``: a :class:`toolonce.Store` (``toolonce.open_store(url)``).
    - ``reads``: names of read tools; a tool tagged :data:`READ_TAG` (``"toolonce:read"``),
      with ``metadata={"toolonce": "read"}``, or made from a ``@toolonce.read`` function is one
      too. Read tools run every time, untouched.
    - ``scope``: ``"thread_id"`` (default) or ``"run_id"``, read from the run's config, or a
      function of the ``ToolCallRequest`` returning the scope.
    - ``lease``, ``retention``, ``in_flight``, ``key_fields``, ``on_expired``,
      ``repeat_argument``: as ``@toolonce.write`` takes them, for every write tool.
    """

    def __init__(
        self,
        store: Store,
        *,
        reads: Iterable[str] = (),
        scope: ScopeOf = "thread_id",
        lease: float = 60,
        retention: float = 86400,
        in_flight: Union[str, Wait] = "reject",
        key_fields: Optional[Iterable[str]] = None,
        on_expired: Union[str, Callable[[Context], Any]] = "hold",
        repeat_argument: Any = DEFAULT_REPEAT,
    ) -> None:
        super().__init__()
        if not (callable(scope) or scope in ("thread_id", "run_id")):
            raise ConfigError(
                f"scope must be 'thread_id', 'run_id' or a function of the request, not {scope!r}"
            )
        fields = list(key_fields) if key_fields is not None else None
        policies = Policies(lease, retention, in_flight, fields, on_expired, repeat_argument)
        self._runner = Runner(store, policies)
        # What the model is bound for each write tool (its schema with the ordinal), by name.
        self._shown: dict = {}
        self._reads = read_names(reads)
        self._scope = scope

    # -- which calls, and their scope ---------------------------------------------------------

    def is_read(self, tool: Any, name: str) -> bool:
        """Whether the call goes to a read tool (or to no registered tool: LangChain answers
        that itself)."""
        if tool is None or name in self._reads:
            return True
        if READ_TAG in (getattr(tool, "tags", None) or ()):
            return True
        metadata = getattr(tool, "metadata", None) or {}
        if is_read_mark(metadata.get(METADATA_KEY)):
            return True
        for fn in (getattr(tool, "func", None), getattr(tool, "coroutine", None)):
            if getattr(fn, "toolonce_kind", None) == "read":
                return True
        return False

    def scope_of(self, request: Any, name: str) -> str:
        if callable(self._scope):
            return resolve_scope(self._scope(request), "the scope function's answer", name)
        runtime = getattr(request, "runtime", None)
        # LangGraph's execution info carries both ids; the run's config has the thread id too.
        found = getattr(getattr(runtime, "execution_info", None), self._scope, None)
        if found is None and self._scope == "thread_id":
            config = getattr(runtime, "config", None) or {}
            found = (config.get("configurable") or {}).get("thread_id")
        found = str(found) if found is not None else None
        where = "the run's thread_id (config['configurable']['thread_id'])"
        if self._scope == "run_id":
            where = "the run's run_id (config['run_id'])"
        return resolve_scope(found, where, name)

    # -- what the model is shown -------------------------------------------------------------

    def shown(self, tool: Any) -> Any:
        """What the model is bound for ``tool``: a write tool with the repeat ordinal as its JSON
        Schema (the function format), else the tool as it is."""
        if not isinstance(tool, BaseTool) or self.is_read(tool, tool.name):
            return tool
        if tool.name not in self._shown:
            spec = convert_to_openai_tool(tool)
            function = spec["function"]
            parameters = function.get("parameters", {"type": "object", "properties": {}})
            schema, repeat = self._runner.repeat_for(tool.name, parameters)
            if repeat is None:
                self._shown[tool.name] = None
            else:
                self._shown[tool.name] = {
                    "type": "function",
                    "function": {**function, "parameters": schema},
                }
        return self._shown[tool.name] or tool

    def _shown_request(self, request: Any) -> Any:
        tools = getattr(request, "tools", None)
        if not tools:
            return request
        return request.override(tools=[self.shown(t) for t in tools])

    def repeat_of(self, tool: Any, name: str) -> Optional[str]:
        """The repeat argument of the write tool ``name`` (decided when it was first shown)."""
        if name not in self._runner.repeats and isinstance(tool, BaseTool):
            self.shown(tool)
        return self._runner.repeats.get(name)

    # -- the middleware hooks -----------------------------------------------------------------

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(self._shown_request(request))

    async def awrap_model_call(
        self, request: Any, handler: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        return await handler(self._shown_request(request))

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        name = call["name"]
        if self.is_read(request.tool, name):
            return handler(request)
        scope = self.scope_of(request, name)
        repeat = self.repeat_of(request.tool, name)
        own = _without_ordinal(request, repeat)
        try:
            answer = self._runner.call(
                name, scope, call["args"], lambda: _stored(handler(own), name), repeat
            )
        except Exception as e:
            if refused_ordinal(e):
                return _refused(call, name, str(e))
            raise
        return _reply(answer, call, name)

    async def awrap_tool_call(
        self, request: Any, handler: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        call = request.tool_call
        name = call["name"]
        if self.is_read(request.tool, name):
            return await handler(request)
        scope = self.scope_of(request, name)
        repeat = self.repeat_of(request.tool, name)
        own = _without_ordinal(request, repeat)

        async def run() -> Any:
            return _stored(await handler(own), name)

        try:
            answer = await self._runner.acall(name, scope, call["args"], run, repeat)
        except Exception as e:
            if refused_ordinal(e):
                return _refused(call, name, str(e))
            raise
        return _reply(answer, call, name)


def _without_ordinal(request: Any, repeat: Optional[str]) -> Any:
    """The request with the tool call's arguments as the tool takes them: without the ordinal."""
    call = request.tool_call
    args = without(call["args"], repeat)
    if args is call["args"]:
        return request
    return request.override(tool_call={**call, "args": args})


def _refused(call: Any, name: str, refusal: str) -> ToolMessage:
    """The answer to a bad ordinal, for the model: the core's refusal; nothing ran."""
    return ToolMessage(content=refusal, tool_call_id=call["id"], name=name, status="error")


def _noted(content: Any, note: str) -> Any:
    """The content the model reads for a replay: the recorded content, then the note."""
    if isinstance(content, list):
        return [*content, {"type": "text", "text": note}]
    return f"{content}\n\n{note}"


def _stored(result: Any, name: str) -> Any:
    """What the layer records of the tool's answer (JSON: the message's content and artifact)."""
    if isinstance(result, ToolMessage):
        if result.status == "error":
            raise _FailedMessage(result)
        stored = {"content": result.content}
        if result.artifact is not None:
            stored["artifact"] = result.artifact
        return stored
    # A Command (a state update) is no value toolonce can store and replay; the tool has run,
    # so this is its recorded failure, replayed to duplicates, never a release.
    raise PermanentError(
        _native.text("command_unstorable", {"tool": name, "type": type(result).__name__})
    )


def _reply(answer: Answer, call: Any, name: str) -> ToolMessage:
    """The ``ToolMessage`` for this call, from the layer's answer; raises its error."""
    if isinstance(answer.error, _FailedMessage):
        return answer.error.tool_message
    value = answer.unwrap()
    metadata = {OUTCOME_KEY: answer.outcome, KEY_KEY: answer.key}
    content = value["content"]
    if answer.note is not None:
        metadata[NOTE_KEY] = answer.note
        content = _noted(content, answer.note)
    return ToolMessage(
        content=content,
        artifact=value.get("artifact"),
        tool_call_id=call["id"],
        name=name,
        response_metadata=metadata,
    )
