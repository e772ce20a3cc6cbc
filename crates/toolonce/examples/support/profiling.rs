//! What the profiling drivers (`drive`, `redis_floor`, `pg_floor`) share, so that they are
//! measured alike: the command line `URL first|replay N`, the runtime (multi-thread, 2 workers,
//! as `toolonce bench`'s), and the line each prints at the end.

use std::time::Duration;

/// The driver's command line.
pub(crate) struct Run {
    pub(crate) url: String,
    /// First-time operations, else replays of one.
    pub(crate) first: bool,
    pub(crate) n: u64,
}

/// `URL first|replay N`, or an exit with the usage line.
pub(crate) fn args(program: &str) -> Run {
    let usage = || -> ! {
        eprintln!("usage: {program} URL first|replay N");
        std::process::exit(2)
    };
    let mut argv = std::env::args().skip(1);
    let (Some(url), Some(mode), Some(n)) = (argv.next(), argv.next(), argv.next()) else {
        usage()
    };
    let first = match mode.as_str() {
        "first" => true,
        "replay" => false,
        _ => usage(),
    };
    let Ok(n) = n.parse() else { usage() };
    Run { url, first, n }
}

/// The runtime every driver runs its loop on, in a spawned task (as the bench spawns its
/// callers: the loop and the connection's task then share a worker).
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime")
}

/// The closing line: `n` operations of `what` took `took`.
pub(crate) fn report(what: &str, n: u64, took: Duration) {
    eprintln!(
        "{n} {what} in {took:?}: {:.1} µs each",
        took.as_secs_f64() * 1e6 / n as f64
    );
}
