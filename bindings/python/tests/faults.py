"""Real faults between the native store and a real Redis server: a loopback TCP proxy (asyncio,
on a thread of its own) that forwards a store's connections to the server and, when told,
loses what the scenarios' ``fault`` steps name, on the wire:

- ``lose_next_claim_reply``: the next claim that the server applied (the native ``SET … NX``
  answered nil, or the claim script answered 1 or 2: won or taken over) has its reply dropped
  and the connection cut, so the store sees its claim fail after it took effect;
- ``lose_renewals``: every later renewal (the renew script, or ``SET … IFEQ``) is never sent:
  the connection is cut instead, so the lease lapses while the tool runs;
- ``lose_next_resolve_reply``: the next resolve script's reply is dropped after the server ran
  it (an operator's write whose answer is lost).

Commands and replies are framed as RESP. Scripts are told apart by their text, which the store
sends in ``SCRIPT LOAD`` when it connects (each ends with its body, ``claim.lua`` and so on,
after the helpers it uses), so the proxy knows each one's SHA-1 as the server does.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

SCRIPTS = Path(__file__).resolve().parents[3] / "crates/toolonce/src/store/redis"
FAULTS = {"lose_next_claim_reply", "lose_renewals", "lose_next_resolve_reply"}


class Incomplete(Exception):
    """More bytes are needed for one whole RESP value."""


def parse(buf: bytes, at: int = 0) -> Tuple[object, int]:
    """One RESP2/RESP3 value from ``buf[at:]``: (value, end). Bulk strings are bytes, nil is
    None, an error is ("error", text), aggregates are lists."""
    end = buf.find(b"\r\n", at)
    if end < 0:
        raise Incomplete
    kind, line, after = buf[at:at + 1], buf[at + 1:end], end + 2
    if kind in b"+":
        return line, after
    if kind in (b"-", b"!"):
        return ("error", line), after
    if kind in (b":", b",", b"(", b"#"):
        return int(line) if kind == b":" else line, after
    if kind == b"_":
        return None, after
    if kind in (b"$", b"="):
        n = int(line)
        if n < 0:
            return None, after
        if len(buf) < after + n + 2:
            raise Incomplete
        return buf[after:after + n], after + n + 2
    if kind in (b"*", b"~", b">", b"%", b"|"):
        n = int(line)
        if n < 0:
            return None, after
        count = n * 2 if kind in (b"%", b"|") else n
        items: List[object] = []
        for _ in range(count):
            item, after = parse(buf, after)
            items.append(item)
        if kind == b"|":  # attributes precede the value they describe
            return parse(buf, after)
        return items, after
    raise ValueError(f"not RESP: {buf[at:at + 40]!r}")


def _body(name: str) -> bytes:
    return (SCRIPTS / f"{name}.lua").read_bytes()


class RedisFaults:
    """A proxy to ``127.0.0.1:upstream``; ``url`` is the store URL through it."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.faults: Set[str] = set()
        self.fired: List[str] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._shas: Dict[str, str] = {}  # SHA-1 (hex) -> script name
        self._bodies = {name: _body(name) for name in ("claim", "renew", "resolve")}
        self._loop = asyncio.new_event_loop()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._server: Optional[asyncio.base_events.Server] = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(10)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def add(self, fault: str) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault}")
        with self._lock:
            self.faults.add(fault)

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = await asyncio.start_server(self._connection, sock=self._sock)

        self._loop.run_until_complete(start())
        ready.set()
        self._loop.run_forever()

    def _kind(self, command: List[bytes]) -> str:
        """What the store is doing with ``command``: claim, renew, resolve, or other."""
        name = command[0].upper() if command else b""
        upper = [a.upper() for a in command[3:]]
        if name == b"SET" and b"NX" in upper:
            return "claim"
        if name == b"SET" and b"IFEQ" in upper:
            return "renew"
        if name == b"SCRIPT" and len(command) > 2 and command[1].upper() == b"LOAD":
            for script, body in self._bodies.items():
                if command[2].endswith(body):
                    self._shas[hashlib.sha1(command[2]).hexdigest()] = script
        if name == b"EVALSHA" and len(command) > 1:
            return self._shas.get(command[1].decode().lower(), "other")
        if name == b"EVAL" and len(command) > 1:
            for script, body in self._bodies.items():
                if command[1].endswith(body):
                    return script
        return "other"

    def _take(self, fault: str) -> bool:
        with self._lock:
            if fault in self.faults:
                if fault.startswith("lose_next"):
                    self.faults.discard(fault)
                self.fired.append(fault)
                return True
            return False

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.close()
            return
        pending: asyncio.Queue = asyncio.Queue()
        cut = asyncio.Event()
        tasks = [
            asyncio.ensure_future(self._requests(reader, up_writer, pending, cut)),
            asyncio.ensure_future(self._replies(up_reader, writer, pending, cut)),
        ]
        await cut.wait()
        for task in tasks:
            task.cancel()
        for w in (writer, up_writer):
            w.transport.abort()

    async def _requests(self, reader, up_writer, pending: asyncio.Queue, cut: asyncio.Event) -> None:
        async for command, frame in _frames(reader, up_writer):
            kind = self._kind(command if isinstance(command, list) else [])
            if kind == "renew" and self._take("lose_renewals"):
                # Never sent: the connection is cut in its place.
                break
            await pending.put(kind)
            up_writer.write(frame)
        cut.set()

    async def _replies(self, up_reader, writer, pending: asyncio.Queue, cut: asyncio.Event) -> None:
        async for reply, frame in _frames(up_reader, writer):
            kind = pending.get_nowait() if not pending.empty() else "other"
            if self._loses(kind, reply):
                break
            writer.write(frame)
        cut.set()

    def _loses(self, kind: str, reply: object) -> bool:
        """Whether the reply to a command of ``kind`` is to be lost (after the server applied it)."""
        if kind == "claim":
            applied = reply is None or reply in (1, 2)
            return applied and self._take("lose_next_claim_reply")
        if kind == "resolve":
            return self._take("lose_next_resolve_reply")
        return False


async def _frames(reader: asyncio.StreamReader, onward: asyncio.StreamWriter):
    """Each whole RESP frame ``reader`` sends, parsed and as its bytes, until it closes; what
    was written ``onward`` is drained before more is read, as a proxy must."""
    buf = b""
    while True:
        data = await reader.read(65536)
        if not data:
            return
        buf += data
        while buf:
            try:
                value, end = parse(buf)
            except Incomplete:
                break
            frame, buf = buf[:end], buf[end:]
            yield value, frame
        await onward.drain()
