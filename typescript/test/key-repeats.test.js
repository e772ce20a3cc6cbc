// The repeat ordinal (issue 43): every shared vector (crates/toolonce/tests/data/key_repeats.json,
// written before either implementation) comes out the same through idemKey and through a wrapped
// tool, whose handler gets the arguments without the ordinal; a refused ordinal claims and runs
// nothing; a replay tells the model when the identical call took effect and how to repeat it.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { openStore, idempotent, idemKey, InvalidArguments, PermanentError } = require("..");
const { canonicalize } = require("../dist/canonical.js");
const { LIMITS, TEXTS } = require("../dist/artifacts.generated.js");
const { repo, storeUrls, uniqueRunId, errorOf, defined } = require("./support.js");

// A tool without a schema this package reads gets the ordinal only when asked for it.
const ASKED = { repeatArgument: "repeat" };
const data = JSON.parse(fs.readFileSync(path.join(repo, "crates", "toolonce", "tests", "data", "key_repeats.json"), "utf8"));

test("the package's repeat limits are the vectors' (read from the core's limits, not a copy)", () => {
  assert.equal(LIMITS.repeat.max, data.max);
  assert.equal(LIMITS.repeat.default_name, data.default_name);
});

test("idemKey matches every repeat vector, and refuses every ordinal the vectors refuse", () => {
  assert.ok(data.vectors.length >= 20, `only ${data.vectors.length} vectors`);
  for (const v of data.vectors) {
    const args = JSON.parse(v.args_json);
    const options = { repeatArgument: v.repeat_name };
    if (v.refused !== undefined) {
      // The integer beyond 64 bits is a double in JavaScript: any refusal counts for it.
      assert.throws(() => idemKey(v.run_id, v.tool, args, options), (e) => e instanceof InvalidArguments && e.message.includes(`\`${v.refused}\``), v.note);
      continue;
    }
    assert.equal(idemKey(v.run_id, v.tool, args, options), v.key, v.note);
  }
});

test("a wrapped tool keys every vector as the core does and hands its handler the arguments without the ordinal", async () => {
  const store = await openStore("memory://");
  try {
    for (const v of data.vectors) {
      const seen = [];
      const tool = idempotent({ kind: "write", name: v.tool, run: async (args, ctx) => (seen.push(args), ctx.idem) }, store, { repeatArgument: v.repeat_name });
      const answer = await tool.runDetailed(JSON.parse(v.args_json), { runId: uniqueRunId() });
      if (v.refused !== undefined) {
        assert.equal(answer.outcome, "invalid_arguments", v.note);
        assert.ok(answer.error instanceof InvalidArguments);
        assert.match(answer.error.message, new RegExp(`^Not executed: \`${v.refused}\` must be a whole number from 1 to ${data.max} \\(got `), v.note);
        assert.equal(answer.key, undefined, "nothing was claimed");
        assert.equal(seen.length, 0, "nothing ran");
        continue;
      }
      assert.equal(answer.outcome, "executed", v.note);
      assert.equal(seen.length, 1);
      assert.equal(canonicalize(seen[0]), v.tool_args_json, v.note);
      const runId = v.run_id;
      // The vector's own scope: the key is the vector's.
      const keyed = idempotent({ kind: "write", name: v.tool, run: async (_args, ctx) => ctx.idem }, await openStore("memory://"), { repeatArgument: v.repeat_name });
      assert.equal((await keyed.runDetailed(JSON.parse(v.args_json), { runId })).key, v.key, v.note);
    }
  } finally {
    await store.close();
  }
});

test("the call option repeat keys as the argument does, and a bad one or one disagreeing with the argument is refused", async () => {
  const store = await openStore("memory://");
  try {
    let runs = 0;
    const pay = idempotent({ kind: "write", name: "pay", run: async () => ++runs }, store, ASKED);
    const second = data.vectors.find((v) => v.note === "the second time on purpose");
    const args = { to: "bob", cents: 500 };
    assert.equal((await pay.runDetailed(args, { runId: second.run_id }, { repeat: 2 })).key, second.key);
    assert.equal(idemKey(second.run_id, "pay", args, { repeat: 2 }), second.key);
    for (const bad of [0, 1001, 2.5, "2"]) {
      // @ts-expect-error: "2" is no number (the others are numbers out of range)
      const answer = await pay.runDetailed(args, { runId: uniqueRunId() }, { repeat: bad });
      assert.equal(answer.outcome, "invalid_arguments", String(bad));
      assert.match(errorOf(answer).message, /`repeat` must be a whole number from 1 to 1000/);
    }
    const clash = await pay.runDetailed({ ...args, repeat: 3 }, { runId: uniqueRunId() }, { repeat: 2 });
    assert.equal(clash.outcome, "invalid_arguments");
    assert.match(errorOf(clash).message, /disagree/);
    assert.equal(runs, 1);
  } finally {
    await store.close();
  }
});

