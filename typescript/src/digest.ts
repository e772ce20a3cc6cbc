// The hashes and the random owner tokens of every call, made as cheaply as the runtime allows:
// one-shot `crypto.hash` where it exists (Node 20.12+, 21.7+), and owner tokens cut from a
// buffer of random bytes filled 256 tokens at a time rather than one system call per call.

import * as crypto from "node:crypto";

type OneShot = (algorithm: string, data: string, encoding: "hex") => string;
const oneShot = (crypto as unknown as { hash?: OneShot }).hash;

/** The hex digest of `data` (UTF-8) with `algorithm` (`sha256`, `sha1`). */
export function hexDigest(algorithm: "sha256" | "sha1", data: string): string {
  if (oneShot !== undefined) return oneShot(algorithm, data, "hex");
  return crypto.createHash(algorithm).update(data).digest("hex");
}

const TOKEN_BYTES = 16;
const pool = Buffer.alloc(TOKEN_BYTES * 256);
let next = pool.length;

/** A fresh owner token: 128 bits from the system's CSPRNG, as 32 hex digits. */
export function ownerToken(): string {
  if (next === pool.length) {
    crypto.randomFillSync(pool);
    next = 0;
  }
  const token = pool.toString("hex", next, next + TOKEN_BYTES);
  // Zeroed once used, so a token is never in memory twice.
  pool.fill(0, next, next + TOKEN_BYTES);
  next += TOKEN_BYTES;
  return token;
}
