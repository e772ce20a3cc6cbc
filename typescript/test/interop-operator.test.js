// The operator API and the Rust command settle each other's entries on every shared store
// (SQLite, Redis, Valkey, Redis Cluster, PostgreSQL): an entry left unknown by `toolonce exec`
// (killed past its lease) is resolved by `store.resolve`, one left unknown by this package is
// resolved by `toolonce resolve`, and a settled entry either side wrote is removed by the other
// (the fence compares the start and settling time each side reads of the other's entry).
// TOOLONCE_BIN must be the Rust command built from this tree: without it the test fails.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const { openStore, idempotent, idemKey } = require("..");
const { storeUrls, uniqueRunId, runProgram, sleep, crashAfterClaim, CRASH_ARGS, defined } = require("./support.js");

const BIN = process.env.TOOLONCE_BIN;

function toolonce(url, args) {
  assert.ok(BIN, "TOOLONCE_BIN must name the `toolonce` command (cargo build -p toolonce-cli --all-features)");
  return runProgram(BIN, args, { env: { ...process.env, TOOLONCE_STORE: url } });
}

async function until(store, key, state) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const entry = await store.get(key);
    if (entry?.state === state) return entry;
    assert.ok(Date.now() < deadline, `never became ${state}: ${JSON.stringify(entry)}`);
    await sleep(50);
  }
}

/** `toolonce exec` of a command that hangs, SIGKILLed once it has claimed: its entry is left to become unknown. */
async function rustLeftRunning(url, scope) {
  const child = spawn(defined(BIN), ["exec", "--store", url, "--scope", scope, "--name", "deploy", "--lease", "1", "--", "sleep", "30"], { stdio: "ignore" });
  const store = await openStore(url);
  try {
    await until(store, idemKey(scope, "deploy", {}), "running");
  } finally {
    child.kill("SIGKILL");
    await store.close();
  }
  await new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve(undefined) : child.once("exit", resolve)));
}

for (const [name, url] of Object.entries(storeUrls()).filter(([n]) => n !== "memory")) {
  test(`${name}: the Rust command and the operator API settle and remove each other's entries`, { timeout: 120_000 }, async (t) => {
    // The SQLite file must exist for `toolonce resolve` (it never creates one): this opens it.
    const store = await openStore(url);
    t.after(() => store.close());

    await t.test("an entry left unknown by toolonce exec is resolved by store.resolve", async () => {
      const scope = uniqueRunId("rust-unknown");
      await rustLeftRunning(url, scope);
      const key = idemKey(scope, "deploy", {});
      const unknown = await until(store, key, "unknown");
      const record = { exit_code: 0, stdout: "deployed\n", stderr: "" };
      assert.deepEqual(await store.resolve(key, unknown, { done: record }), { kind: "applied" });
      const shown = await toolonce(url, ["show", "--json", key]);
      assert.equal(shown.code, 0, shown.stderr);
      assert.equal(JSON.parse(shown.stdout).state, "done");
      // The Rust command replays it as if the command had run.
      const replay = await toolonce(url, ["exec", "--scope", scope, "--name", "deploy", "--", "sleep", "30"]);
      assert.equal(replay.code, 0, replay.stderr);
      assert.equal(replay.stdout, "deployed\n");
    });

    await t.test("an entry left unknown by this package is resolved by toolonce resolve", async () => {
      const runId = uniqueRunId("ts-unknown");
      const key = await crashAfterClaim(url, runId, 300);
      await until(store, key, "unknown");
      const out = await toolonce(url, ["resolve", key, "--done", '{"charged":"by hand"}']);
      assert.equal(out.code, 0, out.stderr);
      const entry = defined(await store.get(key));
      assert.equal(entry.state, "done");
      assert.deepEqual(entry.result, { charged: "by hand" });
      let runs = 0;
      const charge = idempotent({ kind: "write", name: "charge_card", run: async () => ++runs }, store);
      assert.deepEqual(await charge.run(CRASH_ARGS, { runId }), { charged: "by hand" });
      assert.equal(runs, 0);
    });

    await t.test("a settled entry of either side is removed by the other", async () => {
      const scope = uniqueRunId("rust-done");
      const ran = await toolonce(url, ["exec", "--scope", scope, "--name", "greet", "--", "echo", "hi"]);
      assert.equal(ran.code, 0, ran.stderr);
      const rustKey = idemKey(scope, "greet", {});
      assert.deepEqual(await store.remove(rustKey, defined(await store.get(rustKey))), { kind: "applied" });
      assert.equal(await store.get(rustKey), undefined);

      const runId = uniqueRunId("ts-done");
      await idempotent({ kind: "write", name: "send_email", run: async () => ({ sent: true }) }, store).run({}, { runId });
      const tsKey = idemKey(runId, "send_email", {});
      const rm = await toolonce(url, ["rm", tsKey]);
      assert.equal(rm.code, 0, rm.stderr);
      assert.equal(await store.get(tsKey), undefined);
    });
  });
}
