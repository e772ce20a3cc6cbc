"""The examples run as tests, offline, on a SQLite file and on the session's Redis; each ends
with `effects: N (expected N)` and exits 0 only then."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(params=["sqlite", "redis"])
def example_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'toolonce.db'}"
    server = request.getfixturevalue("redis_server")
    server.flush()
    return server.url


def run_example(name: str, url: str) -> str:
    """Runs the example on ``url``; its output, whose last line must say the effects it saw
    equal the ones it expected (and its exit status 0)."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), url], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"effects: (\d+) \(expected \1\)", last), last
    return done.stdout


def test_the_openai_agents_example_sends_one_email_for_duplicate_calls_and_a_retried_run(example_url):
    out = run_example("openai_agents.py", example_url)
    assert out.strip().endswith("effects: 1 (expected 1)")


def test_the_langgraph_example_issues_one_refund_across_a_crash_and_a_resume(example_url):
    out = run_example("langgraph_resume.py", example_url)
    assert "send on resume: replayed" in out
    assert out.strip().endswith("effects: 1 (expected 1)")


def test_the_langchain_example_sends_one_email_for_a_duplicate_call_and_a_retried_run(example_url):
    out = run_example("langchain_middleware.py", example_url)
    assert "call_3 send_email: replayed" in out
    assert "lookups: 2 (expected 2)" in out
    assert out.strip().endswith("effects: 1 (expected 1)")


def test_the_pydantic_ai_example_issues_one_refund_for_a_duplicate_call_and_a_retried_run(example_url):
    out = run_example("pydantic_ai_toolset.py", example_url)
    assert "lookups: 2 (expected 2)" in out
    assert out.strip().endswith("effects: 1 (expected 1)")


def test_an_example_exits_non_zero_when_its_effects_differ_from_the_expected(tmp_path):
    """The check cannot pass by itself: a store that forgets (a fresh memory store per process)
    makes the LangGraph example's resumed process run the tool again, and the example says so."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "langgraph_resume.py"), "memory://"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode != 0
    assert done.stdout.strip().splitlines()[-1] == "effects: 2 (expected 1)"
