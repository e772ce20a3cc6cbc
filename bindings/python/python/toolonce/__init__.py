"""toolonce for Python: make every side-effecting tool call of an AI agent take effect once.

A call of a ``@toolonce.write`` function is keyed by ``(scope, tool name, canonical arguments)``
and claimed in a store; the first caller runs the function, duplicates get its stored result.
The protocol (claim, lease heartbeat, record, replay, ``unknown`` after a crash) is toolonce's
Rust core, run by the native module ``toolonce._native``; this module is the Pythonic surface:
the decorator, the scope and key context variables, and exceptions for the outcomes.

Sync functions run on the caller's thread and async ones on the caller's event loop, both with
the caller's context variables; store I/O and the lease heartbeat run on a Tokio runtime owned by
the native module, with the GIL released.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar, Union
from urllib.parse import urlencode

from . import _native
from ._errors import (
    ConfigError,
    ConflictError,
    InFlightError,
    InvalidArgumentsError,
    PermanentError,
    ReplayedFailure,
    StoreUnavailableError,
    ToolFailed,
    ToolonceError,
    UnknownOutcomeError,
)

__all__ = [
    "CANNOT_TELL",
    "NOT_DONE",
    "Answer",
    "ConfigError",
    "ConflictError",
    "Context",
    "Done",
    "InFlightError",
    "InvalidArgumentsError",
    "PermanentError",
    "ReplayedFailure",
    "Store",
    "StoreUnavailableError",
    "ToolFailed",
    "ToolonceError",
    "UnknownOutcomeError",
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

_scope: contextvars.ContextVar[str] = contextvars.ContextVar("toolonce_scope")
_context: contextvars.ContextVar["Context"] = contextvars.ContextVar("toolonce_context")


class Store:
    """A store opened by :func:`open_store`; a context manager that closes it on exit."""

    __slots__ = ("_native",)

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def url(self) -> str:
        """The store's URL with its secrets masked."""
        return self._native.url

    @property
    def closed(self) -> bool:
        return self._native.closed

    def close(self) -> None:
        """Releases the store's connections; calls made with it afterwards raise."""
        self._native.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<toolonce.Store {self.url}>"


def open_store(url: str, **options: Any) -> Store:
    """Opens the store ``url`` names: ``memory://``, ``sqlite://PATH``, ``redis://HOST``,
    ``rediss://``, ``redis+cluster://HOST``, ``postgres://HOST/DB``.

    ``options`` are added to the URL's query string (``pool_size=8`` for ``?pool_size=8``;
    ``True``/``False`` as ``true``/``false``), which is where each backend reads its options.
    Raises :class:`ConfigError` for a malformed URL or option and
    :class:`StoreUnavailableError` when the store cannot be reached.
    """
    if options:
        query = urlencode(
            {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in options.items()}
        )
        url = f"{url}{'&' if '?' in url else '?'}{query}"
    return Store(_native.open_store(url))


@dataclass(frozen=True)
class Wait:
    """``in_flight=Wait(seconds)``: a duplicate that finds its operation running waits up to
    ``seconds`` for it to settle, then answers as a duplicate of it."""

    seconds: float


@dataclass(frozen=True)
class Context:
    """What a write function knows about the operation it runs (its optional ``ctx``
    parameter; :func:`current_key` gives the key alone)."""

    key: str
    """The operation key, ``idem:`` + 32 hex digits: the same for every duplicate."""
    may_have_run_before: bool
    """An earlier attempt of this operation may have taken effect downstream (this call took
    over an ``unknown`` operation): send the key downstream so it can drop a second attempt."""

    @property
    def idempotency_header(self) -> "tuple[str, str]":
        """``("Idempotency-Key", key)``, to send downstream."""
        return ("Idempotency-Key", self.key)


@dataclass(frozen=True)
class Done:
    """A verify function's answer: the interrupted attempt took effect, with this result
    (recorded and replayed)."""

    result: Any = None


class _Verdict:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"toolonce.{self._name.upper()}"


NOT_DONE = _Verdict("not_done")
"""A verify function's answer: the interrupted attempt did not take effect; run it again."""
CANNOT_TELL = _Verdict("cannot_tell")
"""A verify function's answer: the downstream system cannot say; hold (``unknown``)."""


@dataclass(frozen=True)
class Answer:
    """What :meth:`call_detailed` returns: the outcome word of the core (``executed``,
    ``replayed``, ``replayed_failure``, ``in_flight``, ``conflict``, ``unknown``,
    ``store_unavailable``, ``invalid_arguments``), the operation key, the value (on success)
    and the error (the exception a plain call would raise, not raised)."""

    outcome: str
    key: Optional[str]
    value: Any = None
    error: Optional[BaseException] = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> Any:
        """The value, or raises the error."""
        if self.error is not None:
            raise self.error
        return self.value


