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

This module imports LangChain (``pip install langchain``); ``import toolonce`` does not.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Iterable, Optional, Union

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage

from ._answer import Answer, Wait
from ._context import Context
from ._errors import ConfigError, PermanentError
from ._framework import (
    KEY_KEY,
    METADATA_KEY,
    OUTCOME_KEY,
    READ_TAG,
    Policies,
    Runner,
    is_read_mark,
    read_names,
    resolve_scope,
)
from ._store import Store

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
    - ``lease``, ``retention``, ``in_flight``, ``key_fields``, ``on_expired``: as
      ``@toolonce.write`` takes them, for every write tool.
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
    ) -> None:
        super().__init__()
        if not (callable(scope) or scope in ("thread_id", "run_id")):
            raise ConfigError(
                f"scope must be 'thread_id', 'run_id' or a function of the request, not {scope!r}"
            )
        fields = list(key_fields) if key_fields is not None else None
        self._runner = Runner(store, Policies(lease, retention, in_flight, fields, on_expired))
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

    # -- the middleware hooks -----------------------------------------------------------------

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        name = call["name"]
        if self.is_read(request.tool, name):
            return handler(request)
        scope = self.scope_of(request, name)
        answer = self._runner.call(
            name, scope, call["args"], lambda: _stored(handler(request), name)
        )
        return _reply(answer, call, name)

    async def awrap_tool_call(
        self, request: Any, handler: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        call = request.tool_call
        name = call["name"]
        if self.is_read(request.tool, name):
            return await handler(request)
        scope = self.scope_of(request, name)

        async def run() -> Any:
            return _stored(await handler(request), name)

        answer = await self._runner.acall(name, scope, call["args"], run)
        return _reply(answer, call, name)


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
        f"{name} returned a {type(result).__name__}, which toolonce cannot store and replay: "
        "return a plain value from a write tool, or mark it a read tool"
    )


def _reply(answer: Answer, call: Any, name: str) -> ToolMessage:
    """The ``ToolMessage`` for this call, from the layer's answer; raises its error."""
    if isinstance(answer.error, _FailedMessage):
        return answer.error.tool_message
    value = answer.unwrap()
    return ToolMessage(
        content=value["content"],
        artifact=value.get("artifact"),
        tool_call_id=call["id"],
        name=name,
        response_metadata={OUTCOME_KEY: answer.outcome, KEY_KEY: answer.key},
    )
