// What the machine's idle CPUs do, for the bench's output (bench.js): a KVM
// guest whose cpuidle driver is haltpoll with guest_halt_poll_ns=0 halts a CPU the moment it
// is idle, so every wait on the store costs a wake-up whose price moves from run to run (10 to
// 190 µs per replay were seen on one such guest), and the 1-caller rows then measure the host
// more than either design. The Rust bench (`toolonce bench`) says the same in the same words.

"use strict";

const fs = require("node:fs");

const IDLE_DRIVER = "/sys/devices/system/cpu/cpuidle/current_driver";
const HALT_POLL_NS = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";

/** The note for a machine whose idle driver and halt-poll setting read `driver` and `pollNs`. */
function haltingNote(driver, pollNs) {
  if (driver?.trim() !== "haltpoll" || pollNs?.trim() !== "0") return null;
  return (
    "this KVM guest halts an idle CPU at once (cpuidle haltpoll, guest_halt_poll_ns=0), so every wait on the store " +
    "costs a wake-up whose price varies from run to run: the 1-caller rows say more about the host than about either " +
    `side; for steady figures, as root: echo 200000 > ${HALT_POLL_NS} (and back to 0 after)`
  );
}

function read(file) {
  try {
    return fs.readFileSync(file, "utf8");
  } catch {
    return undefined;
  }
}

/** This machine's note, or null where its idle CPUs do not halt at once (or it cannot tell). */
function idleNote() {
  return haltingNote(read(IDLE_DRIVER), read(HALT_POLL_NS));
}

module.exports = { haltingNote, idleNote, IDLE_DRIVER, HALT_POLL_NS };
