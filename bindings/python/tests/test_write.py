"""The decorator's promises on every store: one execution per operation, replays, outcomes as
exceptions, keys shared with the other bindings."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import toolonce

KEYS_JSON = Path(__file__).resolve().parents[3] / "crates/toolonce/tests/data/keys.json"


class Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list = []

    def add(self, item) -> int:
        with self.lock:
            self.calls.append(item)
            return len(self.calls)


def test_a_sequential_duplicate_replays_the_stored_result_without_running(store, run_id):
    runs = Counter()

    @toolonce.write(store)
    def send_email(to: str, subject: str) -> dict:
        return {"n": runs.add(to), "key": toolonce.current_key()}

    first = send_email(to="ada@example.com", subject="Hi", scope=run_id)
    second = send_email(to="ada@example.com", subject="Hi", scope=run_id)
    assert first == second
    assert len(runs.calls) == 1
    assert first["key"].startswith("idem:") and len(first["key"]) == 37
    detailed = send_email.call_detailed(to="ada@example.com", subject="Hi", scope=run_id)
    assert (detailed.outcome, detailed.value) == ("replayed", first)


def test_concurrent_duplicates_from_threads_run_the_function_once(store, run_id):
    runs = Counter()

    @toolonce.write(store, in_flight=toolonce.Wait(30))
    def charge(card: str, cents: int) -> dict:
        time.sleep(0.2)
        return {"charge": runs.add(card)}

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: charge(card="A", cents=100, scope=run_id), range(16)))
    assert len(runs.calls) == 1
    assert all(r == {"charge": 1} for r in results)


def test_concurrent_duplicates_from_asyncio_tasks_run_the_function_once(store, run_id):
    runs = Counter()

    @toolonce.write(store, in_flight=toolonce.Wait(30))
    async def charge(card: str, cents: int) -> dict:
        await asyncio.sleep(0.2)
        return {"charge": runs.add(card)}

    async def main():
        with toolonce.scope(run_id):
            return await asyncio.gather(*(charge(card="A", cents=100) for _ in range(16)))

    results = asyncio.run(main())
    assert len(runs.calls) == 1
    assert all(r == {"charge": 1} for r in results)


def test_a_duplicate_while_the_first_runs_is_rejected_as_in_flight(store, run_id):
    started, release = threading.Event(), threading.Event()

    @toolonce.write(store)
    def slow(x: int) -> int:
        started.set()
        release.wait(10)
        return x

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(slow, x=1, scope=run_id)
        assert started.wait(10)
        with pytest.raises(toolonce.InFlightError) as err:
            slow(x=1, scope=run_id)
        assert err.value.key.startswith("idem:")
        release.set()
        assert first.result() == 1
    assert slow(x=1, scope=run_id) == 1


def test_nested_arguments_never_collide(store, run_id):
    runs = Counter()

    @toolonce.write(store)
    def pay(payment: dict) -> dict:
        runs.add(payment)
        return payment

    calls = [
        {"card": "A", "amount": 100},
        {"card": "B", "amount": 999},
        {"card": "A", "amount": {"value": 100}},
        {"card": ["A"], "amount": 100},
        {"card": "A", "amount": 100, "extra": None},
        {"card": "A"},
        {},
    ]
    for payment in calls:
        assert pay(payment=payment, scope=run_id) == payment
    assert len(runs.calls) == len(calls)
    # Key order and 100 vs 100.0 are the same operation.
    assert pay(payment={"amount": 100.0, "card": "A"}, scope=run_id) == calls[0]
    assert len(runs.calls) == len(calls)


def test_scopes_and_tool_names_separate_operations(store, run_id):
    runs = Counter()

    @toolonce.write(store, name="notify")
    def notify(to: str) -> int:
        return runs.add(to)

    @toolonce.write(store, name="notify_other")
    def notify_other(to: str) -> int:
        return runs.add(to)

    assert notify(to="a", scope=run_id) == 1
    assert notify(to="a", scope=run_id + "-2") == 2
    assert notify_other(to="a", scope=run_id) == 3


def test_keys_match_every_shared_vector():
    vectors = json.loads(KEYS_JSON.read_text())["vectors"]
    assert len(vectors) >= 50
    for v in vectors:
        args = json.loads(v["args_json"])
        assert toolonce.derive_key(v["run_id"], v["tool"], args) == v["key"], v


def test_a_decorated_function_keys_its_call_as_derive_key_does(store, run_id):
    @toolonce.write(store, name="charge_card")
    def charge_card(payment: dict) -> str:
        return toolonce.current_key()

    key = charge_card(payment={"card": "A", "amount": 100}, scope=run_id)
    assert key == toolonce.derive_key(run_id, "charge_card", {"payment": {"card": "A", "amount": 100}})
    assert charge_card("payment-as-positional", scope=run_id) == toolonce.derive_key(
        run_id, "charge_card", {"payment": "payment-as-positional"}
    )


def test_the_default_tool_name_is_the_module_and_qualified_name(store):
    class Billing:
        @staticmethod
        @toolonce.write(store)
        def refund(order: str) -> None:
            return None

    assert Billing.refund.tool_name == (
        f"{__name__}.test_the_default_tool_name_is_the_module_and_qualified_name"
        ".<locals>.Billing.refund"
    )


def test_an_async_function_runs_on_the_callers_event_loop_with_its_context(store, run_id):
    @toolonce.write(store)
    async def where(x: int) -> dict:
        return {"loop": id(asyncio.get_running_loop()), "key": toolonce.current_key()}

    async def main():
        with toolonce.scope(run_id):
            return id(asyncio.get_running_loop()), await where(x=1)

    loop_id, result = asyncio.run(main())
    assert result["loop"] == loop_id
    assert result["key"] == where.key_for(run_id, x=1)


def test_a_sync_function_runs_on_the_callers_thread(store, run_id):
    @toolonce.write(store)
    def where(x: int) -> int:
        return threading.get_ident()

    assert where(x=1, scope=run_id) == threading.get_ident()


def test_the_ctx_parameter_receives_the_key_and_is_not_an_argument(store, run_id):
    @toolonce.write(store, name="ctx_tool")
    def tool(order: str, ctx: toolonce.Context) -> list:
        return [ctx.key, ctx.may_have_run_before, list(ctx.idempotency_header)]

    key, again, header = tool(order="o1", scope=run_id)
    assert key == toolonce.derive_key(run_id, "ctx_tool", {"order": "o1"})
    assert again is False
    assert header == ["Idempotency-Key", key]
    assert "ctx" not in str(tool.__signature__)


def test_a_transient_error_is_released_and_the_next_call_runs_again(store, run_id):
    runs = Counter()

    @toolonce.write(store)
    def flaky(x: int) -> str:
        if runs.add(x) == 1:
            raise ConnectionError("downstream timed out")
        return "ok"

    with pytest.raises(ConnectionError, match="downstream timed out"):
        flaky(x=1, scope=run_id)
    assert flaky(x=1, scope=run_id) == "ok"
    assert flaky(x=1, scope=run_id) == "ok"
    assert len(runs.calls) == 2


def test_a_permanent_error_is_stored_and_replayed_to_duplicates(store, run_id):
    runs = Counter()

    class CardDeclined(Exception):
        toolonce_permanent = True

    @toolonce.write(store)
    def charge(card: str) -> str:
        runs.add(card)
        if card == "declined":
            raise CardDeclined("card declined")
        raise toolonce.PermanentError("invalid card number", detail={"field": "card"})

    with pytest.raises(CardDeclined):
        charge(card="declined", scope=run_id)
    with pytest.raises(toolonce.ReplayedFailure, match="card declined") as replay:
        charge(card="declined", scope=run_id)
    assert isinstance(replay.value, toolonce.PermanentError)
    with pytest.raises(toolonce.PermanentError):
        charge(card="bad", scope=run_id)
    with pytest.raises(toolonce.ReplayedFailure) as replay:
        charge(card="bad", scope=run_id)
    assert replay.value.detail == {"field": "card"}
    answer = charge.call_detailed(card="bad", scope=run_id)
    assert answer.outcome == "replayed_failure" and isinstance(answer.error, toolonce.ReplayedFailure)
    assert len(runs.calls) == 2


def test_async_errors_are_transient_or_permanent_as_for_sync_functions(store, run_id):
    runs = Counter()

    @toolonce.write(store)
    async def op(kind: str) -> str:
        n = runs.add(kind)
        if kind == "transient" and n == 1:
            raise TimeoutError("slow")
        if kind == "permanent":
            raise toolonce.PermanentError("never")
        return "ok"

    async def main():
        with toolonce.scope(run_id):
            with pytest.raises(TimeoutError):
                await op(kind="transient")
            assert await op(kind="transient") == "ok"
            with pytest.raises(toolonce.PermanentError):
                await op(kind="permanent")
            with pytest.raises(toolonce.ReplayedFailure):
                await op(kind="permanent")

    asyncio.run(main())
    assert len(runs.calls) == 3


def test_key_fields_make_the_key_and_other_arguments_must_match(store, run_id):
    @toolonce.write(store, key_fields=["order_id"])
    def refund(order_id: str, cents: int) -> int:
        return cents

    assert refund(order_id="o1", cents=100, scope=run_id) == 100
    assert refund(order_id="o1", cents=100, scope=run_id) == 100
    with pytest.raises(toolonce.ConflictError):
        refund(order_id="o1", cents=200, scope=run_id)


def test_the_heartbeat_keeps_the_lease_while_a_sync_function_blocks(store, run_id):
    started = threading.Event()
    runs = Counter()

    @toolonce.write(store, lease=0.3, on_expired="rerun")
    def slow(x: int) -> int:
        started.set()
        time.sleep(1.5)  # five leases, GIL released by sleep but the thread blocked
        return runs.add(x)

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(slow, x=1, scope=run_id)
        assert started.wait(10)
        time.sleep(0.9)  # three leases later, a rerun would take over an expired claim
        with pytest.raises(toolonce.InFlightError):
            slow(x=1, scope=run_id)
        assert first.result() == 1
    assert len(runs.calls) == 1


def test_the_heartbeat_keeps_the_lease_while_a_sync_function_holds_the_gil(store, run_id):
    started = threading.Event()

    @toolonce.write(store, lease=0.3, on_expired="rerun")
    def busy(x: int) -> str:
        started.set()
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            sum(range(1000))  # pure Python: holds the GIL between switches
        return "done"

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(busy, x=1, scope=run_id)
        assert started.wait(10)
        time.sleep(0.8)
        assert busy.call_detailed(x=1, scope=run_id).outcome == "in_flight"
        assert first.result() == "done"


def test_a_call_without_a_scope_raises_and_runs_nothing(store):
    runs = Counter()

    @toolonce.write(store)
    def op(x: int) -> None:
        runs.add(x)

    with pytest.raises(toolonce.InvalidArgumentsError, match="scope"):
        op(x=1)
    assert runs.calls == []


def test_arguments_that_are_not_json_raise_before_anything_runs(store, run_id):
    runs = Counter()

    @toolonce.write(store)
    def op(x) -> None:
        runs.add(x)

    for bad in [object(), {1: "int key"}, float("nan"), 2**70]:
        with pytest.raises(toolonce.InvalidArgumentsError):
            op(x=bad, scope=run_id)
    assert runs.calls == []


def test_a_result_that_is_not_json_is_recorded_as_a_permanent_failure(store, run_id):
    runs = Counter()

    @toolonce.write(store)
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
            toolonce.write(store, **kwargs)(lambda x: x)
    with pytest.raises(toolonce.ConfigError, match="scope"):
        toolonce.write(store)(lambda scope: scope)


def test_a_closed_store_refuses_calls(tmp_path, run_id):
    with toolonce.open_store(f"sqlite://{tmp_path / 'c.db'}") as store:

        @toolonce.write(store)
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

        @toolonce.write(store, name="ship", lease=0.2, on_expired=verify)
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
    with toolonce.open_store(f"sqlite://{tmp_path / 'v2.db'}") as store:
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

        @toolonce.write(store, name="ship", lease=0.2, on_expired=verify)
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
    with toolonce.open_store(f"sqlite://{tmp_path / 'v3.db'}") as store:
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

        @toolonce.write(store, name="ship", lease=0.2, on_expired=verify)
        def ship(order: str) -> str:
            raise AssertionError("held: must not run")

        @toolonce.write(store, name="ship", lease=0.2, on_expired=verify)
        async def ship_async(order: str) -> str:
            raise AssertionError("held: must not run")

        with pytest.raises(toolonce.UnknownOutcomeError) as err:
            ship(order="o1", scope=run_id)
        assert isinstance(err.value.__cause__, TypeError)
        with pytest.raises(toolonce.UnknownOutcomeError) as err:
            asyncio.run(ship_async(order="o1", scope=run_id))
        assert isinstance(err.value.__cause__, TypeError)
