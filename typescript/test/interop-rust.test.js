// Interop with the Rust side on every store (one SQLite file, Redis, Valkey, Redis Cluster,
// PostgreSQL): this package and the `toolonce` command (built from crates/toolonce-cli)
// deduplicate each other in every state an entry can be in: done and a sticky failure (each
// recorded by either side and replayed by the other), running
// (in flight), unknown and held, taken over under rerun with the same key, and settled by
// `toolonce resolve`. Both sides derive one key for one operation, so `toolonce exec --scope S
// --name TOOL --args JSON` is the same operation as TOOL called with those arguments in run S.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { spawn } = require("node:child_process");
const { openStore, idempotent, idemKey, PermanentError, OperationInFlight, OutcomeUnknown } = require("..");
const { storeUrls, uniqueRunId, tempDir, runProgram, sleep, crashAfterClaim, CRASH_ARGS, errorOf, defined } = require("./support.js");
const { backendOf } = require("../dist/open.js");

const BIN = process.env.TOOLONCE_BIN;
const skip = BIN ? false : "no `toolonce` command: set TOOLONCE_BIN or build it (cargo build -p toolonce-cli --all-features)";
const LEASE_MS = 600;

/** `toolonce ARGS…` on `url`: resolves with {code, stdout, stderr}. */
function toolonce(url, args) {
  return runProgram(BIN, args, { env: { ...process.env, TOOLONCE_STORE: url } });
}

/** `toolonce exec` of operation (scope, name, args) running `script` in sh; resolves as `toolonce`. */
function exec(url, scope, name, args, script, extra = []) {
  return toolonce(url, ["exec", "--scope", scope, "--name", name, "--args", JSON.stringify(args), ...extra, "--", "sh", "-c", script]);
}

/** The entry of `key` as `toolonce show --json` prints it. */
async function show(url, key) {
  const out = await toolonce(url, ["show", "--json", key]);
  assert.equal(out.code, 0, `toolonce show: ${out.stderr}`);
  return JSON.parse(out.stdout);
}

/** A marker file a command touches when it runs: whether it ran is whether the file exists. */
function marker() {
  const file = path.join(tempDir(), `ran-${uniqueRunId()}`);
  return { file, ran: () => fs.existsSync(file), script: `touch '${file}'` };
}

/** A write tool that counts its runs and records the context it ran with. */
function tool(name, body) {
  const runs = [];
  return {
    runs,
    /** @type {import("../dist/index.js").WriteTool} */
    def: {
      kind: "write",
      name,
      async run(args, ctx) {
        runs.push({ key: ctx.idem, mayHaveRunBefore: ctx.mayHaveRunBefore });
        return body(args, ctx);
      },
    },
  };
}

/** Starts `toolonce exec` running `sleep` in its own process group; resolves once its entry is running. */
async function startExec(url, scope, name, args, extra) {
  const child = spawn(defined(BIN), ["exec", "--scope", scope, "--name", name, "--args", JSON.stringify(args), ...extra, "--", "sleep", "30"], {
    env: { ...process.env, TOOLONCE_STORE: url },
    stdio: "ignore",
    detached: true,
  });
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const key = idemKey(scope, name, args);
  for (let i = 0; ; i++) {
    const out = await toolonce(url, ["show", "--json", key]);
    if (out.code === 0 && JSON.parse(out.stdout).state === "running") break;
    if (i > 200) throw new Error(`toolonce exec did not claim ${key}: ${out.stderr}`);
    await sleep(25);
  }
  return { key, exited, kill: (signal) => process.kill(-defined(child.pid), signal) };
}

