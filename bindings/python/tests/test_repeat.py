"""The repeat ordinal (issue 43) in the Python package: the shared vectors
(crates/toolonce/tests/data/key_repeats.json, read here, never copied) come out the same through
``derive_key`` and through a ``@toolonce.write`` function, which never gets the ordinal; a bad
ordinal is refused with the core's text and runs nothing; a repeat on purpose runs again, a
retry of it is replayed; every replay's answer carries the core's note."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from pathlib import Path

import pytest
from counting import Counter

import toolonce
from toolonce import _native

REPO = Path(__file__).resolve().parents[3]
DATA = json.loads((REPO / "crates" / "toolonce" / "tests" / "data" / "key_repeats.json").read_text())
BAD = [0, -1, 1.5, "2", 10**30, 1001, True, False, [2], {"n": 2}, float("nan")]


def refusal_head(name: str) -> str:
    """The start of the core's refusal (``repeat_invalid``) for the argument ``name``."""
    template = _native.templates()["repeat_invalid"]
    return template[: template.index("{max}")].replace("{repeat}", name)


def test_the_packages_repeat_limits_are_the_vectors():
    assert _native.REPEAT_MAX == DATA["max"]
    assert _native.REPEAT_DEFAULT_NAME == DATA["default_name"]


def test_derive_key_matches_every_repeat_vector_and_refuses_every_ordinal_they_refuse():
    assert len(DATA["vectors"]) >= 20
    for v in DATA["vectors"]:
        args = json.loads(v["args_json"])
        if "refused" in v:
            with pytest.raises(toolonce.InvalidArgumentsError) as refused:
                toolonce.derive_key(v["run_id"], v["tool"], args, repeat_argument=v["repeat_name"])
            assert refused.value.message.startswith(refusal_head(v["refused"])), v["note"]
            assert refused.value.detail == {"repeat": v["refused"]}
            continue
        key = toolonce.derive_key(v["run_id"], v["tool"], args, repeat_argument=v["repeat_name"])
        assert key == v["key"], v["note"]


def test_a_write_function_keys_every_vector_as_the_core_does_and_never_gets_the_ordinal():
    for v in DATA["vectors"]:
        seen = []
        # A store of its own per vector: the vectors share their scope and tool.
        with toolonce.open_store("memory://") as store:

            @toolonce.write(store, name=v["tool"], repeat_argument=v["repeat_name"])
            def tool(**kwargs):
                seen.append(kwargs)
                return toolonce.current_key()

            args = json.loads(v["args_json"])
            if "refused" in v:
                with pytest.raises(toolonce.InvalidArgumentsError):
                    tool(**args, scope=v["run_id"])
                assert seen == [], v["note"]
                continue
            answer = tool.call_detailed(**args, scope=v["run_id"])
            assert (answer.outcome, answer.key, answer.value) == ("executed", v["key"], v["key"])
            assert json.dumps(seen[0], sort_keys=True, separators=(",", ":")) == v["tool_args_json"]
            assert tool.key_for(v["run_id"], **args) == v["key"], v["note"]


def test_a_payment_repeated_on_purpose_runs_twice_and_a_retry_of_either_is_replayed(store, run_id):
    paid = Counter()

    @toolonce.write(store, name="pay")
    def pay(to: str, cents: int) -> dict:
        n = paid.add((to, cents, toolonce.current_key()))
        return {"payment": n}

    first = pay.call_detailed(to="bob", cents=500, scope=run_id)
    again = pay.call_detailed(to="bob", cents=500, repeat=2, scope=run_id)
    retry = pay.call_detailed(to="bob", cents=500, repeat=2, scope=run_id)
    retry_first = pay.call_detailed(to="bob", cents=500, repeat=1, scope=run_id)
    assert [a.outcome for a in (first, again, retry, retry_first)] == [
        "executed", "executed", "replayed", "replayed"
    ]
    assert [c[:2] for c in paid.calls] == [("bob", 500), ("bob", 500)]
    # Each ordinal its own Idempotency-Key downstream; the first's key is the one without one.
    assert paid.calls[0][2] == toolonce.derive_key(run_id, "pay", {"to": "bob", "cents": 500})
    assert paid.calls[0][2] != paid.calls[1][2] == retry.key
    assert retry.value == {"payment": 2} and retry_first.value == {"payment": 1}
    assert first.note is None and again.note is None


def test_every_replay_carries_the_cores_note_with_the_next_ordinal(store, run_id):
    @toolonce.write(store, name="pay")
    def pay(to: str) -> str:
        return "ok"

    pay(to="bob", scope=run_id)
    replayed = pay.call_detailed(to="bob", scope=run_id)
    hint = _native.text("repeat_hint", {"tool": "pay", "repeat": "repeat", "next": "2"})
    assert replayed.note is not None and replayed.note.endswith(hint)
    assert replayed.key in replayed.note and "Z" in replayed.note
    assert replayed.value == "ok"  # the recorded result, unchanged
    pay(to="bob", repeat=2, scope=run_id)
    again = pay.call_detailed(to="bob", repeat=2, scope=run_id)
    assert again.note.endswith(
        _native.text("repeat_hint", {"tool": "pay", "repeat": "repeat", "next": "3"})
    )


