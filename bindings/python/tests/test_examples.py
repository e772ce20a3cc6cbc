"""The examples run as tests, offline, on a SQLite file and on the session's Redis."""

from __future__ import annotations

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
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), url], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_openai_agents_example_sends_one_email_for_duplicate_calls_and_a_retried_run(example_url):
    out = run_example("openai_agents.py", example_url)
    assert "emails sent: 1" in out


def test_the_langgraph_example_issues_one_refund_across_a_crash_and_a_resume(example_url):
    out = run_example("langgraph_resume.py", example_url)
    assert "refunds issued: 1" in out