@contextlib.contextmanager
def scope(run_id: str) -> Iterator[str]:
    """``with toolonce.scope(run_id):`` — write calls inside (in this thread or task, and the
    tasks it starts) use ``run_id`` as their scope unless given ``scope=``."""
    if not isinstance(run_id, str) or not run_id:
        raise ConfigError("the scope must be a non-empty str")
    token = _scope.set(run_id)
    try:
        yield run_id
    finally:
        _scope.reset(token)


def current_key() -> str:
    """The operation key of the write function running in this context."""
    ctx = _context.get(None)
    if ctx is None:
        raise LookupError("toolonce.current_key() called outside a toolonce write function")
    return ctx.key


def current_context() -> Context:
    """The :class:`Context` of the write function running in this context."""
    ctx = _context.get(None)
    if ctx is None:
        raise LookupError("toolonce.current_context() called outside a toolonce write function")
    return ctx


def derive_key(
    scope: str, tool: str, args: Any, key_fields: Optional[Sequence[str]] = None
) -> str:
    """The operation key of ``tool`` called in ``scope`` with ``args`` (JSON), as every toolonce
    binding derives it."""
    return _native.derive_key(scope, tool, args, _pointers(key_fields))


def read(fn: F) -> F:
    """Marks a read tool: it has no side effect, so it runs every time and needs no store."""
    fn.toolonce_kind = "read"  # type: ignore[attr-defined]
    return fn


def _pointers(key_fields: Optional[Sequence[str]]) -> Optional[list]:
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


def _is_permanent(exc: BaseException) -> bool:
    return isinstance(exc, PermanentError) or getattr(exc, "toolonce_permanent", False) is True


_ERRORS = {
    "replayed_failure": ReplayedFailure,
    "in_flight": InFlightError,
    "conflict": ConflictError,
    "unknown": UnknownOutcomeError,
    "store_unavailable": StoreUnavailableError,
    "invalid_arguments": InvalidArgumentsError,
}


