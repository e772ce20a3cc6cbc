//! What a run runs on and its random id: the runtime both sides of every round share, as the
//! reports name it, and the id that names what the run writes.

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
