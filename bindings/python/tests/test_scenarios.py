"""The layer's conformance scenarios (crates/toolonce/tests/data/scenarios/scenarios.json, its
README says the format), the same file the Rust suite and the TypeScript package run: every
scenario through ``@toolonce.write`` on every store fixture, each in a scope of its own. A
scenario not run and not listed as unsupported for "python" (with a reason) fails; so does an
expectation this runner cannot check unless the file's ``unchecked`` says why.

Callers are async functions on one event loop; a caller that vanishes is a cancelled task
(its lease lapses, the entry turns unknown). The package has no operator API and no way to
put a fault between its layer and the store, so those scenarios are listed as unsupported."""

from __future__ import annotations

import asyncio
import contextvars
import json
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

import toolonce

RUNNER = "python"
FILE = Path(__file__).resolve().parents[3] / "crates/toolonce/tests/data/scenarios/scenarios.json"
SCENARIOS = json.loads(FILE.read_text())
UNCHECKED: Dict[str, str] = SCENARIOS.get("unchecked", {}).get(RUNNER, {})
PATIENCE = 20.0
SETTLE = 0.15  # a `start` without a blocking tool pauses this long, so the caller is claiming or waiting
STEPS = {"call", "start", "release", "await", "abandon", "wait", "check"}


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


def test_every_scenario_is_run_here_or_says_why_not():
    ids = [s["id"] for s in SCENARIOS["scenarios"]]
    assert len(ids) >= 15, "the scenario file lost its scenarios"
    assert len(set(ids)) == len(ids), "two scenarios share an id"
    for scenario in SCENARIOS["scenarios"]:
        why = _unsupported(scenario)
        if why is not None:
            assert why.strip(), f"{scenario['id']}: unsupported without a reason"
            continue
        for step in scenario["steps"]:
            assert step["do"] in STEPS, f"{scenario['id']}: step {step['do']} is not supported here"
            if "entry" in step.get("expect", {}):
                assert UNCHECKED.get("entry", "").strip(), f"{scenario['id']}: an entry check, unchecked without a reason"


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

    def __init__(self, store: toolonce.Store, scenario: dict, scope: str) -> None:
        self.store = store
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
            self.store,
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

    def check(self, expect: dict, answer: Optional[toolonce.Answer] = None) -> None:
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
        # "entry": not checked here; the file's `unchecked` says why (asserted above).

    async def step(self, step: dict) -> None:
        do, caller, expect = step["do"], step.get("caller"), step.get("expect", {})
        if do == "call":
            task = await self.start(step)
            self.check(expect, await asyncio.wait_for(task, PATIENCE))
        elif do == "start":
            self.tasks[caller] = await self.start(step)
        elif do == "release":
            self.gates.pop(caller).set()
        elif do == "await":
            self.check(expect, await asyncio.wait_for(self.tasks.pop(caller), PATIENCE))
        elif do == "abandon":
            task = self.tasks.pop(caller)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        elif do == "wait":
            ms = step["ms"] if "ms" in step else step["leases"] * self.policy["lease_ms"]
            await asyncio.sleep(ms / 1000)
        elif do == "check":
            self.check(expect)
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


@pytest.mark.parametrize("scenario", SCENARIOS["scenarios"], ids=lambda s: s["id"])
def test_scenario(scenario, store, run_id):
    why = _unsupported(scenario)
    if why is not None:
        # Listed, with its reason: accounted for, not run.
        assert why.strip(), f"{scenario['id']}: unsupported without a reason"
        return
    asyncio.run(Run(store, scenario, f"{run_id}-{scenario['id']}").run())
