// Store URLs as they may be shown: never with their password (docs/contract.md).

/** `url` with the password of its user info replaced by `***`. */
export function redactUrl(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)([^@/?#]*)@/i, (_all, scheme: string, userinfo: string) => {
    const colon = userinfo.indexOf(":");
    return colon < 0 ? `${scheme}${userinfo}@` : `${scheme}${userinfo.slice(0, colon)}:***@`;
  });
}
