"""Fixtures: one real Redis and one real PostgreSQL per test session, a fresh store per test."""

from __future__ import annotations

import itertools
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import toolonce  # noqa: E402
from downstream import Downstream  # noqa: E402
from servers import PostgresServer, RedisServer  # noqa: E402

_scopes = itertools.count()


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    server = PostgresServer()
    yield server
    server.stop()


def open_with_retry(url: str) -> toolonce.Store:
    deadline = time.monotonic() + 15
    while True:
        try:
            return toolonce.open_store(url)
        except toolonce.StoreUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def store_url(request, tmp_path):
    kind = request.param
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite://{tmp_path / 'toolonce.db'}"
    if kind == "redis":
        return request.getfixturevalue("redis_server").url
    return request.getfixturevalue("postgres_server").url


@pytest.fixture
def store(store_url):
    with open_with_retry(store_url) as store:
        yield store


@pytest.fixture
def run_id(request):
    """A scope of its own for each test, so tests sharing a server never share keys."""
    return f"{request.node.name}-{os.getpid()}-{time.time_ns()}-{next(_scopes)}"


@pytest.fixture
def downstream():
    """A real HTTP service on loopback that records each request's Idempotency-Key."""
    service = Downstream()
    yield service
    service.close()