const urls = storeUrls();
for (const name of ["sqlite", "redis", "valkey", "redis cluster", "postgres"]) {
  const url = urls[name];
  test.describe(`with the toolonce command, on ${name}`, { skip }, () => {
    let store;
    test.before(async () => {
      store = await openStore(url);
    });
    test.after(async () => {
      await store?.close();
    });

    test("both sides derive the same key for the same operation", async () => {
      const args = { to: "ada@example.com", items: [{ sku: "a", qty: 2 }], note: { text: "é" } };
      const out = await toolonce(url, ["key", "--json", "--scope", "run-k", "--tool", "send_invoice", "--args", JSON.stringify(args)]);
      assert.equal(out.code, 0, out.stderr);
      assert.equal(JSON.parse(out.stdout).key, idemKey("run-k", "send_invoice", args));
    });

    test("done: an operation executed here is replayed by toolonce exec, and one exec executed is replayed here", async () => {
      const scope = uniqueRunId("interop-done");
      const args = { customerId: "cus_1", amountCents: 500 };
      const charge = tool("charge_card", () => ({ chargeId: "ch_1" }));
      const ours = await idempotent(charge.def, store).runDetailed(args, { runId: scope });
      assert.equal(ours.outcome, "executed");
      const m = marker();
      const replay = await exec(url, scope, "charge_card", args, m.script);
      assert.equal(replay.code, 0, replay.stderr);
      assert.deepEqual(JSON.parse(replay.stdout), { chargeId: "ch_1" });
      assert.equal(m.ran(), false);

      const scope2 = uniqueRunId("interop-done");
      const first = await exec(url, scope2, "send_email", args, "echo sent");
      assert.equal(first.code, 0, first.stderr);
      const send = tool("send_email", () => "ran here");
      const answer = await idempotent(send.def, store).runDetailed(args, { runId: scope2 });
      assert.equal(answer.outcome, "replayed");
      assert.equal(answer.result.stdout, "sent\n");
      assert.equal(answer.result.exit_code, 0);
      assert.deepEqual(send.runs, []);
    });

    test("key fields: both sides key on the same fields, and a differing rest is a conflict on either side", async () => {
      const scope = uniqueRunId("interop-fields");
      const send = tool("send_email", () => ({ sent: 1 }));
      const wrapped = idempotent(send.def, store, { keyFields: ["/to"] });
      const ours = await wrapped.runDetailed({ to: "a@x", body: "one" }, { runId: scope });
      assert.equal(ours.outcome, "executed");
      const m = marker();
      const conflict = await exec(url, scope, "send_email", { to: "a@x", body: "two" }, m.script, ["--key-field", "/to"]);
      assert.equal(conflict.code, 65, conflict.stderr);
      assert.equal(m.ran(), false);
      const same = await exec(url, scope, "send_email", { body: "one", to: "a@x" }, m.script, ["--key-field", "/to"]);
      assert.equal(same.code, 0, same.stderr);
      assert.equal(m.ran(), false);

      const scope2 = uniqueRunId("interop-fields");
      const first = await exec(url, scope2, "send_email", { to: "b@x", body: "one" }, "echo sent", ["--key-field", "/to"]);
      assert.equal(first.code, 0, first.stderr);
      const answer = await wrapped.runDetailed({ to: "b@x", body: "two" }, { runId: scope2 });
      assert.equal(answer.outcome, "conflict");
      assert.equal(send.runs.length, 1);
    });

    test("a sticky failure recorded here is replayed by toolonce exec without running", async () => {
      const scope = uniqueRunId("interop-failed");
      const args = { card: "4000" };
      const charge = tool("charge_card", () => {
        // No detail: exec reads a failure's detail as its own record (exit code, output).
        throw new PermanentError("card declined");
      });
      const ours = await idempotent(charge.def, store).runDetailed(args, { runId: scope });
      assert.ok(ours.error instanceof PermanentError);
      const entry = await show(url, ours.key);
      assert.equal(entry.state, "failed");
      const m = marker();
      const replay = await exec(url, scope, "charge_card", args, m.script);
      assert.equal(replay.code, 1);
      assert.match(replay.stderr, /card declined/);
      assert.equal(m.ran(), false);
    });

    test("a sticky failure toolonce exec recorded (a non-zero exit) is replayed here as a PermanentError without running", async () => {
      const scope = uniqueRunId("interop-failed");
      const args = { card: "4000" };
      const first = await exec(url, scope, "charge_card", args, "echo declined >&2; exit 3");
      assert.equal(first.code, 3, first.stderr);
      const key = idemKey(scope, "charge_card", args);
      assert.equal((await show(url, key)).state, "failed");
      const charge = tool("charge_card", () => "ran here");
      const answer = await idempotent(charge.def, store).runDetailed(args, { runId: scope });
      assert.equal(answer.outcome, "replayed_failure");
      assert.equal(answer.key, key);
      assert.ok(answer.error instanceof PermanentError, String(answer.error));
      assert.equal(answer.error.replayed, true);
      assert.equal(answer.error.message, "the command exited with code 3");
      // exec's record of the run is the failure's detail.
      assert.equal(errorOf(answer).detail.exit_code, 3);
      assert.equal(errorOf(answer).detail.stderr, "declined\n");
      await assert.rejects(idempotent(charge.def, store).run(args, { runId: scope }), (e) => e instanceof PermanentError && e.replayed === true);
      assert.deepEqual(charge.runs, []);
    });

    test("running: each side answers in flight while the other runs the operation", async () => {
      const scope = uniqueRunId("interop-running");
      const args = { n: 1 };
      /** @type {((value: unknown) => void) | undefined} */
      let release;
      const slow = tool("deploy", () => new Promise((r) => (release = r)));
      const wrapped = idempotent(slow.def, store);
      const first = wrapped.run(args, { runId: scope });
      while (release === undefined) await sleep(5);
      const m = marker();
      const dup = await exec(url, scope, "deploy", args, m.script);
      assert.equal(dup.code, 75, dup.stderr);
      assert.equal(m.ran(), false);
      release({ deployed: true });
      assert.deepEqual(await first, { deployed: true });

      const scope2 = uniqueRunId("interop-running");
      const running = await startExec(url, scope2, "deploy", args, []);
      const other = tool("deploy", () => "ran here");
      await assert.rejects(idempotent(other.def, store).run(args, { runId: scope2 }), OperationInFlight);
      assert.deepEqual(other.runs, []);
      running.kill("SIGTERM");
      await running.exited;
    });

    test("unknown: a crash on either side leaves the operation unknown, and the other side holds it", async () => {
      const scope = uniqueRunId("interop-unknown");
      const key = await crashAfterClaim(url, scope, LEASE_MS);
      await sleep(LEASE_MS + 300);
      assert.equal((await show(url, key)).state, "unknown");
      const m = marker();
      const held = await exec(url, scope, "charge_card", CRASH_ARGS, m.script, ["--on-expired", "hold"]);
      assert.equal(held.code, 73, held.stderr);
      assert.equal(m.ran(), false);

      const scope2 = uniqueRunId("interop-unknown");
      const running = await startExec(url, scope2, "charge_card", CRASH_ARGS, ["--lease", "0.6"]);
      running.kill("SIGKILL");
      await running.exited;
      await sleep(LEASE_MS + 300);
      const charge = tool("charge_card", () => "ran here");
      await assert.rejects(idempotent(charge.def, store, { onExpired: "hold" }).run(CRASH_ARGS, { runId: scope2 }), (e) => {
        assert.ok(e instanceof OutcomeUnknown, String(e));
        assert.equal(e.key, running.key);
        return true;
      });
      assert.deepEqual(charge.runs, []);
    });

    test("rerun: either side takes over the other's unknown operation and runs it again with the same key", async () => {
      const scope = uniqueRunId("interop-rerun");
      const key = await crashAfterClaim(url, scope, LEASE_MS);
      await sleep(LEASE_MS + 300);
      const rerun = await exec(url, scope, "charge_card", CRASH_ARGS, 'printf %s "$TOOLONCE_KEY"', ["--on-expired", "rerun"]);
      assert.equal(rerun.code, 0, rerun.stderr);
      assert.equal(rerun.stdout, key);
      const entry = await show(url, key);
      assert.equal(entry.state, "done");
      assert.equal(entry.attempts, 2);

      const scope2 = uniqueRunId("interop-rerun");
      const running = await startExec(url, scope2, "charge_card", CRASH_ARGS, ["--lease", "0.6"]);
      running.kill("SIGKILL");
      await running.exited;
      await sleep(LEASE_MS + 300);
      const charge = tool("charge_card", () => ({ charged: true }));
      assert.deepEqual(await idempotent(charge.def, store, { onExpired: "rerun" }).run(CRASH_ARGS, { runId: scope2 }), { charged: true });
      assert.deepEqual(charge.runs, [{ key: running.key, mayHaveRunBefore: true }]);
      const after = await show(url, running.key);
      assert.equal(after.state, "done");
      assert.equal(after.attempts, 2);
    });

    test("resolve: toolonce resolve settles an operation left unknown here, as done or as failed, and it is replayed", async () => {
      const scope = uniqueRunId("interop-resolve");
      const key = await crashAfterClaim(url, scope, LEASE_MS);
      await sleep(LEASE_MS + 300);
      const done = await toolonce(url, ["resolve", key, "--done", JSON.stringify({ charged: true, by: "operator" })]);
      assert.equal(done.code, 0, done.stderr);
      const charge = tool("charge_card", () => "ran here");
      const wrapped = idempotent(charge.def, store);
      const answer = await wrapped.runDetailed(CRASH_ARGS, { runId: scope });
      assert.equal(answer.outcome, "replayed");
      assert.deepEqual(answer.result, { charged: true, by: "operator" });

      const scope2 = uniqueRunId("interop-resolve");
      const key2 = await crashAfterClaim(url, scope2, LEASE_MS);
      await sleep(LEASE_MS + 300);
      const failed = await toolonce(url, ["resolve", key2, "--failed", "the charge bounced"]);
      assert.equal(failed.code, 0, failed.stderr);
      await assert.rejects(wrapped.run(CRASH_ARGS, { runId: scope2 }), (e) => {
        assert.ok(e instanceof PermanentError, String(e));
        assert.equal(e.replayed, true);
        assert.equal(e.message, "the charge bounced");
        return true;
      });
      assert.deepEqual(charge.runs, []);
    });
  });
}