test("the refusal quotes the value given as compact JSON cut at 40 characters", async () => {
  const store = await openStore("memory://");
  try {
    const pay = idempotent({ kind: "write", name: "pay", run: async () => assert.fail("must not run") }, store, ASKED);
    const long = { note: "x".repeat(60) };
    const answer = await pay.runDetailed({ to: "bob", repeat: long }, { runId: uniqueRunId() });
    const got = JSON.stringify(long).slice(0, 40) + "…";
    assert.equal(errorOf(answer).message, TEXTS.repeat_invalid.replace("{repeat}", "repeat").replace("{max}", "1000").replace("{got}", got).replace("{tool}", "pay"));
  } finally {
    await store.close();
  }
});

test("with repeatArgument false the argument is the tool's own, keyed and handed over as it is", async () => {
  const store = await openStore("memory://", { repeatArgument: false });
  try {
    const seen = [];
    const tool = idempotent({ kind: "write", name: "schedule", run: async (args) => seen.push(args) }, store);
    const args = { every: "week", repeat: "weekly" };
    const answer = await tool.runDetailed(args, { runId: "run-1" });
    assert.equal(answer.outcome, "executed");
    assert.deepEqual(seen, [args]);
    assert.equal(answer.key, idemKey("run-1", "schedule", args, { repeatArgument: false }));
    assert.throws(() => idempotent({ kind: "write", name: "x", run() {} }, store, { repeatArgument: "" }), /repeatArgument must be a non-empty argument name/);
  } finally {
    await store.close();
  }
});

const ISO_SECOND = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/;

