//! `toolonce exec`: runs a command at most once per operation. The first call runs it (its
//! output streamed as usual) and stores its exit code and the head and tail of its stdout and
//! stderr; every duplicate replays exactly those, byte for byte, without running it.
//!
//! The operation is `(scope, name, args)`, the same key `toolonce key` prints; the command line
//! is deliberately not part of it, so a fixed typo in a deploy script does not make the deploy
//! run twice. Put whatever distinguishes two operations into `--args`.
//!
//! The command runs in a process group of its own, tied to toolonce's life (see [`child`] and
//! [`shim`]): signals to toolonce reach it, and it does not outlive toolonce.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use rustix::process::Signal;
use toolonce::key::{self, Derived};
use toolonce::{
    About, InFlight, Layer, OnExpired, Outcome, Store, ToolError, WriteAnswer, WriteOptions,
};

use crate::args::{self, StoreArg};
use crate::exit;

mod capture;
mod child;
mod record;
mod replay;
pub(crate) mod shim;

use child::{NotStarted, Signals};
use record::Record;

const EXEC_NOTES: &str = "\
exec exits with the command's own code, whether it ran now or this is a duplicate replaying
its recorded outcome (a non-zero exit is recorded too, unless --transient-exit). A replay
writes the recorded stdout and stderr, then one line at the end of stderr: `toolonce: not
run: replayed the recorded outcome of operation KEY (STATE TIME; exit code N)`, the command
to forget the outcome so that the command runs again (`toolonce rm KEY`), and the recorded
command line when it is not this one. A command
that cannot be started (126, 127) and a call stopped by a signal before the command started
(128+N) record nothing: the next call tries again.

Signals: the command runs in a process group of its own. SIGINT, SIGTERM and SIGHUP sent to
toolonce (Ctrl-C included) are forwarded to that group; toolonce keeps renewing the claim,
waits for the command, SIGKILLs the group if it is still running after --grace, and records
the outcome like any other exit (a command killed by signal N exits 128+N). If toolonce itself
is killed (SIGKILL), the command's group is killed too: at once on Linux (parent-death signal),
within half a second elsewhere. Being in its own group, the command is not in the terminal's
foreground group: a command that reads from the terminal stops (SIGTTIN); give it its input
through a pipe or a file.

Output: streamed live in full; the stored copy keeps the first and last halves of
--max-output bytes of each stream, with a line saying how many bytes were dropped between
them. exec returns once the command exits; a background process it started is not waited for
(its output is read for one more second).

A run that ends without recording an outcome (toolonce SIGKILLed with its command, the
machine lost, the store unreachable when it finished) leaves the operation `unknown` once its
lease has expired: the command may or may not have taken effect. What a duplicate then does is
--on-expired: `hold` (the default) does not run the command and exits 73, until a person checks
and settles it with `toolonce resolve KEY --done JSON | --failed MESSAGE | --release`
(`toolonce ls --state unknown` lists such operations); `rerun` runs the command again with the
same TOOLONCE_KEY and with TOOLONCE_MAY_HAVE_RUN_BEFORE=1 (an earlier attempt may have taken
effect), which is safe when whatever it calls deduplicates by that key. The variable is never
set otherwise, not even inherited.

The operation is identified by --scope, --name and --args, never by the command line.
The command gets the operation key in TOOLONCE_KEY and IDEMPOTENCY_KEY: hand it to any
downstream service that deduplicates requests. Set RUST_LOG=toolonce=info for the library's
log line of every call (with RUST_LOG set, its warning about an unknown outcome is shown too).";

/// The largest `--max-output`: a record must stay well within what every store accepts.
const MAX_OUTPUT_LIMIT: usize = 64 << 20;

