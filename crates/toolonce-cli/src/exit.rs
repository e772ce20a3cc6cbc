//! The exit codes of every subcommand, in one table: what a script can tell apart without
//! reading stderr. The numbers follow sysexits.h where one fits, so they stay clear of the
//! small codes commands commonly use for themselves.
//!
//! Subcommands return errors; [`code_of`] picks the code from what the error is made of (a
//! [`toolonce::Error`], a closed pipe, or an explicit [`Exit`]), so one subcommand cannot answer
//! an unreachable store differently from another.

use std::fmt;
use std::io;
use std::process::ExitCode;

/// Bad input or configuration: nothing was done. Also clap's code for a usage error, and a
/// store that can never work as given (the library's `Error::Config`).
pub(crate) const USAGE: u8 = 2;
/// The key fields match an earlier operation whose other arguments differ (`EX_DATAERR`).
pub(crate) const CONFLICT: u8 = 65;
/// No live entry for the key (`EX_NOINPUT`).
pub(crate) const NOT_FOUND: u8 = 66;
/// `resolve`: the entry is settled (done or failed) already, perhaps since it was last looked
/// at: nothing was changed.
pub(crate) const SETTLED: u8 = 67;
/// `resolve`, `rm`: the entry is a live claim (its owner is running it and renewing its
/// lease), or another attempt or entry than the one read (it changed meanwhile): nothing was
/// changed.
pub(crate) const LIVE: u8 = 68;
/// The store cannot be used right now: nothing was done (`EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: u8 = 69;
/// A bug or an answer toolonce does not understand (`EX_SOFTWARE`).
pub(crate) const INTERNAL: u8 = 70;
/// `exec`: an earlier run of the operation ended without a recorded outcome (its lease
/// expired), and the policy is to hold: not run here, a person must check. `resolve`, `rm`:
/// the store failed during the write (its reply lost), which may or may not have applied.
pub(crate) const UNKNOWN: u8 = 73;
/// The operation is running elsewhere: not run here (`EX_TEMPFAIL`).
pub(crate) const IN_FLIGHT: u8 = 75;
/// The program exists but could not be executed, as shells report it.
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The program was not found, as shells report it.
pub(crate) const NOT_FOUND_COMMAND: u8 = 127;
/// The reader of stdout went away: what a shell reports for a tool killed by SIGPIPE.
pub(crate) const BROKEN_PIPE: u8 = 128 + 13;

/// What each subcommand's help says instead of repeating the table.
pub(crate) const POINTER: &str =
    "Exit codes: the same table for every subcommand, in `toolonce --help`.";

/// The table, as the top-level `--help` shows it.
pub(crate) const TABLE: &str = "\
Exit codes (the same for every subcommand):
  0        done
  1        demo: a figure came out wrong
  2        bad input or configuration: nothing was done; also a store that can never work
           as given (a wrong password, a file that is not a SQLite database, a missing one
           for ls, show, rm, resolve, purge)
  65       conflict: the key fields match an earlier operation with other arguments; not run
  66       not found: no live entry for the key (show, rm, resolve)
  67       resolve: the entry is already done or failed (perhaps settled meanwhile); nothing
           was changed
  68       resolve, rm: the entry is running and its lease is live (the message says when it
           ends; --force acts on that claim anyway), or it changed since it was read (taken
           over, or released or removed and claimed again); nothing was changed
  69       the store is unavailable: nothing was done; try again later (for resolve and rm
           before their write; a failure during it is 73)
  70       internal error: a bug or an answer toolonce does not understand
  73       exec: unknown: an earlier run ended without a recorded outcome (or its record
           cannot be read) and may have taken effect; not run (--on-expired hold). Check,
           then `toolonce resolve KEY`. resolve, rm: the store failed during the write (its
           reply lost), which may or may not have been applied: `toolonce show KEY` tells
  75       in flight: the same operation is running elsewhere; not run (exec without --wait,
           or the wait ran out)
  126      exec: the command could not be executed (nothing recorded)
  127      exec: the command was not found (nothing recorded)
  128+N    exec: the command was killed by signal N; or toolonce got signal N before it
           started the command (nothing recorded)
  141      stdout was closed early (a reader such as `head` went away)
