"""One agent framework's tool call through the layer, for the adapters (``langchain.py``,
``pydantic_ai.py``): the framework gives the tool's name, the call's arguments (the JSON object
the model sent, keyed as it is, so the key is the one ``@toolonce.write(name=...)`` and
``toolonce.derive_key`` give for the same call) and the scope, and a function that runs the
tool. The call protocol is the package's own (``_pump.py``), so an adapter adds no semantics:
what a duplicate, a failure or a crash does is what it does for a ``@toolonce.write`` function.

Also the read-tool marks every adapter honours, and the scope an adapter resolves for a call.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Dict, Iterable, Optional, Sequence, Tuple, Union

from . import _native
from ._answer import Answer, Wait
from ._context import Context, current_scope
from ._errors import ConfigError, InvalidArgumentsError
from ._pump import run_async, run_sync
from ._store import Store
from ._tool import DEFAULT_REPEAT, WriteTool, keeps_own, repeat_name

READ_TAG = "toolonce:read"
"""The tag (LangChain ``tags=[...]``) that marks a read tool: it runs untouched."""
METADATA_KEY = "toolonce"
"""The metadata key (``metadata={"toolonce": "read"}``) that marks a read tool."""
OUTCOME_KEY = "toolonce/outcome"
"""Where an adapter puts the call's outcome word, as ``toolonce mcp`` does in ``_meta``."""
KEY_KEY = "toolonce/key"
"""Where an adapter puts the call's operation key."""
NOTE_KEY = "toolonce/note"
"""Where an adapter puts a replay's note (also in what the model reads)."""


class Call:
    """One framework tool call: its arguments (the key's) and how to run it."""

    __slots__ = ("args", "run")

    def __init__(self, args: Any, run: Callable[[], Any]) -> None:
        if not isinstance(args, dict):
            raise InvalidArgumentsError(
                f"a tool call's arguments must be a JSON object, not {type(args).__name__}"
            )
        self.args = args
        self.run = run


def _run_sync(call: Call) -> Any:
    return call.run()


async def _run_async(call: Call) -> Any:
    return await call.run()


class CallTool(WriteTool):
    """A write tool whose function comes with each call (the framework's own execution of the
    tool) and whose key arguments are the call's arguments as the model sent them."""

    def __init__(
        self,
        store: Store,
        name: str,
        is_async: bool,
        policies: "Policies",
        repeat: Optional[str] = None,
    ) -> None:
        fn = _run_async if is_async else _run_sync
        super().__init__(
            fn,
            store,
            name,
            policies.lease,
            policies.retention,
            policies.in_flight,
            policies.key_fields,
            policies.on_expired,
            repeat,
        )

    def key_args(self, args: tuple, kwargs: dict) -> Any:
        return kwargs["call"].args

    def scope_of(self, kwargs: dict) -> str:
        return kwargs.pop("scope")


class Policies:
    """The settings an adapter passes to every write tool it runs, as ``@toolonce.write``
    takes them (checked when the first call builds a tool)."""

    __slots__ = ("lease", "retention", "in_flight", "key_fields", "on_expired", "repeat")

    def __init__(
        self,
        lease: float,
        retention: float,
        in_flight: Union[str, Wait],
        key_fields: Optional[Sequence[str]],
        on_expired: Union[str, Callable[[Context], Any]],
        repeat_argument: Any = DEFAULT_REPEAT,
    ) -> None:
        self.lease = lease
        self.retention = retention
        self.in_flight = in_flight
        self.key_fields = key_fields
        self.on_expired = on_expired
        # The repeat argument's name every write tool gets unless its schema has its own.
        self.repeat = repeat_name(repeat_argument, "repeat_argument")


