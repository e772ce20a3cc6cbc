"""The values a caller and a verify function exchange with toolonce: :class:`Answer` (what a
call ended with), the verdicts :class:`Done`, :data:`NOT_DONE` and :data:`CANNOT_TELL`, and
:class:`Wait`; and the mapping of the core's outcome words to exceptions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ._errors import (
    ConflictError,
    InFlightError,
    InvalidArgumentsError,
    ReplayedFailure,
    StoreUnavailableError,
    ToolFailed,
    UnknownOutcomeError,
)


@dataclass(frozen=True)
class Wait:
    """``in_flight=Wait(seconds)``: a duplicate that finds its operation running waits up to
    ``seconds`` for it to settle, then answers as a duplicate of it."""

    seconds: float


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
    and the error (the exception a plain call would raise, not raised). ``notice`` is set when
    the tool ran but its outcome was not simply recorded: it may not survive a failover of the
    store (fewer replicas acknowledged it than asked), it could not be recorded, or the claim
    was lost while the tool ran; it is written for a person, and logged too. ``note`` is set
    on a replay (``replayed``, ``replayed_failure``): what the model should read beside the
    recorded result or error, which stay as they were — that the identical call took effect
    earlier in this scope, when, and how to perform it again on purpose (the core's text)."""

    outcome: str
    key: Optional[str]
    value: Any = None
    error: Optional[BaseException] = None
    notice: Optional[str] = None
    note: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> Any:
        """The value, or raises the error."""
        if self.error is not None:
            raise self.error
        return self.value


_ERRORS = {
    "replayed_failure": ReplayedFailure,
    "in_flight": InFlightError,
    "conflict": ConflictError,
    "unknown": UnknownOutcomeError,
    "store_unavailable": StoreUnavailableError,
    "invalid_arguments": InvalidArgumentsError,
}


def error_of(outcome: str, key: Optional[str], payload: tuple) -> BaseException:
    """The exception for a call the layer ended with an error (``payload`` is its message,
    class and detail)."""
    message, _class, detail = payload
    return _ERRORS.get(outcome, ToolFailed)(message, key, detail)
