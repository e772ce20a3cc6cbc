"""toolonce for Python: make every side-effecting tool call of an AI agent take effect once.

A call of a ``@toolonce.write`` function is keyed by ``(scope, tool name, canonical arguments)``
and claimed in a store; the first caller runs the function, duplicates get its stored result.
The protocol (claim, lease heartbeat, record, replay, ``unknown`` after a crash) is toolonce's
Rust core, run by the native module ``toolonce._native``; this module is the Pythonic surface:
the decorator, the scope and key context variables, and exceptions for the outcomes.

The package's files, by job: ``_store.py`` (stores), ``_context.py`` (scope and key),
``_answer.py`` (answers and verdicts), ``_operator.py`` (the operator's get, list, resolve and
remove), ``_errors.py`` (exceptions), ``_tool.py`` (a write
function's settings and arguments), ``_names.py`` (its name, and one tool per name on a store),
``_protocol.py`` (the one call protocol) and ``_pump.py`` (its sync and async pumps); this file
is the decorator and the public names.

Sync functions run on the caller's thread and async ones on the caller's event loop, both with
the caller's context variables; store I/O and the lease heartbeat run on a Tokio runtime owned by
the native module, with the GIL released.
"""

from __future__ import annotations

import atexit
import functools
import inspect
from typing import Any, Callable, Optional, Sequence, TypeVar, Union

from . import _native
from ._answer import CANNOT_TELL, NOT_DONE, Answer, Done, Wait
from ._context import Context, current_context, current_key, scope
from ._errors import (
    ConfigError,
    ConflictError,
    EffectUnknownError,
    InFlightError,
    InvalidArgumentsError,
    PermanentError,
    ReplayedFailure,
    StoreUnavailableError,
    ToolFailed,
    ToolonceError,
    UnknownOutcomeError,
)
from ._names import register
from ._operator import Entry, EntryPage, OperatorAnswer, StoredError, Unreadable
from ._pump import run_async, run_sync
from ._store import Store, open_store
from ._tool import DEFAULT_REPEAT, WriteTool, pointers, repeat_annotation

__all__ = [
    "CANNOT_TELL",
    "NOT_DONE",
    "Answer",
    "ConfigError",
    "ConflictError",
    "Context",
    "Done",
    "EffectUnknownError",
    "Entry",
    "EntryPage",
    "InFlightError",
    "InvalidArgumentsError",
    "OperatorAnswer",
    "PermanentError",
    "ReplayedFailure",
    "Store",
    "StoreUnavailableError",
    "StoredError",
    "ToolFailed",
    "ToolonceError",
    "UnknownOutcomeError",
    "Unreadable",
    "Wait",
    "current_key",
    "derive_key",
    "open_store",
    "read",
    "scope",
    "write",
]

F = TypeVar("F", bound=Callable[..., Any])

# Runtime threads must be out of Python before the interpreter finalizes.
atexit.register(_native._shutdown)


def derive_key(
    scope: str,
    tool: str,
    args: Any,
    key_fields: Optional[Sequence[str]] = None,
    repeat_argument: Optional[str] = None,
) -> str:
    """The operation key of ``tool`` called in ``scope`` with ``args`` (JSON), as every toolonce
    binding derives it. With ``repeat_argument`` (such as ``"repeat"``), that top-level member
    of ``args`` is the repeat ordinal, as a write tool shown to a model takes it: left out of
    the arguments, and 2 to 1000 part of the key (absent, ``None`` or 1 leave the key as it
    is); anything else raises :class:`InvalidArgumentsError`."""
    return _native.derive_key(scope, tool, args, pointers(key_fields), repeat_argument)


def read(fn: F) -> F:
    """Marks a read tool: it has no side effect, so it runs every time and needs no store."""
    fn.toolonce_kind = "read"  # type: ignore[attr-defined]
    return fn


