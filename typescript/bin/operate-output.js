// Output for the JavaScript operator commands (operate.js), in the Rust command's shapes
// (crates/toolonce-cli/src/output.rs): aligned tables, durations in two units at most, UTC
// timestamps with milliseconds, and JSON with its keys in order, as serde_json writes it.

"use strict";

/** A duration in ms as `0.4s`, `12s`, `3m05s`, `2h10m`, `4d03h`. */
function duration(ms) {
  const d = Math.max(0, ms);
  const secs = Math.floor(d / 1000);
  const two = (n) => String(n).padStart(2, "0");
  if (secs < 10) return `${(d / 1000).toFixed(1)}s`;
  if (secs < 60) return `${secs}s`;
  if (secs < 3600) return `${Math.floor(secs / 60)}m${two(secs % 60)}s`;
  if (secs < 86400) return `${Math.floor(secs / 3600)}h${two(Math.floor((secs % 3600) / 60))}m`;
  return `${Math.floor(secs / 86400)}d${two(Math.floor((secs % 86400) / 3600))}h`;
}

/** A time (a Date) as RFC 3339 in UTC with milliseconds. */
function timestamp(date) {
  return date.toISOString();
}

/** `rows` under `headers` ([name, "left" | "right"]), columns padded, no trailing spaces. */
function table(headers, rows) {
  const widths = headers.map(([h], c) => Math.max(h.length, ...rows.map((r) => [...r[c]].length)));
  const line = (cells) =>
    cells
      .map((cell, c) => {
        const pad = " ".repeat(widths[c] - [...cell].length);
        return headers[c][1] === "right" ? pad + cell : cell + pad;
      })
      .join("  ")
      .trimEnd() + "\n";
  return line(headers.map(([h]) => h)) + line(widths.map((w) => "-".repeat(w))) + rows.map(line).join("");
}

/** `text` wrapped at `width` columns. */
function wrap(text, width) {
  let out = "";
  let column = 0;
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (column > 0 && column + 1 + word.length > width) {
      out += "\n";
      column = 0;
    }
    if (column > 0) {
      out += " ";
      column++;
    }
    out += word;
    column += word.length;
  }
  return out + "\n";
}

/** `value` with every object's keys in order, as serde_json's map keeps them. */
function sorted(value) {
  if (Array.isArray(value)) return value.map(sorted);
  if (value === null || typeof value !== "object") return value;
  const out = {};
  for (const k of Object.keys(value).sort()) if (value[k] !== undefined) out[k] = sorted(value[k]);
  return out;
}

/** One JSON document, keys in order. */
function json(value) {
  return JSON.stringify(sorted(value));
}

/** Pretty JSON (two spaces), keys in order, as `serde_json::to_string_pretty`. */
function pretty(value) {
  return JSON.stringify(sorted(value), null, 2);
}

module.exports = { duration, timestamp, table, wrap, json, pretty };
