"""A child process of test_processes.py: runs write operations against a shared store.

    proc_worker.py many URL SCOPE LOG OPS GATE INDEX COUNT
                                               each of OPS operations once through the decorator,
                                               appending a line to LOG per execution; prints
                                               the results as JSON. Ready, it writes
                                               GATE/ready.INDEX and waits for GATE/go (the
                                               test's barrier), then starts at operation
                                               INDEX * OPS / COUNT and wraps around
    proc_worker.py hang URL SCOPE MARKER        claims `charge`, writes MARKER, then hangs (the
                                               test SIGKILLs it between claim and complete)
    proc_worker.py interrupted URL SCOPE MARKER as hang, but the test sends SIGINT: the
                                               KeyboardInterrupt reaches the caller
    proc_worker.py forked URL SCOPE MARKER      uses toolonce, then forks (multiprocessing's
                                               "fork" start method); the child opens the store
                                               itself, writes MARKER from inside `slow` (lease
                                               0.6 s), runs five leases long and returns
    proc_worker.py gil URL SCOPE MARKER         async duplicates (more than the runtime's
                                               workers) whose waits end while a sync tool
                                               (`busy`, lease 0.6 s) holds the GIL for 4 s in
                                               one C call, after writing MARKER
"""

import asyncio
import ctypes
import json
import multiprocessing
import os
import signal
import sys
import threading
import time

import toolonce


def main() -> None:
    mode, url, scope = sys.argv[1:4]
    store = toolonce.open_store(url)
    if mode == "many":
        log, ops = sys.argv[4], int(sys.argv[5])

        @toolonce.write(store, name="append_line", in_flight=toolonce.Wait(60))
        def append_line(op: int) -> dict:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, f"{op} {os.getpid()}\n".encode())
            finally:
                os.close(fd)
            return {"op": op, "by": os.getpid()}

        gate, index, count = sys.argv[6], int(sys.argv[7]), int(sys.argv[8])
        # Each process starts where no other does, so that each leads somewhere: in one order,
        # the first process to win would stay ahead of the others (they poll while it runs)
        # and could execute all of them.
        start = index * ops // count
        order = [(start + i) % ops for i in range(ops)]
        with open(os.path.join(gate, f"ready.{index}"), "w"):
            pass
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(gate, "go")):
            if time.monotonic() > deadline:
                sys.exit("the test never opened the gate")
            time.sleep(0.001)
        results = {}
        with toolonce.scope(scope):
            for op in order:
                results[op] = append_line(op=op)
        print(json.dumps(results))
    elif mode == "hang":
        marker = sys.argv[4]

        @toolonce.write(store, name="charge", lease=0.5)
        def charge(order: str) -> str:
            with open(marker, "w") as f:
                f.write(toolonce.current_key())
            time.sleep(3600)
            return "never"

        charge(order="o1", scope=scope)
    elif mode == "interrupted":
        marker = sys.argv[4]
        # What a terminal's Ctrl-C finds: Python's KeyboardInterrupt handler. A process started
        # from a background job of a shell without job control (`(cmd &)`, how a CI runner may
        # start the suite) inherits SIGINT ignored, Python then installs no handler, and the
        # test's SIGINT would be dropped: this worker hung twice in a row in such a run.
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)

        @toolonce.write(store, name="charge", lease=0.5)
        def charge(order: str) -> str:
            with open(marker, "w") as f:
                f.write(toolonce.current_key())
            # Ctrl-C (SIGINT) lands here. Short sleeps, not one long one: a signal that arrives
            # between the interpreter's last check and the start of the sleep's system call
            # (the test sends it just as the marker appears, which is that moment) does not
            # interrupt the call, only sets CPython's flag, so one long sleep would run out its
            # hour. Which thread takes the signal is what
            # test_no_toolonce_thread_can_take_a_ctrl_c_meant_for_the_sleeping_caller checks.
            for _ in range(36_000):
                time.sleep(0.1)
            return "never"

        try:
            charge(order="o1", scope=scope)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    elif mode == "forked":
        store.close()
        forked(url, scope, sys.argv[4])
    elif mode == "gil":
        store.close()
        gil(url, scope, sys.argv[4])


SLOW_SECONDS = 3.0  # five leases of 0.6 s


def forked_child(url: str, scope: str, marker: str) -> None:
    """The forked child: its own store, as the README says, and a tool longer than its lease."""
    store = toolonce.open_store(url)

    @toolonce.write(store, name="slow", lease=0.6)
    def slow(x: int) -> str:
        with open(marker, "w") as f:
            f.write(toolonce.current_key())
        time.sleep(SLOW_SECONDS)
        return "slow done"

    assert slow(x=1, scope=scope) == "slow done"


def forked(url: str, scope: str, marker: str) -> None:
    # The parent has used toolonce (its runtime is running) before it forks.
    parent = toolonce.open_store(url)

    @toolonce.write(parent, name="warm")
    def warm(x: int) -> int:
        return x

    assert warm(x=1, scope=scope) == 1
    child = multiprocessing.get_context("fork").Process(
        target=forked_child, args=(url, scope, marker)
    )
    child.start()
    child.join(60)
    if child.exitcode != 0:
        sys.exit(f"the forked child failed: exit code {child.exitcode}")
    print("child done", flush=True)


def hold_the_gil(seconds: float) -> None:
    """One C call that keeps the GIL: a ctypes.PyDLL function is called without releasing it."""
    libc = ctypes.PyDLL(None)
    libc.usleep(ctypes.c_uint(int(seconds * 1_000_000)))


GIL_SECONDS = 4.0


def gil(url: str, scope: str, marker: str) -> None:
    store = toolonce.open_store(url)
    sleeping = threading.Event()

    @toolonce.write(store, name="sleeper")
    def sleeper(x: int) -> str:
        sleeping.set()
        time.sleep(GIL_SECONDS + 2)  # the GIL released: only holds the operation
        return "slept"

    # The same operation from another worker (a store of its own: one store holds one tool
    # per name), async and waiting for it.
    waiters_store = toolonce.open_store(url)

    @toolonce.write(waiters_store, name="sleeper", in_flight=toolonce.Wait(1.0))
    async def waiter(x: int) -> str:
        raise AssertionError("a duplicate of a running operation must not run")

    @toolonce.write(store, name="busy", lease=0.6)
    def busy(x: int) -> str:
        with open(marker, "w") as f:
            f.write(toolonce.current_key())
        hold_the_gil(GIL_SECONDS)
        return "busy done"

    async def main() -> None:
        # More waiters than the runtime has workers. Each waits for `sleeper`'s operation
        # (running in another thread) and gives up after 1 s, while `busy` holds the GIL: each
        # then has an answer for this event loop, and a runtime worker that waited for the GIL
        # to hand it over would be stuck there with every task behind it, the heartbeat too.
        waiters = [
            asyncio.ensure_future(waiter.call_detailed(x=1, scope=scope))
            for _ in range(2 * (os.cpu_count() or 2) + 4)
        ]
        await asyncio.sleep(0.05)
        assert busy(x=1, scope=scope) == "busy done"
        outcomes = {answer.outcome for answer in await asyncio.gather(*waiters)}
        assert outcomes == {"in_flight"}, outcomes

    holder = threading.Thread(target=lambda: sleeper(x=1, scope=scope))
    holder.start()
    assert sleeping.wait(30)
    asyncio.run(main())
    holder.join()
    print("busy done", flush=True)


if __name__ == "__main__":
    main()
