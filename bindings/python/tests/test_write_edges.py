"""The decorator at its edges, on every store: bad input and bad options refused before anything
runs, verify probes, a write that calls another, and outcomes that cannot be converted or read
(never released: recorded saying so, or kept transient with the caller's own exception)."""

from __future__ import annotations

import asyncio
import datetime
import os
import threading
import time

import pytest

import toolonce
from counting import Counter


def test_a_call_without_a_scope_raises_and_runs_nothing(store):
    runs = Counter()

    @toolonce.write(store, name="op")
    def op(x: int) -> None:
        runs.add(x)

    with pytest.raises(toolonce.InvalidArgumentsError, match="scope"):
        op(x=1)
    assert runs.calls == []


def test_arguments_that_are_not_json_raise_before_anything_runs(store, run_id):
    runs = Counter()

    @toolonce.write(store, name="op")
    def op(x) -> None:
        runs.add(x)

    for bad in [object(), {1: "int key"}, float("nan"), 2**70]:
        with pytest.raises(toolonce.InvalidArgumentsError):
            op(x=bad, scope=run_id)
    assert runs.calls == []


def test_a_result_that_is_not_json_is_recorded_as_a_permanent_failure(store, run_id):
    runs = Counter()

    @toolonce.write(store, name="op")
    def op(x: int) -> object:
        runs.add(x)
        return object()

    with pytest.raises(TypeError, match="cannot be stored"):
        op(x=1, scope=run_id)
    with pytest.raises(toolonce.ReplayedFailure, match="cannot be stored"):
        op(x=1, scope=run_id)
    assert len(runs.calls) == 1


def test_a_pydantic_model_argument_is_keyed_by_its_fields(store, run_id):
    pydantic = pytest.importorskip("pydantic", reason="pydantic is pinned in the test requirements")

    class Email(pydantic.BaseModel):
        to: str
        subject: str

    runs = Counter()

    @toolonce.write(store, name="send_model")
    def send(email: Email) -> str:
        runs.add(email.to)
        return toolonce.current_key()

    key = send(Email(to="a", subject="s"), scope=run_id)
    assert key == toolonce.derive_key(run_id, "send_model", {"to": "a", "subject": "s"})
    assert send(Email(to="a", subject="s"), scope=run_id) == key
    assert len(runs.calls) == 1


def test_bad_options_are_refused_when_decorating(store):
    for kwargs in [
        {"lease": 0.001},
        {"retention": -1},
        {"in_flight": "wait"},
        {"on_expired": "retry"},
        {"key_fields": ["/bad~2pointer"]},
    ]:
        with pytest.raises(toolonce.ConfigError):
            toolonce.write(store, name="echo", **kwargs)(lambda x: x)
    with pytest.raises(toolonce.ConfigError, match="scope"):
        toolonce.write(store, name="echo")(lambda scope: scope)


def test_a_closed_store_refuses_calls(tmp_path, run_id):
    with toolonce.open_store(f"sqlite://{tmp_path / 'c.db'}") as store:

        @toolonce.write(store, name="op")
        def op(x: int) -> int:
            return x

        assert op(x=1, scope=run_id) == 1
    assert store.closed
    with pytest.raises(RuntimeError, match="closed"):
        op(x=1, scope=run_id)


def test_a_bad_store_url_names_the_problem_without_its_password():
    with pytest.raises(toolonce.ConfigError, match="unknown store scheme") as err:
        toolonce.open_store("mysql://user:s3cret@host/db")
    assert "s3cret" not in str(err.value)


def test_a_store_url_option_nothing_reads_is_refused_with_a_near_miss():
    with pytest.raises(toolonce.ConfigError, match="did you mean `allow_eviction`") as err:
        toolonce.open_store("redis://:s3cret@127.0.0.1:1/?allow_evicton=true")
    assert "`allow_evicton` that nothing reads" in str(err.value)
    assert "s3cret" not in str(err.value)
    with pytest.raises(toolonce.ConfigError, match="reads none"):
        toolonce.open_store("memory://?x=1")


def test_read_marks_a_read_tool_that_runs_every_time():
    @toolonce.read
    def balance(account: str) -> int:
        return 1

    assert balance.toolonce_kind == "read"
    assert balance(account="a") == 1


