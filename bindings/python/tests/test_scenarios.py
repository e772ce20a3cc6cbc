"""The layer's conformance scenarios (crates/toolonce/tests/data/scenarios/scenarios.json, its
README says the format), the same file the Rust suite and the TypeScript package run: every
scenario through ``@toolonce.write`` on every store fixture, each in a scope of its own. A
scenario not run and not listed as unsupported for "python" (with a reason) fails; so does an
expectation this runner cannot check unless the file's ``unchecked`` says why.

Callers are async functions on one event loop; a caller that vanishes is a cancelled task
(its lease lapses, the entry turns unknown). The operator steps and the entry expectations use
the store's operator API (``Store.aget``, ``aresolve``, ``aremove``). A scenario with a
``fault`` step runs on Redis, each caller with a store of its own behind a proxy that loses
what the step names on the real connection (tests/faults.py); the in-process stores (memory,
SQLite) have no connection between the layer and the store to lose anything on, so those
scenarios do not run on them."""

from __future__ import annotations

import asyncio
import contextvars
import json
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import pytest

import toolonce
from faults import RedisFaults

RUNNER = "python"
FILE = Path(__file__).resolve().parents[3] / "crates/toolonce/tests/data/scenarios/scenarios.json"
SCENARIOS = json.loads(FILE.read_text())
UNCHECKED: Dict[str, str] = SCENARIOS.get("unchecked", {}).get(RUNNER, {})
PATIENCE = 20.0
SETTLE = 0.15  # a `start` without a blocking tool pauses this long, so the caller is claiming or waiting
STEPS = {"call", "start", "release", "await", "abandon", "fault", "wait", "read", "resolve", "remove", "check"}
FAULTS = {"lose_next_claim_reply", "lose_renewals"}
CHECKED = {"outcome", "result", "error", "notice", "runs", "probes", "entry", "answer"}
KINDS = ("memory", "sqlite", "redis", "postgres")
# Where a fault can be put between the layer and the store, on a real connection.
FAULTY_KINDS = ("redis",)


class Charger:
    """The scenarios' one tool. A store refuses two different functions under one name, so
    every call decorates this one bound method; what it does is the calling task's
    ``_BEHAVIOUR``, set in the context its task starts with."""

    async def charge(self, order: str, cents: int) -> Any:
        return await _BEHAVIOUR.get()()


_BEHAVIOUR: contextvars.ContextVar = contextvars.ContextVar("behaviour")
_CHARGER = Charger()


def _unsupported(scenario: dict) -> Optional[str]:
    return scenario.get("unsupported", {}).get(RUNNER)


def _faulty(scenario: dict) -> bool:
    return any(step["do"] == "fault" for step in scenario["steps"])


def _kinds(scenario: dict) -> tuple:
    """The store fixtures a scenario runs on."""
    return FAULTY_KINDS if _faulty(scenario) else KINDS


def test_every_scenario_is_run_here_or_says_why_not():
    ids = [s["id"] for s in SCENARIOS["scenarios"]]
    assert len(ids) >= 15, "the scenario file lost its scenarios"
    assert len(set(ids)) == len(ids), "two scenarios share an id"
    for scenario in SCENARIOS["scenarios"]:
        why = _unsupported(scenario)
        if why is not None:
            assert why.strip(), f"{scenario['id']}: unsupported without a reason"
            continue
        assert _kinds(scenario), f"{scenario['id']}: runs on no store"
        for step in scenario["steps"]:
            assert step["do"] in STEPS, f"{scenario['id']}: step {step['do']} is not supported here"
            if step["do"] == "fault":
                assert step["fault"] in FAULTS, f"{scenario['id']}: fault {step['fault']} is not supported here"
            for expectation in step.get("expect", {}):
                if expectation not in CHECKED:
                    assert UNCHECKED.get(expectation, "").strip(), (
                        f"{scenario['id']}: {expectation} is not checked here, and unchecked without a reason"
                    )


def _behave(tool: dict) -> Any:
    if "returns" in tool:
        return tool["returns"]
    if tool.get("throws") == "permanent":
        raise toolonce.PermanentError(tool["message"])
    if tool.get("throws") == "transient":
        raise ConnectionError(tool["message"])
    raise AssertionError(f"tool {tool}: expected returns or throws")


def _verdict(probe: Any) -> Any:
    if probe == "not_done":
        return toolonce.NOT_DONE
    if probe == "cannot_tell":
        return toolonce.CANNOT_TELL
    if isinstance(probe, dict) and "done" in probe:
        return toolonce.Done(probe["done"])
    raise AssertionError(f"probe {probe!r}: expected done, not_done or cannot_tell")


