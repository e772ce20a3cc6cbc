#!/usr/bin/env node
// The `toolonce` command of the npm package. Its operator verbs, `ls`, `show`, `resolve` and
// `rm`, run in JavaScript on the package's own stores (operate.js), so they work from the
// tarball alone. Every other verb (exec, mcp, key, demo, purge, bench…) runs the prebuilt
// `toolonce` binary of this platform, which npm installs from one of the optional per-platform packages
// (@toolonce/cli-<os>-<cpu>[-<libc>], each with `os`, `cpu` and `libc` fields, so npm installs
// only the one that fits). Nothing runs at install time, so `npm install --ignore-scripts` and
// `npx` work. The binary gets this process's arguments, standard streams and environment; its
// exit status (or the signal that ended it) becomes this process's.

"use strict";

const { spawn } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");

/** The platform package for this machine, as npm names it; musl and glibc Linux differ. */
function platformPackage() {
  const { platform, arch } = process;
  if (platform === "linux") {
    // Node built against glibc reports its version; on musl (Alpine) the field is missing.
    const header = process.report?.getReport?.().header ?? {};
    const libc = header.glibcVersionRuntime ? "gnu" : "musl";
    return `@toolonce/cli-linux-${arch}-${libc}`;
  }
  if (platform === "win32") return `@toolonce/cli-win32-${arch}-msvc`;
  return `@toolonce/cli-${platform}-${arch}`;
}

/** The path of the binary: TOOLONCE_BINARY if set, else the platform package's. */
function binaryPath() {
  if (process.env.TOOLONCE_BINARY) return process.env.TOOLONCE_BINARY;
  const name = platformPackage();
  const file = process.platform === "win32" ? "toolonce.exe" : "toolonce";
  let dir;
  try {
    dir = path.dirname(require.resolve(`${name}/package.json`));
  } catch {
    const version = require("../package.json").version;
    process.stderr.write(
      `toolonce: the binary for this platform (${process.platform} ${process.arch}) is missing: ` +
        `the optional package ${name} is not installed.\n` +
        `Install it with \`npm install ${name}@${version}\` (npm skips optional packages when ` +
        `installed with --omit=optional or --no-optional), or set TOOLONCE_BINARY to a toolonce ` +
        `binary; \`cargo install toolonce-cli\` builds one.\n` +
        `(\`toolonce ls\`, \`show\`, \`resolve\` and \`rm\` need no binary: they run in JavaScript.)\n`,
    );
    process.exit(1);
  }
  const binary = path.join(dir, "bin", file);
  if (!fs.existsSync(binary)) {
    process.stderr.write(`toolonce: ${name} is installed but has no ${path.join("bin", file)}; reinstall it\n`);
    process.exit(1);
  }
  return binary;
}

function main() {
  const { OPERATOR_VERBS, runVerb } = require("./operate.js");
  const verb = process.argv[2];
  if (OPERATOR_VERBS.includes(verb)) return runVerb(verb, process.argv.slice(3));
  const binary = binaryPath();
  // Listening before the binary starts: a signal sent to this process (Ctrl-C reaches both
  // through the terminal's process group; a supervisor's SIGTERM reaches only this one) must
  // never find it without a handler, which would end it alone and leave the binary running.
  // Signals are handled on the event loop, so one that comes before `child` is set is handled
  // after it is, and passed on; the child decides.
  let child;
  const forward = (signal) => () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  };
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(signal, forward(signal));
  child = spawn(binary, process.argv.slice(2), { stdio: "inherit", windowsHide: true });
  child.on("error", (error) => {
    process.stderr.write(`toolonce: cannot run ${child.spawnfile}: ${error.message}\n`);
    process.exit(1);
  });
  child.on("exit", (code, signal) => {
    if (signal) {
      // Die of the same signal, so that the caller sees what the binary saw.
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
      return;
    }
    process.exit(code ?? 1);
  });
}

main();