def test_a_verify_function_decides_what_an_unknown_operation_becomes(tmp_path, run_id):
    # An unknown operation is made by a caller abandoned mid-run (lease expires); see
    # test_processes.py for the same after a real SIGKILL.
    url = f"sqlite://{tmp_path / 'v.db'}"
    with toolonce.open_store(url) as store:
        started = threading.Event()

        @toolonce.write(store, name="ship", lease=0.2)
        async def ship_abandoned(order: str) -> str:
            started.set()
            await asyncio.sleep(30)
            return "never"

        async def abandon():
            task = asyncio.ensure_future(ship_abandoned(order="o1", scope=run_id))
            while not started.is_set():
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(abandon())
        time.sleep(0.5)
        seen = []

        def verify(ctx: toolonce.Context):
            seen.append(ctx.key)
            return toolonce.Done({"shipped": True})

        later = toolonce.open_store(url)  # the worker that finds it abandoned: its own handle

        @toolonce.write(later, name="ship", lease=0.2, on_expired=verify)
        def ship(order: str) -> dict:
            raise AssertionError("the probe said done: must not run")

        assert ship(order="o1", scope=run_id) == {"shipped": True}
        assert seen == [toolonce.derive_key(run_id, "ship", {"order": "o1"})]
        assert ship(order="o1", scope=run_id) == {"shipped": True}


def test_a_write_function_may_call_another_write_function(store, run_id):
    runs = Counter()

    @toolonce.write(store, name="inner")
    def inner(x: int) -> dict:
        runs.add(("inner", x))
        return {"inner": toolonce.current_key()}

    @toolonce.write(store, name="outer")
    def outer(x: int) -> dict:
        runs.add(("outer", x))
        got = inner(x=x)
        assert toolonce.current_key() == outer.key_for(run_id, x=x)  # restored after inner
        return {"outer": toolonce.current_key(), **got}

    with toolonce.scope(run_id):
        first = outer(x=1)
        assert outer(x=1) == first
        assert inner(x=1) == {"inner": first["inner"]}
    assert first["inner"] == inner.key_for(run_id, x=1)
    assert len(runs.calls) == 2


def test_a_verify_function_that_raises_holds_the_operation_with_its_error_as_cause(tmp_path, run_id):
    url = f"sqlite://{tmp_path / 'v2.db'}"
    with toolonce.open_store(url) as store:
        started = threading.Event()

        @toolonce.write(store, name="ship", lease=0.2)
        async def ship_abandoned(order: str) -> str:
            started.set()
            await asyncio.sleep(30)
            return "never"

        async def abandon():
            task = asyncio.ensure_future(ship_abandoned(order="o1", scope=run_id))
            while not started.is_set():
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(abandon())
        time.sleep(0.5)

        def verify(ctx):
            raise ConnectionError("the carrier's API is down")

        later = toolonce.open_store(url)  # the worker that finds it abandoned: its own handle

        @toolonce.write(later, name="ship", lease=0.2, on_expired=verify)
        def ship(order: str) -> str:
            raise AssertionError("cannot tell: must not run")

        with pytest.raises(toolonce.UnknownOutcomeError) as err:
            ship(order="o1", scope=run_id)
        assert isinstance(err.value.__cause__, ConnectionError)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_permanent_error_whose_detail_is_not_json_is_stored_without_it_and_says_so(store, run_id, kind):
    runs = Counter()
    when = datetime.datetime(2026, 1, 2, 3, 4, 5)

    def declined(card: str) -> str:
        runs.add(card)
        raise toolonce.PermanentError("card declined", detail={"at": when})

    async def declined_async(card: str) -> str:
        return declined(card)

    fn = toolonce.write(store, name="charge")(declined if kind == "sync" else declined_async)

    def call(**kwargs):
        if kind == "sync":
            return fn.call_detailed(**kwargs)
        return asyncio.run(fn.call_detailed(**kwargs))

    first = call(card="A", scope=run_id)
    assert first.outcome == "executed"
    assert type(first.error) is toolonce.PermanentError and first.error.detail == {"at": when}
    replay = call(card="A", scope=run_id)
    assert replay.outcome == "replayed_failure"
    assert isinstance(replay.error, toolonce.ReplayedFailure)
    assert replay.error.message.startswith("card declined")
    assert "detail" in replay.error.message and "not stored" in replay.error.message
    assert replay.error.detail is None
    assert len(runs.calls) == 1


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_transient_error_whose_message_is_not_utf8_is_released_and_reaches_the_caller_unchanged(store, run_id, kind):
    runs = Counter()
    message = os.fsdecode(b"caf\xe9 unreachable")  # a lone surrogate, '\udce9'
    raised = []

    def flaky(x: int) -> str:
        if runs.add(x) == 1:
            raised.append(ConnectionError(message))
            raise raised[0]
        return "ok"

    async def flaky_async(x: int) -> str:
        return flaky(x)

    fn = toolonce.write(store, name="flaky")(flaky if kind == "sync" else flaky_async)

    def call(**kwargs):
        if kind == "sync":
            return fn(**kwargs)
        return asyncio.run(fn(**kwargs))

    with pytest.raises(ConnectionError) as err:
        call(x=1, scope=run_id)
    assert err.value is raised[0] and str(err.value) == message
    assert call(x=1, scope=run_id) == "ok"  # released: the next call ran it again
    assert call(x=1, scope=run_id) == "ok"
    assert len(runs.calls) == 2


