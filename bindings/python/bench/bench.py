"""toolonce's decorator against idemkit and exactly-once on the same Redis and PostgreSQL, in
the same run, with the same workload: OPS operations by one caller the first time, the same
OPS again (replays), OPS first-time operations spread over WORKERS concurrent workers, and
those again (replays) over as many.

Each library decorates the same function (it counts its executions and returns a small dict)
and keys on the same arguments (run, order, cents); a fresh run id keeps every phase's
operations new. Sync libraries use threads as workers, idemkit (async) uses asyncio tasks.
Run by bench/run, which installs the libraries; prints ops/s and toolonce's ratio to idemkit.

The last row is the raw floor: the minimal unsafe design written directly on the drivers the
other libraries use (redis-py; psycopg with prepared statements), with no fencing, heartbeat,
fingerprint or canonical key: first-time `SET NX PX` + `SET PX` (SQL: `INSERT … ON CONFLICT DO
NOTHING` + `UPDATE`), replay one `GET` (`SELECT`). A first-time write needs two round trips
whatever the library (claim before the side effect, record after it), so this row bounds what
any library can reach from Python on that store, and shows whether a ratio is reachable at all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from servers import PostgresServer, RedisServer  # noqa: E402

from idle import idle_note  # noqa: E402

import toolonce  # noqa: E402


class Effect:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.n = 0

    def __call__(self, order: int) -> dict:
        with self.lock:
            self.n += 1
        return {"order": order, "status": "charged"}


# -- one adapter per library: setup() -> (sync call or async call) ---------------------------


class Toolonce:
    name = "toolonce"
    is_async = False

    def __init__(self, url: str) -> None:
        self.store = toolonce.open_store(url)
        self.effect = Effect()

        @toolonce.write(self.store, name="charge", in_flight=toolonce.Wait(30))
        def charge(run: str, order: int, cents: int) -> dict:
            return self.effect(order)

        self.fn = charge

    def call(self, run: str, order: int) -> dict:
        return self.fn(run=run, order=order, cents=100, scope=run)

    def close(self) -> None:
        self.store.close()


class ToolonceAsync(Toolonce):
    name = "toolonce (async)"
    is_async = True

    def __init__(self, url: str) -> None:
        self.store = toolonce.open_store(url)
        self.effect = Effect()

        @toolonce.write(self.store, name="charge_async", in_flight=toolonce.Wait(30))
        async def charge(run: str, order: int, cents: int) -> dict:
            return self.effect(order)

        self.fn = charge

    async def call(self, run: str, order: int) -> dict:  # type: ignore[override]
        return await self.fn(run=run, order=order, cents=100, scope=run)


class ExactlyOnce:
    name = "exactly-once"
    is_async = False

    def __init__(self, url: str) -> None:
        import exactly_once

        self.store = (
            exactly_once.Store.redis(url) if url.startswith("redis") else exactly_once.Store.postgres(url)
        )
        self.effect = Effect()

        @exactly_once.once(self.store, key=lambda run, order, cents: f"charge:{run}:{order}:{cents}")
        def charge(run: str, order: int, cents: int) -> dict:
            return self.effect(order)

        self.fn = charge

    def call(self, run: str, order: int) -> dict:
        return self.fn(run=run, order=order, cents=100)

    def close(self) -> None:
        close = getattr(self.store, "close", None)
        if close:
            close()


class Idemkit:
    name = "idemkit"
    is_async = True

    def __init__(self, url: str) -> None:
        self.url = url
        self.effect = Effect()
        self.fn = None

    async def setup(self) -> None:
        from idemkit import MethodConfig, PostgresBackend, RedisBackend, idempotent

        if self.url.startswith("redis"):
            self.backend = RedisBackend.from_url(self.url)
        else:
            from idemkit.backends.postgres import init_pg

            await init_pg(self.url)
            self.backend = PostgresBackend.from_url(self.url)

        @idempotent(backend=self.backend, config=MethodConfig(wait_timeout_seconds=30))
        async def charge(run: str, order: int, cents: int) -> dict:
            return self.effect(order)

        self.fn = charge

    async def call(self, run: str, order: int) -> dict:
        return await self.fn(run=run, order=order, cents=100)

    async def aclose(self) -> None:
        await self.backend.aclose()


class RawFloor:
    """The minimal unsafe design, straight on the drivers: see the module's docstring."""

    name = "raw floor (unsafe)"
    is_async = False

    def __init__(self, url: str) -> None:
        self.url = url
        self.effect = Effect()
        self.replaying = False
        self.local = threading.local()
        if url.startswith("redis"):
            import redis

            self.redis = redis.Redis.from_url(url)
        else:
            import psycopg

            self.redis = None
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS bench_raw_floor "
                    "(key text PRIMARY KEY, value text, expires_at timestamptz)"
                )

    def _pg(self):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            import psycopg

            # prepare_threshold=0: every statement is prepared on first use, as toolonce's are.
            conn = psycopg.connect(self.url, autocommit=True, prepare_threshold=0)
            self.local.conn = conn
        return conn

    def call(self, run: str, order: int) -> dict:
        key = f"floor:{run}:{order}:100"
        if self.redis is not None:
            if self.replaying:
                return json.loads(self.redis.get(key))
            if not self.redis.set(key, '{"status":"running"}', nx=True, px=60_000):
                return json.loads(self.redis.get(key))
            result = self.effect(order)
            self.redis.set(key, json.dumps(result), px=600_000)
            return result
        conn = self._pg()
        if self.replaying:
            return json.loads(
                conn.execute("SELECT value FROM bench_raw_floor WHERE key = %s", (key,)).fetchone()[0]
            )
        inserted = conn.execute(
            "INSERT INTO bench_raw_floor VALUES (%s, NULL, now() + interval '1 minute') "
            "ON CONFLICT DO NOTHING",
            (key,),
        ).rowcount
        if inserted != 1:
            raise RuntimeError(f"the raw floor found {key} taken: the bench reuses a key")
        result = self.effect(order)
        conn.execute(
            "UPDATE bench_raw_floor SET value = %s, expires_at = now() + interval '10 minutes' "
            "WHERE key = %s",
            (json.dumps(result), key),
        )
        return result

    def close(self) -> None:
        if self.redis is not None:
            self.redis.close()


