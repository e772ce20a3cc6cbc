#!/usr/bin/env node
// The npm tarballs of a release (scripts/dist and .github/workflows/release.yml call it):
//
//   node scripts/dist-npm.js library OUT
//     the library `toolonce` (typescript/, built first with `npm run build`), whose `toolonce`
//     command (typescript/bin/toolonce.js) runs the binary of an optional per-platform package;
//   node scripts/dist-npm.js platform NAME BINARY OUT
//     that package for one platform (NAME is one of PLATFORMS below), carrying BINARY.
//
// The per-platform packages are the pattern of esbuild, biome and rspack: each has `os`, `cpu`
// (and on Linux `libc`) fields, the library lists them all as optionalDependencies at its own
// version, and npm installs only the one that fits the machine. Nothing runs at install time,
// so `--ignore-scripts` changes nothing. The list lives in the tarball's manifest only: the
// checkout's package.json leaves it out, so that `npm ci` there never asks the registry for
// packages that a release publishes.

"use strict";

const { execFileSync } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");

const repo = path.resolve(__dirname, "..");
const library = path.join(repo, "typescript");
const manifest = JSON.parse(fs.readFileSync(path.join(library, "package.json"), "utf8"));
const scope = "@toolonce";

/** Every platform a release builds the binary for: the package's name suffix and its fields. */
const PLATFORMS = {
  "linux-x64-gnu": { os: "linux", cpu: "x64", libc: "glibc", exe: "toolonce" },
  "linux-arm64-gnu": { os: "linux", cpu: "arm64", libc: "glibc", exe: "toolonce" },
  "linux-x64-musl": { os: "linux", cpu: "x64", libc: "musl", exe: "toolonce" },
  "linux-arm64-musl": { os: "linux", cpu: "arm64", libc: "musl", exe: "toolonce" },
  "darwin-x64": { os: "darwin", cpu: "x64", exe: "toolonce" },
  "darwin-arm64": { os: "darwin", cpu: "arm64", exe: "toolonce" },
  "win32-x64-msvc": { os: "win32", cpu: "x64", exe: "toolonce.exe" },
};

function fail(message) {
  process.stderr.write(`dist-npm: ${message}\n`);
  process.exit(1);
}

function pack(dir, out) {
  const packed = JSON.parse(
    execFileSync("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", out], {
      cwd: dir,
      encoding: "utf8",
    }),
  )[0];
  process.stdout.write(`${path.join(out, packed.filename)}\n`);
}

function stage(name) {
  const dir = path.join(repo, "target", "tmp", "dist-npm", name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

function packLibrary(out) {
  for (const built of ["dist/index.js", "dist/index.d.ts", "artifacts/keys.json", "bin/toolonce.js"]) {
    if (!fs.existsSync(path.join(library, built))) fail(`typescript/${built} is missing: run \`npm ci && npm run build\` in typescript/ first`);
  }
  const dir = stage("toolonce");
  for (const entry of [...manifest.files, "README.md"]) {
    fs.cpSync(path.join(library, entry), path.join(dir, entry), { recursive: true });
  }
  const published = { ...manifest };
  // The scripts build from a checkout (prepack would rebuild); a user of the tarball needs none.
  delete published.scripts;
  delete published.devDependencies;
  published.optionalDependencies = Object.fromEntries(
    Object.keys(PLATFORMS).map((name) => [`${scope}/cli-${name}`, manifest.version]),
  );
  fs.writeFileSync(path.join(dir, "package.json"), `${JSON.stringify(published, null, 2)}\n`);
  pack(dir, out);
}

function packPlatform(name, binary, out) {
  const platform = PLATFORMS[name];
  if (!platform) fail(`unknown platform ${JSON.stringify(name)}; one of: ${Object.keys(PLATFORMS).join(", ")}`);
  if (!fs.existsSync(binary)) fail(`no binary at ${binary}`);
  const dir = stage(`cli-${name}`);
  fs.mkdirSync(path.join(dir, "bin"));
  fs.copyFileSync(binary, path.join(dir, "bin", platform.exe));
  fs.chmodSync(path.join(dir, "bin", platform.exe), 0o755);
  const published = {
    name: `${scope}/cli-${name}`,
    version: manifest.version,
    description: `The toolonce command for ${name}, installed by the toolonce package's \`toolonce\` command`,
    license: manifest.license,
    repository: manifest.repository,
    os: [platform.os],
    cpu: [platform.cpu],
    ...(platform.libc ? { libc: [platform.libc] } : {}),
    files: ["bin"],
    // Yarn PnP: a binary must be on disk to be run.
    preferUnplugged: true,
  };
  fs.writeFileSync(path.join(dir, "package.json"), `${JSON.stringify(published, null, 2)}\n`);
  fs.writeFileSync(
    path.join(dir, "README.md"),
    `# ${published.name}\n\nThe prebuilt \`toolonce\` binary for ${name}. Install \`toolonce\` instead: ` +
      "its `toolonce` command runs this binary, and npm picks this package only on a machine it fits.\n",
  );
  pack(dir, out);
}

function main(args) {
  const [command, ...rest] = args;
  if (command === "library" && rest.length === 1) return packLibrary(path.resolve(rest[0]));
  if (command === "platform" && rest.length === 3) return packPlatform(rest[0], path.resolve(rest[1]), path.resolve(rest[2]));
  if (command === "platforms" && rest.length === 0) return process.stdout.write(`${Object.keys(PLATFORMS).join("\n")}\n`);
  fail("usage: dist-npm.js library OUT | platform NAME BINARY OUT | platforms");
}

main(process.argv.slice(2));