def test_arguments_the_function_cannot_see_never_change_the_key(store, run_id):
    runs = Counter()

    @toolonce.write(store, name="create_issue")
    def create_issue(title: str, labels: tuple = ("bug",), assignee=None) -> str:
        runs.add(title)
        return toolonce.current_key()

    key = create_issue(title="x", scope=run_id)
    # A default passed explicitly is what the function receives anyway: the same operation.
    assert create_issue(title="x", assignee=None, scope=run_id) == key
    assert create_issue("x", ("bug",), scope=run_id) == key
    assert len(runs.calls) == 1
    # A keyword the function does not take is refused before anything runs, not keyed.
    with pytest.raises(toolonce.InvalidArgumentsError, match="note"):
        create_issue(title="x", note="retrying", scope=run_id)
    with pytest.raises(toolonce.InvalidArgumentsError, match="ctx"):
        create_issue(title="x", ctx="mine", scope=run_id)
    assert len(runs.calls) == 1
    # A value the function can tell apart from the default is another operation.
    assert create_issue(title="x", assignee="ada", scope=run_id) != key
    assert len(runs.calls) == 2


def test_keywords_a_function_takes_with_double_star_are_part_of_the_key(store, run_id):
    runs = Counter()

    @toolonce.write(store, name="log_event")
    def log_event(kind: str, **fields) -> int:
        return runs.add((kind, fields))

    assert log_event(kind="a", scope=run_id) == 1
    assert log_event(kind="a", note="x", scope=run_id) == 2
    assert log_event(kind="a", note="x", scope=run_id) == 2
    assert log_event.key_for(run_id, kind="a", note="x") == toolonce.derive_key(
        run_id, "log_event", {"kind": "a", "note": "x"}
    )


def test_a_verified_result_that_is_not_json_holds_the_operation_saying_why(tmp_path, run_id):
    url = f"sqlite://{tmp_path / 'v3.db'}"
    with toolonce.open_store(url) as store:
        started = threading.Event()

        @toolonce.write(store, name="ship", lease=0.2)
        async def ship_abandoned(order: str) -> str:
            started.set()
            await asyncio.sleep(30)
            return "never"

        async def abandon():
            task = asyncio.ensure_future(ship_abandoned(order="o1", scope=run_id))
            while not started.is_set():
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(abandon())
        time.sleep(0.5)

        def verify(ctx):
            return toolonce.Done(object())

        # Workers that find it abandoned, a sync and an async one, each with its own handle.
        later, later_async = toolonce.open_store(url), toolonce.open_store(url)

        @toolonce.write(later, name="ship", lease=0.2, on_expired=verify)
        def ship(order: str) -> str:
            raise AssertionError("held: must not run")

        @toolonce.write(later_async, name="ship", lease=0.2, on_expired=verify)
        async def ship_async(order: str) -> str:
            raise AssertionError("held: must not run")

        with pytest.raises(toolonce.UnknownOutcomeError) as err:
            ship(order="o1", scope=run_id)
        assert isinstance(err.value.__cause__, TypeError)
        with pytest.raises(toolonce.UnknownOutcomeError) as err:
            asyncio.run(ship_async(order="o1", scope=run_id))
        assert isinstance(err.value.__cause__, TypeError)
