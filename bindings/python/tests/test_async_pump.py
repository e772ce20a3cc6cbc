"""The async pump's promises on every store: the layer polled on the event loop's thread keeps
its lease while a coroutine blocks that loop, wakes every call it parks (many at once, on
several loops), lets a cancelled waiter go without touching the operation, and still works on
a loop that cannot watch a descriptor (the runtime's pump)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import toolonce
from counting import Counter


def test_the_heartbeat_keeps_the_lease_while_an_async_function_blocks_its_event_loop(store, run_id):
    started = threading.Event()
    runs = Counter()

    @toolonce.write(store, name="stuck", lease=0.3, on_expired="rerun")
    async def stuck(x: int) -> int:
        started.set()
        time.sleep(1.5)  # five leases with the loop blocked: nothing on it can renew
        return runs.add(x)

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(lambda: asyncio.run(stuck(x=1, scope=run_id)))
        assert started.wait(10)
        time.sleep(0.9)  # three leases later, a rerun would take over an expired claim
        assert asyncio.run(stuck.call_detailed(x=1, scope=run_id)).outcome == "in_flight"
        assert first.result() == 1
    assert len(runs.calls) == 1


def test_many_concurrent_async_calls_on_one_loop_each_run_once_then_replay(store, run_id):
    runs = Counter()

    @toolonce.write(store, name="charge", in_flight=toolonce.Wait(30))
    async def charge(order: int) -> dict:
        runs.add(order)
        await asyncio.sleep(0)
        return {"order": order}

    async def wave() -> list:
        # Every order called by three tasks at once: one runs it, two wait or replay.
        calls = [charge(order=i % 100, scope=run_id) for i in range(300)]
        return await asyncio.gather(*calls)

    first = asyncio.run(wave())
    again = asyncio.run(wave())
    assert first == again == [{"order": i % 100} for i in range(300)]
    assert sorted(runs.calls) == list(range(100))


def test_async_calls_on_loops_in_two_threads_are_each_answered_on_their_own_loop(store, run_id):
    @toolonce.write(store, name="where")
    async def where(side: str, n: int) -> list:
        return [side, id(asyncio.get_running_loop())]

    # Both loops run at once (each waits for the other before its calls), which is the case
    # under test, and which keeps both alive: a loop already collected could leave its id to
    # the next one, and the two ids would compare equal though the loops were two.
    both_running = threading.Barrier(2)

    def side(name: str) -> set:
        async def main() -> set:
            loop = id(asyncio.get_running_loop())
            await asyncio.to_thread(both_running.wait, 30)
            answers = await asyncio.gather(*(where(side=name, n=n, scope=run_id) for n in range(50)))
            assert {tuple(a) for a in answers} == {(name, loop)}
            await asyncio.to_thread(both_running.wait, 30)
            return {loop}

        return asyncio.run(main())

    with ThreadPoolExecutor(2) as pool:
        loops = list(pool.map(side, ["a", "b"]))
    assert loops[0] != loops[1]


def test_a_task_cancelled_while_it_waits_for_a_duplicate_leaves_the_operation_to_its_owner(store, run_id):
    runs = Counter()

    async def main() -> None:
        release = asyncio.Event()

        @toolonce.write(store, name="ship", in_flight=toolonce.Wait(30))
        async def ship(order: str) -> str:
            runs.add(order)
            await release.wait()
            return "shipped"

        owner = asyncio.ensure_future(ship(order="o1", scope=run_id))
        while not runs.calls:
            await asyncio.sleep(0.01)
        waiter = asyncio.ensure_future(ship(order="o1", scope=run_id))
        await asyncio.sleep(0.2)  # the waiter is parked on the running operation
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        release.set()
        assert await owner == "shipped"
        assert (await ship.call_detailed(order="o1", scope=run_id)).outcome == "replayed"

    asyncio.run(main())
    assert runs.calls == ["o1"]


class _NoReaderLoop(asyncio.SelectorEventLoop):
    """A loop that cannot watch a descriptor, as Windows' proactor loop cannot."""

    def add_reader(self, *args, **kwargs):
        raise NotImplementedError


