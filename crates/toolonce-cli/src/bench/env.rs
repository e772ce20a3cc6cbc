//! What a run runs on and its random id: the runtime both sides of every round share, as the
//! reports name it, what the machine does with an idle CPU when that makes the figures
//! unsteady, and the id that names what the run writes.

/// The runtime both sides of every round run on (the command's own: toolonce and the floor
/// share it, its worker threads and their connections), as the report names it.
pub(super) fn runtime() -> String {
    let handle = tokio::runtime::Handle::current();
    match handle.runtime_flavor() {
        tokio::runtime::RuntimeFlavor::CurrentThread => "Tokio current-thread".to_owned(),
        _ => format!(
            "Tokio multi-thread, {} worker threads",
            handle.metrics().num_workers()
        ),
    }
}

/// Where a KVM guest's idle driver and its polling budget are (Linux).
const IDLE_DRIVER: &str = "/sys/devices/system/cpu/cpuidle/current_driver";
const HALT_POLL_NS: &str = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";

/// What makes this machine's 1-caller figures unsteady, if the bench can tell: a KVM guest that
/// halts an idle CPU at once. Each wait on the store then sleeps the CPU into the host, and how
/// long waking it takes depends on the host's own polling at that moment: on the machine this
/// was found on, replays of one caller took 10 µs in one run and 190 in the next, toolonce's
/// and the floor's alike, and a steady 16 to 22 µs with the guest polling for 200 µs first.
pub(super) fn idle_note() -> Option<String> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    halting_note(read(IDLE_DRIVER).as_deref(), read(HALT_POLL_NS).as_deref())
}

fn halting_note(driver: Option<&str>, poll_ns: Option<&str>) -> Option<String> {
    let halts_at_once = driver?.trim() == "haltpoll" && poll_ns?.trim() == "0";
    halts_at_once.then(|| {
        format!(
            "this KVM guest halts an idle CPU at once (cpuidle haltpoll, guest_halt_poll_ns=0), \
             so every wait on the store costs a wake-up whose price varies from run to run: \
             the 1-caller rows say more about the host than about either side; for steady \
             figures, as root: echo 200000 > {HALT_POLL_NS} (and back to 0 after)"
        )
    })
}

pub(super) fn rand_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // A clock-derived id is good enough if the system has no randomness to give.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        return nanos as u64 ^ u64::from(std::process::id());
    }
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::halting_note;

    #[test]
    fn a_kvm_guest_that_halts_idle_cpus_at_once_is_named_in_the_report() {
        let note = halting_note(Some("haltpoll\n"), Some("0\n")).unwrap();
        assert!(note.contains("guest_halt_poll_ns=0"), "{note}");
        assert!(note.contains("echo 200000 >"), "{note}");
    }

    #[test]
    fn a_guest_that_polls_first_or_another_machine_gets_no_note() {
        assert_eq!(halting_note(Some("haltpoll\n"), Some("200000\n")), None);
        assert_eq!(halting_note(Some("intel_idle\n"), None), None);
        assert_eq!(halting_note(Some("acpi_idle\n"), Some("0\n")), None);
        assert_eq!(halting_note(None, None), None);
        assert_eq!(halting_note(Some("haltpoll\n"), None), None);
    }
}