#[derive(clap::Args)]
#[command(after_long_help = EXEC_NOTES)]
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
    /// command runs. After a crash of toolonce, the run's outcome is unknown once it has
    /// passed (see --on-expired).
    #[arg(long, value_name = "SECONDS", value_parser = args::lease, default_value = "60")]
    lease: Duration,
    /// What to do when an earlier run of the operation ended without recording an outcome
    /// (its lease expired): `hold` runs nothing and exits 73 until `toolonce resolve` settles
    /// it; `rerun` runs the command again with the same TOOLONCE_KEY and with
    /// TOOLONCE_MAY_HAVE_RUN_BEFORE=1 (safe only when what it calls deduplicates by that key).
    #[arg(long, value_name = "POLICY", value_enum, default_value_t = OnExpiredArg::Hold)]
    on_expired: OnExpiredArg,
    /// How long the outcome is kept and replayed.
    #[arg(long, value_name = "SECONDS", value_parser = args::retention, default_value = "86400")]
    retention: Duration,
    /// The most bytes of each stream (stdout, stderr) stored for replay: its head and tail,
    /// half each. A number of bytes, or with a suffix K, M (KiB, MiB); at most 64M. The live
    /// output is never cut.
    #[arg(long, value_name = "BYTES", value_parser = bytes, default_value = "1M")]
    max_output: usize,
    /// After forwarding a signal to the command, how long to wait for it before killing its
    /// process group with SIGKILL.
    #[arg(long, value_name = "SECONDS", value_parser = args::grace, default_value = "10")]
    grace: Duration,
    /// The command and its arguments, best after `--`.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// `--on-expired`: the policies a shell command can choose (it has no probe to verify with).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OnExpiredArg {
    Hold,
    Rerun,
}

impl From<OnExpiredArg> for OnExpired {
    fn from(arg: OnExpiredArg) -> OnExpired {
        match arg {
            OnExpiredArg::Hold => OnExpired::Hold,
            OnExpiredArg::Rerun => OnExpired::Rerun,
        }
    }
}

/// Parses a size in bytes: `1000`, `64K`, `1M` (binary units).
fn bytes(text: &str) -> Result<usize, String> {
    let (digits, unit) = match text.strip_suffix(['K', 'k']) {
        Some(digits) => (digits, 1 << 10),
        None => match text.strip_suffix(['M', 'm']) {
            Some(digits) => (digits, 1 << 20),
            None => (text, 1),
        },
    };
    let size = digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("{text:?} is not a number of bytes (such as 65536, 64K or 1M)"))?;
    if size > MAX_OUTPUT_LIMIT {
        return Err(format!("{text:?} is more than the largest allowed, 64M"));
    }
    Ok(size)
}

pub(crate) async fn run(a: ExecArgs) -> anyhow::Result<ExitCode> {
    // All input is checked before the store is touched: bad input runs nothing.
    if a.args == "-" {
        bail!("--args - is not available for exec: standard input belongs to the command");
    }
    let value = args::read_args(&a.args)?;
    let fields = args::key_fields(&a.key_fields)?;
    let op = key::derive(&a.scope, &a.name, &value, fields.as_ref())?;
    // From here on, SIGINT, SIGTERM and SIGHUP are toolonce's to handle.
    let mut signals = child::listen()
        .context("cannot handle signals")
        .map_err(exit::internal)?;
    let store = match open_store(&a.store.url, &mut signals).await? {
        Ok(store) => store,
        Err(stopped) => return Ok(stopped),
    };
    let this_command_line = record::command_line(&a.command);
    // Set only if the command ran here (its output has then been streamed already).
    let mut ran: Option<Result<Record, NotStarted>> = None;
    let once = Once {
        a: &a,
        op: &op,
        command_line: &this_command_line,
    };
    let answer = match once.run(&store, &mut signals, &mut ran).await {
        Ok(answer) => answer,
        // Waiting for the claim or for a concurrent run: nothing was started here.
        Err(sig) => return Ok(not_started(&child::stopped_before_start(sig))),
    };

    if let (Some(Ok(_)), Some(notice)) = (&ran, &answer.notice) {
        // The command ran, but its outcome was not simply recorded: say so beside its output.
        eprintln!("toolonce: warning: operation {}: {notice}", op.key);
    }
    match ran {
        Some(Ok(record)) => return Ok(exit_code(record.exit_code)),
        Some(Err(not_started_here)) => return Ok(not_started(&not_started_here)),
        None => {}
    }
    let store_option = if a.store.url == crate::DEFAULT_STORE {
        String::new()
    } else {
        format!(" --store {}", toolonce::store::redact_url(&a.store.url))
    };
    if matches!(answer.outcome, Outcome::Replayed | Outcome::ReplayedFailure) {
        // For the note's "when": a failed read only leaves the time out of it.
        let entry = store.get(&op.key).await.ok().flatten();
        let about = replay::Replayed {
            key: &op.key,
            entry,
            command_line: &this_command_line,
            store_option: store_option.clone(),
        };
        match answer.result {
            Ok(value) => return Ok(replay::done(&value, &about)),
            Err(error) => return replay::failed(&error, &about),
        }
    }
    not_run(&a, &op, answer, &store_option)
}