def write(
    store: Store,
    name: Optional[str] = None,
    *,
    lease: float = 60,
    retention: float = 86400,
    in_flight: Union[str, Wait] = "reject",
    key_fields: Optional[Sequence[str]] = None,
    on_expired: Union[str, Callable[[Context], Any]] = "hold",
    repeat_argument: Any = DEFAULT_REPEAT,
) -> Callable[[F], F]:
    """Makes a function a write tool that takes effect once per operation.

    The decorated function (sync or async) is called as before, plus ``scope=`` (or inside
    ``with toolonce.scope(run_id):``). Its keyword arguments — positional ones by their names,
    or the fields of a lone pydantic model argument — are the operation's arguments, keyed with
    the scope and ``name`` (default: ``module.qualname``). The first call runs it and returns
    its result; a duplicate returns the stored result (as JSON: dicts, lists, …) without
    running it. Other outcomes raise :class:`InFlightError`, :class:`ConflictError`,
    :class:`UnknownOutcomeError`, :class:`StoreUnavailableError` or, for a duplicate of a
    permanent failure, :class:`ReplayedFailure`. ``fn.call_detailed(...)`` returns an
    :class:`Answer` instead of raising.

    An exception raised by the function propagates; it is **transient** (the operation is
    released; a duplicate runs again) unless it is a :class:`PermanentError` or has
    ``toolonce_permanent = True``, in which case it is stored and replayed.

    - ``lease``: seconds a claim lives without a heartbeat (renewed every third while the
      function runs); ``retention``: seconds a result is kept and replayed.
    - ``in_flight``: ``"reject"`` or ``Wait(seconds)``.
    - ``key_fields``: argument names or JSON Pointers that alone make the key; the other
      arguments must then match (else :class:`ConflictError`).
    - ``on_expired``: what a duplicate does when an earlier attempt was interrupted:
      ``"hold"`` (raise :class:`UnknownOutcomeError`), ``"rerun"`` (run again with the same
      key), or a verify function ``f(ctx) -> Done(result) | NOT_DONE | CANNOT_TELL``.
    - ``repeat_argument``: the optional keyword argument (default ``repeat``; ``None`` for
      none) by which a model says it performs the same action again on purpose: ``repeat=2``,
      3, … is another operation (its own key, so its own ``Idempotency-Key`` downstream), and a
      retry of it is replayed. It is in the function's signature (so in the schema a framework
      shows the model, with the core's description) and never reaches the function; a value
      that is not a whole number from 1 to 1000 raises :class:`InvalidArgumentsError` with the
      text for the model, and nothing runs. A function with a parameter of that name keeps its
      own and gets none (logged); one taking ``**kwargs`` gets it only when it is named here.
      A replay's :attr:`Answer.note` (``call_detailed``) says what the model should be told.
    """

    def decorate(fn: F) -> F:
        tool = WriteTool(
            fn, store, name, lease, retention, in_flight, key_fields, on_expired, repeat_argument
        )
        register(store, tool.name, fn)
        params = [p for p in tool.signature.parameters.values() if p.name != "ctx"]
        if tool.repeat is not None:
            # Keyword-only and optional, before a **kwargs (a signature's order).
            repeat = inspect.Parameter(
                tool.repeat,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=repeat_annotation(),
            )
            at = len(params)
            if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
                at -= 1
            params.insert(at, repeat)
        signature = tool.signature.replace(parameters=params)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return (await run_async(tool, args, kwargs)).unwrap()

            async def call_detailed_async(*args: Any, **kwargs: Any) -> Answer:
                return await run_async(tool, args, kwargs)

            wrapper: Any = async_wrapper
            wrapper.call_detailed = call_detailed_async
        else:

            @functools.wraps(fn)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                return run_sync(tool, args, kwargs).unwrap()

            def call_detailed_sync(*args: Any, **kwargs: Any) -> Answer:
                return run_sync(tool, args, kwargs)

            wrapper = sync_wrapper
            wrapper.call_detailed = call_detailed_sync
        wrapper.__signature__ = signature
        wrapper.toolonce_kind = "write"
        wrapper.tool_name = tool.name

        def key_for(scope: str, **kw: Any) -> str:
            ordinal = tool.take_repeat(kw)
            args = tool.with_repeat(tool.key_args((), kw), ordinal)
            return _native.derive_key(scope, tool.name, args, tool.key_fields, tool.repeat)

        wrapper.key_for = key_for
        return wrapper  # type: ignore[no-any-return]

    return decorate
