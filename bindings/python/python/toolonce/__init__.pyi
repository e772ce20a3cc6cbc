"""Type stubs of the toolonce package (see __init__.py for the documentation)."""

import contextlib
from datetime import datetime
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterator,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from ._errors import (
    ConfigError as ConfigError,
    ConflictError as ConflictError,
    EffectUnknownError as EffectUnknownError,
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

EntryState = Literal["running", "unknown", "done", "failed"]
Resolution = Union[Dict[str, Any], Literal["release"]]
AnswerKind = Literal["applied", "absent", "settled", "live", "changed"]

class StoredError:
    message: str
    detail: Any
    def __init__(self, message: str, detail: Any = None) -> None: ...

class Entry:
    key: str
    state: EntryState
    scope: Optional[str]
    tool: Optional[str]
    detail: Optional[str]
    fingerprint: Optional[str]
    attempts: Optional[int]
    started_at: datetime
    first_started_at: Optional[datetime]
    settled_at: Optional[datetime]
    lease_ends_at: Optional[datetime]
    expires_at: Optional[datetime]
    owner_digest: Optional[str]
    result: Any
    error: Optional[StoredError]

class Unreadable:
    key: str
    reason: str
    def __init__(self, key: str, reason: str) -> None: ...

class EntryPage:
    entries: List[Entry]
    next: Optional[str]
    unreadable: List[Unreadable]
    def __init__(
        self, entries: List[Entry], next: Optional[str], unreadable: List[Unreadable] = ...
    ) -> None: ...

class OperatorAnswer:
    kind: AnswerKind
    entry: Optional[Entry]
    def __init__(self, kind: AnswerKind, entry: Optional[Entry] = None) -> None: ...
    @property
    def applied(self) -> bool: ...

class Store:
    @property
    def url(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def get(self, key: str) -> Optional[Entry]: ...
    async def aget(self, key: str) -> Optional[Entry]: ...
    def list(
        self,
        *,
        state: Optional[EntryState] = None,
        scope: Optional[str] = None,
        tool: Optional[str] = None,
        limit: int = 100,
        cursor: Optional[str] = None,
    ) -> EntryPage: ...
    async def alist(
        self,
        *,
        state: Optional[EntryState] = None,
        scope: Optional[str] = None,
        tool: Optional[str] = None,
        limit: int = 100,
        cursor: Optional[str] = None,
    ) -> EntryPage: ...
    def resolve(
        self, key: str, seen: Entry, resolution: Resolution, *, force: bool = False, retention: float = 86400
    ) -> OperatorAnswer: ...
    async def aresolve(
        self, key: str, seen: Entry, resolution: Resolution, *, force: bool = False, retention: float = 86400
    ) -> OperatorAnswer: ...
    def remove(self, key: str, seen: Entry) -> OperatorAnswer: ...
    async def aremove(self, key: str, seen: Entry) -> OperatorAnswer: ...
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
    note: Optional[str]
    def __init__(
        self,
        outcome: str,
        key: Optional[str],
        value: Any = None,
        error: Optional[BaseException] = None,
        notice: Optional[str] = None,
        note: Optional[str] = None,
    ) -> None: ...
    @property
    def ok(self) -> bool: ...
    def unwrap(self) -> Any: ...

def scope(run_id: str) -> contextlib.AbstractContextManager[str]: ...
def current_key() -> str: ...
def current_context() -> Context: ...
def derive_key(
    scope: str,
    tool: str,
    args: Any,
    key_fields: Optional[Sequence[str]] = None,
    repeat_argument: Optional[str] = None,
) -> str: ...
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
    repeat_argument: Optional[str] = ...,
) -> Callable[[F], F]: ...