/// Opens the store, unless a signal comes first: then the exit code of a call stopped before
/// its command started.
async fn open_store(
    url: &str,
    signals: &mut Signals,
) -> anyhow::Result<Result<Arc<dyn Store>, ExitCode>> {
    match until_signal(toolonce::store::open(url), signals, None).await {
        Err(sig) => Ok(Err(not_started(&child::stopped_before_start(sig)))),
        Ok(Ok(store)) => Ok(Ok(store)),
        Ok(Err(e)) => Err(e).with_context(|| {
            format!(
                "cannot open the store {}; the command was not run",
                toolonce::store::redact_url(url)
            )
        }),
    }
}

/// One call of the command through the layer.
struct Once<'a> {
    a: &'a ExecArgs,
    op: &'a Derived,
    command_line: &'a str,
}

impl Once<'_> {
    /// Runs the command at most once for the operation; `ran` is set only if it ran here. A
    /// signal before the command started stops the call.
    async fn run(
        &self,
        store: &Arc<dyn Store>,
        signals: &mut Signals,
        ran: &mut Option<Result<Record, NotStarted>>,
    ) -> Result<WriteAnswer, Signal> {
        let a = self.a;
        let options = WriteOptions::new()
            .lease(a.lease)
            .retention(a.retention)
            .in_flight(a.wait.map_or(InFlight::Reject, InFlight::Wait))
            .on_expired(a.on_expired.into());
        let about =
            About::new(a.scope.clone(), a.name.clone()).detail(self.command_line.to_owned());
        let started = AtomicBool::new(false);
        let (started_ref, transient) = (&started, a.transient_exit);
        let (command, key, max_output, grace) = (&a.command, &self.op.key, a.max_output, a.grace);
        let command_signals = signals.clone();
        let layer = Layer::new(store.clone());
        let call = layer.run_with_about(&a.name, self.op, &about, &options, |ctx| async move {
            let run = child::Run {
                command,
                key,
                max_output,
                grace,
                may_have_run_before: ctx.may_have_run_before(),
            };
            started_ref.store(true, Ordering::SeqCst);
            let outcome = child::run(run, command_signals).await;
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
        });
        until_signal(call, signals, Some(&started)).await
    }
}

/// What a call that did not run the command says, and its exit code.
fn not_run(
    a: &ExecArgs,
    op: &Derived,
    answer: WriteAnswer,
    store_option: &str,
) -> anyhow::Result<ExitCode> {
    match (answer.outcome, answer.result) {
        // The entry is there, but the record of its run cannot be read (damaged, or written
        // by a writer this version cannot follow): begun, perhaps done.
        (Outcome::Unknown, Err(error)) if has_store_error(&error) => {
            eprintln!(
                "toolonce: not run: operation {} (scope {:?}, name {:?}) is recorded, but its \
                 record cannot be read ({}), so it may have taken effect. Look at it with \
                 `toolonce show {}{store_option}` and check whether it took effect; `toolonce \
                 rm {}{store_option}` forgets it, so that the next call runs the command.",
                op.key,
                a.scope,
                a.name,
                store_error(&error),
                op.key,
                op.key
            );
            Ok(ExitCode::from(exit::UNKNOWN))
        }
        (Outcome::Unknown, _) => {
            say_held(a, op, store_option);
            Ok(ExitCode::from(exit::UNKNOWN))
        }
        (Outcome::InFlight, _) => {
            say_in_flight(a, op);
            Ok(ExitCode::from(exit::IN_FLIGHT))
        }
        (Outcome::StoreUnavailable, Err(error)) => {
            eprintln!(
                "toolonce: the store {} is unavailable ({}); the command was not run. Try again \
                 later.",
                toolonce::store::redact_url(&a.store.url),
                store_error(&error)
            );
            Ok(ExitCode::from(exit::UNAVAILABLE))
        }
        (Outcome::Conflict, Err(_)) => {
            eprintln!(
                "toolonce: conflict: operation {} (scope {:?}, name {:?}) was already recorded \
                 with the same key fields but other arguments; the command was not run. Change \
                 a key field to make it a new operation.",
                op.key, a.scope, a.name
            );
            Ok(ExitCode::from(exit::CONFLICT))
        }
        (outcome, result) => Err(exit::internal(anyhow::anyhow!(
            "unexpected answer from the layer: {outcome}: {result:?}"
        ))),
    }
}

