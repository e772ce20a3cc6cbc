// The layer's conformance scenarios (crates/toolonce/tests/data/scenarios/scenarios.json, its
// README says the format), the same file the Rust suite runs on each of its store
// configurations and the Python package at its layer: every scenario through `idempotent` on
// every store, all of one store's at once, each in a run id of its own. A scenario not run and
// not listed as unsupported for "typescript" (with a reason) fails the test.
//
// Each caller has its own Store on the real backend behind a switchboard of faults: a claim
// applied whose reply is lost, renewals that never arrive, and a caller that vanishes (nothing it
// sends reaches the store any more, so its lease lapses while its tool is let go). The operator
// steps use the real store's own API (store.get, store.resolve, store.remove).

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { openStore, idempotent, PermanentError } = require("..");
const { Store, backendOf } = require("../dist/open.js");
const { StoreError } = require("../dist/errors.js");
const { repo, storeUrls, uniqueRunId, sleep } = require("./support.js");

const RUNNER = "typescript";
const FILE = path.join(repo, "crates", "toolonce", "tests", "data", "scenarios", "scenarios.json");
const PATIENCE_MS = 20_000;
/** How long a `start` without a blocking tool pauses, so the caller is claiming or waiting. */
const SETTLE_MS = 150;

const scenarioFile = JSON.parse(fs.readFileSync(FILE, "utf8"));

/** `real`'s backend behind the faults of one caller, as a Store of its own. */
function callerStore(real) {
  const backend = backendOf(real);
  const faults = new Set();
  const lost = (what) => new StoreError(`injected by the scenario: ${what}`, true);
  const gone = () => {
    if (faults.has("gone")) throw lost("the caller is gone");
  };
  /** @type {import("../dist/store.js").Backend} */
  const wrapped = {
    url: backend.url,
    async claim(req) {
      gone();
      const answer = await backend.claim(req);
      if (faults.delete("lose_next_claim_reply")) throw lost("the reply to the claim was lost");
      return answer;
    },
    async renew(...args) {
      gone();
      if (faults.has("lose_renewals")) throw lost("the renewal never arrived");
      return backend.renew(...args);
    },
    async complete(...args) {
      gone();
      return backend.complete(...args);
    },
    async fail(...args) {
      gone();
      return backend.fail(...args);
    },
    async get(key) {
      gone();
      return backend.get(key);
    },
    async resolve(...args) {
      gone();
      return backend.resolve(...args);
    },
    // The operator's calls pass through, so that the wrapper is a whole Backend.
    inspect: (key) => backend.inspect(key),
    list: (query) => backend.list(query),
    remove: (key, seen) => backend.remove(key, seen),
    close: async () => {},
  };
  return { store: new Store(wrapped, {}), faults };
}

function optionsOf(policy, probe, probes) {
  const options = { lease: policy.lease_ms, retention: policy.retention_ms };
  options.inFlight = policy.in_flight === "reject" ? "reject" : { wait: policy.in_flight.wait_ms };
  if (policy.key_fields !== undefined) options.keyFields = policy.key_fields;
  if (policy.on_expired === "verify") {
    options.onExpired = {
      async verify() {
        probes.n++;
        if (probe === "not_done" || probe === "cannot_tell") return { status: probe };
        if (probe !== undefined && "done" in probe) return { status: "done", result: probe.done };
        throw new Error(`probe ${JSON.stringify(probe)}: expected done, not_done or cannot_tell`);
      },
    };
  } else {
    options.onExpired = policy.on_expired;
  }
  return options;
}

function behave(tool) {
  if ("returns" in tool) return tool.returns;
  if (tool.throws === "permanent") throw new PermanentError(tool.message);
  if (tool.throws === "transient") throw new Error(tool.message);
  throw new Error(`tool ${JSON.stringify(tool)}: expected returns or throws`);
}

