// The bench's note on idle CPUs (bench/idle.js): given only where the guest halts an idle CPU
// at once, and what it says of this machine agrees with this machine's own settings.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { defined } = require("./support.js");
const fs = require("node:fs");
const { haltingNote, idleNote, IDLE_DRIVER, HALT_POLL_NS } = require("../bench/idle.js");

test("the note is given for haltpoll with no polling, as sysfs writes them, and for nothing else", () => {
  const note = defined(haltingNote("haltpoll\n", "0\n"), "the note");
  assert.match(note, /halts an idle CPU at once/);
  assert.match(note, /echo 200000 > \/sys\/module\/haltpoll\/parameters\/guest_halt_poll_ns/);
  assert.equal(haltingNote("haltpoll\n", "200000\n"), null);
  assert.equal(haltingNote("acpi_idle\n", "0\n"), null);
  assert.equal(haltingNote("haltpoll\n", undefined), null);
  assert.equal(haltingNote(undefined, "0\n"), null);
});

test("the note on this machine is what its own idle driver and halt-poll setting call for", () => {
  const read = (file) => (fs.existsSync(file) ? fs.readFileSync(file, "utf8") : undefined);
  const halts = read(IDLE_DRIVER)?.trim() === "haltpoll" && read(HALT_POLL_NS)?.trim() === "0";
  assert.equal(idleNote() !== null, halts);
});
