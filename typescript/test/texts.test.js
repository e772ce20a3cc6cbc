// The texts a model reads come from the core's data/texts.json alone: the package's sources hold
// none of their own (test/wording.js says how one is recognised), every text they use is in the
// file with each placeholder filled, and every text they leave is one the Rust or the Python
// code answers with.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { pkg, repo } = require("./support.js");
const { ownWording, sources } = require("./wording.js");

const embedded = require(path.join(pkg, "dist", "artifacts.generated.js"));
const read = (file) => fs.readFileSync(file, "utf8");

test("the TypeScript sources hold no model-facing text of their own", () => {
  const files = sources(path.join(pkg, "src"));
  assert.ok(files.length > 20, files.join(" "));
  assert.deepEqual(ownWording(files, embedded.TEXTS, pkg), []);
});

test("the check finds a text written out again, a sentence of a source's own, and passes a programmer's exception", (t) => {
  const dir = fs.mkdtempSync(path.join(require("node:os").tmpdir(), "toolonce-wording-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, "sample.ts");
  const lines = [
    "const a = `Already in progress: an identical call of ${tool} is running right now`;",
    'const b = "Not executed: the widget is asleep, so nothing ran.";',
    "const c = bad ? 'one thing. Another thing' : '';",
    'throw new TypeError("Bad config: the scope must be a string. Pass one.");',
    'warn(`Lost the claim of ${tool}; it was taken over.`);',
    'const d = /["\'`]Not executed: a regex, not a string/;',
    'throw new InvalidArguments("Refused: the arguments are wrong here.", {});',
  ];
  fs.writeFileSync(file, lines.join("\n"));
  const found = ownWording([file], embedded.TEXTS, dir).map((f) => f.split(":").slice(0, 2).join(":"));
  assert.deepEqual(found, ["sample.ts:1", "sample.ts:2", "sample.ts:3", "sample.ts:7"]);
});

/** The names of the texts `files` use through `pattern`'s first group, converted by `name`. */
function uses(files, pattern, name = (n) => n) {
  const used = new Set();
  for (const file of files) for (const m of read(file).matchAll(pattern)) used.add(name(m[1]));
  return used;
}

/** The files under `dir` whose names end with `ext`. */
function tree(dir, ext) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const file = path.join(dir, e.name);
    if (e.isDirectory()) return tree(file, ext);
    return e.name.endsWith(ext) ? [file] : [];
  });
}

test("every text the TypeScript package uses is in the file, and every other one is the Rust or Python code's", () => {
  const ts = uses(sources(path.join(pkg, "src")), /\btext\("([a-z_]+)"/g);
  for (const name of ts) assert.ok(name in embedded.TEXTS, `the sources use a text ${name} that data/texts.json lacks`);
  const rust = [path.join(repo, "crates"), path.join(repo, "bindings", "python", "src")].flatMap((d) => tree(d, ".rs"));
  const snake = (camel) => camel.replace(/(?<!^)[A-Z]/g, (c) => `_${c}`).toLowerCase();
  const others = new Set([
    ...uses(rust.filter((f) => !f.endsWith(path.join("src", "texts.rs"))), /\bText::([A-Z][A-Za-z]+)\b/g, snake),
    ...uses(tree(path.join(repo, "bindings", "python", "python", "toolonce"), ".py"), /\btext\("([a-z_]+)"/g),
  ]);
  const unused = Object.keys(embedded.TEXTS).filter((name) => !ts.has(name) && !others.has(name));
  assert.deepEqual(unused, [], "texts no implementation answers with");
  assert.ok(ts.has("held") && others.has("unknown_tool"), "the scan found the uses");
});

test("a text has every placeholder filled, refuses one left empty, and puts a value with braces in as it is", () => {
  const { text } = require(path.join(pkg, "dist", "texts.js"));
  const conflict = text("conflict", { tool: "pay", key: "idem:{key}" });
  assert.match(conflict, /^Conflict: an earlier call of `pay` .*\(operation idem:\{key\}\)/);
  assert.doesNotMatch(conflict.replace("idem:{key}", ""), /\{[a-z_]+\}/);
  for (const [name, template] of Object.entries(embedded.TEXTS)) {
    const names = [...template.matchAll(/\{([a-z_]+)\}/g)].map((m) => m[1]);
    const values = Object.fromEntries(names.map((n) => [n, "X"]));
    assert.doesNotMatch(text(name, values), /\{[a-z_]+\}/, name);
    if (names.length > 0) assert.throws(() => text(name, {}), /no value for the placeholder/, name);
    assert.throws(() => text(name, { ...values, stray: "y" }), /has no placeholder stray/, name);
  }
});
