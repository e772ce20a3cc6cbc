// The servers the tests run against, started by this package's own test support (no Rust
// toolchain involved): a redis-server, a valkey-server 8.1 (the one with `SET … IFEQ`, from
// scripts/install-valkey), a three-master Redis Cluster joined with
// `redis-cli --cluster create`, and a PostgreSQL server from `initdb` (as the `postgres` OS
// user through setpriv when the tests run as root), each on free loopback ports, in a
// temporary directory, stopped when the test run ends. scripts/install-test-deps installs them.

"use strict";

const { spawn, spawnSync } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = /** @type {import("node:net").AddressInfo} */ (server.address());
      server.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Sends one inline command and resolves with the raw reply, or false when nothing answers. */
function ask(port, command) {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1", () => socket.write(command + "\r\n"));
    let data = "";
    socket.setTimeout(1000, () => {
      socket.destroy();
      resolve(false);
    });
    socket.on("data", (d) => {
      data += d;
      if (data.endsWith("\r\n") && (data[0] !== "$" || data.split("\r\n").length > 2)) {
        socket.destroy();
        resolve(data);
      }
    });
    socket.once("error", () => resolve(false));
  });
}

async function until(what, deadlineMs, check) {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`${what} within ${deadlineMs / 1000} s`);
    await sleep(50);
  }
}

function found(program) {
  return spawnSync("sh", ["-c", `command -v ${program}`]).status === 0;
}

const children = new Set();
process.on("exit", () => {
  for (const child of children) child.kill("SIGKILL");
});

function start(program, args, options = {}) {
  const child = spawn(program, args, { stdio: "ignore", ...options });
  child.once("error", (e) => {
    console.error(`cannot start ${program} (run scripts/install-test-deps): ${e.message}`);
  });
  children.add(child);
  child.once("exit", () => children.delete(child));
  return child;
}

/**
 * A redis-server of its own on a free port (or `port`; `extra` arguments added); resolves once
 * it answers. `program`: another Redis-compatible server taking the same arguments.
 * @param {string} dir
 * @param {string[]} [extra]
 * @param {{ port?: number, program?: string }} [options]
 */
