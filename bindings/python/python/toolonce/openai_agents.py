"""toolonce for the OpenAI Agents SDK: a ``@toolonce.write`` function is a ``function_tool`` as it
is (its signature shows the model the optional repeat ordinal with the core's description);
:func:`failure_error_function` is what the SDK should tell the model when a call fails::

    function_tool(pay, failure_error_function=toolonce.openai_agents.failure_error_function)

:func:`function_tool` does both, and gives a replay's output the core's note after the recorded
result (as text: the result's own text, or its JSON), so the model reads that the identical call
already took effect, when, and how to do it again on purpose::

    tools = [toolonce.openai_agents.function_tool(pay)]

The SDK's default hides every exception from the model; this one tells it toolonce's own answers
(a bad repeat ordinal, in flight, unknown, store unavailable: texts written for a model by the
core) and leaves any other exception to the SDK's default.

This module imports the OpenAI Agents SDK (``pip install openai-agents``); ``import toolonce``
does not.
"""

from __future__ import annotations

import functools
import inspect
import json
from typing import Any

from agents import function_tool as _function_tool
from agents.tool import default_tool_error_function

from ._errors import ConfigError, ToolonceError

__all__ = ["failure_error_function", "function_tool"]


def failure_error_function(ctx: Any, error: Exception) -> str:
    """What the model reads when a tool call fails: a toolonce answer's own text (the core's),
    else what the SDK's default says."""
    for e in (error, error.__cause__ or error.__context__):
        if isinstance(e, ToolonceError):
            note = getattr(e, "note", None)  # a replayed failure's
            return str(e) if note is None else f"{e}\n\n{note}"
    return default_tool_error_function(ctx, error)


def _noted(answer: Any) -> Any:
    """What the model reads for ``answer``: the result, and after a replay's, the note."""
    value = answer.unwrap()
    if answer.note is None:
        return value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return f"{text}\n\n{answer.note}"


def function_tool(fn: Any, **kwargs: Any) -> Any:
    """The SDK's ``function_tool`` of the ``@toolonce.write`` function ``fn``, whose replays
    carry the core's note to the model and whose failures the model reads as toolonce wrote
    them (:func:`failure_error_function`, unless ``failure_error_function=`` is given)."""
    if getattr(fn, "toolonce_kind", None) != "write":
        raise ConfigError(f"function_tool takes a @toolonce.write function, not {fn!r}")
    detailed = fn.call_detailed
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(*args: Any, **kw: Any) -> Any:
            return _noted(await detailed(*args, **kw))

        run: Any = run_async
    else:

        @functools.wraps(fn)
        def run_sync(*args: Any, **kw: Any) -> Any:
            return _noted(detailed(*args, **kw))

        run = run_sync
    run.__signature__ = inspect.signature(fn)
    kwargs.setdefault("failure_error_function", failure_error_function)
    return _function_tool(run, **kwargs)
