// `npm pack` gives a tarball that installs into a fresh project and works there: no native
// code, no install scripts, the core's artifacts inside, nothing from the repository needed.

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

test("the packed tarball installs into a fresh project and works there, with nothing native in it", () => {
  const dir = fs.mkdtempSync(path.join(tempDir(), "pack-"));
  const packed = JSON.parse(run("npm", ["pack", "--json", "--pack-destination", dir], pkg))[0];
  const files = packed.files.map((f) => f.path);
  assert.ok(files.includes("dist/index.js") && files.includes("dist/index.d.ts"), files.join(" "));
  assert.ok(files.includes("artifacts/redis/claim.lua") && files.includes("artifacts/keys.json"), files.join(" "));
  assert.ok(files.some((f) => f.startsWith("artifacts/postgres/")) && files.some((f) => f.startsWith("artifacts/sqlite/")), files.join(" "));
  assert.deepEqual(files.filter((f) => f.endsWith(".node") || f.startsWith("src/") || f.startsWith("test/")), []);
  const manifest = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8"));
  assert.deepEqual(Object.keys(manifest.dependencies ?? {}), [], "the package's own dependencies stay none");
  for (const hook of ["install", "preinstall", "postinstall"]) assert.equal(manifest.scripts?.[hook], undefined, hook);

  const project = path.join(dir, "app");
  fs.mkdirSync(project);
  fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
  run("npm", ["install", "--offline", path.join(dir, packed.filename)], project);
  const script = `
    const { openStore, idempotent, idemKey } = require("toolonce");
    (async () => {
      const out = {};
      for (const url of ["memory://", "sqlite://" + ${JSON.stringify(path.join(project, "app.db"))}]) {
        if (url.startsWith("sqlite") && !require("node:module").isBuiltin("node:sqlite")) continue;
        const store = await openStore(url);
        let runs = 0;
        const send = idempotent({ kind: "write", name: "send_email", run: async (args, ctx) => (runs++, { id: ctx.idem }) }, store);
        const a = await send.runDetailed({ to: "a@x" }, { runId: "r" });
        const b = await send.runDetailed({ to: "a@x" }, { runId: "r" });
        out[url.slice(0, 6)] = [a.outcome, b.outcome, runs, a.result.id === idemKey("r", "send_email", { to: "a@x" })];
        await store.close();
      }
      process.stdout.write(JSON.stringify(out));
    })();
  `;
  const result = JSON.parse(run(process.execPath, ["--no-warnings", "-e", script], project));
  assert.deepEqual(result.memory, ["executed", "replayed", 1, true]);
  if (require("node:module").isBuiltin("node:sqlite")) assert.deepEqual(result.sqlite, ["executed", "replayed", 1, true]);
});