test.describe("stores the toolonce command created", { skip }, () => {
  /** Runs exec once on a fresh store at `url` (which creates its schema there), then replays it here. */
  async function createdThereReplayedHere(url) {
    const scope = uniqueRunId("created-by-rust");
    const first = await exec(url, scope, "send_email", { to: "a@x" }, "echo created");
    assert.equal(first.code, 0, first.stderr);
    const store = await openStore(url);
    try {
      const send = tool("send_email", () => "ran here");
      const answer = await idempotent(send.def, store).runDetailed({ to: "a@x" }, { runId: scope });
      assert.equal(answer.outcome, "replayed");
      assert.equal(answer.result.stdout, "created\n");
      assert.deepEqual(send.runs, []);
    } finally {
      await store.close();
    }
  }

  test("a SQLite file the toolonce command created is used here", async () => {
    await createdThereReplayedHere(`sqlite://${path.join(tempDir(), `created-by-rust-${process.pid}.db`)}`);
  });

  test("a PostgreSQL database the toolonce command created the schema in is used here", async () => {
    const { Client } = require("pg");
    const admin = new Client({ connectionString: urls.postgres });
    await admin.connect();
    const db = `created_by_rust_${process.pid}`;
    try {
      await admin.query(`CREATE DATABASE ${db}`);
      await createdThereReplayedHere(urls.postgres.replace(/\/[^/]*$/, `/${db}`));
    } finally {
      await admin.end();
    }
  });
});

