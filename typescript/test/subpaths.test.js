// The framework adapters' subpaths (toolonce/langchain, toolonce/ai-sdk, toolonce/mastra) of the
// packed tarball load and type-check in a fresh project that has none of the frameworks: they
// import nothing from them, and their declarations name none of them.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { spawnSync } = require("node:child_process");
const { pkg, tempDir } = require("./support.js");

function run(program, args, cwd) {
  const out = spawnSync(program, args, { cwd, encoding: "utf8", env: { ...process.env, npm_config_audit: "false", npm_config_fund: "false" } });
  assert.equal(out.status, 0, `${program} ${args.join(" ")}:\n${out.stdout}${out.stderr}`);
  return out.stdout;
}

const CONSUMER = `
import { openStore } from "toolonce";
import { idempotentMiddleware } from "toolonce/langchain";
import { idempotentTool } from "toolonce/ai-sdk";
import { idempotentTool as mastraTool } from "toolonce/mastra";

export async function main(): Promise<number[]> {
  const store = await openStore("memory://");
  let runs = 0;
  const send = idempotentTool("send", { description: "d", execute: async (input: { to: string }, _options: object) => ({ n: ++runs, to: input.to }) }, { store, scope: "run-1" });
  const first: { n: number; to: string } = await send.execute({ to: "a" }, { toolCallId: "c1", messages: [] });
  const again = await send.execute({ to: "a" }, { toolCallId: "c2", messages: [] });
  const ticket = mastraTool({ id: "open_ticket", execute: async (input: { s: string }, _context: object) => input.s.length }, { store });
  const length: number = await ticket.execute({ s: "abc" }, { agent: { threadId: "t" } });
  const middleware = idempotentMiddleware({ store, reads: ["lookup"] });
  const answer = await middleware.wrapToolCall({ toolCall: { name: "lookup", args: {} } }, () => "read");
  await store.close();
  return [first.n, again.n, runs, length, answer === "read" ? 1 : 0];
}
`;

test("the adapters' subpaths load and type-check in a fresh project without any framework", () => {
  const dir = fs.mkdtempSync(path.join(tempDir(), "subpaths-"));
  const packed = JSON.parse(run("npm", ["pack", "--json", "--pack-destination", dir], pkg))[0];
  const files = packed.files.map((f) => f.path);
  for (const sub of ["langchain", "ai-sdk", "mastra"]) {
    assert.ok(files.includes(`dist/${sub}.js`) && files.includes(`dist/${sub}.d.ts`), sub);
    const declared = fs.readFileSync(path.join(pkg, "dist", `${sub}.d.ts`), "utf8") + fs.readFileSync(path.join(pkg, "dist", `${sub}.js`), "utf8");
    assert.doesNotMatch(declared, /from "(langchain|@langchain|ai|@mastra)|require\("(langchain|@langchain|ai|@mastra)/, `${sub} names a framework`);
  }
  const project = path.join(dir, "app");
  fs.mkdirSync(project);
  fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
  run("npm", ["install", "--offline", path.join(dir, packed.filename)], project);
  for (const framework of ["langchain", "@langchain/core", "ai", "@mastra/core"]) {
    assert.ok(!fs.existsSync(path.join(project, "node_modules", framework)), `${framework} was installed`);
  }
  fs.writeFileSync(path.join(project, "consumer.ts"), CONSUMER);
  const tsc = require.resolve("typescript/bin/tsc");
  const flags = ["--strict", "--target", "es2022", "--module", "node16", "--moduleResolution", "node16", "--types", "node", "--typeRoots", path.join(pkg, "node_modules", "@types")];
  run(process.execPath, [tsc, ...flags, "consumer.ts"], project);
  const out = run(process.execPath, ["--no-warnings", "-e", `require("./consumer.js").main().then((r) => process.stdout.write(JSON.stringify(r)))`], project);
  // The AI SDK tool ran once for two tool call ids; the Mastra tool ran; the read passed through.
  assert.deepEqual(JSON.parse(out), [1, 1, 1, 3, 1]);
});
