"""Several OS processes on one store, and processes killed mid-run."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
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
    gate = tmp_path / "gate"
    gate.mkdir()
    children = [
        subprocess.Popen(
            [sys.executable, WORKER, "many", url, run_id, str(log), str(OPERATIONS), str(gate), str(i),
             str(PROCESSES)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(PROCESSES)
    ]
    # A barrier: every process has started Python, opened the store and is ready before any
    # runs an operation, so they race from one moment (a slow start under load cannot leave
    # all the work to the first).
    deadline = time.monotonic() + 120
    while len(list(gate.glob("ready.*"))) < PROCESSES:
        for child in children:
            assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the workers never got ready"
        time.sleep(0.01)
    (gate / "go").touch()
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
    # Every process got every operation's answer.
    assert all(len(a) == OPERATIONS for a in answers)


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

        # Another worker, configured to rerun: a store of its own, as in its own process (one
        # store holds one tool per name).
        with toolonce.open_store(url) as other:

            @toolonce.write(other, name="charge", lease=0.5, on_expired="rerun")
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

            @toolonce.write(store, name="send")
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


def interrupt_worker(url: str, scope: str, marker: Path):
    """Starts the `interrupted` worker, sends SIGINT once its tool runs, and returns
    (exit code, stdout, stderr), or None if it did not exit within 30 s (then it is killed)."""
    child = subprocess.Popen(
        [sys.executable, WORKER, "interrupted", url, scope, str(marker)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 30
    while not marker.exists() or not marker.read_text():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    child.send_signal(signal.SIGINT)
    try:
        out, err = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        print(f"the Ctrl-C'd worker {child.pid} hangs:\n{thread_report(child.pid)}", file=sys.stderr)
        child.kill()
        child.communicate()
        return None
    return child.returncode, out, err


def thread_report(pid: int) -> str:
    """What each thread of a hung process is doing: its signal masks, and its stack when gdb is
    there (to find why a hang happens, the next time it does)."""
    lines = []
    for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
        status = (task / "status").read_text().splitlines()
        wanted = [l for l in status if l.startswith(("Name", "State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))]
        lines.append(f"{task.name}: " + "  ".join(" ".join(l.split()) for l in wanted))
    if shutil.which("gdb"):
        bt = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                            capture_output=True, text=True, timeout=60)
        lines.append(bt.stdout[-20000:])
    report = "\n".join(lines)
    where = os.environ.get("TOOLONCE_HANG_DIR")
    if where:
        Path(where, f"hang-{pid}.txt").write_text(report)
    return report


def test_ctrl_c_while_the_function_runs_records_nothing_and_the_operation_becomes_unknown(tmp_path, run_id):
    # A Ctrl-C'd worker sometimes did not exit (about 1 run in 20 in full-suite runs, never
    # alone). One cause is found: a suite started with SIGINT ignored (a background job of a
    # shell without job control) passed that on to the worker, which then had no handler; the
    # worker now restores Python's (see proc_worker.py). Whether it was the only cause is not
    # known, so a hung worker still gets one fresh attempt, and its threads' signal masks and
    # stacks are printed.
    for attempt in range(2):
        url = f"sqlite://{tmp_path / f'int-{attempt}.db'}"
        scope = f"{run_id}-{attempt}"
        outcome = interrupt_worker(url, scope, tmp_path / f"claimed-{attempt}")
        if outcome is not None:
            break
    assert outcome is not None, "the Ctrl-C'd worker did not exit within 30 s, twice"
    code, out, err = outcome
    assert code == 3 and "interrupted" in out, (out, err)
    time.sleep(1.0)  # the abandoned claim's lease expires
    with toolonce.open_store(url) as store:

        @toolonce.write(store, name="charge", lease=0.5)
        def charge(order: str) -> str:
            raise AssertionError("held: must not run")

        with pytest.raises(toolonce.UnknownOutcomeError):
            charge(order="o1", scope=scope)


def blocked_signals(task: Path) -> set:
    """The signals a thread (a /proc/PID/task/TID directory) blocks."""
    for line in (task / "status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            mask = int(line.split()[1], 16)
            return {s for s in signal.Signals if mask >> (s.value - 1) & 1}
    raise AssertionError(f"no SigBlk in {task}/status")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread signal masks in /proc")
def test_no_toolonce_thread_can_take_a_ctrl_c_meant_for_the_sleeping_caller(tmp_path, run_id):
    # A process-directed SIGINT goes to any thread that does not block it. Taken by a runtime
    # worker, Python's C handler only sets a flag there, and the main thread, asleep in a sync
    # tool, sleeps on: Ctrl-C did not end the process (a hang seen under load). Every thread
    # toolonce starts (runtime workers, the SQLite connection thread, the thread that enters
    # Python for async callers) must block the asynchronous signals; the caller's must not.
    import asyncio

    with toolonce.open_store(f"sqlite://{tmp_path / 'signals.db'}") as store:

        @toolonce.write(store, name="sync_op")
        def sync_op(x: int) -> int:
            return x

        @toolonce.write(store, name="async_op")
        async def async_op(x: int) -> int:
            return x

        assert sync_op(x=1, scope=run_id) == 1
        assert asyncio.run(async_op(x=1, scope=run_id)) == 1
        # An async call on a loop that cannot watch a descriptor starts the Python thread.
        loop = NoReaderLoop()
        try:
            assert loop.run_until_complete(async_op(x=2, scope=run_id)) == 2
        finally:
            loop.close()
        tasks = {t: (t / "comm").read_text().strip() for t in Path("/proc/self/task").iterdir()}
        ours = {t: name for t, name in tasks.items() if name.startswith("toolonce")}
        assert {"toolonce", "toolonce-sqlite", "toolonce-python"} <= set(ours.values()), ours
        wanted = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                  signal.SIGALRM, signal.SIGCHLD}
        for task, name in ours.items():
            missing = wanted - blocked_signals(task)
            assert not missing, f"thread {task.name} ({name}) can take {sorted(missing)}"
        # The caller's thread gets its signals, as before the call.
        assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


class NoReaderLoop(asyncio.SelectorEventLoop):
    """A loop without add_reader, as Windows' proactor loop: async calls take the hand-off."""

    def add_reader(self, *args, **kwargs):
        raise NotImplementedError


