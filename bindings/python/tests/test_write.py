"""The decorator's promises on every store: one execution per operation, replays, outcomes as
exceptions, keys shared with the other bindings."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import toolonce
from counting import Counter

KEYS_JSON = Path(__file__).resolve().parents[3] / "crates/toolonce/tests/data/keys.json"


def test_a_sequential_duplicate_replays_the_stored_result_without_running(store, run_id):
    runs = Counter()

    @toolonce.write(store, name="send_email")
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

    @toolonce.write(store, name="charge", in_flight=toolonce.Wait(30))
    def charge(card: str, cents: int) -> dict:
        time.sleep(0.2)
        return {"charge": runs.add(card)}

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: charge(card="A", cents=100, scope=run_id), range(16)))
    assert len(runs.calls) == 1
    assert all(r == {"charge": 1} for r in results)


def test_concurrent_duplicates_from_asyncio_tasks_run_the_function_once(store, run_id):
    runs = Counter()

    @toolonce.write(store, name="charge", in_flight=toolonce.Wait(30))
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

    @toolonce.write(store, name="slow")
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

    @toolonce.write(store, name="pay")
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


def test_an_async_function_runs_on_the_callers_event_loop_with_its_context(store, run_id):
    @toolonce.write(store, name="where")
    async def where(x: int) -> dict:
        return {"loop": id(asyncio.get_running_loop()), "key": toolonce.current_key()}

    async def main():
        with toolonce.scope(run_id):
            return id(asyncio.get_running_loop()), await where(x=1)

    loop_id, result = asyncio.run(main())
    assert result["loop"] == loop_id
    assert result["key"] == where.key_for(run_id, x=1)


def test_a_sync_function_runs_on_the_callers_thread(store, run_id):
    @toolonce.write(store, name="where")
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

    @toolonce.write(store, name="flaky")
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

    @toolonce.write(store, name="charge")
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

    @toolonce.write(store, name="op")
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
    @toolonce.write(store, name="refund", key_fields=["order_id"])
    def refund(order_id: str, cents: int) -> int:
        return cents

    assert refund(order_id="o1", cents=100, scope=run_id) == 100
    assert refund(order_id="o1", cents=100, scope=run_id) == 100
    with pytest.raises(toolonce.ConflictError):
        refund(order_id="o1", cents=200, scope=run_id)


def test_the_heartbeat_keeps_the_lease_while_a_sync_function_blocks(store, run_id):
    started = threading.Event()
    runs = Counter()

    @toolonce.write(store, name="slow", lease=0.3, on_expired="rerun")
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

    @toolonce.write(store, name="busy", lease=0.3, on_expired="rerun")
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
