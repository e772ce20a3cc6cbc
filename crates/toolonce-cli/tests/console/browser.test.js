// The console in a real browser (Debian's chromium-headless-shell driven by playwright-core),
// started by tests/console.rs with a seeded store. Environment: CONSOLE_URL (with the token in
// its fragment), UNKNOWN_KEY, DONE_KEY, STORE_URL, TOOLONCE (the binary), PLAYWRIGHT (the
// directory holding node_modules/playwright-core), CHROMIUM, SCREENSHOT (where to save one).
// Exits non-zero on the first broken promise.
"use strict";
const assert = require("node:assert/strict");
const http = require("node:http");
const path = require("node:path");
const { execFileSync } = require("node:child_process");
const { chromium } = require(path.join(process.env.PLAYWRIGHT, "node_modules", "playwright-core"));

const url = process.env.CONSOLE_URL;
const origin = new URL(url).origin;
const unknownKey = process.env.UNKNOWN_KEY;
const doneKey = process.env.DONE_KEY;

async function rowKeys(page, tbody) {
  return page.$$eval(`#${tbody} tr`, (rows) => rows.map((r) => r.dataset.key));
}

async function main() {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM });
  try {
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
    const page = await context.newPage();
    const dialogs = [];
    page.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss(); });
    await page.goto(url);
    await page.waitForSelector(`#rows tr[data-key="${doneKey}"]`);
    // The token left the address bar once exchanged for the session cookie.
    assert.ok(!page.url().includes("token"), page.url());
    const cookies = await context.cookies();
    assert.equal(cookies.length, 1);
    assert.equal(cookies[0].httpOnly, true);
    assert.equal(cookies[0].sameSite, "Strict");

    // The chart of entries by state is drawn from the stats endpoint's samples.
    await page.waitForSelector('#chart-states path[data-series="unknown"]', { state: "attached" });

    // This console runs no calls and cannot see another process's: no chart of them, but a
    // note saying so. Its counts come from the SQLite store's census, and the page says so.
    assert.equal(await page.$eval("#calls-figure", (f) => f.hidden), true);
    await page.waitForFunction(() => document.getElementById("calls-note").textContent.includes("cannot see other processes' calls"));
    await page.waitForSelector('#counts-source[data-source="census"]');

    // The unknown outcome is listed first, apart.
    assert.deepEqual(await rowKeys(page, "unknown-rows"), [unknownKey]);

    // Filter: only unknown entries.
    await page.selectOption("#f-state", "unknown");
    await page.click("#filters button");
    await page.waitForFunction((k) => {
      const rows = [...document.querySelectorAll("#rows tr")];
      return rows.length === 1 && rows[0].dataset.key === k;
    }, unknownKey);
    await page.selectOption("#f-state", "");
    await page.fill("#f-q", "render");
    await page.click("#filters button");
    await page.waitForFunction((k) => {
      const rows = [...document.querySelectorAll("#rows tr")];
      return rows.length === 1 && rows[0].dataset.key === k;
    }, doneKey);
    await page.fill("#f-q", "");
    await page.click("#filters button");

    // A stored result holding <script> is shown as text and never runs.
    await page.click(`#rows tr[data-key="${doneKey}"]`);
    await page.waitForFunction(() => document.getElementById("payload").textContent.includes("<script>"));
    assert.equal(await page.$$eval("#payload *", (els) => els.length), 0);
    assert.deepEqual(dialogs, []);

    // Two tabs show the unknown entry; the first resolves it, the second gets "changed".
    const second = await context.newPage();
    await second.goto(origin + "/console/");
    for (const p of [page, second]) {
      await p.waitForSelector(`#unknown-rows tr[data-key="${unknownKey}"]`);
      await p.click(`#unknown-rows tr[data-key="${unknownKey}"]`);
      await p.waitForFunction(() => document.querySelector("#fields dd:nth-of-type(2)")?.textContent === "unknown");
    }
    await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
    await page.fill("#done-result", '{"sent": true}');
    await page.click("#act-done");
    await page.waitForFunction(() => document.getElementById("outcome").textContent === "applied");
    await page.waitForFunction(() => document.querySelector("#fields dd:nth-of-type(2)")?.textContent === "done");
    await second.click("#act-release");
    await second.waitForFunction(() => document.getElementById("outcome").textContent.startsWith("changed"));

    // A request without the token (a new browser context, no cookie) is refused, and the page
    // asks for the token.
    const stranger = await browser.newContext();
    const strange = await stranger.newPage();
    const refused = await strange.goto(origin + "/console/api/entries");
    assert.equal(refused.status(), 401);
    await strange.goto(origin + "/console/");
    await strange.waitForSelector("#login:not([hidden])");

    // An action from another origin's page, with the operator's browser, is refused.
    const evil = http.createServer((_, res) => {
      res.setHeader("content-type", "text/html");
      res.end("<!doctype html><title>evil</title>");
    });
    await new Promise((r) => evil.listen(0, "127.0.0.1", r));
    const evilPage = await context.newPage();
    await evilPage.goto(`http://127.0.0.1:${evil.address().port}/`);
    const [answer] = await Promise.all([
      evilPage.waitForResponse((r) => r.url().includes("/console/api/remove")),
      evilPage.evaluate((u) => fetch(u + "/console/api/remove", {
        method: "POST", mode: "no-cors", credentials: "include",
        headers: { "content-type": "text/plain" },
        body: JSON.stringify({ key: "x", fence: "y" }),
      }).catch(() => null), origin),
    ]);
    assert.equal(answer.status(), 403);
    evil.close();

    // A new entry appears without a reload.
    execFileSync(process.env.TOOLONCE, ["exec", "--store", process.env.STORE_URL, "--scope", "team",
      "--name", "fresh_tool", "--", "true"], { stdio: "ignore" });
    await page.waitForFunction(() => [...document.querySelectorAll("#rows td")].some((td) => td.textContent === "fresh_tool"),
      null, { timeout: 15000 });
    console.log("browser: all checks passed");
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
