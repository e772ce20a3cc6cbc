// Listing a Redis store for an operator (`toolonce ls`): a walk of `SCAN … MATCH prefix idem:*`
// over every master, a page at a time, as the core's (crates/toolonce/src/store/redis/list.rs).
// The cursor says where the walk stands: the master (by name, in name order), its SCAN cursor,
// and the keys already found that the previous page had no room for.

import { ConfigError, CorruptEntry } from "../errors.js";
import { type Inspected, type ListQuery, type Page, type Unreadable, listed } from "../store.js";

/** A master to scan: its name (host:port on a cluster) and a sender. */
export interface Node {
  name: string;
  send(args: string[]): Promise<unknown>;
}

/** How many SCAN calls one page makes at most: a sparse keyspace gives a short page instead. */
const MAX_SCANS_PER_PAGE = 64;
const KEY = /^idem:[0-9a-f]{32}$/;

interface Cursor {
  node: number;
  scan: string;
  pending: string[];
}

/** `NODE/SCAN/HEX,HEX,…`: NODE the master's name, `-` once every master is scanned. */
function encode(c: Cursor, nodes: Node[]): string {
  const node = nodes[c.node]?.name ?? "-";
  return `${encodeURIComponent(node)}/${c.scan}/${c.pending.map((k) => k.slice("idem:".length)).join(",")}`;
}

function parse(text: string, nodes: Node[]): Cursor {
  const invalid = () => new ConfigError(`invalid list cursor ${JSON.stringify(text)}`);
  const [node, scan, pending, extra] = text.split("/");
  if (node === undefined || scan === undefined || pending === undefined || extra !== undefined || !/^\d+$/.test(scan)) throw invalid();
  const keys = pending === "" ? [] : pending.split(",").map((h) => `idem:${h}`);
  if (!keys.every((k) => KEY.test(k))) throw invalid();
  if (node === "-") return { node: nodes.length, scan: "0", pending: keys };
  const name = decodeURIComponent(node);
  const at = nodes.findIndex((n) => n.name === name);
  // A master that left (the topology changed): the next one in name order, from its start.
  if (at < 0) {
    const next = nodes.findIndex((n) => n.name > name);
    return { node: next < 0 ? nodes.length : next, scan: "0", pending: keys };
  }
  return { node: at, scan, pending: keys };
}

/** Escapes the glob characters of `SCAN … MATCH` in a literal prefix. */
function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, (c) => "\\" + c);
}

/** One page of the walk; `read` reads one key's entry whole (undefined when gone). */
export async function listPage(nodes: Node[], prefix: string, query: ListQuery, read: (key: string) => Promise<Inspected | undefined>): Promise<Page> {
  nodes = [...nodes].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const size = query.limit;
  const cursor: Cursor = query.cursor === undefined ? { node: 0, scan: "0", pending: [] } : parse(query.cursor, nodes);
  const pattern = `${globEscape(prefix)}idem:*`;
  let count = Math.min(Math.max(size * 2, 16), 1000);
  const entries: Inspected[] = [];
  // One entry another writer garbled is reported beside the page, not the page failed; it
  // counts towards the page size, so a page stays bounded.
  const unreadable: Unreadable[] = [];
  const readOne = async (key: string): Promise<Inspected | undefined> => {
    try {
      return await read(key);
    } catch (e) {
      if (!(e instanceof CorruptEntry)) throw e;
      unreadable.push({ key, reason: e.message });
      return undefined;
    }
  };
  for (let scans = 0; ; ) {
    while (cursor.pending.length > 0 && entries.length + unreadable.length < size) {
      const chunk = cursor.pending.splice(0, size - entries.length - unreadable.length);
      for (const entry of await Promise.all(chunk.map(readOne))) {
        if (entry !== undefined && listed(query, entry)) entries.push(entry);
      }
    }
    if (entries.length + unreadable.length >= size) {
      const more = cursor.pending.length > 0 || cursor.node < nodes.length;
      return { entries, next: more ? encode(cursor, nodes) : undefined, unreadable };
    }
    const node = nodes[cursor.node];
    if (node === undefined) return { entries, next: undefined, unreadable };
    if (scans === MAX_SCANS_PER_PAGE) return { entries, next: encode(cursor, nodes), unreadable };
    const reply = (await node.send(["SCAN", cursor.scan, "MATCH", pattern, "COUNT", String(count)])) as [unknown, unknown[]];
    scans++;
    const keys = (Array.isArray(reply?.[1]) ? reply[1] : []).map(String).flatMap((k) => (k.startsWith(prefix) && KEY.test(k.slice(prefix.length)) ? [k.slice(prefix.length)] : []));
    if (keys.length === 0) count = Math.min(count * 2, 10_000);
    cursor.pending = keys.sort();
    const next = String(reply?.[0] ?? "0");
    if (next === "0") {
      cursor.node++;
      cursor.scan = "0";
    } else {
      cursor.scan = next;
    }
  }
}
