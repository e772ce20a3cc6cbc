// A PostgreSQL store URL checked and taken apart before pg sees it, as the Rust core reads it
// (store/postgres/tls.rs and the driver): the same options, each once, RFC 3986 decoding (pg
// would read `+` in an option as a space), libpq's sslmode, and a clear refusal of what only
// the Rust core honours rather than a silent other meaning. Shared vectors:
// crates/toolonce/tests/data/store_urls.json.

import { ConfigError } from "../errors.js";
import { unknownOption } from "../url.js";

/** The options the Rust core reads from a PostgreSQL URL (its driver's, and sslrootcert). */
const OPTIONS = [
  "user", "password", "dbname", "options", "application_name", "sslmode", "sslrootcert", "sslnegotiation", "host", "hostaddr", "port",
  "connect_timeout", "tcp_user_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_retries",
  "target_session_attrs", "channel_binding", "load_balance_hosts",
] as const;

/** Those pg honours as the Rust core does; the rest are refused here. */
const HERE = new Set(["user", "password", "options", "application_name", "sslmode", "sslrootcert", "sslnegotiation", "host", "port"]);

const SSLMODES = ["disable", "prefer", "require", "verify-ca", "verify-full"];

const UNSUPPORTED = "is read by the Rust core, not yet by this package";

export interface PostgresTarget {
  /** What pg is given: the options re-encoded so that pg decodes them as RFC 3986 does. */
  connectionString: string;
  host: string;
  port: number;
  dbname: string | null;
  user: string | null;
  password: string | null;
  sslmode: string | null;
  sslrootcert: string | null;
  application_name: string | null;
}

function decode(text: string, what: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new ConfigError(`${what} of the PostgreSQL URL is not valid percent-encoding`);
  }
}

/** Checks and takes apart `postgres://[user[:password]@]host[:port][/db][?options]`. */
export function parsePostgresUrl(url: string): PostgresTarget {
  const m = /^(postgres(?:ql)?):\/\/([^/?#]*)(\/[^?#]*)?(?:\?([^#]*))?$/is.exec(url);
  if (m === null) throw new ConfigError("a malformed PostgreSQL URL: postgres://user:password@host:port/db");
  const authority = m[2] as string;
  const at = authority.lastIndexOf("@");
  const userinfo = at < 0 ? undefined : authority.slice(0, at);
  const hostPort = at < 0 ? authority : authority.slice(at + 1);
  const hm = /^([^:]*)(?::(\d{1,5}))?$/.exec(hostPort);
  if (hm === null || hm[1] === "" || (hm[2] !== undefined && (Number(hm[2]) < 1 || Number(hm[2]) > 65535))) {
    throw new ConfigError("the host and port of the PostgreSQL URL are not HOST[:PORT] with a port from 1 to 65535");
  }
  const colon = userinfo === undefined ? -1 : userinfo.indexOf(":");
  const t: PostgresTarget = {
    connectionString: "",
    host: decode(hm[1] as string, "the host"),
    port: hm[2] === undefined ? 5432 : Number(hm[2]),
    dbname: m[3] === undefined || m[3] === "/" ? null : decode((m[3] as string).slice(1), "the database"),
    user: userinfo === undefined ? null : decode(colon < 0 ? userinfo : userinfo.slice(0, colon), "the user name") || null,
    password: userinfo === undefined || colon < 0 ? null : decode(userinfo.slice(colon + 1), "the password") || null,
    sslmode: null,
    sslrootcert: null,
    application_name: null,
  };
  const kept: string[] = [];
  const seen = new Set<string>();
  for (const pair of (m[4] ?? "").split("&").filter((p) => p !== "")) {
    const eq = pair.indexOf("=");
    const name = decode(eq < 0 ? pair : pair.slice(0, eq), "an option");
    const value = decode(eq < 0 ? "" : pair.slice(eq + 1), "an option");
    if (!(OPTIONS as readonly string[]).includes(name)) throw new ConfigError(unknownOption("PostgreSQL", name, OPTIONS));
    if (seen.has(name)) throw new ConfigError(`the PostgreSQL URL option \`${name}\` is given twice: give it once`);
    seen.add(name);
    if (!HERE.has(name)) throw new ConfigError(`the PostgreSQL URL option \`${name}\` ${UNSUPPORTED}: open this store from Rust, the toolonce command or Python, or leave it out`);
    if (name === "sslmode" && !SSLMODES.includes(value)) {
      throw new ConfigError(`invalid sslmode ${JSON.stringify(value)}: expected disable, prefer, require, verify-ca or verify-full`);
    }
    if (name === "sslmode") t.sslmode = value;
    if (name === "sslrootcert") t.sslrootcert = value;
    if (name === "application_name") t.application_name = value;
    if (name === "password") t.password = value;
    if (name === "user") t.user = value;
    kept.push(`${name}=${encodeURIComponent(value)}`);
  }
  refuseOtherMeanings(t);
  // libpq's meaning of sslmode (require: no certificate check; verify-ca: the chain only).
  if (t.sslmode !== null) kept.push("uselibpqcompat=true");
  t.connectionString = `${m[1]}://${authority}${m[3] ?? ""}${kept.length === 0 ? "" : `?${kept.join("&")}`}`;
  return t;
}

/** What pg would do otherwise than the Rust core: refused, never done differently. */
function refuseOtherMeanings(t: PostgresTarget): void {
  if (t.sslmode === "prefer") {
    throw new ConfigError(`sslmode=prefer (TLS when the server offers it, else plain text) ${UNSUPPORTED}: pg cannot fall back; write sslmode=require or sslmode=disable`);
  }
  if (t.sslrootcert === "system") {
    throw new ConfigError(`sslrootcert=system (the system's trust store) ${UNSUPPORTED}: name a PEM file, or leave it out with sslmode=verify-full`);
  }
  if (t.sslmode === "verify-ca" && t.sslrootcert === null) {
    throw new ConfigError(`sslmode=verify-ca against the system's trust store ${UNSUPPORTED}: name the CA with sslrootcert=PATH`);
  }
}
