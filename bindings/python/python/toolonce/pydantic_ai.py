"""toolonce for Pydantic AI: :class:`ToolonceToolset`, a ``WrapperToolset`` that runs every
write tool of the toolset it wraps through toolonce and leaves read tools untouched::

    agent = Agent(model, toolsets=[ToolonceToolset(FunctionToolset([send_email]), store=store)])

A write call is keyed by ``(scope, tool name, the call's validated arguments as JSON)`` and
runs once per operation: a duplicate (the model asking again with a new tool call id, a
retried run, a second agent on the same store) gets the stored result without calling the
tool. The scope is the surrounding ``with toolonce.scope(...)`` if any, else the run's
``conversation_id`` (``agent.run(..., conversation_id=...)``), or its ``run_id`` with
``scope="run_id"``, or what a function of the ``RunContext`` returns.

The tool's return value is stored as JSON (a pydantic model as its ``model_dump``); the first
caller gets the value itself, a duplicate its JSON form, as with ``@toolonce.write``. An
exception from the tool (``ModelRetry`` too) releases the operation, unless it is a
:class:`toolonce.PermanentError`; other outcomes raise the exception a ``@toolonce.write``
call raises.

This module imports Pydantic AI (``pip install pydantic-ai-slim``); ``import toolonce`` does
not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, FrozenSet, Iterable, Optional, Union

from pydantic_ai.toolsets import WrapperToolset
from pydantic_core import to_jsonable_python

from ._answer import Wait
from ._context import Context
from ._errors import ConfigError
from ._framework import METADATA_KEY, Policies, Runner, is_read_mark, read_names, resolve_scope
from ._store import Store

__all__ = ["ToolonceToolset"]

ScopeOf = Union[str, Callable[[Any], Optional[str]]]


@dataclass
class ToolonceToolset(WrapperToolset):
    """Runs the wrapped toolset's write tools once per operation (see the module docs).

    - ``store``: a :class:`toolonce.Store` (``toolonce.open_store(url)``).
    - ``reads``: names of read tools; a tool whose definition has
      ``metadata={"toolonce": "read"}`` is one too. Read tools run every time, untouched.
    - ``scope``: ``"conversation_id"`` (default) or ``"run_id"`` of the run, or a function of
      the ``RunContext`` returning the scope.
    - ``lease``, ``retention``, ``in_flight``, ``key_fields``, ``on_expired``: as
      ``@toolonce.write`` takes them, for every write tool.
    """

    store: Optional[Store] = None
    reads: Iterable[str] = ()
    scope: ScopeOf = "conversation_id"
    lease: float = 60
    retention: float = 86400
    in_flight: Union[str, Wait] = "reject"
    key_fields: Optional[Iterable[str]] = None
    on_expired: Union[str, Callable[[Context], Any]] = "hold"
    _runner: Runner = field(init=False, repr=False)
    _reads: FrozenSet[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.store is None:
            raise ConfigError("ToolonceToolset needs store=toolonce.open_store(url)")
        if not (callable(self.scope) or self.scope in ("conversation_id", "run_id")):
            raise ConfigError(
                "scope must be 'conversation_id', 'run_id' or a function of the RunContext, "
                f"not {self.scope!r}"
            )
        fields = list(self.key_fields) if self.key_fields is not None else None
        policies = Policies(self.lease, self.retention, self.in_flight, fields, self.on_expired)
        self._runner = Runner(self.store, policies)
        self._reads = read_names(self.reads)

    def is_read(self, name: str, tool: Any) -> bool:
        if name in self._reads:
            return True
        metadata = getattr(getattr(tool, "tool_def", None), "metadata", None) or {}
        return is_read_mark(metadata.get(METADATA_KEY))

    def scope_of(self, ctx: Any, name: str) -> str:
        if callable(self.scope):
            return resolve_scope(self.scope(ctx), "the scope function's answer", name)
        return resolve_scope(getattr(ctx, self.scope, None), f"the run's {self.scope}", name)

    async def call_tool(self, name: str, tool_args: dict, ctx: Any, tool: Any) -> Any:
        if self.is_read(name, tool):
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        scope = self.scope_of(ctx, name)

        async def run() -> Any:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)

        # The arguments arrive validated (a datetime, a dataclass): keyed in their JSON form.
        answer = await self._runner.acall(name, scope, to_jsonable_python(tool_args), run)
        return answer.unwrap()