class _WriteTool:
    """The settings and the protocol loop of one ``@toolonce.write`` function."""

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
        self.name = name or f"{fn.__module__}.{fn.__qualname__}"
        self.native = _native.Tool(
            self.name, float(lease), float(retention), wait, policy, _pointers(key_fields)
        )
        self.signature = inspect.signature(fn)
        params = self.signature.parameters
        if "scope" in params:
            raise ConfigError(
                f"{self.name} has a parameter named 'scope', which toolonce's scope= takes; "
                "rename it"
            )
        self.takes_ctx = "ctx" in params
        self.var_keyword = next(
            (p.name for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None
        )

    # -- arguments ---------------------------------------------------------------------------

    def key_args(self, args: tuple, kwargs: dict) -> Any:
        """The arguments that make the key: keyword arguments, positional ones by name, or the
        fields of a lone pydantic model."""
        if not args:
            return kwargs
        if len(args) == 1 and not kwargs and hasattr(args[0], "model_dump"):
            return args[0]
        try:
            bound = self.signature.bind_partial(*args, **kwargs)
        except TypeError as e:
            raise InvalidArgumentsError(f"{self.name}: {e}") from None
        named = dict(bound.arguments)
        if self.var_keyword is not None and self.var_keyword in named:
            named.update(named.pop(self.var_keyword))
        return named

    def start(self, args: tuple, kwargs: dict, deliver: Any = None) -> Any:
        scope = self.scope_of(kwargs)
        key_args = self.key_args(args, kwargs)
        try:
            return _native.start(self.store._native, self.native, scope, key_args, deliver)
        except (TypeError, ValueError) as e:
            if isinstance(e, ToolonceError):
                raise
            raise InvalidArgumentsError(f"{self.name}: {e}") from None

    # -- replies -----------------------------------------------------------------------------

    @staticmethod
    def reply_exception(call: Any, exc: BaseException) -> None:
        permanent = _is_permanent(exc)
        message = str(exc) or type(exc).__name__
        detail = getattr(exc, "detail", None) if permanent else None
        try:
            call.reply_error(message, permanent, detail)
        except (TypeError, ValueError):
            call.reply_error(message, permanent, None)

    @staticmethod
    def reply_verdict(call: Any, verdict: Any) -> None:
        if isinstance(verdict, Done):
            call.reply_verify("done", verdict.result)
        elif verdict is NOT_DONE:
            call.reply_verify("not_done")
        else:
            call.reply_verify("cannot_tell")

    def answer(
        self,
        event: tuple,
        result: Any,
        ran: bool,
        exc: Optional[BaseException],
        verify_error: Optional[BaseException] = None,
    ) -> Answer:
        answer = self.answer_of(event, result, ran, exc)
        if verify_error is not None and answer.outcome == "unknown":
            # The probe failed, so the operation was held: say why.
            answer.error.__cause__ = verify_error  # type: ignore[union-attr]
        return answer

    def answer_of(
        self, event: tuple, result: Any, ran: bool, exc: Optional[BaseException]
    ) -> Answer:
        _, outcome, key, ok, payload = event
        if outcome == "executed":
            if exc is not None:
                return Answer(outcome, key, None, exc)
            if ok:
                return Answer(outcome, key, result if ran else payload)
            message, _class, detail = payload
            return Answer(outcome, key, None, ToolFailed(message, key, detail))
        if ok:
            return Answer(outcome, key, payload)
        message, _class, detail = payload
        error_class = _ERRORS.get(outcome, ToolFailed)
        return Answer(outcome, key, None, error_class(message, key, detail))

    def call_args(self, args: tuple, kwargs: dict, ctx: Context) -> tuple:
        if self.takes_ctx:
            kwargs = dict(kwargs, ctx=ctx)
        return args, kwargs

    # -- sync --------------------------------------------------------------------------------

    def run_sync(self, args: tuple, kwargs: dict) -> Answer:
        scope = self.scope_of(kwargs)
        key_args = self.key_args(args, kwargs)
        state: list = [None, False, None, None]  # result, ran, exception, verify error

        def runner(key: str, may_have_run_before: bool) -> Optional[tuple]:
            ctx = Context(key, may_have_run_before)
            a, kw = self.call_args(args, kwargs, ctx)
            token = _context.set(ctx)
            state[1] = True
            try:
                state[0] = self.fn(*a, **kw)
                return (True, state[0])
            except Exception as e:
                state[2] = e
                permanent = _is_permanent(e)
                detail = getattr(e, "detail", None) if permanent else None
                return (False, str(e) or type(e).__name__, permanent, detail)
            except BaseException as e:
                # Interrupted mid-run: it may have taken effect, so nothing is recorded.
                state[2] = e
                return None
            finally:
                _context.reset(token)

        verifier = None
        if self.verify is not None:
            verify = self.verify

            def verifier(key: str) -> Any:
                ctx = Context(key, True)
                token = _context.set(ctx)
                try:
                    verdict = verify(ctx)
                except Exception as e:
                    # Cannot tell: held, and the probe's error is the `unknown` error's cause.
                    state[3] = e
                    return "cannot_tell"
                finally:
                    _context.reset(token)
                if isinstance(verdict, Done):
                    return ("done", verdict.result)
                return "not_done" if verdict is NOT_DONE else "cannot_tell"

        try:
            event = _native.run_inline(
                self.store._native, self.native, scope, key_args, runner, verifier
            )
        except BaseException as e:
            if state[2] is not None and not isinstance(state[2], Exception):
                raise state[2] from None  # the interruption itself
            if isinstance(e, (TypeError, ValueError)) and not isinstance(e, ToolonceError):
                if not state[1]:
                    raise InvalidArgumentsError(f"{self.name}: {e}") from None
            raise
        if event is None:
            # A write function called from inside another one's run on this thread.
            return self.run_sync_handoff(args, kwargs, scope)
        return self.answer(event, state[0], state[1], state[2], state[3])

    def scope_of(self, kwargs: dict) -> str:
        scope = kwargs.pop("scope", None)
        if scope is None:
            scope = _scope.get(None)
        if scope is None:
            raise InvalidArgumentsError(
                f"{self.name} needs a scope: pass scope=run_id or call it inside "
                "`with toolonce.scope(run_id):`"
            )
        return scope

    def run_sync_handoff(self, args: tuple, kwargs: dict, scope: str) -> Answer:
        kwargs = dict(kwargs, scope=scope)
        call = self.start(args, kwargs)
        result: Any = None
        ran = False
        exc: Optional[BaseException] = None
        verify_error: Optional[BaseException] = None
        while True:
            try:
                event = call.wait()
            except BaseException:
                call.cancel()
                raise
            kind = event[0]
            if kind == "done":
                return self.answer(event, result, ran, exc, verify_error)
            ctx = Context(event[1], True if kind == "verify" else event[2])
            token = _context.set(ctx)
            try:
                if kind == "verify":
                    try:
                        verdict = self.verify(ctx)  # type: ignore[misc]
                    except Exception as e:
                        verify_error, verdict = e, CANNOT_TELL
                    self.reply_verdict(call, verdict)
                    continue
                a, kw = self.call_args(args, kwargs, ctx)
                ran = True
                try:
                    result = self.fn(*a, **kw)
                except Exception as e:
                    exc = e
                    self.reply_exception(call, e)
                    continue
                except BaseException:
                    # Interrupted mid-run: it may have taken effect, so nothing is recorded.
                    call.abandon()
                    raise
            finally:
                _context.reset(token)
            try:
                call.reply_ok(result)
            except TypeError as e:
                exc = e  # recorded as a permanent failure; raised once the layer is done

    # -- async -------------------------------------------------------------------------------

    async def run_async(self, args: tuple, kwargs: dict) -> Answer:
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop)
        call = self.start(args, kwargs, waiter.deliver)
        result: Any = None
        ran = False
        exc: Optional[BaseException] = None
        verify_error: Optional[BaseException] = None
        while True:
            try:
                event = await waiter.next()
            except BaseException:
                call.cancel()
                raise
            kind = event[0]
            if kind == "done":
                return self.answer(event, result, ran, exc, verify_error)
            ctx = Context(event[1], True if kind == "verify" else event[2])
            token = _context.set(ctx)
            try:
                if kind == "verify":
                    try:
                        verdict = self.verify(ctx)  # type: ignore[misc]
                        if inspect.isawaitable(verdict):
                            verdict = await verdict
                    except Exception as e:
                        verify_error, verdict = e, CANNOT_TELL
                    waiter.arm()
                    self.reply_verdict(call, verdict)
                    continue
                a, kw = self.call_args(args, kwargs, ctx)
                ran = True
                try:
                    result = await self.fn(*a, **kw)
                except Exception as e:
                    exc = e
                    waiter.arm()
                    self.reply_exception(call, e)
                    continue
                except BaseException:
                    # Cancelled or interrupted mid-run: it may have taken effect, so nothing is
                    # recorded; the operation is `unknown` once its lease expires.
                    call.abandon()
                    raise
            finally:
                _context.reset(token)
            waiter.arm()
            try:
                call.reply_ok(result)
            except TypeError as e:
                exc = e  # recorded as a permanent failure; raised once the layer is done