def test_a_replayed_failure_carries_the_note_too(store, run_id):
    @toolonce.write(store, name="charge")
    def charge(card: str) -> str:
        raise toolonce.PermanentError("card declined")

    with pytest.raises(toolonce.PermanentError):
        charge(card="A", scope=run_id)
    answer = charge.call_detailed(card="A", scope=run_id)
    assert answer.outcome == "replayed_failure"
    head = _native.templates()["replayed_failure"].split("{tool}")[0]
    assert answer.note.startswith(head) and answer.error.note == answer.note


def test_a_tool_without_the_argument_is_told_it_cannot_be_repeated(store, run_id):
    @toolonce.write(store, name="pay", repeat_argument=None)
    def pay(to: str) -> str:
        return "ok"

    assert "repeat" not in inspect.signature(pay).parameters
    pay(to="bob", scope=run_id)
    assert pay.call_detailed(to="bob", scope=run_id).note.endswith(_native.text("repeat_off", {}))
    with pytest.raises(toolonce.InvalidArgumentsError):
        pay(to="bob", repeat=2, scope=run_id)  # an argument it does not take


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_a_bad_ordinal_is_refused_with_the_cores_text_and_nothing_runs(store, run_id, bad):
    paid = Counter()

    @toolonce.write(store, name="pay")
    def pay(to: str) -> str:
        paid.add(to)
        return "ok"

    with pytest.raises(toolonce.InvalidArgumentsError) as refused:
        pay(to="bob", repeat=bad, scope=run_id)
    assert refused.value.message.startswith(refusal_head("repeat"))
    assert refused.value.message.endswith(
        _native.templates()["repeat_invalid"].split("{tool}")[1].replace("{tool}", "pay")
    )
    assert paid.calls == []
    # Nothing was claimed: the first real call runs.
    assert pay.call_detailed(to="bob", scope=run_id).outcome == "executed"


def test_an_async_write_function_takes_the_ordinal_the_same_way(store, run_id):
    paid = Counter()

    @toolonce.write(store, name="pay")
    async def pay(to: str) -> int:
        return paid.add(to)

    async def main():
        return [
            (await pay.call_detailed(to="bob", scope=run_id)).outcome,
            (await pay.call_detailed(to="bob", repeat=2, scope=run_id)).outcome,
            (await pay.call_detailed(to="bob", repeat=2, scope=run_id)).outcome,
        ]

    assert asyncio.run(main()) == ["executed", "executed", "replayed"]
    assert len(paid.calls) == 2
    with pytest.raises(toolonce.InvalidArgumentsError):
        asyncio.run(pay(to="bob", repeat=0, scope=run_id))


def test_a_function_with_its_own_repeat_parameter_keeps_it_and_it_is_logged(store, run_id, caplog):
    seen = []

    with caplog.at_level(logging.WARNING, logger="toolonce"):

        @toolonce.write(store, name="ring")
        def ring(bell: str, repeat: int = 1) -> int:
            seen.append(repeat)
            return repeat

    assert any("its own argument 'repeat'" in r.getMessage() for r in caplog.records)
    assert ring(bell="a", repeat=3, scope=run_id) == 3
    assert ring(bell="a", repeat=3, scope=run_id) == 3  # replayed: its own argument is keyed
    assert ring(bell="a", repeat=0, scope=run_id) == 0  # not an ordinal: never refused
    assert seen == [3, 0]
    assert ring.key_for(run_id, bell="a", repeat=3) == toolonce.derive_key(
        run_id, "ring", {"bell": "a", "repeat": 3}
    )


def test_the_argument_is_in_the_signature_with_the_cores_description_and_its_name_is_configurable(store):
    @toolonce.write(store, name="pay", repeat_argument="again")
    def pay(to: str) -> str:
        return "ok"

    params = inspect.signature(pay).parameters
    assert list(params) == ["to", "again"]
    again = params["again"]
    assert again.kind is inspect.Parameter.KEYWORD_ONLY and again.default is None
    from pydantic import TypeAdapter

    adapter = TypeAdapter(again.annotation)
    schema = adapter.json_schema()
    assert schema["description"] == _native.text("repeat_description", {})
    assert {"minimum": 1, "maximum": DATA["max"]}.items() <= next(
        s for s in schema["anyOf"] if s.get("type") == "integer"
    ).items()
    # Not validated (nor coerced) by a framework: the core reads what the model sent.
    assert adapter.validate_python("2") == "2" and adapter.validate_python(True) is True


def test_a_bad_repeat_argument_option_is_refused_when_decorated(store):
    for bad in ("", "a\0b", 3):
        with pytest.raises(toolonce.ConfigError):
            toolonce.write(store, name="pay", repeat_argument=bad)(lambda to: to)
