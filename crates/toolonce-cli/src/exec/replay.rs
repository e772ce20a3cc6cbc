//! What `exec` prints for a duplicate: the recorded run's stdout and stderr, byte for byte, and
//! its exit code, then one line of its own at the end of stderr saying that the command did not
//! run. Without that line a replay looks exactly like a run, and after a failed or Ctrl-C'd run
//! a person retrying would believe the command had just failed again.

use std::io::Write;
use std::process::ExitCode;
use std::time::SystemTime;

use toolonce::{Entry, OperationKey, ToolError};

use super::record::{Record, command_line};
use crate::output;

/// What the note says about the replayed operation, besides the record itself.
pub(crate) struct Replayed<'a> {
    pub(crate) key: &'a OperationKey,
    /// The stored entry, read after the answer for when it settled; `None` if that read
    /// failed (the note then leaves the time out).
    pub(crate) entry: Option<Entry>,
    /// This call's command line, as `command_line` spells it.
    pub(crate) command_line: &'a str,
    /// `--store URL` when the store is not the default, so the `rm` hint can be pasted.
    pub(crate) store_option: String,
}

/// A done result: an exec record replays as the run it records; any other value (an operator
/// recorded it with `toolonce resolve --done JSON`) is printed as one line of JSON, exit 0.
pub(crate) fn done(value: &serde_json::Value, about: &Replayed<'_>) -> ExitCode {
    match Record::from_json(value) {
        Ok(record) => record_and_note(&record, "done", about),
        Err(_) => {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{value}").and_then(|()| stdout.flush());
            note(&about.line("done", "a value recorded with `toolonce resolve --done`"));
            ExitCode::SUCCESS
        }
    }
}

/// A recorded failure: an exec record replays as the run it records; a failure recorded by
/// something else (an operator's `resolve --failed`, or a worker of another language whose
/// error carries a `detail` of its own) is its message, exit 1: it is still the operation's
/// recorded outcome, and replaying it is what a duplicate must do.
pub(crate) fn failed(error: &ToolError, about: &Replayed<'_>) -> anyhow::Result<ExitCode> {
    if let Some(record) = error
        .detail
        .as_ref()
        .and_then(|value| Record::from_json(value).ok())
    {
        return Ok(record_and_note(&record, "failed", about));
    }
    note(&about.line("failed", &format!("the message {:?}", error.message)));
    Ok(ExitCode::FAILURE)
}

/// Writes a recorded run's stdout and stderr back out, then the note, and returns its exit
/// code. A reader that went away (a closed pipe) does not change the outcome, which is the
/// exit code.
fn record_and_note(record: &Record, state: &str, about: &Replayed<'_>) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(&record.stdout)
        .and_then(|()| stdout.flush());
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(&record.stderr);
    // The note starts a line of its own, after the recorded bytes (which stay exact).
    if record.stderr.last().is_some_and(|&b| b != b'\n') {
        let _ = stderr.write_all(b"\n");
    }
    let _ = stderr.flush();
    drop(stderr);
    let what = format!("exit code {}", record.exit_code);
    let mut line = about.line(state, &what);
    let recorded = command_line(&record.command);
    if record.command.is_empty() {
        line.push_str(" The record has no command line (it was set with `toolonce resolve`).");
    } else if recorded != about.command_line {
        line.push_str(&format!(
            " It was recorded for another command line: {recorded}"
        ));
    }
    note(&line);
    ExitCode::from(u8::try_from(record.exit_code).unwrap_or(1))
}

impl Replayed<'_> {
    /// The note: not run, what was replayed (state, when), the key, how to run it again.
    fn line(&self, state: &str, what: &str) -> String {
        let when = self
            .entry
            .as_ref()
            .and_then(|e| e.settled_at)
            .map(|t| {
                let ago = SystemTime::now().duration_since(t).unwrap_or_default();
                format!(" {}, {} ago", output::timestamp(t), output::duration(ago))
            })
            .unwrap_or_default();
        format!(
            "toolonce: not run: replayed the recorded outcome of operation {key} ({state}{when}; \
             {what}). To run the command again, forget it first: `toolonce rm {key}{store}`.",
            key = self.key,
            store = self.store_option,
        )
    }
}

fn note(line: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{line}").and_then(|()| stderr.flush());
}
