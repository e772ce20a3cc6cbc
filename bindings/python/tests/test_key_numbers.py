"""The shared number vectors (crates/toolonce/tests/data/key_numbers.json), as Python holds
numbers: integer texts keep their digits up to 64 bits and are refused beyond, a float is keyed
as a double, and what JSON cannot write is refused, never keyed as something else."""

import hashlib
import json
import math
from pathlib import Path

import pytest

import toolonce

NUMBERS_JSON = Path(__file__).resolve().parents[3] / "crates/toolonce/tests/data/key_numbers.json"
VECTORS = json.loads(NUMBERS_JSON.read_text())


def key_of(canonical: str) -> str:
    text = f"{VECTORS['run_id']}\0{VECTORS['tool']}\0{canonical}"
    return "idem:" + hashlib.sha256(text.encode()).hexdigest()[:32]


def derive(args):
    return toolonce.derive_key(VECTORS["run_id"], VECTORS["tool"], args)


def as_python(value: dict):
    """The vector's value as Python holds it, or None where Python has no such value."""
    if "number" in value:
        return float(value["number"].replace("Infinity", "inf"))
    if "double" in value:
        return float(value["double"])
    if "integer" in value:
        return int(value["integer"])
    if "set" in value:
        return set(value["set"])
    return None


@pytest.mark.parametrize("case", VECTORS["exact"], ids=lambda c: c["args_json"])
def test_integer_texts_keep_their_exact_digits(case):
    assert derive(json.loads(case["args_json"])) == case["key"]


@pytest.mark.parametrize("case", VECTORS["refused"], ids=lambda c: c["args_json"])
def test_integers_beyond_64_bits_are_refused_with_a_message_naming_them(case):
    with pytest.raises(ValueError) as refused:
        derive(json.loads(case["args_json"]))
    assert case["names"] in str(refused.value) and "64 bits" in str(refused.value)


@pytest.mark.parametrize("case", VECTORS["values"], ids=lambda c: json.dumps(c["value"]))
def test_python_values_key_or_are_refused_as_the_vectors_say(case):
    held = as_python(case["value"])
    if case.get("python") == "skipped" or held is None:
        assert case.get("python") == "skipped", f"no Python value for {case}"
        return
    if case.get("refused"):
        with pytest.raises((ValueError, TypeError)):
            derive({"v": held})
        return
    assert not (isinstance(held, float) and not math.isfinite(held))
    assert derive({"v": held}) == key_of('{"v":' + case["canonical"] + "}"), case
