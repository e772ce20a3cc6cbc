"""A ``@toolonce.write`` function's settings, checked once when it is decorated: its store,
name and policies (as the native ``Tool``), its signature, and how a call's arguments and
scope become the operation's."""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, Optional, Sequence, Union

from . import _native
from ._answer import Wait
from ._context import Context, current_scope
from ._errors import ConfigError, InvalidArgumentsError, ToolonceError
from ._names import default_name
from ._store import Store

log = logging.getLogger("toolonce")

DEFAULT_REPEAT = object()
"""``repeat_argument`` not given: the core's default name (``repeat``), unless the function has
a parameter of that name."""
_MISSING = object()


def repeat_name(value: Any, where: str) -> Optional[str]:
    """The repeat argument a ``repeat_argument=`` option names: the core's default name for
    :data:`DEFAULT_REPEAT`, ``None`` for ``None`` or ``False`` (none), else the name given."""
    if value is DEFAULT_REPEAT:
        return str(_native.REPEAT_DEFAULT_NAME)
    if value is None or value is False:
        return None
    if not isinstance(value, str) or value == "" or "\0" in value:
        raise ConfigError(
            f"{where}: repeat_argument must be a non-empty argument name without NUL, or None "
            f"for none, not {value!r}"
        )
    return value


def keeps_own(tool: str, name: str) -> None:
    """Logs that ``tool`` has an argument of its own named like the repeat argument, which it
    keeps (so it gets none)."""
    log.warning(
        "the tool %s has its own argument %r: it keeps it, and gets no repeat argument (set "
        "repeat_argument to another name to give it one)",
        tool,
        name,
    )


def repeat_annotation() -> Any:
    """The annotation of the repeat argument in a write function's signature, which agent
    frameworks turn into its schema: optional, shown as the core's schema property (an integer
    from 1 to the largest ordinal, with the core's description) or null, and not validated by
    the framework (pydantic's ``SkipValidation``), so that the value the model sent reaches the
    core as it is — which reads it and, for anything but an ordinal, answers with the refusal
    the model reads (a framework's validator would coerce ``"2"`` or ``True`` to a number, or
    refuse in words of its own). Plain ``Optional[int]`` without pydantic."""
    try:
        from typing import Annotated

        from pydantic import SkipValidation, WithJsonSchema
    except ImportError:  # pragma: no cover - every framework that reads signatures has pydantic
        return Optional[int]
    shown = _native.add_repeat_to_schema({"type": "object"}, "repeat")
    assert shown is not None
    prop = shown["properties"]["repeat"]
    schema = {"anyOf": [prop, {"type": "null"}], "default": None}
    if "description" in prop:
        schema["description"] = prop["description"]
    return Annotated[Optional[int], SkipValidation, WithJsonSchema(schema)]


def pointers(key_fields: Optional[Sequence[str]]) -> Optional[list]:
    """Key fields as JSON Pointers: a plain name is a top-level argument."""
    if key_fields is None:
        return None
    if isinstance(key_fields, str):
        key_fields = [key_fields]
    out = []
    for field in key_fields:
        if field == "" or field.startswith("/"):
            out.append(field)
        else:
            out.append("/" + field.replace("~", "~0").replace("/", "~1"))
    return out


