//! A `toolonce mcp --listen 127.0.0.1:0` process for the tests: started from a prepared
//! command, its port read from what it says on stderr, stopped with SIGTERM (and killed when
//! dropped, so a failed assertion leaves no gateway running).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::mcp_peer::PATIENCE;

pub(crate) struct Gateway {
    child: Child,
    pub(crate) port: u16,
    stderr: Arc<Mutex<String>>,
}

impl Gateway {
    /// Starts `command` (a `toolonce mcp ... --listen 127.0.0.1:0 ...`) and waits for its port.
    /// The test process's own `RUST_LOG` is not passed on; one set on `command` is.
    pub(crate) fn spawn(mut command: Command) -> Gateway {
        if !command.get_envs().any(|(name, _)| name == "RUST_LOG") {
            command.env_remove("RUST_LOG");
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start toolonce mcp --listen");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let mut lines = BufReader::new(child.stderr.take().unwrap());
        let kept = stderr.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
                if let Some(port) = line
                    .trim()
                    .strip_prefix("toolonce mcp: listening on http://127.0.0.1:")
                    .and_then(|rest| rest.strip_suffix("/mcp"))
                    .and_then(|port| port.parse::<u16>().ok())
                {
                    let _ = tx.send(port);
                }
                kept.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let port = rx.recv_timeout(PATIENCE).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!(
                "the gateway never said its port: {}",
                stderr.lock().unwrap()
            )
        });
        Gateway {
            child,
            port,
            stderr,
        }
    }

    /// The gateway's process id, to find the servers it started.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Stops the gateway with SIGTERM, checks it exited with 0, and returns everything it
    /// logged.
    pub(crate) fn stop(&mut self) -> String {
        let _ = Command::new("kill")
            .args(["-s", "TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the gateway ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader thread ends with the pipe.
        std::thread::sleep(Duration::from_millis(100));
        let log = self.stderr.lock().unwrap().clone();
        assert_eq!(status.code(), Some(0), "{log}");
        log
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
