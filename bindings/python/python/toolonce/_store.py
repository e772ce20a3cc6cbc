"""Stores: :func:`open_store` and the :class:`Store` handle it returns, shared by every tool
decorated with it."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from . import _native


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
