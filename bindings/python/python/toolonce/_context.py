"""What a write function knows while it runs, and the scope its calls are keyed in: the
context variables behind :func:`scope`, :func:`current_key` and the ``ctx`` parameter."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Iterator

from ._errors import ConfigError

_scope: contextvars.ContextVar[str] = contextvars.ContextVar("toolonce_scope")
_context: contextvars.ContextVar["Context"] = contextvars.ContextVar("toolonce_context")


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


def current_scope() -> "str | None":
    """The scope set by the innermost ``with toolonce.scope(...)``, if any."""
    return _scope.get(None)


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

