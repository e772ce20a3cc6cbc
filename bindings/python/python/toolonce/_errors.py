"""The exceptions toolonce raises, one per outcome that is not a plain result.

Every one derives from :class:`ToolonceError` and carries the operation ``key`` (when there is
one) and the ``outcome`` word of the Rust core (``in_flight``, ``conflict``, ``unknown``,
``store_unavailable``, ``replayed_failure``, ``invalid_arguments``).
"""

from __future__ import annotations

from typing import Any, Optional


class ToolonceError(Exception):
    """Base class of toolonce's exceptions."""

    outcome: str = ""

    def __init__(self, message: str, key: Optional[str] = None, detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.key = key
        self.detail = detail


class ConfigError(ToolonceError, ValueError):
    """A store URL, an option or a key field is wrong."""

    outcome = "invalid_arguments"


class InvalidArgumentsError(ToolonceError, ValueError):
    """The call's arguments cannot be keyed (not JSON, too deep, a bad scope): nothing ran."""

    outcome = "invalid_arguments"


class InFlightError(ToolonceError):
    """The same operation is running elsewhere right now; this call did not run it."""

    outcome = "in_flight"


class ConflictError(ToolonceError):
    """The key fields match an earlier operation whose other arguments differ; not run."""

    outcome = "conflict"


class UnknownOutcomeError(ToolonceError):
    """An earlier attempt was interrupted (its lease expired without a result), so whether it
    took effect is unknown; the policy said not to run it again. A person settles it with
    ``toolonce resolve``."""

    outcome = "unknown"


class StoreUnavailableError(ToolonceError):
    """The store could not be used, so the function was not run (fail closed)."""

    outcome = "store_unavailable"


class PermanentError(Exception):
    """Raise this (or a subclass) from a write function for a failure that will never succeed
    on another try (bad input, a declined card): the error is stored and replayed to every
    duplicate as :class:`ReplayedFailure`. Any other exception is transient: the operation is
    released and a duplicate runs the function again (with the same key).

    An exception class of your own can also be marked permanent with a class attribute
    ``toolonce_permanent = True``. ``detail`` (JSON) is stored with the message.
    """

    def __init__(self, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class ReplayedFailure(PermanentError, ToolonceError):
    """A duplicate of an operation that failed permanently: the stored error, replayed."""

    outcome = "replayed_failure"

    def __init__(self, message: str, key: Optional[str] = None, detail: Any = None) -> None:
        PermanentError.__init__(self, message, detail)
        self.key = key


class EffectUnknownError(ToolonceError):
    """An operator's resolve or removal whose answer the store did not give (unreachable, or
    its reply lost): it may or may not have been applied. Read the entry again with
    ``store.get(key)``."""

    outcome = "unknown"


class ToolFailed(ToolonceError):
    """The layer ended the call with an error that is not the function's own exception (for
    example, a verified result that could not be recorded)."""

    outcome = "executed"
