"""Real Redis and PostgreSQL servers for the tests and the benchmark, started on free loopback
ports in temporary directories (never the machine's own 6379/5432), as the Rust tests'
crates/toolonce-testsupport does. A missing server program is an error, never a skip."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, what: str, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout}s: {log.read_text()[-3000:]}")


def _require(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise RuntimeError(f"{program} not found: run scripts/install-test-deps")
    return path


class RedisServer:
    def __init__(self, *extra: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="toolonce-py-redis-")
        self.port = free_port()
        self.log = Path(self.dir, "redis.log")
        self.proc = subprocess.Popen(
            [_require("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.dir, *extra],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT,
        )
        _wait_port(self.port, self.proc, "redis-server", self.log)
        # Accepting connections is not yet answering commands while it loads.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.create_connection(("127.0.0.1", self.port)) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    break
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def command(self, *args: str) -> bytes:
        """One command's raw reply (as much of it as one read gives)."""
        request = f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(request.encode())
            return s.recv(65536)

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(64)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _pg_bindir() -> str:
    if shutil.which("initdb") and shutil.which("postgres"):
        return str(Path(os.path.realpath(shutil.which("postgres"))).parent)
    dirs = sorted(
        (d for d in glob.glob("/usr/lib/postgresql/*/bin")
         if os.access(f"{d}/initdb", os.X_OK) and os.access(f"{d}/postgres", os.X_OK)),
        key=lambda d: int(Path(d).parent.name) if Path(d).parent.name.isdigit() else 0,
    )
    if not dirs:
        raise RuntimeError("initdb/postgres not found: run scripts/install-test-deps")
    return dirs[-1]


class PostgresServer:
    def __init__(self) -> None:
        bindir = _pg_bindir()
        self.as_root = os.geteuid() == 0
        prefix: List[str] = []
        self.dir = tempfile.mkdtemp(prefix="toolonce-py-pg-")
        if self.as_root:
            # PostgreSQL refuses to run as root: run it as the `postgres` OS user.
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            prefix = [_require("setpriv"), f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                      "--init-groups", "--"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        data = f"{self.dir}/data"
        subprocess.run(
            prefix + [f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres",
                      "--no-sync", "-E", "UTF8", "--locale=C"],
            check=True, env=env, cwd=self.dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        self.port = free_port()
        self.log = Path(self.dir, "postgres.log")
        self.proc = subprocess.Popen(
            prefix + [f"{bindir}/postgres", "-D", data, "-p", str(self.port), "-k", self.dir,
                      "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                      "-c", "max_connections=200"],
            env=env, cwd=self.dir, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait_port(self.port, self.proc, "postgres", self.log)
        # Listening comes before accepting logins; the first store open retries briefly.
        time.sleep(0.3)

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