# -- phases ----------------------------------------------------------------------------------


def sync_phase(lib, ops: int, workers: int, run: str) -> float:
    start = time.perf_counter()
    if workers == 1:
        for i in range(ops):
            lib.call(run, i)
    else:
        def worker(w: int) -> None:
            for i in range(w, ops, workers):
                lib.call(run, i)

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(worker, range(workers)))
    return ops / (time.perf_counter() - start)


async def async_phase(lib, ops: int, workers: int, run: str) -> float:
    start = time.perf_counter()

    async def worker(w: int) -> None:
        for i in range(w, ops, workers):
            await lib.call(run, i)

    await asyncio.gather(*(worker(w) for w in range(workers)))
    return ops / (time.perf_counter() - start)


def measure(lib, ops: int, workers: int) -> dict:
    """first (1 caller), replay (1 caller, same ops), concurrent first-time (workers), and
    those replayed by as many workers."""
    first_run, concurrent_run = f"r-{uuid.uuid4().hex}", f"c-{uuid.uuid4().hex}"
    if lib.is_async:
        async def all_phases():
            if hasattr(lib, "setup"):
                await lib.setup()
            await async_phase(lib, 50, 1, f"warm-{uuid.uuid4().hex}")
            out = {
                "first": await async_phase(lib, ops, 1, first_run),
                "replay": await async_phase(lib, ops, 1, first_run),
                "concurrent": await async_phase(lib, ops, workers, concurrent_run),
                "concurrent_replay": await async_phase(lib, ops, workers, concurrent_run),
            }
            if hasattr(lib, "aclose"):
                await lib.aclose()
            return out

        out = asyncio.run(all_phases())
    else:
        sync_phase(lib, 50, 1, f"warm-{uuid.uuid4().hex}")
        first = sync_phase(lib, ops, 1, first_run)
        # The raw floor replays with one read; the libraries find out by themselves.
        lib.replaying = True
        replay = sync_phase(lib, ops, 1, first_run)
        lib.replaying = False
        concurrent = sync_phase(lib, ops, workers, concurrent_run)
        lib.replaying = True
        concurrent_replay = sync_phase(lib, ops, workers, concurrent_run)
        out = {
            "first": first,
            "replay": replay,
            "concurrent": concurrent,
            "concurrent_replay": concurrent_replay,
        }
        lib.close()
    # Every first-time operation ran once: 50 warm-up + 2 x ops first-time, none on replays.
    assert lib.effect.n == 50 + 2 * ops, (lib.name, lib.effect.n)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    redis, postgres = RedisServer(), PostgresServer()
    try:
        time.sleep(1)
        rows = []
        for store, url in [("Redis", redis.url), ("PostgreSQL", postgres.url)]:
            results = {}
            for cls in (Toolonce, ToolonceAsync, Idemkit, ExactlyOnce, RawFloor):
                lib = cls(url)
                results[lib.name] = measure(lib, args.ops, args.workers)
                print(f"{store:10} {lib.name:17} " + "  ".join(
                    f"{k} {v:9.0f}/s" for k, v in results[lib.name].items()), flush=True)
            rows.append((store, results))
        print()
        print(f"{args.ops} operations per phase, {args.workers} workers; ops/s "
              "(ratio = toolonce / idemkit; for the raw floor, floor / idemkit: the most any "
              "library could reach)")
        print()
        print("| store | library | first-time, 1 caller | replay, 1 caller | "
              f"first-time, {args.workers} workers | replay, {args.workers} workers |")
        print("|---|---|---:|---:|---:|---:|")
        for store, results in rows:
            base = results["idemkit"]
            for name, r in results.items():
                cells = []
                for phase in ("first", "replay", "concurrent", "concurrent_replay"):
                    cell = f"{r[phase]:,.0f}"
                    if name.startswith("toolonce") or name.startswith("raw"):
                        cell += f" ({r[phase] / base[phase]:.1f}×)"
                    cells.append(cell)
                print(f"| {store} | {name} | " + " | ".join(cells) + " |")
        note = idle_note()
        if note:
            print()
            print(f"note: {note}")
    finally:
        redis.stop()
        postgres.stop()


if __name__ == "__main__":
    main()
