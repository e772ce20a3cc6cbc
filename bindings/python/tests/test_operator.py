"""The operator API (``Store.get``, ``list``, ``resolve``, ``remove`` and their async forms) on
every store fixture: what it reads, the fence of each write (a stale ``seen`` is refused as
``changed``, a live claim as ``live``, and nothing changes), bad input, and the same entries
read and settled by the Rust ``toolonce`` command."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time

import pytest

import toolonce

LEASE = 0.2


class Tools:
    """The tests' tools. A store refuses two different functions under one name, so each test
    decorates these bound methods again (one tool each), with what they do set here."""

    def __init__(self) -> None:
        self.runs: list = []
        self.stuck_does = "block"
        self.started, self.go = threading.Event(), threading.Event()

    def charge(self, order: str, by: str = "A") -> dict:
        self.runs.append(by)
        return {"by": by}

    def refund(self, order: str) -> None:
        raise toolonce.PermanentError("card declined", detail={"code": 51})

    async def stuck(self, order: str) -> dict:
        if self.stuck_does == "fail":
            raise ConnectionError("provider timed out")
        self.started.set()
        await asyncio.sleep(60)
        return {}

    def slow(self, order: str) -> dict:
        self.started.set()
        self.go.wait(10)
        return {"by": "owner"}


TOOLS = Tools()


@pytest.fixture(autouse=True)
def tools():
    TOOLS.__init__()
    return TOOLS


def recorder(store: toolonce.Store):
    """The tool that returns ``{"by": by}``, and the list of its runs."""
    return toolonce.write(store, name="charge", lease=LEASE)(TOOLS.charge), TOOLS.runs


def stuck(store: toolonce.Store, on_expired: str = "hold"):
    return toolonce.write(store, name="stuck", lease=LEASE, on_expired=on_expired)(TOOLS.stuck)


async def _abandoned(store: toolonce.Store, scope: str, order: str, on_expired: str) -> str:
    tool = stuck(store, on_expired)
    TOOLS.started.clear()
    task = asyncio.ensure_future(tool.call_detailed(order=order, scope=scope))
    for _ in range(1000):
        if TOOLS.started.is_set() or task.done():
            break
        await asyncio.sleep(0.01)
    assert TOOLS.started.is_set(), "the tool never started"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(LEASE * 3)
    return tool.key_for(scope, order=order)


def unknown_entry(store: toolonce.Store, scope: str, order: str = "o-1", on_expired: str = "hold") -> str:
    """The key of an entry left ``unknown``: its caller vanished mid-run and its lease lapsed."""
    return asyncio.run(_abandoned(store, scope, order, on_expired))


def test_get_reads_what_a_call_recorded(store, run_id):
    charge, _ = recorder(store)
    before = datetime.datetime.now(datetime.timezone.utc)
    charge(order="o-1", scope=run_id)
    entry = store.get(charge.key_for(run_id, order="o-1", by="A"))
    assert entry is not None
    assert (entry.state, entry.result, entry.attempts) == ("done", {"by": "A"}, 1)
    assert (entry.scope, entry.tool) == (run_id, "charge")
    assert entry.fingerprint and entry.owner_digest is None and entry.error is None
    assert before - datetime.timedelta(seconds=5) < entry.started_at <= entry.settled_at
    assert entry.expires_at > entry.settled_at and entry.lease_ends_at is None


def test_get_of_a_key_with_no_entry_is_none(store, run_id):
    assert store.get(toolonce.derive_key(run_id, "charge", {})) is None


@pytest.mark.parametrize("bad", ["idem:123", "charge", "IDEM:" + "0" * 32, "idem:" + "A" * 32])
def test_a_text_that_is_not_a_key_is_a_clear_error(store, bad):
    with pytest.raises(toolonce.InvalidArgumentsError, match="invalid operation key"):
        store.get(bad)


def test_a_key_that_is_not_a_text_is_a_clear_error(store):
    with pytest.raises(toolonce.InvalidArgumentsError, match="must be a str"):
        store.get(42)  # type: ignore[arg-type]


def test_a_failed_entry_shows_its_recorded_error(store, run_id):
    refund = toolonce.write(store, name="refund", lease=LEASE)(TOOLS.refund)
    with pytest.raises(toolonce.PermanentError):
        refund(order="o-1", scope=run_id)
    entry = store.get(refund.key_for(run_id, order="o-1"))
    assert entry.state == "failed" and entry.result is None
    assert entry.error == toolonce.StoredError("card declined", {"code": 51})


def test_an_unknown_entry_shows_its_owner_digest_and_when_its_lease_ended(store, run_id):
    key = unknown_entry(store, run_id)
    entry = store.get(key)
    assert (entry.state, entry.attempts, entry.tool) == ("unknown", 1, "stuck")
    assert len(entry.owner_digest) == 12 and entry.expires_at is None
    assert entry.lease_ends_at <= datetime.datetime.now(datetime.timezone.utc)


def test_list_pages_through_the_entries_of_a_scope_and_filters_them(store, run_id):
    charge, _ = recorder(store)
    for order in ("o-1", "o-2", "o-3"):
        charge(order=order, scope=run_id)
    seen, cursor = [], None
    for _ in range(10):
        page = store.list(scope=run_id, limit=2, cursor=cursor)
        assert len(page.entries) <= 2
        seen += page.entries
        cursor = page.next
        if cursor is None:
            break
    assert sorted(e.key for e in seen) == sorted(charge.key_for(run_id, order=o, by="A") for o in ("o-1", "o-2", "o-3"))
    assert all(e.scope == run_id for e in seen)
    assert store.list(scope=run_id, state="running").entries == []
    assert len(store.list(scope=run_id, state="done", tool="charge", limit=1000).entries) == 3
    assert store.list(scope=run_id, tool="another").entries == []


def test_a_listing_reports_an_entry_it_cannot_decode_and_still_lists_every_other_one(tmp_path, run_id):
    import sqlite3

    path = tmp_path / "garbled.db"
    with toolonce.open_store(f"sqlite://{path}") as store:
        charge, _ = recorder(store)
        for order in ("o-1", "o-2", "o-3"):
            charge(order=order, scope=run_id)
        keys = [charge.key_for(run_id, order=o, by="A") for o in ("o-1", "o-2", "o-3")]
        db = sqlite3.connect(path)
        with db:
            db.execute("UPDATE toolonce_entries SET payload = '{not json' WHERE key = ?", (keys[1],))
        db.close()
        read, unreadable, cursor = [], [], None
        for _ in range(10):
            page = store.list(limit=1, cursor=cursor)
            assert len(page.entries) + len(page.unreadable) <= 1
            read += [e.key for e in page.entries]
            unreadable += page.unreadable
            cursor = page.next
            if cursor is None:
                break
        assert sorted(read) == sorted([keys[0], keys[2]])
        assert [u.key for u in unreadable] == [keys[1]]
        assert "not JSON" in unreadable[0].reason
        # Filtered as far as the store can read the entry (SQLite keeps the state apart from the
        # payload it cannot decode).
        assert [u.key for u in store.list(state="done").unreadable] == [keys[1]]
        assert store.list(state="running").unreadable == []


@pytest.mark.parametrize("options, why", [
    ({"limit": 0}, "limit must be an int between 1 and 1000"),
    ({"limit": 1001}, "limit must be an int between 1 and 1000"),
    ({"limit": 2.5}, "limit must be"),
    ({"state": "pending"}, "unknown state 'pending'"),
    ({"scope": 3}, "scope must be a str"),
])
def test_a_listing_asked_wrongly_is_a_clear_error(store, options, why):
    with pytest.raises(toolonce.InvalidArgumentsError, match=why):
        store.list(**options)


def test_resolve_done_is_replayed_to_the_next_call(store, run_id):
    key = unknown_entry(store, run_id)
    answer = store.resolve(key, store.get(key), {"done": {"by": "operator"}})
    assert answer == toolonce.OperatorAnswer("applied") and answer.applied
    entry = store.get(key)
    assert (entry.state, entry.result, entry.attempts) == ("done", {"by": "operator"}, 1)


def test_resolve_failed_records_a_permanent_failure(store, run_id):
    key = unknown_entry(store, run_id)
    assert store.resolve(key, store.get(key), {"failed": "refunded by hand"}).kind == "applied"
    assert store.get(key).error == toolonce.StoredError("refunded by hand")


def test_resolve_release_forgets_the_entry(store, run_id):
    key = unknown_entry(store, run_id)
    assert store.resolve(key, store.get(key), "release").kind == "applied"
    assert store.get(key) is None


def test_a_stale_seen_gets_changed_and_nothing_changes(store, run_id):
    key = unknown_entry(store, run_id, on_expired="rerun")
    stale = store.get(key)
    # A takeover since the read: attempt 2, given back unknown after its transient failure.
    TOOLS.stuck_does = "fail"
    asyncio.run(stuck(store, "rerun").call_detailed(order="o-1", scope=run_id))
    time.sleep(0.01)  # a give-back is a zero-lease renewal, which Redis shows within a millisecond
    now = store.get(key)
    assert (now.state, now.attempts) == ("unknown", 2)
    answer = store.resolve(key, stale, {"done": {"by": "operator"}})
    assert answer.kind == "changed" and answer.entry.attempts == 2
    after = store.get(key)
    assert (after.state, after.attempts, after.owner_digest) == ("unknown", 2, now.owner_digest)


def test_a_removal_with_what_was_read_before_the_entry_was_settled_anew_is_changed(store, run_id):
    charge, runs = recorder(store)
    charge(order="o-1", scope=run_id)
    key = charge.key_for(run_id, order="o-1", by="A")
    first = store.get(key)
    assert store.remove(key, first).kind == "applied" and store.get(key) is None
    charge(order="o-1", by="A", scope=run_id)
    again = store.get(key)
    answer = store.remove(key, first)
    assert answer.kind == "changed" and answer.entry.settled_at == again.settled_at
    assert store.get(key).settled_at == again.settled_at and len(runs) == 2


@pytest.mark.parametrize("store_url", ["sqlite", "redis"], indirect=True)
def test_a_stale_removal_never_deletes_an_entry_settled_anew_within_the_same_millisecond(store, run_id):
    charge, _ = recorder(store)
    deleted = []
    for i in range(50):
        scope = f"{run_id}-{i}"
        charge(order="o-1", scope=scope)
        key = charge.key_for(scope, order="o-1", by="A")
        first = store.get(key)
        assert store.remove(key, first).kind == "applied"
        charge(order="o-1", scope=scope)
        if store.remove(key, first).kind == "applied":
            deleted.append(key)
    assert deleted == [], f"{len(deleted)} of 50 stale removals deleted the entry settled anew"


def test_resolve_of_a_live_claim_is_refused_and_its_owner_still_records(store, run_id):
    slow = toolonce.write(store, name="slow", lease=LEASE)(TOOLS.slow)
    started, go = TOOLS.started, TOOLS.go
    done = []
    worker = threading.Thread(target=lambda: done.append(slow(order="o-1", scope=run_id)))
    worker.start()
    try:
        assert started.wait(10)
        key = slow.key_for(run_id, order="o-1")
        live = store.get(key)
        assert live.state == "running" and live.lease_ends_at is not None
        answer = store.resolve(key, live, "release")
        assert answer.kind == "live" and answer.entry.state == "running"
        # Answered from what was read, with nothing sent: the async form too.
        later = asyncio.run(asyncio.wait_for(store.aresolve(key, live, "release"), 10))
        assert later.kind == "live"
        assert store.get(key).state == "running"
    finally:
        go.set()
        worker.join(10)
    assert done == [{"by": "owner"}] and store.get(key).result == {"by": "owner"}


def test_resolve_of_a_settled_entry_is_refused_as_settled(store, run_id):
    charge, _ = recorder(store)
    charge(order="o-1", scope=run_id)
    key = charge.key_for(run_id, order="o-1", by="A")
    answer = store.resolve(key, store.get(key), {"done": {"by": "operator"}})
    assert answer.kind == "settled" and store.get(key).result == {"by": "A"}
    later = asyncio.run(asyncio.wait_for(store.aresolve(key, store.get(key), "release"), 10))
    assert later.kind == "settled" and store.get(key).result == {"by": "A"}


def test_a_seen_of_another_key_is_refused_and_nothing_changes(store, run_id):
    key = unknown_entry(store, run_id, order="o-1")
    other = unknown_entry(store, run_id, order="o-2")
    with pytest.raises(toolonce.InvalidArgumentsError, match=f"the entry seen is of {other}, not {key}"):
        store.resolve(key, store.get(other), "release")
    assert store.get(key).state == "unknown" and store.get(other).state == "unknown"


@pytest.mark.parametrize("seen", [None, {"state": "unknown"}, "idem:" + "0" * 32])
def test_a_seen_that_is_not_an_entry_read_is_refused(store, run_id, seen):
    with pytest.raises(toolonce.InvalidArgumentsError, match="seen must be an Entry"):
        store.resolve("idem:" + "0" * 32, seen, "release")  # type: ignore[arg-type]


@pytest.mark.parametrize("resolution, why", [
    ({"failed": "  "}, "failed needs a message"),
    ({"done": 1, "failed": "x"}, "resolution must be"),
    ("forget", "resolution must be"),
    ({"done": {1, 2}}, "the result is not JSON"),
])
def test_a_resolution_that_is_not_one_is_refused_and_nothing_changes(store, run_id, resolution, why):
    key = unknown_entry(store, run_id)
    with pytest.raises(toolonce.InvalidArgumentsError, match=why):
        store.resolve(key, store.get(key), resolution)
    assert store.get(key).state == "unknown"


def test_remove_of_an_unsettled_entry_is_refused_for_a_fenced_release(store, run_id):
    key = unknown_entry(store, run_id)
    with pytest.raises(toolonce.InvalidArgumentsError, match="with resolve"):
        store.remove(key, store.get(key))
    assert store.get(key).state == "unknown"


def test_the_async_methods_answer_as_the_sync_ones(store, run_id):
    key = unknown_entry(store, run_id)

    async def operate():
        seen = await store.aget(key)
        page = await store.alist(scope=run_id)
        resolved = await store.aresolve(key, seen, {"done": {"by": "operator"}})
        done = await store.aget(key)
        removed = await store.aremove(key, done)
        with pytest.raises(toolonce.InvalidArgumentsError):
            await store.aget("nope")
        return seen, page, resolved, done, removed, await store.aget(key)

    seen, page, resolved, done, removed, gone = asyncio.run(operate())
    assert seen.state == "unknown" and [e.key for e in page.entries] == [key]
    assert resolved.kind == "applied" and done.result == {"by": "operator"}
    assert removed.kind == "applied" and gone is None
