"""Type stubs of the toolonce package (see __init__.py for the documentation)."""

import contextlib
from typing import (
    Any,
    Awaitable,
    Callable,
    Iterator,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from ._errors import (
    ConfigError as ConfigError,
    ConflictError as ConflictError,
    InFlightError as InFlightError,
    InvalidArgumentsError as InvalidArgumentsError,
    PermanentError as PermanentError,
    ReplayedFailure as ReplayedFailure,
    StoreUnavailableError as StoreUnavailableError,
    ToolFailed as ToolFailed,
    ToolonceError as ToolonceError,
    UnknownOutcomeError as UnknownOutcomeError,
)

F = TypeVar("F", bound=Callable[..., Any])

class Store:
    @property
    def url(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Store": ...
    def __exit__(self, *exc: Any) -> None: ...

def open_store(url: str, **options: Any) -> Store: ...

class Wait:
    seconds: float
    def __init__(self, seconds: float) -> None: ...

class Context:
    key: str
    may_have_run_before: bool
    def __init__(self, key: str, may_have_run_before: bool) -> None: ...
    @property
    def idempotency_header(self) -> Tuple[str, str]: ...

class Done:
    result: Any
    def __init__(self, result: Any = None) -> None: ...

class _Verdict: ...

NOT_DONE: _Verdict
CANNOT_TELL: _Verdict

Verdict = Union[Done, _Verdict]

class Answer:
    outcome: str
    key: Optional[str]
    value: Any
    error: Optional[BaseException]
    notice: Optional[str]
    def __init__(
        self,
        outcome: str,
        key: Optional[str],
        value: Any = None,
        error: Optional[BaseException] = None,
        notice: Optional[str] = None,
    ) -> None: ...
    @property
    def ok(self) -> bool: ...
    def unwrap(self) -> Any: ...

def scope(run_id: str) -> contextlib.AbstractContextManager[str]: ...
def current_key() -> str: ...
def current_context() -> Context: ...
def derive_key(scope: str, tool: str, args: Any, key_fields: Optional[Sequence[str]] = None) -> str: ...
def read(fn: F) -> F: ...
def write(
    store: Store,
    name: Optional[str] = None,
    *,
    lease: float = 60,
    retention: float = 86400,
    in_flight: Union[str, Wait] = "reject",
    key_fields: Optional[Sequence[str]] = None,
    on_expired: Union[str, Callable[[Context], Union[Verdict, Awaitable[Verdict]]]] = "hold",
) -> Callable[[F], F]: ...