def test_a_loop_that_cannot_watch_a_descriptor_still_runs_each_operation_once(store, run_id):
    runs = Counter()

    @toolonce.write(store, name="charge", in_flight=toolonce.Wait(30))
    async def charge(order: int) -> int:
        runs.add(order)
        await asyncio.sleep(0)
        return order

    async def wave() -> list:
        return await asyncio.gather(*(charge(order=i % 20, scope=run_id) for i in range(60)))

    for _ in range(2):
        loop = _NoReaderLoop()
        try:
            assert loop.run_until_complete(wave()) == [i % 20 for i in range(60)]
        finally:
            loop.close()
    assert sorted(runs.calls) == list(range(20))


# A woken call is stepped by the pump's reader callback itself (`_pump._Wake`), not by the loop
# one iteration later: what a task expects of the future it awaits must still hold there.

_caller = contextvars.ContextVar("caller", default="none")


def test_a_woken_call_resumes_in_its_own_tasks_context_among_many_woken_together(store, run_id):
    @toolonce.write(store, name="seen", in_flight=toolonce.Wait(30))
    async def seen(task: int) -> list:
        before = _caller.get()
        await asyncio.sleep(0)
        return [before, _caller.get()]

    async def one(task: int) -> list:
        _caller.set(f"task {task}")
        first = await seen(task=task, scope=run_id)  # a claim and a settle: two wakes
        after_first = _caller.get()
        again = await seen(task=task, scope=run_id)  # replayed: one read, one wake
        return [first, after_first, again, _caller.get()]

    async def main() -> list:
        return await asyncio.gather(*(one(t) for t in range(40)))

    for t, (first, after_first, again, after) in enumerate(asyncio.run(main())):
        mine = f"task {t}"
        assert first == [mine, mine]
        assert again == first
        assert after_first == after == mine


def test_tasks_cancelled_by_other_tasks_as_they_are_woken_end_cancelled_and_run_at_most_once(
    store, run_id
):
    runs = Counter()

    @toolonce.write(store, name="charge", in_flight=toolonce.Wait(30))
    async def charge(order: int) -> int:
        runs.add(order)
        return order

    async def main() -> list:
        tasks: list = []

        async def one(i: int) -> int:
            answer = await charge(order=i, scope=run_id)
            # Woken in the same drain as its neighbours, maybe: cancel the next one wherever
            # it is (parked on the store, or already woken and not yet resumed).
            if i + 1 < len(tasks):
                tasks[i + 1].cancel()
            return answer

        tasks.extend(asyncio.ensure_future(one(i)) for i in range(60))
        return await asyncio.gather(*tasks, return_exceptions=True)

    answers = asyncio.run(asyncio.wait_for(main(), 30))
    assert answers[0] == 0
    for i, answer in enumerate(answers):
        assert answer == i or isinstance(answer, asyncio.CancelledError), (i, answer)
    assert len(runs.calls) == len(set(runs.calls))  # none ran twice

    async def replay() -> list:
        return [(await charge.call_detailed(order=i, scope=run_id)).outcome for i in range(60)]

    # Each operation is replayed, or was released by its cancelled caller and runs now; none
    # is left held.
    outcomes = asyncio.run(asyncio.wait_for(replay(), 30))
    assert set(outcomes) <= {"replayed", "executed"}
    assert sorted(runs.calls) == list(range(60))


def test_ctrl_c_out_of_one_woken_task_reaches_the_caller_and_the_others_still_finish(store, run_id):
    started: list = []
    finished: list = []

    @toolonce.write(store, name="charge", in_flight=toolonce.Wait(30))
    async def charge(order: int) -> int:
        if order == 3:
            raise KeyboardInterrupt  # as Ctrl-C does when it lands in this task's step
        return order

    async def one(i: int) -> None:
        started.append(i)
        try:
            await charge(order=i, scope=run_id)
            await charge(order=i, scope=run_id)  # a second wait, after the interruption
        finally:
            finished.append(i)

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(20)))

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(main())
    # asyncio.run cancelled the rest and ran them to their end: none was left parked (a task
    # the interruption came before never started).
    assert 3 in started
    assert sorted(finished) == sorted(started)