test("a replay's note says the identical call took effect, when (to the second, UTC), its key, and the ordinal that repeats it", async () => {
  const store = await openStore("memory://");
  try {
    let runs = 0;
    const pay = idempotent({ kind: "write", name: "pay", run: async () => ({ receipt: ++runs }) }, store, ASKED);
    const runId = uniqueRunId();
    const before = Math.floor(Date.now() / 1000) * 1000;
    const first = await pay.runDetailed({ to: "bob", cents: 500 }, { runId });
    assert.equal(first.note, undefined, "an executed call has no note");
    const again = await pay.runDetailed({ to: "bob", cents: 500 }, { runId });
    assert.equal(again.outcome, "replayed");
    assert.deepEqual(again.result, { receipt: 1 }, "the result is the recorded one, unchanged");
    const when = defined(/took effect at (\S+) \(operation/.exec(defined(again.note)))[1];
    assert.match(when, ISO_SECOND);
    assert.ok(Date.parse(when) >= before && Date.parse(when) <= Date.now(), when);
    const expected =
      TEXTS.replayed.replace("{tool}", "pay").replace("{when}", when).replace("{key}", defined(first.key)) +
      " " +
      TEXTS.repeat_hint.replace("{tool}", "pay").replace("{repeat}", "repeat").replace("{next}", "2");
    assert.equal(again.note, expected);
    await pay.runDetailed({ to: "bob", cents: 500, repeat: 2 }, { runId });
    const third = await pay.runDetailed({ to: "bob", cents: 500, repeat: 2 }, { runId });
    assert.match(defined(third.note), /and "repeat": 3\.$/, "next is this call's ordinal plus one");
    assert.equal(runs, 2);
  } finally {
    await store.close();
  }
});

test("a replayed failure's note says it failed, and a tool without the argument says it cannot be repeated", async () => {
  const store = await openStore("memory://");
  try {
    const decline = idempotent(
      { kind: "write", name: "charge", run: async () => { throw new PermanentError("card declined"); } },
      store,
      { repeatArgument: false },
    );
    const runId = uniqueRunId();
    await decline.runDetailed({ cents: 1 }, { runId });
    const again = await decline.runDetailed({ cents: 1 }, { runId });
    assert.equal(again.outcome, "replayed_failure");
    assert.equal(errorOf(again).message, "card declined", "the recorded error, unchanged");
    assert.equal(errorOf(again).note, again.note);
    assert.match(defined(again.note), /^Already tried: an identical call of `charge` in this scope failed at \S+Z \(operation idem:[0-9a-f]{32}\)\./);
    assert.ok(defined(again.note).endsWith(" " + TEXTS.repeat_off), again.note);
  } finally {
    await store.close();
  }
});

for (const [name, url] of Object.entries(storeUrls())) {
  test(`the time a replay's note gives is when the store recorded the outcome, for a result and a failure (${name})`, async () => {
    const store = await openStore(url);
    try {
      const pay = idempotent({ kind: "write", name: "pay", run: async (args) => { if (args.fail) throw new PermanentError("declined"); return "ok"; } }, store);
      const runId = uniqueRunId();
      const whenOf = (note) => Date.parse(defined(/ at (\S+Z) \(operation/.exec(note))[1]);
      for (const fail of [false, true]) {
        const before = Math.floor(Date.now() / 1000) * 1000;
        await pay.runDetailed({ fail }, { runId });
        const recorded = Date.now();
        // Past the next second: a time taken at the replay would be later than the record.
        await new Promise((resolve) => setTimeout(resolve, 1100));
        const again = await pay.runDetailed({ fail }, { runId });
        assert.equal(again.outcome, fail ? "replayed_failure" : "replayed");
        const when = whenOf(again.note);
        assert.ok(when >= before && when <= recorded, `${new Date(when).toISOString()} is not between ${new Date(before).toISOString()} and ${new Date(recorded).toISOString()}`);
      }
    } finally {
      await store.close();
    }
  });
}

test("a reference-design tool whose schema has its own repeat keeps it: handed over and keyed as the tool's own", async () => {
  const { z } = require(require.resolve("zod", { paths: [path.join(__dirname, "..")] }));
  const store = await openStore("memory://");
  try {
    const seen = [];
    const schema = z.object({ to: z.string(), repeat: z.enum(["weekly", "monthly"]) });
    const tool = idempotent({ kind: "write", name: "schedule", schema, run: async (args) => seen.push(args) }, store);
    const answer = await tool.runDetailed({ to: "bob", repeat: "weekly" }, { runId: "run-1" });
    assert.equal(answer.outcome, "executed");
    assert.deepEqual(seen, [{ to: "bob", repeat: "weekly" }]);
    assert.equal(answer.key, idemKey("run-1", "schedule", { to: "bob", repeat: "weekly" }, { repeatArgument: false }));
  } finally {
    await store.close();
  }
});

test("a reference-design tool without a schema toolonce can read keeps an argument named repeat unless repeatArgument is given", async () => {
  const store = await openStore("memory://");
  try {
    const seen = [];
    const tool = idempotent({ kind: "write", name: "send", run: async (args) => seen.push(args) }, store);
    const answer = await tool.runDetailed({ to: "bob", repeat: 3 }, { runId: "run-1" });
    assert.equal(answer.outcome, "executed");
    assert.deepEqual(seen, [{ to: "bob", repeat: 3 }], "the tool's own argument reached it");
    assert.equal(answer.key, idemKey("run-1", "send", { to: "bob", repeat: 3 }, { repeatArgument: false }));
    const asked = idempotent({ kind: "write", name: "send2", run: async (args) => seen.push(args) }, store, { repeatArgument: "repeat" });
    assert.equal((await asked.runDetailed({ to: "bob", repeat: 3 }, { runId: "run-1" })).outcome, "executed");
    assert.deepEqual(seen[1], { to: "bob" }, "given explicitly, the ordinal is taken out");
  } finally {
    await store.close();
  }
});

test("at the largest ordinal a replay's note offers no next one and says the limit is reached", async () => {
  const store = await openStore("memory://");
  try {
    const pay = idempotent({ kind: "write", name: "pay", run: async () => "paid" }, store, ASKED);
    const runId = uniqueRunId();
    const max = LIMITS.repeat.max;
    await pay.runDetailed({ to: "bob", repeat: max }, { runId });
    const again = await pay.runDetailed({ to: "bob", repeat: max }, { runId });
    assert.equal(again.outcome, "replayed");
    assert.ok(!defined(again.note).includes(String(max + 1)), again.note);
    const limit = TEXTS.repeat_limit.replace("{repeat}", "repeat").replace("{max}", String(max));
    assert.ok(defined(again.note).endsWith(limit), again.note);
  } finally {
    await store.close();
  }
});

test("a replay whose time the store did not record says so in the file's words", () => {
  const { replayNote } = require("../dist/repeat.js");
  const note = replayNote({ tool: "pay", key: "idem:x", failed: false, settledAt: undefined, repeat: "repeat", ordinal: 1 });
  assert.ok(TEXTS.time_unrecorded !== undefined && note.includes(TEXTS.time_unrecorded), note);
});
