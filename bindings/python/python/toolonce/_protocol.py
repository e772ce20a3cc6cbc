"""The one call protocol of a write call, the same for the sync and the async pump (see
``_pump.py``): what the Python side does with each event the native layer sends and what it
answers, and what it remembers to tell the caller in the end.

The layer sends ``("run", key, may_have_run_before)`` when the claim is won, ``("verify",
key)`` when an unknown operation is to be probed, and ``("done", outcome, key, ok, payload, notice, note)``
last (``note``: what a replay tells the model, the core's text). Each ``run`` and ``verify`` is answered with a native ``Reply``, which converts the
outcome at once (``_native.Reply`` applies the verdict on it: only the tool's own transient
exception releases the operation). An :class:`Attempt` keeps what the caller must get that the
layer does not send back: the function's own return value, its own exception (raised as it was,
never a copy), and why a probe could not tell.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Optional

from . import _native
from ._answer import NOT_DONE, Answer, Done, error_of
from ._context import Context, _context
from ._errors import PermanentError, ToolFailed

if TYPE_CHECKING:
    from ._tool import WriteTool


def is_permanent(exc: BaseException) -> bool:
    """Whether the tool declared ``exc`` permanent (stored and replayed) rather than transient
    (the operation released)."""
    return isinstance(exc, PermanentError) or getattr(exc, "toolonce_permanent", False) is True


class Attempt:
    """One write call's bookkeeping (see the module docs)."""

    __slots__ = ("tool", "args", "kwargs", "result", "ran", "exc", "verify_error")

    def __init__(self, tool: "WriteTool", args: tuple, kwargs: dict) -> None:
        self.tool = tool
        self.args = args
        self.kwargs = kwargs
        self.result: Any = None
        self.ran = False
        # The caller's exception: the function's own, or why its result cannot be stored, or
        # the interruption (KeyboardInterrupt, CancelledError) that abandoned the call.
        self.exc: Optional[BaseException] = None
        self.verify_error: Optional[BaseException] = None

    # -- run ---------------------------------------------------------------------------------

    def begin(self, key: str, may_have_run_before: bool) -> "tuple[Context, tuple, dict]":
        ctx = Context(key, may_have_run_before)
        self.ran = True
        kwargs = dict(self.kwargs, ctx=ctx) if self.tool.takes_ctx else self.kwargs
        return ctx, self.args, kwargs

    def returned(self, result: Any) -> Any:
        self.result = result
        reply = _native.Reply.result(result)
        if reply.error is not None:
            self.exc = reply.error  # recorded as a permanent failure; raised once it is
        return reply

    def raised(self, exc: Exception) -> Any:
        self.exc = exc
        permanent = is_permanent(exc)
        detail = getattr(exc, "detail", None) if permanent else None
        return _native.Reply.failure(exc, permanent, detail)

    def run_sync(self, key: str, may_have_run_before: bool) -> Optional[Any]:
        """Runs the sync function; the reply, or ``None`` when it was interrupted mid-run (it
        may have taken effect, so nothing is recorded)."""
        ctx, args, kwargs = self.begin(key, may_have_run_before)
        token = _context.set(ctx)
        try:
            result = self.tool.fn(*args, **kwargs)
        except Exception as e:
            return self.raised(e)
        except BaseException as e:
            self.exc = e
            return None
        finally:
            _context.reset(token)
        return self.returned(result)

    async def run_async(self, key: str, may_have_run_before: bool) -> Optional[Any]:
        """:meth:`run_sync` for an async function, awaited on the caller's event loop."""
        ctx, args, kwargs = self.begin(key, may_have_run_before)
        token = _context.set(ctx)
        try:
            result = await self.tool.fn(*args, **kwargs)
        except Exception as e:
            return self.raised(e)
        except BaseException as e:
            self.exc = e
            return None
        finally:
            _context.reset(token)
        return self.returned(result)

    # -- verify ------------------------------------------------------------------------------

    def cannot_tell(self, exc: Exception) -> Any:
        # Held, and the probe's error becomes the `unknown` error's cause.
        self.verify_error = exc
        return _native.Reply.verified("cannot_tell")

    def verdict(self, verdict: Any) -> Any:
        if isinstance(verdict, Done):
            try:
                return _native.Reply.verified("done", verdict.result)
            except Exception as e:  # the result cannot be recorded: hold, saying why
                return self.cannot_tell(e)
        return _native.Reply.verified("not_done" if verdict is NOT_DONE else "cannot_tell")

    def verify_sync(self, key: str) -> Any:
        ctx = Context(key, True)
        token = _context.set(ctx)
        try:
            verdict = self.tool.verify(ctx)  # type: ignore[misc]
        except Exception as e:
            return self.cannot_tell(e)
        finally:
            _context.reset(token)
        return self.verdict(verdict)

    async def verify_async(self, key: str) -> Any:
        ctx = Context(key, True)
        token = _context.set(ctx)
        try:
            verdict = self.tool.verify(ctx)  # type: ignore[misc]
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception as e:
            return self.cannot_tell(e)
        finally:
            _context.reset(token)
        return self.verdict(verdict)

    # -- done --------------------------------------------------------------------------------

    def answer(self, event: tuple) -> Answer:
        """The caller's :class:`Answer` for the ``done`` event."""
        _, outcome, key, ok, payload, notice, note = event
        if outcome == "executed":
            if self.exc is not None:
                return Answer(outcome, key, None, self.exc, notice)
            if ok:
                return Answer(outcome, key, self.result if self.ran else payload, None, notice)
            message, _class, detail = payload
            return Answer(outcome, key, None, ToolFailed(message, key, detail), notice)
        if ok:
            return Answer(outcome, key, payload, None, notice, note)
        error = error_of(outcome, key, payload)
        if note is not None:
            error.note = note  # type: ignore[attr-defined]
        if self.verify_error is not None and outcome == "unknown":
            # The probe failed, so the operation was held: say why.
            error.__cause__ = self.verify_error
        return Answer(outcome, key, None, error, notice, note)
