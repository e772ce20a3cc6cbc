"""What the machine's idle CPUs do, for bench.py's output: a KVM guest whose cpuidle driver is
haltpoll with guest_halt_poll_ns=0 halts a CPU the moment it is idle, so every wait on the store
costs a wake-up whose price moves from run to run, and the 1-caller columns then measure the
host more than any library. `toolonce bench` and the TypeScript bench say the same in the same
words."""

from __future__ import annotations

from pathlib import Path

IDLE_DRIVER = "/sys/devices/system/cpu/cpuidle/current_driver"
HALT_POLL_NS = "/sys/module/haltpoll/parameters/guest_halt_poll_ns"


def halting_note(driver: str | None, poll_ns: str | None) -> str | None:
    """The note for a machine whose idle driver and halt-poll setting read `driver`, `poll_ns`."""
    if driver is None or poll_ns is None:
        return None
    if driver.strip() != "haltpoll" or poll_ns.strip() != "0":
        return None
    return (
        "this KVM guest halts an idle CPU at once (cpuidle haltpoll, guest_halt_poll_ns=0), "
        "so every wait on the store costs a wake-up whose price varies from run to run: the "
        "1-caller columns say more about the host than about any library; for steady figures, "
        f"as root: echo 200000 > {HALT_POLL_NS} (and back to 0 after)"
    )


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def idle_note() -> str | None:
    """This machine's note, or None where its idle CPUs do not halt at once (or it cannot tell)."""
    return halting_note(_read(IDLE_DRIVER), _read(HALT_POLL_NS))