async function startRedis(dir, extra = [], { port, program = "redis-server" } = {}) {
  if (program === "redis-server" && !found("redis-server")) throw new Error("redis-server is missing: run scripts/install-test-deps");
  port ??= await freePort();
  const data = fs.mkdtempSync(path.join(dir, "redis-"));
  const child = start(program, ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", data, ...extra]);
  await until(`${path.basename(program)} on ${port} did not answer`, 10_000, async () => (await ask(port, "PING")) === "+PONG\r\n");
  return { url: `redis://127.0.0.1:${port}/`, port, child, dir: data };
}

/** Where scripts/install-valkey (run by scripts/install-test-deps) puts valkey-server 8.1. */
function valkeyServer() {
  const target = process.env.CARGO_TARGET_DIR ?? path.resolve(__dirname, "..", "..", "target");
  return path.join(target, "tmp", "valkey", "valkey-server");
}

/**
 * A valkey-server 8.1 of its own on a free port (or `port`), as `startRedis`; fails loudly when it is not installed.
 * @param {string} dir
 * @param {string[]} [extra]
 * @param {{ port?: number }} [options]
 */
async function startValkey(dir, extra = [], { port } = {}) {
  const program = valkeyServer();
  if (!fs.existsSync(program)) throw new Error(`${program} is missing: run scripts/install-test-deps (it installs valkey-server 8.1 with scripts/install-valkey)`);
  return startRedis(dir, extra, { port, program });
}

/** Three cluster-mode masters joined into one cluster; resolves once every node reports ok. */
async function startRedisCluster(dir) {
  const nodes = [];
  for (let i = 0; i < 3; i++) {
    nodes.push(await startRedis(dir, ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"]));
  }
  const create = spawnSync(
    "redis-cli",
    ["--cluster", "create", ...nodes.map((n) => `127.0.0.1:${n.port}`), "--cluster-replicas", "0", "--cluster-yes"],
    { encoding: "utf8", timeout: 30_000 },
  );
  if (create.status !== 0) throw new Error(`redis-cli --cluster create failed:\n${create.stdout}${create.stderr}`);
  await until("the Redis Cluster was not ok", 30_000, async () => {
    for (const n of nodes) {
      const info = await ask(n.port, "CLUSTER INFO");
      if (!info || !info.includes("cluster_state:ok") || !info.includes("cluster_known_nodes:3")) return false;
    }
    return true;
  });
  return { url: `redis+cluster://${nodes.map((n) => `127.0.0.1:${n.port}`).join(",")}`, nodes };
}

/** `initdb` and `postgres`: on PATH, or in Debian's highest /usr/lib/postgresql/N/bin. */
function postgresBinaries() {
  if (found("initdb") && found("postgres")) return { initdb: "initdb", postgres: "postgres" };
  const root = "/usr/lib/postgresql";
  const versions = fs.existsSync(root) ? fs.readdirSync(root).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions) {
    const bin = path.join(root, v, "bin");
    if (fs.existsSync(path.join(bin, "initdb")) && fs.existsSync(path.join(bin, "postgres"))) {
      return { initdb: path.join(bin, "initdb"), postgres: path.join(bin, "postgres") };
    }
  }
  throw new Error("postgres/initdb not found: run scripts/install-test-deps (Debian package postgresql)");
}

/** A PostgreSQL server with its own data directory on a free port, trusting loopback. */
async function startPostgres(dir) {
  const bins = postgresBinaries();
  const base = fs.mkdtempSync(path.join(dir, "postgres-"));
  const data = path.join(base, "data");
  let asUser = (program, args) => [program, args];
  if (process.getuid && process.getuid() === 0) {
    // PostgreSQL refuses to run as root: run it as the `postgres` OS user.
    const id = (flag) => spawnSync("id", [flag, "postgres"], { encoding: "utf8" }).stdout.trim();
    const uid = id("-u");
    const gid = id("-g");
    if (!uid) throw new Error("no postgres OS user: run scripts/install-test-deps");
    fs.chownSync(base, Number(uid), Number(gid));
    asUser = (program, args) => ["setpriv", [`--reuid=${uid}`, `--regid=${gid}`, "--init-groups", "--", program, ...args]];
  }
  // The server's user must reach its directory through ours (mkdtemp makes them 0700).
  fs.chmodSync(dir, 0o755);
  fs.chmodSync(base, 0o755);
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("PG")));
  env.LC_ALL = "C";
  const [initProgram, initArgs] = asUser(bins.initdb, ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"]);
  const init = spawnSync(initProgram, initArgs, { encoding: "utf8", env, cwd: base });
  if (init.status !== 0) throw new Error(`initdb failed:\n${init.stdout}${init.stderr}`);
  const port = await freePort();
  const [program, args] = asUser(bins.postgres, [
    "-D", data, "-p", String(port), "-k", base,
    "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=200",
  ]);
  const child = start(program, args, { env, cwd: base });
  await until(`postgres on ${port} did not accept connections`, 30_000, () => new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  }));
  // Accepting TCP is not yet accepting logins: wait for a query to succeed.
  const { Client } = require("pg");
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  await until(`postgres on ${port} did not answer a query`, 30_000, async () => {
    const client = new Client({ connectionString: url });
    try {
      await client.connect();
      await client.query("select 1");
      return true;
    } catch {
      return false;
    } finally {
      await client.end().catch(() => {});
    }
  });
  return { url, port, child };
}

/** A directory of this process, removed at exit. */
function tempDir(label = "toolonce-ts-") {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), label));
  process.on("exit", () => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

module.exports = { startRedis, startValkey, valkeyServer, startRedisCluster, startPostgres, tempDir, freePort, sleep };
