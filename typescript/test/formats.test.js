// The packed tarball, installed into a fresh project, is both an ES module and a CommonJS one for
// every subpath of its `exports`: `import` gets the ESM wrappers (dist/*.mjs, scripts/esm.js) and
// `require` the CommonJS build, and they are one module instance, so a Store opened through one is
// a Store to the other and their entries are shared. Its declarations type-check a consumer under
// every moduleResolution a TypeScript project may use: node16 and nodenext for an ES module (.mts)
// and a CommonJS one (.cts), bundler, and node10, which knows no `exports` (typesVersions); and
// arethetypeswrong finds no problem in it.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { spawnSync } = require("node:child_process");
const { pkg, tempDir } = require("./support.js");

const NODE20 = process.env.TOOLONCE_NODE20;

function run(program, args, cwd) {
  const out = spawnSync(program, args, { cwd, encoding: "utf8", env: { ...process.env, npm_config_audit: "false", npm_config_fund: "false" } });
  assert.equal(out.status, 0, `${program} ${args.join(" ")}:\n${out.stdout}${out.stderr}`);
  return out.stdout;
}

/** The package's subpaths as a consumer names them: toolonce, toolonce/langchain, … */
const SUBPATHS = Object.keys(JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8")).exports).map((s) => path.posix.join("toolonce", s));

// Requires every subpath; the ESM side imports this file, so both sides meet in one process.
const CJS_SIDE = `
"use strict";
const modules = {};
for (const sub of ${JSON.stringify(SUBPATHS)}) modules[sub] = require(sub);
const { idempotent } = require("toolonce");
module.exports = { modules, resolved: Object.fromEntries(Object.keys(modules).map((s) => [s, require.resolve(s)])), idempotent };
`;

// Named imports from every subpath, then each subpath's namespace against the CommonJS module.
// A namespace Node made from a CommonJS module itself would have a \`default\` (and, on Node 22,
// a "module.exports") beyond its names: equal names show the ESM wrapper was loaded.
const ESM_SIDE = `
import { idempotent, openStore, Store, ToolonceError } from "toolonce";
import { idempotentMiddleware } from "toolonce/langchain";
import { idempotentTool } from "toolonce/ai-sdk";
import { idempotentTool as mastraTool, mastraScope } from "toolonce/mastra";
import cjs from "./cjs-side.cjs";

const out = { runtime: process.version, subpaths: {} };
for (const sub of ${JSON.stringify(SUBPATHS)}) {
  const ns = await import(sub);
  const required = cjs.modules[sub];
  out.subpaths[sub] = {
    names: Object.keys(ns).sort(),
    required: Object.keys(required).sort(),
    differ: Object.keys(required).filter((name) => ns[name] !== required[name]),
    imported: import.meta.resolve?.(sub) ?? null,
    requiredFrom: cjs.resolved[sub],
  };
}
out.named = [idempotent, openStore, Store, ToolonceError, idempotentMiddleware, idempotentTool, mastraTool, mastraScope].map((f) => typeof f);

// One instance: a store opened through import is a Store to require, and a tool wrapped by the
// CommonJS idempotent() on it replays the entry the ESM one wrote.
const store = await openStore("memory://");
let runs = 0;
const tool = { kind: "write", name: "send_email", run: async (args) => ++runs };
const first = await idempotent(tool, store).runDetailed({ to: "a@x" }, { runId: "r" });
const again = await cjs.idempotent(tool, store).runDetailed({ to: "a@x" }, { runId: "r" });
out.shared = [store instanceof cjs.modules.toolonce.Store, first.outcome, again.outcome, runs];
await store.close();
process.stdout.write(JSON.stringify(out));
`;

/** Packs the package and installs the tarball into a fresh project: the project's directory and the tarball. */
function installed(label) {
  const dir = fs.mkdtempSync(path.join(tempDir(), `${label}-`));
  const packed = JSON.parse(run("npm", ["pack", "--json", "--pack-destination", dir], pkg))[0];
  const files = packed.files.map((f) => f.path);
  for (const sub of SUBPATHS) {
    const base = `dist/${sub === "toolonce" ? "index" : path.posix.basename(sub)}`;
    for (const ext of [".js", ".d.ts", ".mjs", ".d.mts"]) assert.ok(files.includes(base + ext), `${base}${ext} is not in the tarball`);
  }
  const project = path.join(dir, "app");
  fs.mkdirSync(project);
  fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
  run("npm", ["install", "--offline", path.join(dir, packed.filename)], project);
  fs.writeFileSync(path.join(project, "cjs-side.cjs"), CJS_SIDE);
  fs.writeFileSync(path.join(project, "esm-side.mjs"), ESM_SIDE);
  return { project, tarball: path.join(dir, packed.filename) };
}

/** @type {{ project: string, tarball: string } | undefined} */
let installation;
function app() {
  installation ??= installed("formats");
  return installation.project;
}

function checkBothSides(node) {
  const out = JSON.parse(run(node, ["--no-warnings", "esm-side.mjs"], app()));
  for (const sub of SUBPATHS) {
    const side = out.subpaths[sub];
    assert.ok(side.required.length > 0, `${sub} requires to nothing`);
    assert.deepEqual(side.names, side.required, `${sub}: import did not get the ESM wrapper, or it lacks names`);
    assert.deepEqual(side.differ, [], `${sub}: import and require give different values`);
    assert.match(side.requiredFrom, /[\\/]dist[\\/][\w-]+\.js$/, sub);
    if (side.imported !== null) assert.match(side.imported, /\/dist\/[\w-]+\.mjs$/, sub);
  }
  assert.deepEqual(out.named, Array(8).fill("function"));
  assert.deepEqual(out.shared, [true, "executed", "replayed", 1]);
  return out;
}

test("import and require of every subpath of the packed tarball give one module instance", () => {
  checkBothSides(process.execPath);
});

test("import and require give one module instance under Node 20 too, whose CommonJS lexer is older", () => {
  if (!NODE20 || !fs.existsSync(NODE20)) {
    throw new Error(`no Node 20 at ${NODE20 ?? "(TOOLONCE_NODE20 unset)"}: run scripts/install-node20, or set TOOLONCE_NODE20`);
  }
  assert.match(checkBothSides(NODE20).runtime, /^v20\./);
});

// The consumer's body, the same in every module format: the types must be the package's real ones
// (each @ts-expect-error must meet an error), not `any` from a declaration not found.
const BODY = `
export async function main(): Promise<number[]> {
  const store: Store = await openStore("memory://");
  let runs = 0;
  const send = idempotent({ kind: "write", name: "send", run: async (args: { to: string }) => ++runs }, store);
  const sent: number = await send.run({ to: "a" }, { runId: "r" });
  // @ts-expect-error: a call needs the run's context
  await send.run({ to: "a" });
  const tool = idempotentTool("send", { description: "d", execute: async (input: { to: string }, _options: object) => input.to.length }, { store, scope: "run-1" });
  const length: number = await tool.execute({ to: "ab" }, { toolCallId: "c1", messages: [] });
  const ticket = mastraTool({ id: "open_ticket", execute: async (input: { s: string }, _context: object) => input.s.length }, { store });
  // @ts-expect-error: a Mastra tool's result is what its execute returns
  const wrong: string = await ticket.execute({ s: "abc" }, { agent: { threadId: "t" } });
  const middleware = idempotentMiddleware({ store, reads: ["lookup"] });
  await store.close();
  return [sent, length, wrong.length, typeof middleware.wrapToolCall === "function" ? 1 : 0];
}
`;
const IMPORTS = `
import { openStore, idempotent, type Store } from "toolonce";
import { idempotentMiddleware } from "toolonce/langchain";
import { idempotentTool } from "toolonce/ai-sdk";
import { idempotentTool as mastraTool } from "toolonce/mastra";
`;

/** tsc on `files` of the project with `flags`; the declaration files of toolonce it read. */
function typeCheck(files, flags) {
  const tsc = require.resolve("typescript/bin/tsc");
  const common = ["--noEmit", "--strict", "--listFiles", "--target", "es2022", "--types", "node", "--typeRoots", path.join(pkg, "node_modules", "@types")];
  const out = spawnSync(process.execPath, [tsc, ...common, ...flags, ...files], { cwd: app(), encoding: "utf8" });
  const lines = out.stdout.split("\n");
  // --listFiles prints the files read among the diagnostics; the failure shows only the latter.
  const diagnostics = lines.filter((line) => !line.startsWith("/")).join("\n");
  assert.equal(out.status, 0, `tsc ${flags.join(" ")} ${files.join(" ")}:\n${diagnostics}${out.stderr}`);
  return lines
    .filter((line) => line.includes(`node_modules/toolonce/dist/`))
    .map((line) => path.basename(line.trim()))
    .sort();
}

const DECLARATIONS = ["ai-sdk", "index", "langchain", "mastra"];

test("an ES module and a CommonJS consumer type-check under node16 and nodenext, each with its own declarations", () => {
  fs.writeFileSync(path.join(app(), "consumer.mts"), IMPORTS + BODY);
  fs.writeFileSync(path.join(app(), "consumer.cts"), IMPORTS + BODY);
  for (const mode of ["node16", "nodenext"]) {
    const flags = ["--module", mode, "--moduleResolution", mode];
    // The .d.mts files re-export the .d.ts ones, so the ESM consumer reads both; the CommonJS one only the latter.
    const esm = typeCheck(["consumer.mts"], flags);
    for (const name of DECLARATIONS) assert.ok(esm.includes(`${name}.d.mts`), `${mode}: the .mts consumer did not get ${name}.d.mts: ${esm.join(" ")}`);
    const cjs = typeCheck(["consumer.cts"], flags);
    for (const name of DECLARATIONS) assert.ok(cjs.includes(`${name}.d.ts`), `${mode}: the .cts consumer did not get ${name}.d.ts: ${cjs.join(" ")}`);
    assert.deepEqual(cjs.filter((f) => f.endsWith(".d.mts")), [], `${mode}: the .cts consumer read ESM declarations`);
  }
});

test("a consumer type-checks under moduleResolution bundler with the ESM declarations, and under node10 with the CommonJS ones", () => {
  fs.writeFileSync(path.join(app(), "consumer.ts"), IMPORTS + BODY);
  const bundler = typeCheck(["consumer.ts"], ["--module", "esnext", "--moduleResolution", "bundler"]);
  for (const name of DECLARATIONS) assert.ok(bundler.includes(`${name}.d.mts`), `bundler did not read ${name}.d.mts: ${bundler.join(" ")}`);
  // node10 ignores `exports`: the root is `types`, the subpaths typesVersions.
  const node10 = typeCheck(["consumer.ts"], ["--module", "commonjs", "--moduleResolution", "node10"]);
  assert.deepEqual(node10.filter((f) => DECLARATIONS.includes(f.replace(/\.d\.m?ts$/, ""))), DECLARATIONS.map((n) => `${n}.d.ts`));
});

test("arethetypeswrong finds no problem in the packed tarball, and every subpath is ESM from ESM and CommonJS from CommonJS", () => {
  app();
  const attw = path.join(pkg, "node_modules", "@arethetypeswrong", "cli", "dist", "index.js");
  const tarball = /** @type {{ tarball: string }} */ (installation).tarball;
  // Its text report, not --format json: with a problem, attw exits before a pipe takes all the JSON.
  const out = spawnSync(process.execPath, [attw, "--profile", "strict", "--format", "ascii", "--no-color", "--no-emoji", tarball], { encoding: "utf8" });
  assert.equal(out.status, 0, out.stdout + out.stderr);
  assert.match(out.stdout, /No problems found/);
  for (const sub of SUBPATHS) {
    const resolutions = "node10: OK \nnode16 (from CJS): OK (CJS)\nnode16 (from ESM): OK (ESM)\nbundler: OK \n";
    assert.ok(out.stdout.includes(`"${sub}"\n\n${resolutions}`), `${sub}:\n${out.stdout}`);
  }
});
