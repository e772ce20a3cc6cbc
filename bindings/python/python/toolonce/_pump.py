"""The two pumps that drive the call protocol of ``_protocol.py``: the sync one, which runs the
function on the caller's thread (inline, or by a hand-off when nested in another write
function's run), and the async one, which awaits it on the caller's event loop, polling the
native layer on the loop's thread and woken through the loop's pump."""

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
    key_args = tool.key_args(args, kwargs)
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
    key_args = tool.key_args(args, kwargs)
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
    while True:
        while event is None:
            # Nothing to do until the layer is woken (a store's answer, a timer): wait for the
            # pump to say so, then poll again.
            woken = loop.create_future()
            try:
                if call.park(woken):
                    await woken
                event = call.poll()
            except BaseException:
                call.cancel()
                raise
        kind = event[0]
        if kind == "done":
            return attempt.answer(event)
        if kind == "verify":
            reply = await attempt.verify_async(event[1])
        else:
            reply = await attempt.run_async(event[1], event[2])
            if reply is None:
                # Cancelled or interrupted mid-run: it may have taken effect, so nothing is
                # recorded; the operation is `unknown` once its lease expires.
                call.abandon()
                raise attempt.exc  # type: ignore[misc]
        try:
            event = call.reply(reply)
        except BaseException:
            call.cancel()
            raise


# The pump of each event loop (``_native.Pump``), or None for a loop that cannot watch one
# (Windows' proactor loop): made on a loop's first call, gone with the loop.
_pumps: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any]" = weakref.WeakKeyDictionary()


def _pump_of(loop: asyncio.AbstractEventLoop) -> Any:
    try:
        return _pumps[loop]
    except KeyError:
        pass
    try:
        pump = _native.Pump()
        loop.add_reader(pump.fileno(), _drain, pump)
    except NotImplementedError:
        pump = None
    _pumps[loop] = pump
    return pump


def _drain(pump: Any) -> None:
    """Run by the loop when its pump's socket is readable: wakes the calls woken since."""
    for woken in pump.drain():
        if not woken.done():
            woken.set_result(None)


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
        kind = event[0]
        if kind == "done":
            call.finish()
            return attempt.answer(event)
        if kind == "verify":
            reply = await attempt.verify_async(event[1])
        else:
            reply = await attempt.run_async(event[1], event[2])
            if reply is None:
                call.abandon()
                raise attempt.exc  # type: ignore[misc]
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
