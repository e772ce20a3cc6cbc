"""Stores: :func:`open_store` and the :class:`Store` handle it returns, shared by every tool
decorated with it, with the operator's methods (get, list, resolve, remove; ``_operator.py``)."""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import urlencode

from . import _native, _operator
from ._operator import DAY, Entry, EntryPage, OperatorAnswer


class Store:
    """A store opened by :func:`open_store`; a context manager that closes it on exit."""

    __slots__ = ("_native", "_tools")

    def __init__(self, native: Any) -> None:
        self._native = native
        # Tool name -> the callable decorated with it, so that one name is one tool (_names.py).
        self._tools: dict = {}

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

    def get(self, key: str) -> Optional[Entry]:
        """The live entry of the operation ``key`` (``idem:`` and 32 hex digits), or ``None``."""
        return _operator.get(self._native, key)

    async def aget(self, key: str) -> Optional[Entry]:
        return await _operator.aget(self._native, key)

    def list(self, *, state: Optional[str] = None, scope: Optional[str] = None,
             tool: Optional[str] = None, limit: int = 100, cursor: Optional[str] = None) -> EntryPage:
        """A page of at most ``limit`` (1 to 1000) live entries, only those in ``state``
        (``running``, ``unknown``, ``done``, ``failed``) and recorded with ``scope`` and
        ``tool`` when given, after ``cursor`` (the ``next`` of the previous page)."""
        return _operator.list_(self._native, state, scope, tool, cursor, limit)

    async def alist(self, *, state: Optional[str] = None, scope: Optional[str] = None,
                    tool: Optional[str] = None, limit: int = 100,
                    cursor: Optional[str] = None) -> EntryPage:
        return await _operator.alist(self._native, state, scope, tool, cursor, limit)

    def resolve(self, key: str, seen: Entry, resolution: Any, *, force: bool = False,
                retention: float = DAY) -> OperatorAnswer:
        """Settles the entry ``seen`` (read by :meth:`get` or :meth:`list`) of ``key``, an
        ``unknown`` one (or a running one with ``force``: its owner is stuck but renewing), and
        no other: ``{"done": RESULT}`` (it took effect: duplicates replay RESULT), ``{"failed":
        MESSAGE}`` (duplicates replay the failure) or ``"release"`` (it did not: the next call
        runs it). ``retention``: seconds the outcome is kept. Refused with nothing written when
        it is settled, live or another attempt (:class:`OperatorAnswer`); raises
        :class:`EffectUnknownError` when the store failed before it answered."""
        return _operator.resolve(self._native, key, seen, resolution, force, retention)

    async def aresolve(self, key: str, seen: Entry, resolution: Any, *, force: bool = False,
                       retention: float = DAY) -> OperatorAnswer:
        return await _operator.aresolve(self._native, key, seen, resolution, force, retention)

    def remove(self, key: str, seen: Entry) -> OperatorAnswer:
        """Deletes the settled entry ``seen`` (done or failed) of ``key``, and no other: one
        deleted and claimed again since it was read is ``changed``, left alone. An unsettled
        entry is deleted by ``resolve(key, seen, "release")`` instead."""
        return _operator.remove(self._native, key, seen)

    async def aremove(self, key: str, seen: Entry) -> OperatorAnswer:
        return await _operator.aremove(self._native, key, seen)

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
