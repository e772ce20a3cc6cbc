"""Several OS processes on one store, and processes killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import toolonce

WORKER = str(Path(__file__).with_name("proc_worker.py"))
PROCESSES = 8
OPERATIONS = 500


def shared_url(kind: str, tmp_path: Path, request) -> str:
    if kind == "sqlite":
        return f"sqlite://{tmp_path / 'shared.db'}"
    return request.getfixturevalue("redis_server").url


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_eight_processes_running_the_same_500_operations_execute_each_once(kind, tmp_path, request, run_id):
    url = shared_url(kind, tmp_path, request)
    log = tmp_path / "executions.log"
    children = [
        subprocess.Popen(
            [sys.executable, WORKER, "many", url, run_id, str(log), str(OPERATIONS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(PROCESSES)
    ]
    answers = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        answers.append(json.loads(out))
    executions = Counter(int(line.split()[0]) for line in log.read_text().splitlines())
    assert sorted(executions) == list(range(OPERATIONS))
    assert set(executions.values()) == {1}, [op for op, n in executions.items() if n > 1]
    # Every process got the one execution's result for every operation.
    for op in range(OPERATIONS):
        assert len({json.dumps(a[str(op)], sort_keys=True) for a in answers}) == 1
    # More than one process executed some: they really ran side by side.
    assert len({a[str(op)]["by"] for a in answers for op in range(OPERATIONS)}) > 1


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_child_killed_between_claim_and_complete_is_held_then_rerun_with_its_key(kind, tmp_path, request, run_id):
    url = shared_url(kind, tmp_path, request)
    marker = tmp_path / "claimed"
    child = subprocess.Popen([sys.executable, WORKER, "hang", url, run_id, str(marker)])
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() or not marker.read_text():
            assert child.poll() is None, "the child exited before claiming"
            assert time.monotonic() < deadline, "the child never ran the function"
            time.sleep(0.02)
        key = marker.read_text()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    time.sleep(1.0)  # two leases: the claim expires, the operation is unknown

    runs = []
    with toolonce.open_store(url) as store:

        @toolonce.write(store, name="charge", lease=0.5)
        def charge_hold(order: str) -> str:
            runs.append("hold")
            return "charged"

        with pytest.raises(toolonce.UnknownOutcomeError) as err:
            charge_hold(order="o1", scope=run_id)
        assert err.value.key == key
        assert runs == []

        @toolonce.write(store, name="charge", lease=0.5, on_expired="rerun")
        def charge_rerun(order: str, ctx: toolonce.Context) -> str:
            runs.append((ctx.key, ctx.may_have_run_before))
            return "charged"

        assert charge_rerun(order="o1", scope=run_id) == "charged"
        assert charge_rerun(order="o1", scope=run_id) == "charged"
        assert charge_hold(order="o1", scope=run_id) == "charged"
    assert runs == [(key, True)]


def test_a_store_outage_raises_without_running_the_function(run_id):
    from servers import RedisServer

    server = RedisServer()
    runs = []
    try:
        with toolonce.open_store(server.url) as store:

            @toolonce.write(store)
            def send(to: str) -> str:
                runs.append(to)
                return "sent"

            assert send(to="a", scope=run_id) == "sent"
            server.proc.kill()
            server.proc.wait()
            with pytest.raises(toolonce.StoreUnavailableError) as err:
                send(to="b", scope=run_id)
            assert err.value.outcome == "store_unavailable"
            answer = send.call_detailed(to="c", scope=run_id)
            assert answer.outcome == "store_unavailable"
            assert isinstance(answer.error, toolonce.StoreUnavailableError)
    finally:
        server.stop()
    assert runs == ["a"]


def test_opening_a_store_that_is_down_raises_store_unavailable():
    from servers import free_port

    with pytest.raises(toolonce.StoreUnavailableError):
        toolonce.open_store(f"redis://127.0.0.1:{free_port()}")


def test_ctrl_c_while_the_function_runs_records_nothing_and_the_operation_becomes_unknown(tmp_path, run_id):
    url = f"sqlite://{tmp_path / 'int.db'}"
    marker = tmp_path / "claimed"
    child = subprocess.Popen(
        [sys.executable, WORKER, "interrupted", url, run_id, str(marker)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 30
    while not marker.exists() or not marker.read_text():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 3 and "interrupted" in out, (out, err)
    time.sleep(1.0)  # the abandoned claim's lease expires
    with toolonce.open_store(url) as store:

        @toolonce.write(store, name="charge", lease=0.5)
        def charge(order: str) -> str:
            raise AssertionError("held: must not run")

        with pytest.raises(toolonce.UnknownOutcomeError):
            charge(order="o1", scope=run_id)
