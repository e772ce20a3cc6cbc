"""The two pumps that drive the call protocol of ``_protocol.py``: the sync one, which runs the
function on the caller's thread (inline, or by a hand-off when nested in another write
function's run), and the async one, which awaits it on the caller's event loop, polling the
native layer on the loop's thread and woken through the loop's pump.

A woken async call resumes in the loop iteration that read its wake (``_Wake``), not one
later as an asyncio future's waiter would: each wait on the store then costs the loop one
iteration instead of two, which is most of what the async pump paid over the sync one."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from . import _native
from ._answer import Answer
from ._errors import InvalidArgumentsError, ToolonceError
from ._protocol import Attempt
from ._tool import WriteTool


def run_sync(tool: WriteTool, args: tuple, kwargs: dict) -> Answer:
    """A sync call: the native layer is driven on this thread and calls the protocol's runner
    and verifier inline."""
    scope = tool.scope_of(kwargs)
    ordinal = tool.take_repeat(kwargs)
    key_args = tool.with_repeat(tool.key_args(args, kwargs), ordinal)
    attempt = Attempt(tool, args, kwargs)
    verifier = attempt.verify_sync if tool.verify is not None else None
    try:
        event = _native.run_inline(
            tool.store._native, tool.native, scope, key_args, attempt.run_sync, verifier
        )
    except BaseException as e:
        if attempt.exc is not None and not isinstance(attempt.exc, Exception):
            raise attempt.exc from None  # the interruption itself
        if isinstance(e, (TypeError, ValueError)) and not isinstance(e, ToolonceError):
            if not attempt.ran:
                raise InvalidArgumentsError(f"{tool.name}: {e}") from None
        raise
    if event is None:
        # A write function called from inside another one's run on this thread.
        return _run_sync_handoff(tool, attempt, scope, key_args)
    return attempt.answer(event)


def _run_sync_handoff(tool: WriteTool, attempt: Attempt, scope: str, key_args: Any) -> Answer:
    """A sync call whose layer runs on the runtime, its events read with ``Call.wait``."""
    call = tool.start(scope, key_args)
    while True:
        try:
            event = call.wait()
        except BaseException:
            call.cancel()
            raise
        kind = event[0]
        if kind == "done":
            call.finish()
            return attempt.answer(event)
        if kind == "verify":
            reply = attempt.verify_sync(event[1])
        else:
            reply = attempt.run_sync(event[1], event[2])
            if reply is None:
                call.abandon()
                raise attempt.exc  # type: ignore[misc]
        call.reply(reply)


async def run_async(tool: WriteTool, args: tuple, kwargs: dict) -> Answer:
    """An async call: the layer is polled on this event loop's thread (``_native.begin``), or,
    on a loop that cannot watch a descriptor, runs on the runtime and hands its events over."""
    scope = tool.scope_of(kwargs)
    ordinal = tool.take_repeat(kwargs)
    key_args = tool.with_repeat(tool.key_args(args, kwargs), ordinal)
    attempt = Attempt(tool, args, kwargs)
    loop = asyncio.get_running_loop()
    pump = _pump_of(loop)
    if pump is None:
        return await _run_async_handoff(tool, attempt, scope, key_args, loop)
    call = tool.begin(pump, scope, key_args)
    try:
        event = call.poll()
    except BaseException:
        call.cancel()
        raise
    woken = _Wake(loop)  # one per call: a call waits for one wake at a time
    while True:
        while event is None:
            # Nothing to do until the layer is woken (a store's answer, a timer): wait for the
            # pump to say so, then poll again.
            woken.rearm()
            try:
                if call.park(woken):
                    await woken
                event = call.poll()
            except BaseException:
                call.cancel()
                raise
        if event[0] == "done":
            return attempt.answer(event)
        reply = await _reply_to(attempt, call, event)
        try:
            event = call.reply(reply)
        except BaseException:
            call.cancel()
            raise


# The pump of each event loop (``_native.Pump``), or None for a loop that cannot watch one
# (Windows' proactor loop): made on a loop's first call, gone with the loop.
_pumps: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any]" = weakref.WeakKeyDictionary()


# The last loop asked for and its pump: a program runs one loop, and a weak reference's call
# is cheaper than the dictionary's lookup, which makes one for its key each time.
_last: "tuple[weakref.ref, Any] | None" = None


def _pump_of(loop: asyncio.AbstractEventLoop) -> Any:
    global _last
    last = _last
    if last is not None and last[0]() is loop:
        return last[1]
    try:
        pump = _pumps[loop]
    except KeyError:
        try:
            pump = _native.Pump()
            loop.add_reader(pump.fileno(), _drain, pump)
        except NotImplementedError:
            pump = None
        _pumps[loop] = pump
    _last = (weakref.ref(loop), pump)
    return pump


def _drain(pump: Any) -> None:
    """Run by the loop when its pump's socket is readable: resumes the calls woken since, here
    and now (see ``_Wake``)."""
    woken = pump.drain()
    for i, wake in enumerate(woken):
        try:
            wake.wake()
        except BaseException:
            # A task that let Ctrl-C or SystemExit out of its step: it goes on up the loop, as
            # from any callback; the calls after it still get their wake, at the next turn.
            for rest in woken[i + 1 :]:
                rest.wake_soon()
            raise


class _Wake:
    """What an async call awaits until its pump wakes it: a future as far as the task that
    awaits it can tell (``_asyncio_future_blocking``, ``add_done_callback``, ``result``,
    ``cancel``), whose :meth:`wake` steps that task at once, in the context it registered,
    where ``Future.set_result`` would schedule the step for the loop's next iteration. Only
    ``_drain`` wakes it so, a reader callback, where no task is running; a cancellation is
    scheduled as a future's is, since it comes from any code. Rearmed for each wait of its call.
    """

    __slots__ = ("_asyncio_future_blocking", "_loop", "_callback", "_context", "_state", "_msg")

    _PENDING, _WOKEN, _CANCELLED = 0, 1, 2

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._asyncio_future_blocking = False
        self._loop = loop
        self._callback: Any = None
        self._context: Any = None
        self._state = _Wake._PENDING
        self._msg: Any = None

    def rearm(self) -> None:
        self._state = _Wake._PENDING

    def __await__(self) -> Any:
        if self._state == _Wake._PENDING:
            self._asyncio_future_blocking = True
            yield self
        self.result()

    __iter__ = __await__

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def done(self) -> bool:
        return self._state != _Wake._PENDING

    def cancelled(self) -> bool:
        return self._state == _Wake._CANCELLED

    def result(self) -> None:
        if self._state == _Wake._CANCELLED:
            raise asyncio.CancelledError(*(() if self._msg is None else (self._msg,)))

    def exception(self) -> Any:
        self.result()
        return None

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        if self._state != _Wake._PENDING:
            self._loop.call_soon(fn, self, context=context)
        else:
            self._callback, self._context = fn, context

    def remove_done_callback(self, fn: Any) -> int:
        if self._callback is not None and self._callback == fn:
            self._callback = self._context = None
            return 1
        return 0

    def cancel(self, msg: Any = None) -> bool:
        if self._state != _Wake._PENDING:
            return False
        self._state, self._msg = _Wake._CANCELLED, msg
        self._schedule()
        return True

    def wake(self) -> None:
        """Steps the waiting task now (``_drain`` only)."""
        if self._state != _Wake._PENDING:
            return
        self._state = _Wake._WOKEN
        fn, context = self._callback, self._context
        if fn is None:
            return  # not awaited yet: its task sees it done when it awaits
        self._callback = self._context = None
        if context is None:
            fn(self)
        else:
            context.run(fn, self)

    def wake_soon(self) -> None:
        """Steps the waiting task at the loop's next iteration, as a future would."""
        if self._state == _Wake._PENDING:
            self._state = _Wake._WOKEN
            self._schedule()

    def _schedule(self) -> None:
        fn, context = self._callback, self._context
        if fn is not None:
            self._callback = self._context = None
            self._loop.call_soon(fn, self, context=context)


async def _reply_to(attempt: Attempt, call: Any, event: tuple) -> Any:
    """The reply to a `run` or `verify` event, the same for both pumps: the function's outcome,
    or the probe's. A run cancelled or interrupted midway may have taken effect, so nothing is
    recorded: the call is abandoned (the operation is `unknown` once its lease expires) and the
    interruption goes on up."""
    if event[0] == "verify":
        return await attempt.verify_async(event[1])
    reply = await attempt.run_async(event[1], event[2])
    if reply is None:
        call.abandon()
        raise attempt.exc  # type: ignore[misc]
    return reply


async def _run_async_handoff(
    tool: WriteTool, attempt: Attempt, scope: str, key_args: Any, loop: asyncio.AbstractEventLoop
) -> Answer:
    """An async call whose layer runs on the runtime and hands its events to this loop."""
    waiter = _Waiter(loop)
    call = tool.start(scope, key_args, waiter.deliver)
    while True:
        try:
            event = await waiter.next()
        except BaseException:
            call.cancel()
            raise
        if event[0] == "done":
            call.finish()
            return attempt.answer(event)
        reply = await _reply_to(attempt, call, event)
        waiter.arm()
        call.reply(reply)


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
