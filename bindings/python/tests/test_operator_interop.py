"""The operator API and the Rust ``toolonce`` command on one store: Python settles an entry
that ``toolonce exec`` left unknown, and the command reads and replays what Python resolved;
the command resolves an entry a Python caller left unknown, and Python reads it. The binary is
``$TOOLONCE_BIN`` or the workspace's ``target/debug/toolonce`` (``cargo build -p toolonce-cli
--all-features``); a missing one is an error, never a skip. Also: an operator's write whose
reply is lost on the wire raises ``EffectUnknownError``, never a silent answer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import toolonce
from faults import RedisFaults
# The tools fixture resets test_operator's tools before each test here too.
from test_operator import tools, unknown_entry  # noqa: F401

REPO = Path(__file__).resolve().parents[3]
LEASE = 0.3


def toolonce_bin() -> str:
    path = os.environ.get("TOOLONCE_BIN") or str(REPO / "target/debug/toolonce")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} not found: build it with `cargo build -p toolonce-cli --all-features`")
    return path


def cli(subcommand: str, *args: str, url: str) -> subprocess.CompletedProcess:
    return subprocess.run([toolonce_bin(), subcommand, "--store", url, *args],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def shared_url(request, tmp_path):
    """A store the command and Python both open (not memory://, which is one process's)."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'shared.db'}"
    return request.getfixturevalue(f"{request.param}_server").url


def _wait_for(store: toolonce.Store, key: str, state: str, timeout: float = 20) -> toolonce.Entry:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = store.get(key)
        if entry is not None and entry.state == state:
            return entry
        time.sleep(0.05)
    raise AssertionError(f"{key} never became {state}: {store.get(key)}")


def test_python_settles_what_the_command_left_unknown_and_the_command_replays_it(shared_url, run_id):
    command = [toolonce_bin(), "exec", "--store", shared_url, "--scope", run_id, "--name", "deploy",
               "--lease", str(LEASE), "--", "sleep", "30"]
    # Killed mid-run, with its command: nobody recorded how it ended.
    worker = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    key = toolonce.derive_key(run_id, "deploy", {})
    with toolonce.open_store(shared_url) as store:
        try:
            _wait_for(store, key, "running")
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
        seen = _wait_for(store, key, "unknown")
        assert (seen.scope, seen.tool, seen.attempts) == (run_id, "deploy", 1)
        record = {"exit_code": 0, "stdout": "deployed by hand\n", "stderr": ""}
        assert store.resolve(key, seen, {"done": record}).kind == "applied"
    shown = cli("show", "--json", key, url=shared_url)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert (doc["state"], doc["result"], doc["attempts"]) == ("done", record, 1)
    again = cli("exec", "--scope", run_id, "--name", "deploy", "--", "echo", "ran again", url=shared_url)
    assert (again.returncode, again.stdout) == (0, "deployed by hand\n"), again.stderr


def test_the_command_settles_what_python_left_unknown_and_python_reads_it(shared_url, run_id):
    with toolonce.open_store(shared_url) as store:
        key = unknown_entry(store, run_id)
        assert store.get(key).state == "unknown"
        resolved = cli("resolve", key, "--failed", "refunded by hand", url=shared_url)
        assert resolved.returncode == 0, resolved.stderr
        entry = store.get(key)
        assert entry.state == "failed" and entry.error == toolonce.StoredError("refunded by hand")
        # And what the command removes is gone for Python too.
        assert cli("rm", key, url=shared_url).returncode == 0
        assert store.get(key) is None


def test_a_resolve_whose_reply_is_lost_raises_effect_unknown_and_it_did_apply(redis_server, run_id):
    proxy = RedisFaults(redis_server.port)
    try:
        with toolonce.open_store(proxy.url) as store:
            key = unknown_entry(store, run_id)
            seen = store.get(key)
            proxy.add("lose_next_resolve_reply")
            with pytest.raises(toolonce.EffectUnknownError, match="may or may not have been applied") as caught:
                store.resolve(key, seen, {"done": {"by": "operator"}})
            assert caught.value.key == key and caught.value.outcome == "unknown"
            assert proxy.fired == ["lose_next_resolve_reply"]
            # It had applied: read again, the entry shows it, and a second try is refused.
            assert store.get(key).result == {"by": "operator"}
            assert store.resolve(key, seen, {"done": {"by": "operator"}}).kind == "settled"
    finally:
        proxy.close()

