// The toolonce console's page. Everything from the store is put in the page as text
// (textContent), never as HTML. The CSRF token stays in this script's memory; the session is
// an HttpOnly cookie this script cannot read.
"use strict";
let csrf = null;
let cursor = null;
let shown = null; // the entry shown in the detail panel, as the server last sent it

const $ = (id) => document.getElementById(id);

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text == null ? "-" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
}

function age(ms) {
  if (ms == null) return "-";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

async function api(path, body) {
  const init = { credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["content-type"] = "application/json";
    init.headers["x-csrf-token"] = csrf || "";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  let doc = null;
  try { doc = await res.json(); } catch (_) { doc = { error: "no JSON answer" }; }
  return { status: res.status, doc };
}

async function login(token) {
  const init = { method: "POST", credentials: "same-origin", headers: {} };
  if (token) init.headers["authorization"] = "Bearer " + token;
  const res = await fetch("/console/api/session", init);
  if (res.status !== 200) return false;
  csrf = (await res.json()).csrf;
  return true;
}

function filterQuery() {
  const p = new URLSearchParams();
  const add = (k, v) => { if (v) p.set(k, v); };
  add("state", $("f-state").value);
  add("scope", $("f-scope").value);
  add("tool", $("f-tool").value);
  add("min_age", $("f-age").value);
  add("q", $("f-q").value);
  return p;
}

function row(tbody, e, columns) {
  const tr = document.createElement("tr");
  tr.dataset.key = e.key;
  for (const c of columns) cell(tr, c(e), c === columns[1] && columns.length > 4 ? "state-" + e.state : null);
  tr.addEventListener("click", () => showEntry(e.key));
  tbody.appendChild(tr);
}

const LIST_COLUMNS = [(e) => e.key, (e) => e.state, (e) => e.scope, (e) => e.tool, (e) => e.attempts, (e) => age(e.age_ms)];

async function loadList(append) {
  const p = filterQuery();
  if (append && cursor) p.set("cursor", cursor);
  const { status, doc } = await api("/console/api/entries?" + p.toString());
  if (status !== 200) return setStatus(doc.error, true);
  const tbody = $("rows");
  if (!append) tbody.replaceChildren();
  for (const e of doc.entries) row(tbody, e, LIST_COLUMNS);
  // Entries the store cannot decode are named, never hidden: text only, as every stored value.
  const bad = $("unreadable");
  if (!append) bad.replaceChildren();
  for (const u of doc.unreadable ?? []) {
    const li = document.createElement("li");
    li.textContent = u.key + ": " + u.reason;
    bad.appendChild(li);
  }
  $("unreadable-note").hidden = bad.childElementCount === 0;
  cursor = doc.next;
  $("more").hidden = !cursor;
}

async function loadUnknown() {
  const { status, doc } = await api("/console/api/unknown");
  if (status !== 200) return setStatus(doc.error, true);
  $("unknown-count").textContent = "(" + doc.count + (doc.complete ? "" : "+") + ")";
  $("unknown-oldest").textContent = doc.oldest_age_ms == null ? "none" : "oldest: " + age(doc.oldest_age_ms);
  const tbody = $("unknown-rows");
  tbody.replaceChildren();
  for (const e of doc.entries) row(tbody, e, [(e) => e.key, (e) => e.scope, (e) => e.tool, (e) => age(e.age_ms)]);
}

function showFields(e) {
  const dl = $("fields");
  dl.replaceChildren();
  const add = (k, v) => {
    const dt = document.createElement("dt"); dt.textContent = k;
    const dd = document.createElement("dd"); dd.textContent = v == null ? "-" : String(v);
    dl.append(dt, dd);
  };
  add("key", e.key); add("state", e.state); add("scope", e.scope); add("tool", e.tool);
  add("detail", e.detail); add("attempts", e.attempts); add("first started", e.first_started_at);
  add("started", e.started_at); add("settled", e.settled_at); add("owner", e.owner_digest ? "#" + e.owner_digest : null);
  add("downstream key handed out", e.downstream_key_handed_out ? "yes" : "not recorded");
  const payload = e.result !== undefined ? e.result : e.error;
  $("payload").textContent = payload === undefined ? "-" : JSON.stringify(payload, null, 2);
}

async function showEntry(key) {
  const { status, doc } = await api("/console/api/entry?key=" + encodeURIComponent(key));
  if (status !== 200) return setStatus(doc.error, true);
  shown = doc;
  $("detail").hidden = false;
  $("outcome").textContent = "";
  showFields(doc);
}

function setOutcome(text, bad) {
  $("outcome").textContent = text;
  $("outcome").className = bad ? "bad" : "";
}

async function act(path, extra) {
  if (!shown) return;
  const { status, doc } = await api(path, Object.assign({ key: shown.key, fence: shown.fence }, extra));
  if (status === 200) {
    // Show the entry as it is now (gone after a release or a removal).
    const now = await api("/console/api/entry?key=" + encodeURIComponent(shown.key));
    if (now.status === 200) { shown = now.doc; showFields(now.doc); }
    else { $("fields").replaceChildren(); $("payload").textContent = "(no entry any more)"; }
    setOutcome("applied");
  } else if (doc.changed) {
    setOutcome("changed: " + doc.error, true);
  } else {
    setOutcome(doc.error || "refused (" + status + ")", true);
  }
  if (doc.entry) { shown = doc.entry; showFields(doc.entry); }
  refresh();
}

// Charts: inline SVG built element by element (no markup from data).
const SVG = "http://www.w3.org/2000/svg";
const COLOURS = { running: "#a60", unknown: "#b00", done: "#070", failed: "#555", store_page_ms: "#24c", replays: "#24c", in_flight: "#b0b" };

function chart(svg, given, series) {
  svg.replaceChildren();
  // One sample is drawn as a flat line across, not as an invisible point.
  const samples = given.length === 1 ? [given[0], given[0]] : given;
  const w = 600, h = 120, pad = 4;
  const values = samples.flatMap((s) => series.map((k) => s[k] || 0));
  const top = Math.max(0, ...values);
  // Headroom above the highest value, so a flat line is not drawn on the border.
  const max = Math.max(1, top) * 1.25;
  const x = (i) => pad + (samples.length < 2 ? 0 : (i * (w - 2 * pad)) / (samples.length - 1));
  const y = (v) => h - pad - (v * (h - 2 * pad)) / max;
  for (const k of series) {
    const path = document.createElementNS(SVG, "path");
    path.setAttribute("d", samples.map((s, i) => (i ? "L" : "M") + x(i).toFixed(1) + " " + y(s[k] || 0).toFixed(1)).join(" "));
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", COLOURS[k]);
    path.setAttribute("stroke-width", "2");
    path.dataset.series = k;
    path.dataset.last = String(given.length ? given[given.length - 1][k] || 0 : 0);
    svg.appendChild(path);
  }
  const label = document.createElementNS(SVG, "text");
  label.setAttribute("x", "8"); label.setAttribute("y", "14"); label.setAttribute("font-size", "11");
  label.textContent = "max " + (Math.round(top * 100) / 100);
  svg.appendChild(label);
}

async function loadStats() {
  const { status, doc } = await api("/console/api/stats");
  if (status !== 200) return;
  chart($("chart-states"), doc.samples, ["running", "unknown", "done", "failed"]);
  chart($("chart-latency"), doc.samples, ["store_page_ms"]);
  const last = doc.samples[doc.samples.length - 1];
  if (last) {
    const how = last.source === "census"
      ? "counted by the store's census"
      : "counted from the store's pages (this store has no census)" + (last.complete ? "" : ", incomplete: more entries than one walk reads");
    const oldest = last.oldest_unknown_ms == null ? "" : "; the oldest unknown entry's lease ended " + age(last.oldest_unknown_ms) + " ago";
    $("counts-source").textContent = (last.error ? "the last count failed: " + last.error : how + oldest);
    $("counts-source").dataset.source = last.source;
  }
  // Calls per minute only where the console runs in the process that answers them.
  $("calls-figure").hidden = doc.calls == null;
  if (doc.calls != null) chart($("chart-calls"), doc.calls.per_minute, ["replays", "in_flight"]);
  $("calls-note").textContent = doc.calls == null ? doc.calls_note : "";
}

function setStatus(text, bad) {
  $("status").textContent = text || "";
  $("status").style.color = bad ? "#b00" : "";
}

async function refresh() {
  await Promise.all([loadUnknown(), loadList(false), loadStats()]);
  setStatus("updated " + new Date().toLocaleTimeString());
}

// Bulk: the count (and each entry's fence) first, then the action, fenced per entry.
let bulkItems = null;
async function bulkCount() {
  const { status, doc } = await api("/console/api/bulk?" + filterQuery().toString());
  if (status !== 200) return setStatus(doc.error, true);
  bulkItems = doc.items;
  $("bulk-preview").textContent = doc.count + (doc.complete ? "" : "+") + " entries: " + $("bulk-action").value + "?";
  $("bulk-apply").hidden = doc.count === 0;
}
async function bulkApply() {
  if (!bulkItems) return;
  const body = { action: $("bulk-action").value, items: bulkItems };
  if (body.action === "failed") body.message = $("bulk-message").value;
  const { status, doc } = await api("/console/api/bulk", body);
  bulkItems = null;
  $("bulk-apply").hidden = true;
  $("bulk-preview").textContent = status === 200
    ? `applied ${doc.applied}, changed ${doc.changed}, refused ${doc.refused}, unknown ${doc.unknown}`
    : (doc.error || "refused (" + status + ")");
  refresh();
}

function wire() {
  $("bulk-count").addEventListener("click", bulkCount);
  $("bulk-apply").addEventListener("click", bulkApply);
  $("filters").addEventListener("submit", (ev) => { ev.preventDefault(); loadList(false); });
  $("more").addEventListener("click", () => loadList(true));
  $("act-done").addEventListener("click", () => {
    let result;
    try { result = JSON.parse($("done-result").value); } catch (e) { return setOutcome("the result is not JSON: " + e.message, true); }
    act("/console/api/resolve", { outcome: "done", result });
  });
  $("act-failed").addEventListener("click", () => act("/console/api/resolve", { outcome: "failed", message: $("failed-message").value }));
  $("act-release").addEventListener("click", () => act("/console/api/resolve", { outcome: "release" }));
  $("act-remove").addEventListener("click", () => act("/console/api/remove", {}));
}

async function start() {
  // The token comes once, in the fragment (never sent to a server), and leaves the address bar.
  const m = /^#token=([0-9a-f]+)$/.exec(location.hash);
  if (m) history.replaceState(null, "", location.pathname);
  const ok = await login(m ? m[1] : null);
  if (!ok) {
    $("login").hidden = false;
    $("login-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (await login($("token").value.trim())) { $("login").hidden = true; begin(); }
      else setStatus("wrong token", true);
    });
    return;
  }
  begin();
}

function begin() {
  $("main").hidden = false;
  wire();
  refresh();
  // Live updates: a bounded poll (one request pair every 3 s, none while the tab is hidden).
  setInterval(() => { if (!document.hidden) refresh(); }, 3000);
}

start();