// The settled entry itself: on Valkey both sides settle with a native `SET … IFEQ`, on Redis 7
// with the script, and the bytes must agree (a reference-design worker reads them too).
for (const name of ["redis", "valkey"]) {
  test(`on ${name}, a done entry settled here is byte for byte the one the toolonce command writes, but for its times and owner, and each side replays the other's`, { skip }, async () => {
    const { Redis } = require("ioredis");
    const base = urls[name];
    const scope = uniqueRunId("interop-bytes");
    const args = { to: "ada@example.com", note: "é\u2028\"" };
    const rust = `${base}?prefix=rs:`;
    const ours = `${base}?prefix=ts:`;
    const first = await exec(rust, scope, "send_email", args, "echo sent");
    assert.equal(first.code, 0, first.stderr);
    const key = idemKey(scope, "send_email", args);
    const redis = new Redis(base);
    const store = await openStore(ours);
    try {
      const theirs = defined(await redis.get(`rs:${key}`));
      // The same claim as exec's (its about members include the command line as the detail),
      // settled with exec's result text, through this package's store.
      const wire = JSON.parse(theirs);
      const backend = backendOf(store);
      const owner = require("node:crypto").randomBytes(16).toString("hex");
      const about = { scope: wire.scope, tool: wire.tool, detail: wire.detail };
      const claim = await backend.claim({ key, fingerprint: wire.fingerprint, owner, leaseMs: 30_000, retentionMs: 86_400_000, takeover: false, about });
      assert.deepEqual(claim, { kind: "won" });
      const result = defined(/^\{"status":"done","result":(.*),"startedAt":/.exec(theirs))[1];
      assert.equal(await backend.complete(key, owner, result, 86_400_000), true);
      const mine = defined(await redis.get(`ts:${key}`));
      // And for the owner's digest: each side's attempt had an owner of its own.
      const times = (v) => v.replace(/"(startedAt|completedAt|settledAt|firstStartedAt)":\d+/g, '"$1":T').replace(/"owner":"[0-9a-f]{40}"/, '"owner":D');
      assert.equal(times(mine), times(theirs));
      assert.match(mine, /"completedAt":(\d+),"settledAt":\1,/);
      const m = marker();
      const replay = await exec(ours, scope, "send_email", args, m.script);
      assert.equal(replay.code, 0, replay.stderr);
      assert.equal(m.ran(), false);
      assert.equal(replay.stdout, "sent\n");
    } finally {
      redis.disconnect();
      await store.close();
    }
  });
}