class WriteTool:
    """The settings of one ``@toolonce.write`` function."""

    def __init__(
        self,
        fn: Callable[..., Any],
        store: Store,
        name: Optional[str],
        lease: float,
        retention: float,
        in_flight: Union[str, Wait],
        key_fields: Optional[Sequence[str]],
        on_expired: Union[str, Callable[[Context], Any]],
        repeat_argument: Any = DEFAULT_REPEAT,
    ) -> None:
        if not isinstance(store, Store):
            raise ConfigError(f"store must be a toolonce.Store (open_store(url)), not {store!r}")
        if isinstance(in_flight, Wait):
            wait: Optional[float] = float(in_flight.seconds)
        elif in_flight == "reject":
            wait = None
        else:
            raise ConfigError(
                f"in_flight must be 'reject' or toolonce.Wait(seconds), not {in_flight!r}"
            )
        self.verify: Optional[Callable[[Context], Any]] = None
        if callable(on_expired):
            self.verify, policy = on_expired, "verify"
        elif on_expired in ("hold", "rerun"):
            policy = on_expired
        else:
            raise ConfigError(
                f"on_expired must be 'hold', 'rerun' or a verify function, not {on_expired!r}"
            )
        self.fn = fn
        self.store = store
        self.name = name or default_name(fn)
        self.key_fields = pointers(key_fields)
        self.signature = inspect.signature(fn)
        params = self.signature.parameters
        if "scope" in params:
            raise ConfigError(
                f"{self.name} has a parameter named 'scope', which toolonce's scope= takes; "
                "rename it"
            )
        self.repeat = self.repeat_of(repeat_argument, params)
        self.native = _native.Tool(
            self.name, float(lease), float(retention), wait, policy, self.key_fields, self.repeat
        )
        self.takes_ctx = "ctx" in params
        self.params = dict(params)
        # The parameters a keyword argument binds to by its name, and their defaults.
        by_keyword = [
            p
            for p in params.values()
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        ]
        self.keywords = frozenset(p.name for p in by_keyword)
        self.defaults = {p.name: p.default for p in by_keyword if p.default is not p.empty}

    def repeat_of(self, option: Any, params: Any) -> Optional[str]:
        """The tool's repeat argument: the option's name, unless the function has a parameter
        of that name, which it keeps (logged). A function taking ``**kwargs`` gets it only when
        the option names it, as such a function may take an argument of that name itself."""
        name = repeat_name(option, self.name)
        if name is None:
            return None
        if name in params:
            keeps_own(self.name, name)
            return None
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        if takes_any and option is DEFAULT_REPEAT:
            return None
        return name

    def take_repeat(self, kwargs: dict) -> Any:
        """Takes the repeat ordinal out of a call's keyword arguments (the function never gets
        it); ``_MISSING`` when the call has none."""
        if self.repeat is None:
            return _MISSING
        return kwargs.pop(self.repeat, _MISSING)

    def with_repeat(self, key_args: Any, ordinal: Any) -> Any:
        """The key arguments with the ordinal back under its name, for the core to read (and
        refuse) and key: ``toolonce::repeat::take`` is the one rule."""
        if ordinal is _MISSING:
            return key_args
        if hasattr(key_args, "model_dump"):
            key_args = key_args.model_dump(mode="json")
        return dict(key_args, **{self.repeat: ordinal})  # type: ignore[dict-item]

    def key_args(self, args: tuple, kwargs: dict) -> Any:
        """The arguments that make the key: what the function receives, bound to its signature
        by name (positional ones too), or the fields of a lone pydantic model.

        Two calls the function cannot tell apart are one operation: a keyword it does not take
        is refused (nothing runs), and an argument passed with its parameter's default value (of
        the same type) is left out, as a default not passed is."""
        if len(args) == 1 and not kwargs and hasattr(args[0], "model_dump"):
            return args[0]
        if "ctx" in kwargs and self.takes_ctx:
            raise InvalidArgumentsError(
                f"{self.name}: ctx is given by toolonce (the operation's Context), not by the "
                "caller"
            )
        if not args and kwargs.keys() <= self.keywords:
            # Keywords only, all of them named parameters: no binding needed (the common call).
            defaults = self.defaults
            if defaults.keys().isdisjoint(kwargs):
                return kwargs
            return {
                k: v for k, v in kwargs.items() if k not in defaults or not _is_default(v, defaults[k])
            }
        try:
            bound = self.signature.bind_partial(*args, **kwargs)
        except TypeError as e:
            raise InvalidArgumentsError(f"{self.name}: {e}") from None
        named = {}
        for name, value in bound.arguments.items():
            param = self.params[name]
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            elif not _is_default(value, param.default):
                named[name] = value
        return named

    def scope_of(self, kwargs: dict) -> str:
        """The call's scope: its ``scope=`` (taken out of ``kwargs``), else the surrounding
        ``with toolonce.scope(...)``."""
        scope = kwargs.pop("scope", None)
        if scope is None:
            scope = current_scope()
        if scope is None:
            raise InvalidArgumentsError(
                f"{self.name} needs a scope: pass scope=run_id or call it inside "
                "`with toolonce.scope(run_id):`"
            )
        return scope

    def start(self, scope: str, key_args: Any, deliver: Any = None) -> Any:
        """Starts the native call on the runtime (see ``_native.start``)."""
        try:
            return _native.start(self.store._native, self.native, scope, key_args, deliver)
        except (TypeError, ValueError) as e:
            if isinstance(e, ToolonceError):
                raise
            raise InvalidArgumentsError(f"{self.name}: {e}") from None

    def begin(self, pump: Any, scope: str, key_args: Any) -> Any:
        """Prepares the native call, to be polled on this event loop (see ``_native.begin``)."""
        try:
            return _native.begin(pump, self.store._native, self.native, scope, key_args)
        except (TypeError, ValueError) as e:
            if isinstance(e, ToolonceError):
                raise
            raise InvalidArgumentsError(f"{self.name}: {e}") from None


def _is_default(value: Any, default: Any) -> bool:
    """Whether ``value`` is ``default`` as the function sees it: the same type and equal (so
    ``True`` is not the default ``1``)."""
    if default is inspect.Parameter.empty:
        return False
    if value is default:
        return True
    try:
        return type(value) is type(default) and bool(value == default)
    except Exception:
        return False
