"""The benchmark's note on idle CPUs (bench/idle.py): given only where the guest halts an idle
CPU at once, and what it says of this machine agrees with this machine's own settings."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import idle  # noqa: E402


def test_the_note_is_given_for_haltpoll_with_no_polling_and_for_nothing_else() -> None:
    note = idle.halting_note("haltpoll\n", "0\n")
    assert note is not None
    assert "halts an idle CPU at once" in note
    assert f"echo 200000 > {idle.HALT_POLL_NS}" in note
    assert idle.halting_note("haltpoll\n", "200000\n") is None
    assert idle.halting_note("acpi_idle\n", "0\n") is None
    assert idle.halting_note("haltpoll\n", None) is None
    assert idle.halting_note(None, "0\n") is None


def test_the_note_on_this_machine_is_what_its_own_settings_call_for() -> None:
    def read(path: str) -> str | None:
        p = Path(path)
        return p.read_text() if p.exists() else None

    driver, poll = read(idle.IDLE_DRIVER), read(idle.HALT_POLL_NS)
    halts = (driver or "").strip() == "haltpoll" and poll is not None and poll.strip() == "0"
    assert (idle.idle_note() is not None) == halts
