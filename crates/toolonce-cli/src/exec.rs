//! `toolonce exec`: runs a command at most once per operation. The first call runs it (its
//! output streamed as usual) and stores its exit code, stdout and stderr; every duplicate
//! replays exactly those, byte for byte, without running it.
//!
//! The operation is `(scope, name, args)`, the same key `toolonce key` prints; the command line
//! is deliberately not part of it, so a fixed typo in a deploy script does not make the deploy
//! run twice. Put whatever distinguishes two operations into `--args`.

use std::ffi::OsString;
use std::io::Write;
use std::process::{ExitCode, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use toolonce::{InFlight, Layer, OperationKey, Outcome, ToolError, WriteOptions, key};

use crate::args::{self, StoreArg};

mod record;

use record::Record;

/// Exit code when the command was not run but may be later: its operation is in flight
/// elsewhere, or the store is unavailable (`EX_TEMPFAIL` of sysexits.h).
const EXIT_TEMPFAIL: u8 = 75;
/// Exit code when the key fields match an earlier operation whose other arguments differ
/// (`EX_DATAERR`).
const EXIT_CONFLICT: u8 = 65;

const EXIT_CODES: &str = "\
Exit codes:
  the command's own   it ran now, or this is a duplicate replaying its recorded outcome
  75                  not run: the same operation is running elsewhere (without --wait, or the
                      wait timed out), or the store cannot be used right now; try again later
  65                  not run: the key fields match an earlier operation with other arguments
  126, 127            the command could not be started (nothing recorded: the next call tries again)
  2                   not run: bad input or configuration (arguments, store URL, a store
                      directory that does not exist)

The operation is identified by --scope, --name and --args, never by the command line.
The command gets the operation key in TOOLONCE_KEY and IDEMPOTENCY_KEY: hand it to any
downstream service that deduplicates requests. Set RUST_LOG=toolonce=info to see whether a
call executed or replayed.";

#[derive(clap::Args)]
#[command(after_long_help = EXIT_CODES)]
pub(crate) struct ExecArgs {
    /// The scope of the operation: a deploy id, a cron slot (`backup/2026-11-29`), a run id.
    #[arg(long)]
    scope: String,
    /// The name of the operation within the scope.
    #[arg(long, visible_alias = "tool")]
    name: String,
    /// The operation's arguments as JSON; with the scope and name they make the key.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    args: String,
    /// A JSON Pointer (RFC 6901) to an argument field that alone defines the operation;
    /// repeat for several. A duplicate with other values elsewhere is a conflict (exit 65).
    #[arg(long = "key-field", value_name = "PTR")]
    key_fields: Vec<String>,
    #[command(flatten)]
    store: StoreArg,
    /// Wait up to SECONDS for a concurrent run of the same operation and replay its outcome.
    /// Without it such a duplicate is refused at once (exit 75).
    #[arg(long, value_name = "SECONDS", value_parser = args::wait)]
    wait: Option<Duration>,
    /// Treat a non-zero exit as transient: not recorded, so the next call runs the command
    /// again. By default a non-zero exit is recorded and replayed like a success.
    #[arg(long)]
    transient_exit: bool,
    /// How long the claim lives without a heartbeat; renewed every third of it while the
    /// command runs. After a crash of toolonce, a duplicate can run again once it has passed.
    #[arg(long, value_name = "SECONDS", value_parser = args::lease, default_value = "60")]
    lease: Duration,
    /// How long the outcome is kept and replayed.
    #[arg(long, value_name = "SECONDS", value_parser = args::retention, default_value = "86400")]
    retention: Duration,
    /// The command and its arguments, best after `--`.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// Why the command did not run to an exit status.
struct NotStarted {
    message: String,
    /// 127 when the program was not found, 126 otherwise, as shells report it.
    exit_code: u8,
}

pub(crate) async fn run(a: ExecArgs) -> anyhow::Result<ExitCode> {
    // All input is checked before the store is touched: bad input runs nothing.
    if a.args == "-" {
        bail!("--args - is not available for exec: standard input belongs to the command");
    }
    let value = args::read_args(&a.args)?;
    let fields = args::key_fields(&a.key_fields)?;
    let op = key::derive(&a.scope, &a.name, &value, fields.as_ref())?;
    if a.lease.is_zero() {
        bail!("--lease must be more than 0 seconds");
    }
    let store = match toolonce::store::open(&a.store.url).await {
        Ok(store) => store,
        Err(e @ toolonce::Error::Config(_)) => {
            return Err(e).context("the command was not run");
        }
        Err(e) => {
            let e = anyhow::Error::new(e);
            eprintln!(
                "toolonce: cannot open the store {}: {}; the command was not run",
                a.store.url,
                toolonce::error_report(&*e)
            );
            return Ok(ExitCode::from(EXIT_TEMPFAIL));
        }
    };
    let options = WriteOptions::new()
        .lease(a.lease)
        .retention(a.retention)
        .in_flight(a.wait.map_or(InFlight::Reject, InFlight::Wait));

    // Set only if the command ran here (its output has then been streamed already).
    let mut ran: Option<Result<Record, NotStarted>> = None;
    let answer = {
        let (ran, command, transient) = (&mut ran, &a.command, a.transient_exit);
        Layer::new(store)
            .run(&a.name, &op, &options, |ctx| async move {
                let outcome = run_command(command, ctx.key()).await;
                let result = match &outcome {
                    Ok(record) if record.exit_code == 0 => Ok(record.to_json()),
                    Ok(record) => {
                        let message = format!("the command exited with code {}", record.exit_code);
                        let error = if transient {
                            ToolError::transient(message)
                        } else {
                            ToolError::permanent(message)
                        };
                        Err(error.with_detail(record.to_json()))
                    }
                    Err(not_started) => Err(ToolError::transient(not_started.message.clone())),
                };
                *ran = Some(outcome);
                result
            })
            .await
    };

    match ran {
        Some(Ok(record)) => return Ok(exit_code(record.exit_code)),
        Some(Err(not_started)) => {
            eprintln!("toolonce: {}", not_started.message);
            return Ok(ExitCode::from(not_started.exit_code));
        }
        None => {}
    }
    match (answer.outcome, answer.result) {
        (Outcome::Replayed, Ok(value)) => replay(&op.key, &value),
        (Outcome::ReplayedFailure, Err(error)) => match &error.detail {
            Some(value) => replay(&op.key, value),
            // A permanent failure recorded by something other than exec (same scope and name).
            None => {
                eprintln!(
                    "toolonce: {} (replayed failure of {})",
                    error.message, op.key
                );
                Ok(ExitCode::FAILURE)
            }
        },
        (Outcome::InFlight, _) => {
            eprintln!(
                "toolonce: operation {} (scope {:?}, name {:?}) is already running elsewhere, or \
                 a run of it was interrupted and its lease has not expired yet; the command was \
                 not run. Try again later, or pass --wait SECONDS to wait for it and replay its \
                 outcome.",
                op.key, a.scope, a.name
            );
            Ok(ExitCode::from(EXIT_TEMPFAIL))
        }
        (Outcome::StoreUnavailable, Err(error)) => {
            eprintln!(
                "toolonce: the store cannot be used right now ({}); the command was not run. \
                 Try again later.",
                store_error(&error)
            );
            Ok(ExitCode::from(EXIT_TEMPFAIL))
        }
        (Outcome::Conflict, Err(_)) => {
            eprintln!(
                "toolonce: Conflict: operation {} (scope {:?}, name {:?}) has the key fields of an \
                 earlier operation with other --args; the command was not run. Change a key \
                 field for a new operation.",
                op.key, a.scope, a.name
            );
            Ok(ExitCode::from(EXIT_CONFLICT))
        }
        (outcome, result) => bail!("unexpected answer from the layer: {outcome}: {result:?}"),
    }
}

/// The store's own error in a `store_unavailable` answer (the message is written for a model).
fn store_error(error: &ToolError) -> &str {
    error
        .detail
        .as_ref()
        .and_then(|d| d.get(toolonce::layer::STORE_ERROR))
        .and_then(serde_json::Value::as_str)
        .unwrap_or(&error.message)
}

/// Writes a recorded run's stdout and stderr back out and returns its exit code.
fn replay(key: &OperationKey, value: &serde_json::Value) -> anyhow::Result<ExitCode> {
    let record = Record::from_json(value)
        .map_err(|e| anyhow::anyhow!("the stored outcome of {key} is not an exec record: {e}"))?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&record.stdout)?;
    stdout.flush()?;
    let mut stderr = std::io::stderr().lock();
    stderr.write_all(&record.stderr)?;
    stderr.flush()?;
    Ok(exit_code(record.exit_code))
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Runs the command with the key in its environment, streaming its output through while
/// capturing it.
async fn run_command(command: &[OsString], key: &OperationKey) -> Result<Record, NotStarted> {
    let (program, rest) = command.split_first().expect("clap requires a command");
    let mut child = tokio::process::Command::new(program)
        .args(rest)
        .env("TOOLONCE_KEY", key.as_str())
        .env("IDEMPOTENCY_KEY", key.as_str())
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| NotStarted {
            message: format!("cannot run {}: {e}", program.to_string_lossy()),
            exit_code: if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            },
        })?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (stdout, stderr, status) = tokio::join!(
        tee(stdout, tokio::io::stdout()),
        tee(stderr, tokio::io::stderr()),
        child.wait()
    );
    let status = status.map_err(|e| NotStarted {
        message: format!("lost track of {}: {e}", program.to_string_lossy()),
        exit_code: 126,
    })?;
    Ok(Record {
        exit_code: status_code(status),
        stdout,
        stderr,
        command: command
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect(),
    })
}

/// The exit code, or `128 + N` for a command killed by signal N, as shells report it.
fn status_code(status: ExitStatus) -> i32 {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return 128 + signal;
        }
    }
    status.code().unwrap_or(1)
}

/// Copies `from` to `to` as it arrives and returns everything read. A failing `to` (a closed
/// pipe) stops the echo, never the capture.
async fn tee(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin) -> Vec<u8> {
    let mut captured = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut echo = true;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        captured.extend_from_slice(&buf[..n]);
        if echo {
            echo = to.write_all(&buf[..n]).await.is_ok() && to.flush().await.is_ok();
        }
    }
    captured
}
