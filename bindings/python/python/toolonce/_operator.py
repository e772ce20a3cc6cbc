"""The operator's side of a store (docs/contract.md, "Store operations"), for a program that
settles what nobody recorded without the ``toolonce`` command: :class:`Entry` (what
``Store.get`` and ``Store.list`` read), :class:`EntryPage`, :class:`OperatorAnswer`, and the
checks of what a caller passes before the native module (``src/operator.rs``) acts.

A resolve or a removal acts only on the entry ``seen`` that was read: the store compares it in
the same atomic step as the write, as ``toolonce resolve`` and ``toolonce rm`` do, so a claim
made after the read (a retry after another operator's release) or a live owner's claim is never
settled or deleted by mistake. A write whose answer was lost raises
:class:`EffectUnknownError`: it may have applied.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, List, Optional, Tuple

from . import _native
from ._errors import InvalidArgumentsError

STATES = ("running", "unknown", "done", "failed")
MAX_PAGE = 1000
# The 100-year cap of every duration (crates/toolonce/data/limits.json, max_duration_ms).
MAX_SECONDS = 100 * 365 * 24 * 60 * 60
DAY = 86400.0


def _when(seconds: Optional[float]) -> Optional[datetime]:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=timezone.utc)


@dataclass(frozen=True)
class StoredError:
    """A failed entry's recorded error (always permanent: a transient one is not kept)."""

    message: str
    detail: Any = None


class Entry:
    """One live entry as the store reported it. The owner shows only as a digest: the token is
    its holder's secret. Times are timezone-aware UTC datetimes."""

    __slots__ = (
        "_native", "key", "state", "scope", "tool", "detail", "fingerprint", "attempts",
        "started_at", "first_started_at", "settled_at", "lease_ends_at", "expires_at",
        "owner_digest", "result", "error",
    )

    def __init__(self, native: Any) -> None:
        set_ = object.__setattr__
        set_(self, "_native", native)
        for name in ("key", "state", "scope", "tool", "detail", "fingerprint", "attempts",
                     "owner_digest", "result"):
            set_(self, name, getattr(native, name))
        for name in ("started_at", "first_started_at", "settled_at", "lease_ends_at",
                     "expires_at"):
            set_(self, name, _when(getattr(native, name)))
        error = native.error
        set_(self, "error", None if error is None else StoredError(*error))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("an Entry is what the store reported: it cannot be changed")

    def __repr__(self) -> str:
        attempt = "-" if self.attempts is None else self.attempts
        return f"<toolonce.Entry {self.key} {self.state}, attempt {attempt}>"


@dataclass(frozen=True)
class EntryPage:
    """A page of entries; ``next`` is where the next page starts (``None`` on the last). A page
    may be short with more to come. ``unreadable``: the entries of the page's stretch of the
    store that cannot be decoded (another writer, or a bug, left them in a form this version
    does not read), unless the store can tell the filters exclude them, reported rather than
    failing the page; a call of
    such an operation is answered that its outcome cannot be read, never run again, until the
    entry's retention ends."""

    entries: List[Entry]
    next: Optional[str]
    unreadable: List["Unreadable"] = field(default_factory=list)


@dataclass(frozen=True)
class Unreadable:
    """An entry a listing could not decode: its key as the store holds it, and why."""

    key: str
    reason: str


@dataclass(frozen=True)
class OperatorAnswer:
    """What a resolve or a removal did. Only ``applied`` changed anything. ``absent``: no live
    entry; ``settled``: done or failed already; ``live``: the attempt seen, its owner alive
    (its lease not over); ``changed``: another entry than the one read (taken over, or released
    or removed and claimed again). A refusal carries the entry found in the same atomic step."""

    kind: str
    entry: Optional[Entry] = None

    @property
    def applied(self) -> bool:
        return self.kind == "applied"


def _answer(pair: Tuple[str, Any]) -> OperatorAnswer:
    kind, entry = pair
    return OperatorAnswer(kind, None if entry is None else Entry(entry))


def _page(triple: Tuple[List[Any], Optional[str], List[Tuple[str, str]]]) -> EntryPage:
    entries, next_, unreadable = triple
    return EntryPage([Entry(e) for e in entries], next_, [Unreadable(k, r) for k, r in unreadable])


def _optional_entry(native: Any) -> Optional[Entry]:
    return None if native is None else Entry(native)


