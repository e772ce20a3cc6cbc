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

A write tool is shown to the model with the optional repeat ordinal (``repeat`` unless
``repeat_argument`` says otherwise, ``None`` for none) among its parameters, described by the
core's text: ``repeat=2``, 3, … performs the same action again on purpose (another operation),
and the tool never gets it. A bad ordinal is told to the model (``ModelRetry`` with the core's
refusal) and nothing runs. A tool whose schema has its own property of that name keeps it and
gets none (logged). A replay returns a ``ToolReturn`` whose value is the recorded one and whose
``content`` (what the model reads beside it) is the core's note: the identical call already
took effect, when, and how to perform it again on purpose; its ``metadata`` holds the outcome,
the key and the note.

This module imports Pydantic AI (``pip install pydantic-ai-slim``); ``import toolonce`` does
not.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, FrozenSet, Iterable, Optional, Union

from pydantic_ai import ModelRetry
from pydantic_ai.messages import ToolReturn
from pydantic_ai.toolsets import WrapperToolset
from pydantic_core import from_json, to_jsonable_python

from ._answer import Wait
from ._context import Context
from ._errors import ConfigError
from ._framework import (
    KEY_KEY,
    METADATA_KEY,
    NOTE_KEY,
    OUTCOME_KEY,
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
    - ``lease``, ``retention``, ``in_flight``, ``key_fields``, ``on_expired``,
      ``repeat_argument``: as ``@toolonce.write`` takes them, for every write tool.
    """

    store: Optional[Store] = None
    reads: Iterable[str] = ()
    scope: ScopeOf = "conversation_id"
    lease: float = 60
    retention: float = 86400
    in_flight: Union[str, Wait] = "reject"
    key_fields: Optional[Iterable[str]] = None
    on_expired: Union[str, Callable[[Context], Any]] = "hold"
    repeat_argument: Any = DEFAULT_REPEAT
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
        policies = Policies(
            self.lease,
            self.retention,
            self.in_flight,
            fields,
            self.on_expired,
            self.repeat_argument,
        )
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

    async def get_tools(self, ctx: Any) -> Dict[str, Any]:
        """The wrapped toolset's tools, each write tool shown with the repeat ordinal among its
        parameters and validated with it kept for :meth:`call_tool`."""
        tools = await super().get_tools(ctx)
        shown = {}
        for name, tool in tools.items():
            if self.is_read(name, tool):
                shown[name] = tool
                continue
            schema, repeat = self._runner.repeat_for(name, tool.tool_def.parameters_json_schema)
            if repeat is None:
                shown[name] = tool
                continue
            tool_def = replace(tool.tool_def, parameters_json_schema=schema)
            validator = _KeepsOrdinal(tool.args_validator, repeat)
            shown[name] = replace(tool, tool_def=tool_def, args_validator=validator)
        return shown

    async def call_tool(self, name: str, tool_args: dict, ctx: Any, tool: Any) -> Any:
        if self.is_read(name, tool):
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        scope = self.scope_of(ctx, name)
        repeat = self._runner.repeats.get(name)
        own_args = without(tool_args, repeat)

        async def run() -> Any:
            return await self.wrapped.call_tool(name, own_args, ctx, tool)

        # The arguments arrive validated (a datetime, a dataclass): keyed in their JSON form,
        # the ordinal as the model sent it (the core reads it).
        keyed = to_jsonable_python(own_args)
        if own_args is not tool_args:
            keyed[repeat] = tool_args[repeat]  # type: ignore[index]
        try:
            answer = await self._runner.acall(name, scope, keyed, run, repeat)
        except Exception as e:
            if refused_ordinal(e):
                # The model's mistake: it reads the core's refusal and may call again.
                raise ModelRetry(str(e)) from None
            raise
        if answer.note is None or answer.error is not None:
            # A replayed failure raises as a @toolonce.write call does (its `note` set).
            return answer.unwrap()
        metadata = {OUTCOME_KEY: answer.outcome, KEY_KEY: answer.key, NOTE_KEY: answer.note}
        return ToolReturn(return_value=answer.value, content=answer.note, metadata=metadata)


class _KeepsOrdinal:
    """A tool's argument validator that validates the tool's own arguments and keeps the
    ordinal ``repeat`` as the model sent it, for the core to read (the tool's own validator
    would drop a parameter it does not have)."""

    def __init__(self, inner: Any, repeat: str) -> None:
        self.inner = inner
        self.repeat = repeat

    def _validated(self, args: Any, **kwargs: Any) -> Any:
        ordinal = args.pop(self.repeat)
        validated = self.inner.validate_python(args, **kwargs)
        if isinstance(validated, dict):
            validated = dict(validated)
            validated[self.repeat] = ordinal
        return validated

    def validate_json(self, input: Any, **kwargs: Any) -> Any:
        try:
            args = from_json(input)
        except ValueError:
            return self.inner.validate_json(input, **kwargs)
        if isinstance(args, dict) and self.repeat in args:
            return self._validated(args, **kwargs)
        return self.inner.validate_json(input, **kwargs)

    def validate_python(self, input: Any, **kwargs: Any) -> Any:
        if isinstance(input, dict) and self.repeat in input:
            return self._validated(dict(input), **kwargs)
        return self.inner.validate_python(input, **kwargs)