function within(promise, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(what)), PATIENCE_MS);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** One scenario on `real`; rejects with what failed. */
async function runScenario(real, scenario) {
  const defaults = scenarioFile.defaults;
  const policy = { ...defaults.policy, ...(scenario.policy ?? {}) };
  const runId = uniqueRunId(`scenario-${scenario.id}`);
  const callers = new Map();
  const seen = new Map();
  const runs = { n: 0 };
  const probes = { n: 0 };
  const caller = (name) => {
    if (name === undefined) throw new Error("no caller");
    if (!callers.has(name)) callers.set(name, { ...callerStore(real), running: undefined, release: undefined });
    return callers.get(name);
  };
  const keyOf = (args) => require("..").idemKey(runId, defaults.tool, args ?? defaults.args, policy.key_fields ? { keyFields: policy.key_fields } : {});

  async function start(step) {
    const who = caller(step.caller);
    let tool = step.tool ?? { returns: { by: step.caller } };
    const blocks = tool.blocks === true;
    let started;
    const running = new Promise((resolve) => (started = resolve));
    if (blocks) {
      tool = tool.then ?? { returns: { by: step.caller } };
      who.release = undefined;
    }
    const gate = new Promise((resolve) => {
      if (blocks) who.release = resolve;
    });
    const wrapped = idempotent(
      {
        kind: "write",
        name: defaults.tool,
        async run() {
          runs.n++;
          if (blocks) {
            started();
            await gate;
          }
          return behave(tool);
        },
      },
      who.store,
      optionsOf(policy, step.probe, probes),
    );
    const answer = wrapped.runDetailed(step.args ?? defaults.args, { runId });
    if (blocks) await within(Promise.race([running, answer.then(() => Promise.reject(new Error("the call ended before its tool started")))]), "the blocking tool never started");
    else if (step.do === "start") await sleep(SETTLE_MS);
    // Wrapped, so that awaiting the start does not await the answer.
    return { answer };
  }

  async function checkEntry(wanted, key) {
    let last;
    // A give-back is a zero-lease renewal, which Redis shows within a millisecond.
    for (let i = 0; i < 10; i++) {
      const entry = await real.get(key);
      try {
        return entryMatches(entry, wanted);
      } catch (e) {
        last = e;
      }
      await sleep(5);
    }
    throw last;
  }

  async function checkCommon(expect, key) {
    if (expect.runs !== undefined) assert.equal(runs.n, expect.runs, "runs");
    if (expect.probes !== undefined) assert.equal(probes.n, expect.probes, "probes");
    if (expect.entry !== undefined) await checkEntry(expect.entry, key ?? keyOf());
  }

  async function checkAnswer(answer, expect) {
    const shown = JSON.stringify({ outcome: answer.outcome, result: answer.result, error: answer.error?.message });
    if (expect.outcome !== undefined) assert.equal(answer.outcome, expect.outcome, `outcome: ${shown}`);
    if (expect.result !== undefined) assert.deepEqual(answer.result, expect.result, `result: ${shown}`);
    if (expect.error !== undefined) {
      assert.ok(answer.error !== undefined, `no error: ${shown}`);
      const cls = answer.error instanceof PermanentError ? "permanent" : "transient";
      if (expect.error.class !== undefined) assert.equal(cls, expect.error.class, `error class: ${shown}`);
      if (expect.error.message !== undefined) assert.equal(answer.error.message, expect.error.message, "error message");
    }
    if (expect.notice !== undefined) assert.equal(answer.notice !== undefined, expect.notice, `notice: ${answer.notice}`);
    await checkCommon(expect, answer.key);
  }

  async function operator(step) {
    const read = seen.get(step.seen);
    if (read === undefined) throw new Error(`nothing read as ${step.seen}`);
    let answer;
    if (step.do === "remove") {
      answer = await real.remove(read.key, read);
    } else {
      const r = step.resolution;
      const resolution = r === "release" ? "release" : "done" in r ? { done: r.done } : { failed: r.failed };
      answer = await real.resolve(read.key, read, resolution, { retentionMs: policy.retention_ms });
    }
    if (step.expect?.answer !== undefined) assert.equal(answer.kind, step.expect.answer, "the store's answer");
    await checkCommon(step.expect ?? {}, read.key);
  }

  const steps = {
    async call(step) {
      const { answer } = await start(step);
      await checkAnswer(await within(answer, "the call never answered"), step.expect ?? {});
    },
    async start(step) {
      caller(step.caller).running = await start(step);
    },
    async release(step) {
      const who = caller(step.caller);
      if (who.release === undefined) throw new Error("no blocked tool to release");
      who.release();
      who.release = undefined;
    },
    async await(step) {
      const who = caller(step.caller);
      if (who.running === undefined) throw new Error("no call started");
      const answer = await within(who.running.answer, "the call never answered");
      who.running = undefined;
      await checkAnswer(answer, step.expect ?? {});
    },
    async abandon(step) {
      const who = caller(step.caller);
      if (who.running === undefined) throw new Error("no call started");
      who.faults.add("gone");
      // Gone: what the tool goes on to do can no longer reach the store.
      who.release?.();
      who.release = undefined;
    },
    async fault(step) {
      if (!["lose_next_claim_reply", "lose_renewals"].includes(step.fault)) throw new Error(`unknown fault ${step.fault}`);
      caller(step.caller).faults.add(step.fault);
    },
    async wait(step) {
      await sleep(step.ms ?? step.leases * policy.lease_ms);
    },
    async read(step) {
      const entry = await real.get(keyOf(step.args));
      if (entry === undefined) throw new Error("no entry to read");
      seen.set(step.as, entry);
    },
    resolve: operator,
    remove: operator,
    async check(step) {
      await checkCommon(step.expect ?? {});
    },
  };

  try {
    for (const [i, step] of scenario.steps.entries()) {
      const run = steps[step.do];
      if (run === undefined) throw new Error(`unknown step ${step.do}`);
      try {
        await run(step);
      } catch (/** @type {any} */ e) {
        throw new Error(`${scenario.id}: step ${i + 1} (${step.do}): ${e.message}`);
      }
    }
  } finally {
    // Calls still running are let go and awaited, so none outlives its store.
    for (const who of callers.values()) {
      who.faults.add("gone");
      who.release?.();
      if (who.running !== undefined) await who.running.answer;
    }
  }
}

