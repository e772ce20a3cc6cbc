"""A thread-safe record of a tool's calls, for the tests that count executions."""

from __future__ import annotations

import threading


class Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list = []

    def add(self, item) -> int:
        with self.lock:
            self.calls.append(item)
            return len(self.calls)