def _seen(seen: Any, doing: str, key: Any) -> Any:
    if not isinstance(seen, Entry):
        raise InvalidArgumentsError(
            f"{doing}: seen must be an Entry that store.get() or store.list() returned, "
            f"not {type(seen).__name__}", key if isinstance(key, str) else None)
    return seen._native


def _key(key: Any, doing: str) -> str:
    if not isinstance(key, str):
        raise InvalidArgumentsError(f"{doing}: the operation key must be a str, not {type(key).__name__}")
    return key


def _resolution(resolution: Any, doing: str, key: str) -> Tuple[str, Any]:
    """``{"done": RESULT}``, ``{"failed": MESSAGE}`` or ``"release"``, as (kind, value)."""
    if resolution == "release":
        return "release", None
    if isinstance(resolution, dict) and len(resolution) == 1:
        if "done" in resolution:
            return "done", resolution["done"]
        failed = resolution.get("failed")
        if isinstance(failed, str) and failed.strip():
            return "failed", failed
        if "failed" in resolution:
            raise InvalidArgumentsError(f"{doing}: failed needs a message saying what happened", key)
    raise InvalidArgumentsError(
        f'{doing}: resolution must be {{"done": RESULT}}, {{"failed": MESSAGE}} or "release", '
        f"not {resolution!r}", key)


def _retention(retention: Any, doing: str, key: str) -> float:
    ok = isinstance(retention, (int, float)) and not isinstance(retention, bool)
    if not ok or not 0.001 <= retention <= MAX_SECONDS:
        raise InvalidArgumentsError(f"{doing}: retention must be from 0.001 s to 100 years, not {retention!r}", key)
    return float(retention)


def _list_args(state: Any, scope: Any, tool: Any, cursor: Any, limit: Any) -> tuple:
    if state is not None and state not in STATES:
        raise InvalidArgumentsError(f"list: unknown state {state!r}: expected running, done, failed or unknown")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgumentsError(f"list: limit must be an int between 1 and {MAX_PAGE}, not {limit!r}")
    for name, value in (("scope", scope), ("tool", tool), ("cursor", cursor)):
        if value is not None and not isinstance(value, str):
            raise InvalidArgumentsError(f"list: {name} must be a str, not {type(value).__name__}")
    return state, scope, tool, cursor, limit


def resolve_args(key: Any, seen: Any, resolution: Any, force: bool, retention: Any) -> tuple:
    key = _key(key, "resolve")
    doing = f"resolve({key})"
    native_seen = _seen(seen, doing, key)
    kind, value = _resolution(resolution, doing, key)
    return key, native_seen, kind, value, bool(force), _retention(retention, doing, key)


def remove_args(key: Any, seen: Any) -> tuple:
    key = _key(key, "remove")
    return key, _seen(seen, f"remove({key})", key)


async def run_async(call: Callable[..., Any], args: tuple, wrap: Callable[[Any], Any]) -> Any:
    """Runs the native ``call(*args, deliver)`` and awaits what it delivers, on this loop. A
    cancelled await leaves the store operation to finish on the runtime (a write sent cannot be
    called back), its answer dropped."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def deliver(ok: bool, value: Any) -> None:
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting any more

    call(*args, deliver)
    return wrap(await future)


def get(store: Any, key: Any) -> Optional[Entry]:
    return _optional_entry(_native.get(store, _key(key, "get")))


async def aget(store: Any, key: Any) -> Optional[Entry]:
    return await run_async(_native.get, (store, _key(key, "get")), _optional_entry)


def list_(store: Any, state: Any, scope: Any, tool: Any, cursor: Any, limit: Any) -> EntryPage:
    return _page(_native.list(store, *_list_args(state, scope, tool, cursor, limit)))


async def alist(store: Any, state: Any, scope: Any, tool: Any, cursor: Any, limit: Any) -> EntryPage:
    return await run_async(_native.list, (store, *_list_args(state, scope, tool, cursor, limit)), _page)


def resolve(store: Any, *args: Any) -> OperatorAnswer:
    return _answer(_native.resolve(store, *resolve_args(*args)))


async def aresolve(store: Any, *args: Any) -> OperatorAnswer:
    return await run_async(_native.resolve, (store, *resolve_args(*args)), _answer)


def remove(store: Any, key: Any, seen: Any) -> OperatorAnswer:
    return _answer(_native.remove(store, *remove_args(key, seen)))


async def aremove(store: Any, key: Any, seen: Any) -> OperatorAnswer:
    return await run_async(_native.remove, (store, *remove_args(key, seen)), _answer)