function entryMatches(entry, wanted) {
  if (wanted === null) {
    assert.equal(entry, undefined, `an entry ${JSON.stringify(entry)}, expected none`);
    return;
  }
  assert.ok(entry !== undefined, `no entry, expected ${JSON.stringify(wanted)}`);
  const shown = JSON.stringify(entry);
  if (wanted.state !== undefined) assert.equal(entry.state, wanted.state, `entry ${shown}`);
  if (wanted.attempts !== undefined) assert.equal(entry.attempts, wanted.attempts, `entry ${shown}`);
  if (wanted.result !== undefined) assert.deepEqual(entry.result, wanted.result, `entry ${shown}`);
  if (wanted.error !== undefined) assert.equal(entry.error?.message, wanted.error, `entry ${shown}`);
}

test("every scenario has an id of its own, and each one this runner skips says why", () => {
  const ids = scenarioFile.scenarios.map((s) => s.id);
  assert.ok(ids.length >= 15, "the scenario file lost its scenarios");
  assert.equal(new Set(ids).size, ids.length, "two scenarios share an id");
  for (const s of scenarioFile.scenarios) {
    const why = s.unsupported?.[RUNNER];
    if (why !== undefined) assert.ok(typeof why === "string" && why.trim() !== "", `${s.id}: unsupported without a reason`);
  }
});

for (const [name, url] of Object.entries(storeUrls())) {
  test(`${name}: every layer scenario runs and holds`, async () => {
    const real = await openStore(url);
    try {
      const ran = [];
      const results = await Promise.allSettled(
        scenarioFile.scenarios.map(async (scenario) => {
          if (scenario.unsupported?.[RUNNER] !== undefined) {
            ran.push(scenario.id);
            return;
          }
          await runScenario(real, scenario);
          ran.push(scenario.id);
        }),
      );
      const failed = results.filter((r) => r.status === "rejected").map((r) => r.reason?.message ?? String(r.reason));
      assert.deepEqual(failed, [], `scenarios failed on ${name}:\n${failed.join("\n")}`);
      assert.deepEqual(ran.sort(), scenarioFile.scenarios.map((s) => s.id).sort(), "every scenario is run or listed as unsupported");
    } finally {
      await real.close();
    }
  });
}
