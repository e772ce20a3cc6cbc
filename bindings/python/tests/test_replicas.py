"""A Redis store with ``replicas=1``: a result its replica did not acknowledge is the caller's,
and the caller's :class:`toolonce.Answer` says that the record may not survive a failover."""

from __future__ import annotations

import os
import signal
import time

import toolonce
from servers import RedisServer


def _wait_in_sync(primary: RedisServer) -> None:
    deadline = time.monotonic() + 20
    while b"state=online" not in primary.command("INFO", "replication"):
        assert time.monotonic() < deadline, "the replica did not sync"
        time.sleep(0.05)


def test_a_result_the_replica_did_not_acknowledge_is_returned_with_a_notice_that_says_so(run_id):
    primary = RedisServer()
    replica = RedisServer("--replicaof", "127.0.0.1", str(primary.port))
    try:
        _wait_in_sync(primary)
        # 2 s: the healthy replica must acknowledge the first call and the claims, which on a
        # loaded machine has taken over 200 ms; the stalled result then waits the whole 2 s.
        store = toolonce.open_store(f"{primary.url}/?replicas=1&replica_timeout_ms=2000")
        runs = []

        @toolonce.write(store, name="charge")
        def charge(card: str, stall: bool) -> dict:
            runs.append(card)
            if stall:
                # The replica stops while the tool runs: it acknowledged the claim, not the
                # result.
                os.kill(replica.proc.pid, signal.SIGSTOP)
            return {"receipt": f"r_{len(runs)}"}

        acknowledged = charge.call_detailed(card="a", stall=False, scope=run_id)
        assert (acknowledged.outcome, acknowledged.notice) == ("executed", None)

        try:
            first = charge.call_detailed(card="b", stall=True, scope=run_id)
        finally:
            os.kill(replica.proc.pid, signal.SIGCONT)
        assert (first.outcome, first.value) == ("executed", {"receipt": "r_2"})
        assert first.notice is not None
        assert "only 0 of the 1 replicas asked (replicas=1) acknowledged" in first.notice
        assert "the record may be lost" in first.notice

        # The record stands: a duplicate replays it, without a notice.
        again = charge.call_detailed(card="b", stall=True, scope=run_id)
        assert (again.outcome, again.value, again.notice) == ("replayed", {"receipt": "r_2"}, None)
        assert runs == ["a", "b"]
        store.close()
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
        replica.stop()
        primary.stop()