def start_worker(*args: str) -> subprocess.Popen:
    """A worker in a process group of its own, so that `stop` also ends a child it forked."""
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def stop(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_for_marker(child: subprocess.Popen, marker: Path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while not marker.exists() or not marker.read_text():
        if child.poll() is not None:
            out, err = child.communicate()
            pytest.fail(f"the worker exited with {child.returncode} before its tool ran:\n{out}\n{err}")
        if time.monotonic() > deadline:
            stop(child)
            out, err = child.communicate()
            pytest.fail(f"the worker's tool never ran:\n{out}\n{err}")
        time.sleep(0.02)
    return marker.read_text()


def a_duplicate_finds_it_running(url: str, run_id: str, name: str, after: float) -> str:
    """A duplicate's outcome `after` seconds (several 0.6 s leases) into the run: `in_flight`
    while the heartbeat renews, `unknown` once the lease expired."""
    time.sleep(after)
    with toolonce.open_store(url) as store:

        @toolonce.write(store, name=name, lease=0.6)
        def duplicate(x: int) -> str:
            raise AssertionError("a duplicate of a running operation must not run")

        return duplicate.call_detailed(x=1, scope=run_id).outcome


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_forked_child_renews_its_lease_while_its_tool_runs(kind, tmp_path, request, run_id):
    url = shared_url(kind, tmp_path, request)
    marker = tmp_path / "claimed"
    child = start_worker("forked", url, run_id, str(marker))
    try:
        wait_for_marker(child, marker)
        assert a_duplicate_finds_it_running(url, run_id, "slow", 1.8) == "in_flight"
        out, err = child.communicate(timeout=60)
    finally:
        stop(child)
        if child.returncode is None:
            child.communicate()
    assert child.returncode == 0 and "child done" in out, (out, err)


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_the_heartbeat_renews_while_a_sync_tool_holds_the_gil_and_async_callers_wait(kind, tmp_path, request, run_id):
    url = shared_url(kind, tmp_path, request)
    marker = tmp_path / "claimed"
    child = start_worker("gil", url, run_id, str(marker))
    try:
        wait_for_marker(child, marker)
        assert a_duplicate_finds_it_running(url, run_id, "busy", 2.6) == "in_flight"
        out, err = child.communicate(timeout=60)
    finally:
        stop(child)
        if child.returncode is None:
            child.communicate()
    assert child.returncode == 0 and "busy done" in out, (out, err)


def test_a_store_opened_before_a_fork_refuses_calls_in_the_child_saying_what_to_do(tmp_path, run_id):
    with toolonce.open_store(f"sqlite://{tmp_path / 'forked.db'}") as store:

        @toolonce.write(store, name="op")
        def op(x: int) -> int:
            return x

        assert op(x=1, scope=run_id) == 1
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, and leave without running the parent's exit hooks
            try:
                op(x=2, scope=run_id)
                said = "ran"
            except toolonce.ConfigError as e:
                said = f"refused: {e}"
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                said = f"other: {e!r}"
            os.write(write_end, said.encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            said = pipe.read()
        os.waitpid(pid, 0)
        assert said.startswith("refused:") and "fork" in said and "open_store" in said, said
        assert op(x=2, scope=run_id) == 2  # the parent's store still works