class Runner:
    """An adapter's write tools on one store, one :class:`CallTool` per tool name and kind
    (sync or async), built on first use."""

    def __init__(self, store: Store, policies: Policies) -> None:
        if not isinstance(store, Store):
            raise ConfigError(f"store must be a toolonce.Store (open_store(url)), not {store!r}")
        self.store = store
        self.policies = policies
        self.tools: Dict[Tuple[str, bool, Optional[str]], CallTool] = {}
        # Each tool's repeat argument, decided once from its schema (see `repeat_for`).
        self.repeats: Dict[str, Optional[str]] = {}
        # Built now, so a bad policy is refused when the adapter is made, not on a first call.
        CallTool(store, "toolonce.check", False, policies, policies.repeat)

    def tool(self, name: str, is_async: bool, repeat: Optional[str]) -> CallTool:
        tool = self.tools.get((name, is_async, repeat))
        if tool is None:
            tool = CallTool(self.store, name, is_async, self.policies, repeat)
            self.tools[(name, is_async, repeat)] = tool
        return tool

    def repeat_for(self, name: str, schema: Any) -> "tuple[Any, Optional[str]]":
        """The JSON Schema a model is shown for the write tool ``name`` (its ``schema`` with the
        repeat argument, by the core's ``repeat::add_to_schema``) and the argument's name; the
        schema as it is and ``None`` when the tool has none, or has a property of that name
        (its own, which it keeps: logged once)."""
        repeat = self.policies.repeat
        if repeat is None:
            return schema, None
        shown = _native.add_repeat_to_schema(schema, repeat) if isinstance(schema, dict) else None
        if shown is None:
            if self.repeats.get(name, repeat) is not None:
                keeps_own(name, repeat)
            self.repeats[name] = None
            return schema, None
        self.repeats[name] = repeat
        return shown, repeat

    def call(
        self,
        name: str,
        scope: str,
        args: Any,
        run: Callable[[], Any],
        repeat: Optional[str] = None,
    ) -> Answer:
        """Runs ``run`` once per operation (scope, name, args); the layer's answer. ``args``
        are the model's, with the ordinal ``repeat`` (if the tool has one) among them: the core
        reads it and keys it, and ``run`` must call the tool without it (:func:`without`)."""
        tool = self.tool(name, False, repeat)
        return run_sync(tool, (), {"scope": scope, "call": Call(args, run)})

    async def acall(
        self,
        name: str,
        scope: str,
        args: Any,
        run: Callable[[], Awaitable[Any]],
        repeat: Optional[str] = None,
    ) -> Answer:
        """:meth:`call` for an async ``run``."""
        tool = self.tool(name, True, repeat)
        return await run_async(tool, (), {"scope": scope, "call": Call(args, run)})


def without(args: Any, repeat: Optional[str]) -> Any:
    """The model's arguments without the ordinal ``repeat``: what the tool is called with."""
    if repeat is None or not isinstance(args, dict) or repeat not in args:
        return args
    return {k: v for k, v in args.items() if k != repeat}


def refused_ordinal(exc: BaseException) -> bool:
    """Whether ``exc`` is the core's refusal of a bad ordinal (its text is for the model)."""
    detail = getattr(exc, "detail", None)
    return isinstance(exc, InvalidArgumentsError) and isinstance(detail, dict) and "repeat" in detail


def is_read_mark(value: Any) -> bool:
    """Whether a tool's metadata value under :data:`METADATA_KEY` marks it a read tool."""
    return value == "read"


def read_names(reads: Iterable[str]) -> frozenset:
    """The names of ``reads`` (a set of tool names), refusing a lone string (whose letters
    would otherwise be taken as names)."""
    if isinstance(reads, str):
        raise ConfigError(f"reads must be a collection of tool names, not the string {reads!r}")
    names = frozenset(reads)
    for name in names:
        if not isinstance(name, str):
            raise ConfigError(f"reads must hold tool names (str), not {name!r}")
    return names


def resolve_scope(found: Optional[str], where: str, tool: str) -> str:
    """The call's scope: the surrounding ``with toolonce.scope(...)`` (the caller said so),
    else the framework's own id ``found``; refused when there is neither (``where`` says what
    was looked for)."""
    outer = current_scope()
    if outer is not None:
        return outer
    if isinstance(found, str) and found:
        return found
    raise InvalidArgumentsError(
        f"{tool}: no scope for this call: {where} is not set; pass it (it names the run whose "
        "duplicates toolonce drops), or call inside `with toolonce.scope(run_id):`"
    )
