"""The framework versions the adapters are tested with are the ones the package states: each
extra of pyproject.toml bounds its framework above (no untested major), the version
requirements-examples.txt pins is inside that range, and it is the one installed here."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def extras() -> dict:
    """{distribution: (low, high)} of the optional dependencies, each ">=LOW,<HIGH"."""
    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    found = {}
    for name, low, high in re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9.]+),<([0-9.]+)"', block):
        found[name] = (low, high)
    return found


def pins() -> dict:
    lines = (ROOT / "requirements-examples.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def parts(v: str) -> tuple:
    return tuple(int(p) for p in re.findall(r"\d+", v)[:3])


def test_every_adapter_framework_has_a_bounded_extra():
    assert set(extras()) == {"langchain", "langchain-core", "pydantic-ai-slim", "openai-agents"}


@pytest.mark.parametrize("name", sorted(extras()))
def test_the_pinned_and_installed_framework_is_inside_its_stated_range(name):
    low, high = extras()[name]
    pinned = pins()[name]
    assert parts(low) <= parts(pinned) < parts(high), f"{name}=={pinned} is outside >={low},<{high}"
    assert version(name) == pinned, f"{name} {version(name)} is installed, {pinned} pinned"
