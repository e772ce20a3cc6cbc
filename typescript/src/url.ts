// Store URLs as they may be shown: never with their password (docs/contract.md).

/** `url` with the password of its user info replaced by `***`. */
export function redactUrl(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)([^@/?#]*)@/i, (_all, scheme: string, userinfo: string) => {
    const colon = userinfo.indexOf(":");
    return colon < 0 ? `${scheme}${userinfo}@` : `${scheme}${userinfo.slice(0, colon)}:***@`;
  });
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
