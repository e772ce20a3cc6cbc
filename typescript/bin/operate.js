// The operator commands of the npm package, in JavaScript: `toolonce ls | show | resolve | rm`
// run here, on the package's own stores, with no native binary, so a TypeScript-only user can
// settle an `unknown` entry with the command the layer's message names. Same arguments, output
// and exit codes as the Rust command's verbs (the table in crates/toolonce-cli/src/exit.rs).
// Every other verb is the Rust command's (toolonce.js runs it).

"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { USAGE, UsageError, parse, storeUrl } = require("./operate-args.js");
const { ls, show } = require("./operate-inspect.js");
const { resolve, rm } = require("./operate-settle.js");

const UNAVAILABLE = 69;
const INTERNAL = 70;
const BROKEN_PIPE = 141;

const STORE = { store: "value", json: "flag", help: "flag" };

/** Each verb: its options, its positional arguments, what it runs, and its help. */
const VERBS = {
  ls: {
    spec: { ...STORE, state: "value", scope: "value", tool: "value", limit: "value" },
    positional: [],
    run: (io, o) => ls(io, o),
    help: "List the entries of a store, newest first (filter by state, scope, tool).\n\nUsage: toolonce ls [--store URL] [--state running|done|failed|unknown] [--scope SCOPE] [--tool TOOL] [--limit N] [--json]",
  },
  show: {
    spec: STORE,
    positional: ["key"],
    run: (io, o, a) => show(io, o, a.key),
    help: "Show one entry: what it is, its attempts and times, its result.\n\nUsage: toolonce show [--store URL] [--json] KEY",
  },
  resolve: {
    spec: { ...STORE, done: "value", failed: "value", release: "flag", force: "flag", retention: "value" },
    positional: ["key"],
    run: (io, o, a) => resolve(io, o, a.key),
    help:
      "Settle an operation whose outcome is unknown: record it as done or failed, or release it.\n\n" +
      "Usage: toolonce resolve [--store URL] KEY (--done JSON | --failed MESSAGE | --release) [--force] [--retention SECONDS] [--json]",
  },
  rm: {
    spec: { ...STORE, force: "flag" },
    positional: ["key"],
    run: (io, o, a) => rm(io, o, a.key),
    help: "Delete one entry (a live claim only with --force).\n\nUsage: toolonce rm [--store URL] [--force] [--json] KEY",
  },
};

const EXIT_CODES =
  "Exit codes: 0 done; 2 bad input or configuration (nothing was done); 66 no live entry for the key; 67 resolve: already done or failed; " +
  "68 resolve, rm: a live claim, or the entry changed since it was read; 69 the store is unavailable (nothing was done); 70 internal error; " +
  "73 resolve, rm: the store failed during the write, which may or may not have been applied (`toolonce show KEY` tells).";

/** The verbs this file runs. */
const OPERATOR_VERBS = Object.keys(VERBS);

/** What the verbs share: output, the package's API, opening the store, checking a key. */
function makeIo() {
  const api = require("../dist/index.js");
  const stores = [];
  return {
    api,
    stores,
    out: (text) => process.stdout.write(text),
    err: (text) => process.stderr.write(text),
    stdin: () => fs.readFileSync(0, "utf8"),
    checkKey(key) {
      if (!/^idem:[0-9a-f]{32}$/.test(key)) throw new UsageError(`invalid operation key ${JSON.stringify(key)}: expected "idem:" followed by 32 lowercase hex digits`);
    },
    async open(options) {
      const url = storeUrl(options);
      const { redactUrl } = require("../dist/url.js");
      // As the Rust command: ls, show, resolve and rm never create a SQLite database.
      const file = /^sqlite:\/\//i.test(url) ? url.slice("sqlite://".length) : undefined;
      if (file !== undefined && file !== "" && file !== ":memory:" && !file.startsWith("file:") && !fs.existsSync(file)) {
        throw new UsageError(
          `no SQLite database at ${path.resolve(file)}: the file does not exist (check --store; ls, show, rm, resolve and purge never create a database, exec and mcp do)`,
        );
      }
      try {
        const store = await api.openStore(url);
        stores.push(store);
        return store;
      } catch (/** @type {any} */ e) {
        const code = e instanceof api.InvalidArguments ? USAGE : UNAVAILABLE;
        throw Object.assign(new Error(`cannot open the store ${redactUrl(url)}: ${e.message}`), { exitCode: code });
      }
    },
  };
}

/** The exit code for an error a verb threw, with its message on stderr. */
function failure(io, e) {
  const { InvalidArguments, StoreUnavailable } = io.api;
  let code = INTERNAL;
  if (e instanceof UsageError || e instanceof InvalidArguments) code = USAGE;
  else if (typeof e?.exitCode === "number") code = e.exitCode;
  else if (e instanceof StoreUnavailable) code = UNAVAILABLE;
  io.err(`toolonce: ${e?.message ?? String(e)}\n`);
  return code;
}

/** Runs `toolonce VERB ...args`; resolves with the exit code. */
async function main(verb, argv) {
  const { spec, positional, run, help } = VERBS[verb];
  if (argv.includes("--help") || argv.includes("-h")) {
    process.stdout.write(`${help}\n\n${EXIT_CODES}\n`);
    return 0;
  }
  let parsed;
  try {
    parsed = parse(argv, spec, positional);
  } catch (/** @type {any} */ e) {
    process.stderr.write(`error: ${e.message}\n\nFor more information, try '--help'.\n`);
    return USAGE;
  }
  let io;
  try {
    io = makeIo();
  } catch (/** @type {any} */ e) {
    process.stderr.write(`toolonce: this package is not built (${e.message}): run npm run build\n`);
    return INTERNAL;
  }
  let code;
  try {
    code = await run(io, parsed.options, parsed.args);
  } catch (e) {
    code = failure(io, e);
  }
  for (const store of io.stores) await store.close().catch(() => {});
  return code;
}

/** Runs the verb and ends the process with its code once stdout is flushed (141 if its reader went away). */
function runVerb(verb, argv) {
  // node:sqlite's "experimental" warning is not the command's to print; any other still is.
  process.removeAllListeners("warning");
  process.on("warning", (w) => {
    if (!(w.name === "ExperimentalWarning" && /SQLite/.test(w.message))) process.stderr.write(`${w.name}: ${w.message}\n`);
  });
  process.stdout.on("error", (e) => process.exit(e.code === "EPIPE" ? BROKEN_PIPE : INTERNAL));
  main(verb, argv).then(
    (code) => {
      process.exitCode = code;
      process.stdout.write("", () => process.exit(code));
    },
    (e) => {
      process.stderr.write(`toolonce: internal error: ${e?.stack ?? e}\n`);
      process.exit(INTERNAL);
    },
  );
}

module.exports = { OPERATOR_VERBS, runVerb, main };
