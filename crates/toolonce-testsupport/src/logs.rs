//! The log lines of a test binary, to check what the layer told the operator. A global
//! subscriber (installed by the first test that asks) sees every thread's events, which a
//! thread-local one set by one test would not always do: tracing caches per call site whether
//! anybody listens, and the heartbeat's events come from other threads.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use toolonce::OperationKey;

/// Everything logged in this process since the first [`Logs::capture`].
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// The process's logs, installing the global subscriber on first use.
    pub fn capture() -> &'static Logs {
        static LOGS: OnceLock<Logs> = OnceLock::new();
        LOGS.get_or_init(|| {
            let logs = Logs::default();
            let writer = logs.clone();
            tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .init();
            logs
        })
    }

    /// The lines that name `key` (each test has keys of its own).
    pub fn lines_about(&self, key: &OperationKey) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|line| line.contains(key.as_str()))
            .map(str::to_owned)
            .collect()
    }

    /// Those lines, joined by newlines.
    pub fn about(&self, key: &OperationKey) -> String {
        self.lines_about(key).join("\n")
    }

    /// Every line.
    pub fn all(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
