"""A ``@toolonce.write`` function's settings, checked once when it is decorated: its store,
name and policies (as the native ``Tool``), its signature, and how a call's arguments and
scope become the operation's."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, Sequence, Union

from . import _native
from ._answer import Wait
from ._context import Context, current_scope
from ._errors import ConfigError, InvalidArgumentsError, ToolonceError
from ._names import default_name
from ._store import Store


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
        self.native = _native.Tool(
            self.name, float(lease), float(retention), wait, policy, self.key_fields
        )
        self.signature = inspect.signature(fn)
        params = self.signature.parameters
        if "scope" in params:
            raise ConfigError(
                f"{self.name} has a parameter named 'scope', which toolonce's scope= takes; "
                "rename it"
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