class _Waiter:
    """Hands the native layer's events to the event loop. The layer sends one event, then
    waits for a reply before it sends the next, so one future at a time is enough; it is armed
    before each reply."""

    __slots__ = ("loop", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future = loop.create_future()

    def arm(self) -> None:
        self.future = self.loop.create_future()

    def deliver(self, event: tuple) -> None:
        # Called on a runtime thread.
        try:
            self.loop.call_soon_threadsafe(_resolve, self.future, event)
        except RuntimeError:
            pass  # the loop is closed: nobody waits for the answer

    def next(self) -> asyncio.Future:
        return self.future


def _resolve(future: asyncio.Future, event: tuple) -> None:
    if not future.done():
        future.set_result(event)


def write(
    store: Store,
    name: Optional[str] = None,
    *,
    lease: float = 60,
    retention: float = 86400,
    in_flight: Union[str, Wait] = "reject",
    key_fields: Optional[Sequence[str]] = None,
    on_expired: Union[str, Callable[[Context], Any]] = "hold",
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
    """

    def decorate(fn: F) -> F:
        tool = _WriteTool(fn, store, name, lease, retention, in_flight, key_fields, on_expired)
        params = [p for p in tool.signature.parameters.values() if p.name != "ctx"]
        signature = tool.signature.replace(parameters=params)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return (await tool.run_async(args, kwargs)).unwrap()

            async def call_detailed_async(*args: Any, **kwargs: Any) -> Answer:
                return await tool.run_async(args, kwargs)

            wrapper: Any = async_wrapper
            wrapper.call_detailed = call_detailed_async
        else:

            @functools.wraps(fn)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                return tool.run_sync(args, kwargs).unwrap()

            def call_detailed_sync(*args: Any, **kwargs: Any) -> Answer:
                return tool.run_sync(args, kwargs)

            wrapper = sync_wrapper
            wrapper.call_detailed = call_detailed_sync
        wrapper.__signature__ = signature
        wrapper.toolonce_kind = "write"
        wrapper.tool_name = tool.name
        wrapper.key_for = lambda scope, **kw: _native.derive_key(
            scope, tool.name, kw, _pointers(key_fields)
        )
        return wrapper  # type: ignore[no-any-return]

    return decorate