class Run:
    """One scenario on one store: its callers, and how often the tool and the probe ran."""

    def __init__(self, store: toolonce.Store, scenario: dict, scope: str,
                 proxied: Optional["Proxied"] = None) -> None:
        self.store = store
        # Each caller's store: the fixture's, or one of its own behind a proxy (`fault`).
        self.proxied = proxied
        self.callers: Callable[[str], toolonce.Store] = proxied or (lambda caller: store)
        self.seen: Dict[str, toolonce.Entry] = {}
        self.scenario = scenario
        self.scope = scope
        self.policy = {**SCENARIOS["defaults"]["policy"], **scenario.get("policy", {})}
        self.runs = 0
        self.probes = 0
        self.tasks: Dict[str, asyncio.Task] = {}
        self.gates: Dict[str, asyncio.Event] = {}

    def function(self, step: dict, caller: str) -> Any:
        """The tool as ``@toolonce.write`` wraps it for this call."""
        tool = step.get("tool", {"returns": {"by": caller}})
        blocks, started = tool.get("blocks") is True, asyncio.Event()
        if blocks:
            tool = tool.get("then", {"returns": {"by": caller}})
            self.gates[caller] = asyncio.Event()
        gate = self.gates.get(caller) if blocks else None
        policy, on_expired = self.policy, self.policy["on_expired"]
        if on_expired == "verify":
            probe = step.get("probe")

            def verify(ctx: toolonce.Context) -> Any:
                self.probes += 1
                return _verdict(probe)

            on_expired = verify
        in_flight = policy["in_flight"]
        wait = "reject" if in_flight == "reject" else toolonce.Wait(in_flight["wait_ms"] / 1000)

        async def behave() -> Any:
            self.runs += 1
            if gate is not None:
                started.set()
                await gate.wait()
            return _behave(tool)

        charge = toolonce.write(
            self.callers(caller),
            name=SCENARIOS["defaults"]["tool"],
            lease=policy["lease_ms"] / 1000,
            retention=policy["retention_ms"] / 1000,
            in_flight=wait,
            key_fields=policy.get("key_fields"),
            on_expired=on_expired,
        )(_CHARGER.charge)
        return charge, behave, started if blocks else None

    async def start(self, step: dict) -> asyncio.Task:
        caller = step["caller"]
        charge, behave, started = self.function(step, caller)
        args = step.get("args", SCENARIOS["defaults"]["args"])
        context = contextvars.copy_context()
        context.run(_BEHAVIOUR.set, behave)
        call = charge.call_detailed(**args, scope=self.scope)
        task = asyncio.get_running_loop().create_task(call, context=context)
        if started is not None:
            waiting = asyncio.ensure_future(started.wait())
            await asyncio.wait({waiting, task}, timeout=PATIENCE, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            assert started.is_set(), f"the blocking tool never started ({task.done() and task.result()})"
        elif step["do"] == "start":
            await asyncio.sleep(SETTLE)
        return task

    def key(self, args: Optional[dict] = None) -> str:
        return toolonce.derive_key(self.scope, SCENARIOS["defaults"]["tool"],
                                   args or SCENARIOS["defaults"]["args"], self.policy.get("key_fields"))

    async def check_entry(self, wanted: Optional[dict], key: str) -> None:
        # A give-back is a zero-lease renewal, which Redis shows within a millisecond.
        for attempt in range(10):
            entry = await self.store.aget(key)
            try:
                return _entry_matches(entry, wanted)
            except AssertionError:
                if attempt == 9:
                    raise
            await asyncio.sleep(0.005)

    async def operate(self, step: dict) -> None:
        seen = self.seen.get(step["seen"])
        assert seen is not None, f"nothing read as {step['seen']}"
        if step["do"] == "remove":
            answer = await self.store.aremove(seen.key, seen)
        else:
            retention = self.policy["retention_ms"] / 1000
            answer = await self.store.aresolve(seen.key, seen, step["resolution"], retention=retention)
        expect = step.get("expect", {})
        if "answer" in expect:
            assert answer.kind == expect["answer"], f"the store's answer {answer}"
        await self.check(expect, key=seen.key)

    async def check(self, expect: dict, answer: Optional[toolonce.Answer] = None, key: Optional[str] = None) -> None:
        if answer is not None:
            shown = f"{answer.outcome} {answer.value!r} {answer.error!r}"
            if "outcome" in expect:
                assert answer.outcome == expect["outcome"], shown
            if "result" in expect:
                assert answer.value == expect["result"], shown
            if "error" in expect:
                error = answer.error
                assert error is not None, shown
                permanent = isinstance(error, toolonce.PermanentError)
                if "class" in expect["error"]:
                    assert ("permanent" if permanent else "transient") == expect["error"]["class"], shown
                if "message" in expect["error"]:
                    assert str(error) == expect["error"]["message"], shown
            if "notice" in expect:
                assert (answer.notice is not None) == expect["notice"], answer.notice
        if "runs" in expect:
            assert self.runs == expect["runs"], f"runs {self.runs}"
        if "probes" in expect:
            assert self.probes == expect["probes"], f"probes {self.probes}"
        if "entry" in expect:
            await self.check_entry(expect["entry"], key or (answer.key if answer else None) or self.key())

    async def step(self, step: dict) -> None:
        do, caller, expect = step["do"], step.get("caller"), step.get("expect", {})
        if do == "call":
            task = await self.start(step)
            await self.check(expect, await asyncio.wait_for(task, PATIENCE))
        elif do == "start":
            self.tasks[caller] = await self.start(step)
        elif do == "release":
            self.gates.pop(caller).set()
        elif do == "await":
            await self.check(expect, await asyncio.wait_for(self.tasks.pop(caller), PATIENCE))
        elif do == "abandon":
            task = self.tasks.pop(caller)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        elif do == "wait":
            ms = step["ms"] if "ms" in step else step["leases"] * self.policy["lease_ms"]
            await asyncio.sleep(ms / 1000)
        elif do == "fault":
            assert self.proxied is not None, "a fault step on a store with no connection to cut"
            self.proxied.faults(caller).add(step["fault"])
        elif do == "read":
            entry = await self.store.aget(self.key(step.get("args")))
            assert entry is not None, "no entry to read"
            self.seen[step["as"]] = entry
        elif do in ("resolve", "remove"):
            await self.operate(step)
        elif do == "check":
            await self.check(expect)
        else:
            raise AssertionError(f"unknown step {do}")

    async def run(self) -> None:
        try:
            for i, step in enumerate(self.scenario["steps"], 1):
                try:
                    await self.step(step)
                except AssertionError as e:
                    raise AssertionError(f"{self.scenario['id']}: step {i} ({step['do']}): {e}") from e
        finally:
            for task in self.tasks.values():
                task.cancel()


def _entry_matches(entry: Optional[toolonce.Entry], wanted: Optional[dict]) -> None:
    if wanted is None:
        assert entry is None, f"an entry {entry}, expected none"
        return
    assert entry is not None, f"no entry, expected {wanted}"
    shown = f"{entry} result {entry.result!r} error {entry.error!r}"
    if "state" in wanted:
        assert entry.state == wanted["state"], shown
    if "attempts" in wanted:
        assert entry.attempts == wanted["attempts"], shown
    if "result" in wanted:
        assert entry.result == wanted["result"], shown
    if "error" in wanted:
        assert entry.error is not None and entry.error.message == wanted["error"], shown


class Proxied:
    """Each caller's own store, behind a fault proxy of its own in front of the Redis server."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.proxies: Dict[str, RedisFaults] = {}
        self.stores: Dict[str, toolonce.Store] = {}

    def __call__(self, caller: str) -> toolonce.Store:
        if caller not in self.stores:
            proxy = self.proxies[caller] = RedisFaults(self.server.port)
            self.stores[caller] = toolonce.open_store(proxy.url)
        return self.stores[caller]

    def faults(self, caller: str) -> RedisFaults:
        self(caller)
        return self.proxies[caller]

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
        for proxy in self.proxies.values():
            proxy.close()


CASES = [
    pytest.param(scenario, kind, id=f"{scenario['id']}-{kind}")
    for scenario in SCENARIOS["scenarios"]
    for kind in _kinds(scenario)
]


@pytest.mark.parametrize("scenario, store_url", CASES, indirect=["store_url"])
def test_scenario(scenario, store_url, store, run_id, request):
    why = _unsupported(scenario)
    if why is not None:
        # Listed, with its reason: accounted for, not run.
        assert why.strip(), f"{scenario['id']}: unsupported without a reason"
        return
    scope = f"{run_id}-{scenario['id']}"
    if not _faulty(scenario):
        asyncio.run(Run(store, scenario, scope).run())
        return
    proxied = Proxied(request.getfixturevalue("redis_server"))
    try:
        asyncio.run(Run(store, scenario, scope, proxied).run())
        wanted = {step["fault"] for step in scenario["steps"] if step["do"] == "fault"}
        fired = {f for proxy in proxied.proxies.values() for f in proxy.fired}
        assert wanted <= fired, f"the faults {sorted(wanted - fired)} never happened on the wire"
    finally:
        proxied.close()
