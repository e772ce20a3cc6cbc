// The command lines of the JavaScript operator commands: the same options as the Rust
// command's `ls`, `show`, `resolve` and `rm` (crates/toolonce-cli/src/inspect.rs, settle.rs),
// `--store URL` (or TOOLONCE_STORE, default sqlite://toolonce.db), `--opt VALUE` or
// `--opt=VALUE`. A usage error exits 2, naming the problem, before any store is opened.

"use strict";

const USAGE = 2;

class UsageError extends Error {}

/**
 * Parses `argv` for a verb whose options are `spec` ({name: "flag" | "value"}) and whose
 * positional arguments are `positional` (names): {options, args}.
 */
function parse(argv, spec, positional) {
  const options = {};
  const args = [];
  let rest = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (rest || !arg.startsWith("--") || arg === "-") {
      args.push(arg);
      continue;
    }
    if (arg === "--") {
      rest = true;
      continue;
    }
    const eq = arg.indexOf("=");
    const name = arg.slice(2, eq < 0 ? undefined : eq);
    const kind = spec[name];
    if (kind === undefined) throw new UsageError(`unexpected argument '--${name}' found`);
    if (options[name] !== undefined) throw new UsageError(`the argument '--${name}' cannot be used multiple times`);
    if (kind === "flag") {
      if (eq >= 0) throw new UsageError(`unexpected value for '--${name}': it takes none`);
      options[name] = true;
    } else if (eq >= 0) {
      options[name] = arg.slice(eq + 1);
    } else {
      if (i + 1 >= argv.length) throw new UsageError(`a value is required for '--${name}' but none was supplied`);
      options[name] = argv[++i];
    }
  }
  if (args.length > positional.length) throw new UsageError(`unexpected argument '${args[positional.length]}' found`);
  if (args.length < positional.length) throw new UsageError(`the required argument <${positional[args.length].toUpperCase()}> was not provided`);
  const named = {};
  positional.forEach((p, i) => (named[p] = args[i]));
  return { options, args: named };
}

/** The store URL: --store, else TOOLONCE_STORE, else sqlite://toolonce.db (as the Rust command). */
function storeUrl(options) {
  return options.store ?? (process.env.TOOLONCE_STORE || "sqlite://toolonce.db");
}

/** `--retention SECONDS`: from a millisecond to 100 years, in ms. */
function retentionMs(text) {
  if (text === undefined) return 86_400_000;
  const secs = Number(text.trim());
  if (text.trim() === "" || Number.isNaN(secs)) throw new UsageError(`invalid value '${text}' for '--retention <SECONDS>': "${text}" is not a number of seconds`);
  if (secs < 0) throw new UsageError(`invalid value '${text}' for '--retention <SECONDS>': ${text} seconds: it must be 0 or more`);
  const ms = secs * 1000;
  if (!(ms >= 1 && ms <= 100 * 365 * 86_400_000)) {
    throw new UsageError(`invalid value '${text}' for '--retention <SECONDS>': ${text} seconds is out of range: it must be between 0.001 and 3153600000 seconds (100 years)`);
  }
  return Math.round(ms);
}

/** `--limit N`: a whole number, 0 or more. */
function limit(text) {
  if (text === undefined) return 100;
  if (!/^\d+$/.test(text)) throw new UsageError(`invalid value '${text}' for '--limit <N>': invalid digit found in string`);
  return Number(text);
}

module.exports = { USAGE, UsageError, parse, storeUrl, retentionMs, limit };