/// An `unknown` operation held by `--on-expired hold`: how to settle it.
fn say_held(a: &ExecArgs, op: &Derived, store_option: &str) {
    let resolve = format!("toolonce resolve {}{store_option}", op.key);
    eprintln!(
        "toolonce: not run: operation {} (scope {:?}, name {:?}) is unknown: an earlier \
         run ended without recording an outcome (toolonce was killed, or lost its store, \
         before its lease expired), so it may have taken effect, and --on-expired is \
         hold. Check whether it took effect, then settle it with one of: `{resolve} \
         --done JSON` (it took effect: duplicates replay JSON), `{resolve} --failed \
         MESSAGE` (it failed: duplicates replay the failure), `{resolve} --release` (it \
         did not: the next call runs the command again with the same TOOLONCE_KEY).",
        op.key, a.scope, a.name
    );
}

/// Another run holds the claim.
fn say_in_flight(a: &ExecArgs, op: &Derived) {
    let advice = match a.wait {
        // It waited already: waiting again is for the caller to decide, not advice.
        Some(waited) => format!(
            "it was still running after waiting {} (--wait); the command was not \
             run. Once the other run ends, a new call replays its outcome.",
            crate::output::duration(waited)
        ),
        None => "the command was not run. Try again later, or pass --wait SECONDS to \
                 wait for it and replay its outcome."
            .to_owned(),
    };
    eprintln!(
        "toolonce: operation {} (scope {:?}, name {:?}) is already running elsewhere, or \
         a run of it was interrupted and its lease has not expired yet; {advice}",
        op.key, a.scope, a.name
    );
}

/// Whether a log event is one that `exec` says itself, in its own line on stderr: the layer's
/// warning about an `unknown` outcome (the only warning of its report module), which names
/// only half a `resolve` command. `cli_exec_unknown` checks that a held call prints one line.
pub(crate) fn says_itself(meta: &tracing::Metadata<'_>) -> bool {
    meta.module_path() == Some("toolonce::layer::report") && *meta.level() == tracing::Level::WARN
}

/// Runs `work` unless one of the signals arrives first while nothing has been started
/// (`started` unset or false): then `work` is dropped and the signal returned. Once the
/// command has started, signals are the command's to get (see [`child::run`]).
async fn until_signal<T>(
    work: impl Future<Output = T>,
    signals: &mut Signals,
    started: Option<&AtomicBool>,
) -> Result<T, Signal> {
    tokio::pin!(work);
    let mut listening = true;
    loop {
        tokio::select! {
            biased;
            done = &mut work => return Ok(done),
            changed = signals.changed(), if listening => {
                if changed.is_err() {
                    listening = false;
                    continue;
                }
                let has_started = started.is_some_and(|s| s.load(Ordering::SeqCst));
                if let Some(sig) = *signals.borrow_and_update()
                    && !has_started
                {
                    return Err(sig);
                }
            }
        }
    }
}

fn not_started(not_started: &NotStarted) -> ExitCode {
    eprintln!(
        "toolonce: {}; nothing was recorded, so the next call runs it",
        not_started.message
    );
    ExitCode::from(not_started.exit_code)
}

/// Whether the layer's answer carries the store's own error (for the operator).
fn has_store_error(error: &ToolError) -> bool {
    error
        .detail
        .as_ref()
        .is_some_and(|d| d.get(toolonce::layer::STORE_ERROR).is_some())
}

/// The store's own error in a `store_unavailable` answer, or an unreadable entry's (the
/// message is written for a model).
fn store_error(error: &ToolError) -> &str {
    error
        .detail
        .as_ref()
        .and_then(|d| d.get(toolonce::layer::STORE_ERROR))
        .and_then(serde_json::Value::as_str)
        .unwrap_or(&error.message)
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes_and_a_ceiling() {
        assert_eq!(bytes("0"), Ok(0));
        assert_eq!(bytes("1000"), Ok(1000));
        assert_eq!(bytes("64K"), Ok(65536));
        assert_eq!(bytes("1M"), Ok(1 << 20));
        assert_eq!(bytes("64M"), Ok(64 << 20));
        for bad in ["65M", "-1", "lots", "1G", "", "K", "99999999999999999999"] {
            assert!(bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_operator_gets_the_store_error_not_the_models_wording() {
        let error = ToolError::transient("Not executed: the idempotency store is unavailable.")
            .with_detail(serde_json::json!({
                toolonce::layer::STORE_ERROR: "store unavailable: Connection refused (os error 111)"
            }));
        assert_eq!(
            store_error(&error),
            "store unavailable: Connection refused (os error 111)"
        );
        let plain = ToolError::transient("other text");
        assert_eq!(store_error(&plain), "other text");
    }
}
