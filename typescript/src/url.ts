// Store URLs as they may be shown: never with their password (docs/contract.md). The rules are
// the Rust core's `redact_url` (store/url.rs): more is masked rather than less where the text
// is ambiguous (a password with a raw `/`, `?` or `#` moves its `@` past the host).

function isSecretKey(key: string): boolean {
  let k = key;
  try {
    k = decodeURIComponent(key);
  } catch {}
  return k === "password" || k === "sslpassword";
}

/** `url` with the password of its user info, and `password`/`sslpassword` options, replaced by `***`. */
export function redactUrl(url: string): string {
  const sep = url.indexOf("://");
  if (sep < 0) return redactKeyValues(url);
  const scheme = url.slice(0, sep);
  const rest = url.slice(sep + 3);
  if (/^(sqlite|memory)$/i.test(scheme)) return url;
  const find = (re: RegExp): number => {
    const i = rest.search(re);
    return i < 0 ? rest.length : i;
  };
  const authorityEnd = find(/[/?#]/);
  const queryStart = find(/\?/);
  const amp = rest.indexOf("&", queryStart);
  const firstOption = rest.slice(queryStart, amp < 0 ? rest.length : amp);
  let at = rest.slice(0, authorityEnd).lastIndexOf("@");
  if (at < 0) at = rest.slice(0, queryStart).lastIndexOf("@");
  if (at < 0 && (!firstOption.includes("=") || authorityEnd === queryStart)) {
    const i = firstOption.lastIndexOf("@");
    at = i < 0 ? -1 : queryStart + i;
  }
  let out = `${scheme}://`;
  let after = rest;
  if (at >= 0) {
    const userinfo = rest.slice(0, at);
    const colon = userinfo.indexOf(":");
    out += colon >= 0 ? `${userinfo.slice(0, colon)}:***@` : /^postgres/i.test(scheme) ? `${userinfo}@` : "***@";
    after = rest.slice(at + 1);
  }
  const q = after.indexOf("?");
  if (q < 0) return out + after;
  let query = after.slice(q + 1);
  const hash = query.indexOf("#");
  const fragment = hash < 0 ? undefined : query.slice(hash + 1);
  if (hash >= 0) query = query.slice(0, hash);
  const pairs = query.split("&").map((pair) => {
    const eq = pair.indexOf("=");
    return eq >= 0 && isSecretKey(pair.slice(0, eq)) ? `${pair.slice(0, eq)}=***` : pair;
  });
  return `${out}${after.slice(0, q)}?${pairs.join("&")}${fragment === undefined ? "" : `#${fragment}`}`;
}

/** Text without a scheme: libpq's key/value form (its password masked), or else whatever could be one. */
function redactKeyValues(text: string): string {
  const masked = text.replace(/(^|\s)((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|(?:[^\s\\]|\\.)*)/gi, (_all, lead: string, key: string) => `${lead}${key}***`);
  if (/^\s*([^\s=]+\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s\\]|\\.)*)\s*)*$/.test(text)) return masked;
  let shown = text;
  const at = shown.lastIndexOf("@");
  if (at >= 0) shown = `***${shown.slice(at)}`;
  const i = shown.toLowerCase().indexOf("password");
  return i < 0 ? shown : `${shown.slice(0, i)}***`;
}

/** Damerau-Levenshtein distance (an adjacent swap counts one) between two short names. */
function editDistance(a: string, b: string): number {
  if (a.length > 128 || b.length > 128) return Number.MAX_SAFE_INTEGER;
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const row = d[i] as number[];
      const up = d[i - 1] as number[];
      let best = Math.min((up[j] as number) + 1, (row[j - 1] as number) + 1, (up[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, ((d[i - 2] as number[])[j - 2] as number) + 1);
      row[j] = best;
    }
  }
  return (d[a.length] as number[])[b.length] as number;
}

/**
 * The message refusing a store URL option that nothing reads, as the Rust core words it: the
 * option, a near miss among the known ones (`allow_evicton` -> `allow_eviction`), and the list.
 * An option nobody reads would otherwise be accepted and mean nothing.
 */
export function unknownOption(store: string, option: string, known: readonly string[]): string {
  let near: string | undefined;
  let nearest = Number.MAX_SAFE_INTEGER;
  for (const k of known) {
    const d = editDistance(option, k);
    if (d <= Math.max(2, Math.floor(k.length / 4)) && d < nearest) {
      near = k;
      nearest = d;
    }
  }
  const suggestion = near === undefined ? "" : ` (did you mean \`${near}\`?)`;
  return `the ${store} store URL has an option \`${option.slice(0, 64)}\` that nothing reads${suggestion}: the options are ${known.map((k) => `\`${k}\``).join(", ")}`;
}
