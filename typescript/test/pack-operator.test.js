// The packed tarball's `toolonce` command settles an unknown entry with no native binary:
// `npx toolonce resolve KEY --done JSON` in a fresh project that installed only the tarball,
// with the Rust command's exit codes; and a verb it cannot run in JavaScript (`exec`) says
// exactly which package to install.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { spawnSync } = require("node:child_process");
const { openStore } = require("..");
const { pkg, tempDir, uniqueRunId, crashAfterClaim, sleep, defined } = require("./support.js");

function run(program, args, cwd, extraEnv = {}) {
  /** @type {NodeJS.ProcessEnv} */
  const env = { ...process.env, npm_config_audit: "false", npm_config_fund: "false", ...extraEnv };
  delete env.TOOLONCE_BINARY;
  return spawnSync(program, args, { cwd, encoding: "utf8", env });
}

test("npx toolonce resolve from the packed tarball settles an unknown entry, with no binary installed", { timeout: 180_000 }, async () => {
  const dir = fs.mkdtempSync(path.join(tempDir(), "pack-operator-"));
  const packed = run("npm", ["pack", "--json", "--pack-destination", dir], pkg);
  assert.equal(packed.status, 0, packed.stderr);
  const { filename, files } = JSON.parse(packed.stdout)[0];
  for (const file of ["bin/toolonce.js", "bin/operate.js", "dist/operator.js"]) assert.ok(files.some((f) => f.path === file), file);
  const project = path.join(dir, "app");
  fs.mkdirSync(project);
  fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
  const installed = run("npm", ["install", "--offline", path.join(dir, filename)], project);
  assert.equal(installed.status, 0, installed.stderr);

  const db = path.join(project, "agent.db");
  const url = `sqlite://${db}`;
  const runId = uniqueRunId("pack-operator");
  const key = await crashAfterClaim(url, runId, 300);
  const store = await openStore(url);
  try {
    while ((await store.get(key))?.state !== "unknown") await sleep(20);
    const npx = (...args) => run("npx", ["--offline", "--no-install", "toolonce", ...args], project);
    const ls = npx("ls", "--store", url, "--state", "unknown", "--json");
    assert.equal(ls.status, 0, ls.stderr);
    assert.deepEqual(JSON.parse(ls.stdout).entries.map((e) => e.key), [key]);
    const resolved = npx("resolve", key, "--store", url, "--done", '{"charged":true}');
    assert.equal(resolved.status, 0, resolved.stderr);
    assert.match(resolved.stdout, new RegExp(`^${key} \\(unknown, attempt 1, owner #[0-9a-f]{12}\\) recorded as done: duplicates replay it\\n$`));
    assert.deepEqual(defined(await store.get(key)).result, { charged: true });
    // Done now: a second resolve is refused with the Rust command's code for it.
    assert.equal(npx("resolve", key, "--store", url, "--release").status, 67);
    assert.equal(npx("show", "idem:00000000000000000000000000000000", "--store", url).status, 66);
    assert.equal(npx("rm", key, "--store", url).status, 0);
    assert.equal(await store.get(key), undefined);

    const exec = npx("exec", "--scope", "s", "--name", "n", "--", "true");
    assert.equal(exec.status, 1);
    assert.match(exec.stderr, /the optional package @toolonce\/cli-\S+ is not installed/);
    assert.match(exec.stderr, /npm install @toolonce\/cli-\S+@\d+\.\d+\.\d+/);
    assert.match(exec.stderr, /`toolonce ls`, `show`, `resolve` and `rm` need no binary/);
  } finally {
    await store.close();
  }
});