Otherwise exec exits with the command's own code, run now or replayed. When exec ends with a
code of its own (2 to 127, or 128+N before the command started), it writes a line on stderr
starting with \"toolonce:\". A replay ends stderr with a line starting with \"toolonce: not
run:\"; a command that ran gets nothing added to its stderr.";

/// An error with the exit code it must end the process with.
#[derive(Debug)]
pub(crate) struct Exit {
    pub(crate) code: u8,
    pub(crate) error: anyhow::Error,
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for Exit {}

/// `error` ending the process with `code`.
pub(crate) fn with_code(code: u8, error: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(Exit {
        code,
        error: error.into(),
    })
}

/// `error` as an internal error (exit 70).
pub(crate) fn internal(error: impl Into<anyhow::Error>) -> anyhow::Error {
    with_code(INTERNAL, error)
}

/// The exit code for an error, from the first part of its chain that decides one. Anything
/// else was refused before it did anything: bad input.
pub(crate) fn code_of(error: &anyhow::Error) -> u8 {
    for cause in error.chain() {
        if let Some(exit) = cause.downcast_ref::<Exit>() {
            return exit.code;
        }
        if is_broken_pipe(cause) {
            return BROKEN_PIPE;
        }
        if let Some(e) = cause.downcast_ref::<toolonce::Error>() {
            return library_code(e);
        }
    }
    USAGE
}

fn library_code(e: &toolonce::Error) -> u8 {
    use toolonce::Error::*;
    match e {
        Unavailable(_) | Store(_) => UNAVAILABLE,
        InvalidKeyPart { .. }
        | InvalidKey(_)
        | InvalidArguments(_)
        | ArgumentsTooLarge { .. }
        | TooDeep { .. }
        | InvalidPointer { .. }
        | Config(_) => USAGE,
        Corrupt { .. } => INTERNAL,
        _ => INTERNAL,
    }
}

/// Whether writing failed because the reader closed the pipe.
pub(crate) fn is_broken_pipe(cause: &(dyn std::error::Error + 'static)) -> bool {
    cause
        .downcast_ref::<io::Error>()
        .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
}

/// Ends the process for an error: a message on stderr (none for a closed pipe, as Unix tools
/// do) and the code of the table.
pub(crate) fn report(error: &anyhow::Error) -> ExitCode {
    let code = code_of(error);
    if code != BROKEN_PIPE {
        eprintln!("toolonce: {}", toolonce::error_report(&**error));
    }
    ExitCode::from(code)
}

/// A child's exit status as an exit code: its own code, or `128 + N` for a child killed by
/// signal N, as shells report it.
pub(crate) fn of_status(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(1),
        (None, None) => 1,
    }
}

/// Ends the process for what clap has to say (help, version, a usage error), quietly when
/// stdout is closed.
pub(crate) fn clap(error: &clap::Error) -> ExitCode {
    match error.print() {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(BROKEN_PIPE),
        _ => ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(USAGE)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_errors_map_to_the_table() {
        let unavailable = anyhow::Error::new(toolonce::Error::unavailable("refused"));
        assert_eq!(code_of(&unavailable.context("cannot open")), UNAVAILABLE);
        let config = anyhow::Error::new(toolonce::Error::Config("bad".into()));
        assert_eq!(code_of(&config), USAGE);
        let corrupt = anyhow::Error::new(toolonce::Error::corrupt("k", "x"));
        assert_eq!(code_of(&corrupt), INTERNAL);
        let pipe = anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe));
        assert_eq!(code_of(&pipe.context("writing")), BROKEN_PIPE);
        assert_eq!(code_of(&internal(anyhow::anyhow!("odd"))), INTERNAL);
        assert_eq!(code_of(&anyhow::anyhow!("--lease must be more")), USAGE);
    }
}
