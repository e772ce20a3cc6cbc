//! The `toolonce` command as a library: a demo of the failure modes toolonce fixes, `exec` for
//! any shell command, key derivation for debugging, store inspection, and an MCP proxy. The
//! binary (`src/main.rs`) only calls [`main`]; the library exists so that the MCP proxy can be
//! driven in-process by tests and benches, without a process of its own ([`mcp_proxy`]).
//!
//! Logs go to stderr (set `RUST_LOG`): stdout carries results, and for `mcp` the protocol.
//! Every subcommand ends with a code of the one table in `exit.rs`.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Subcommand};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

mod args;
mod bench;
mod connections;
mod console;
mod demo;
mod exec;
mod exit;
mod inspect;
mod keycmd;
mod mcp;
mod output;
mod prometheus;
mod settle;

pub use mcp::embed::proxy as mcp_proxy;

/// The default store of every subcommand: a SQLite file in the current directory.
pub(crate) const DEFAULT_STORE: &str = "sqlite://toolonce.db";

#[derive(clap::Parser)]
#[command(
    after_help = exit::TABLE,
    name = "toolonce",
    version,
    about = "Make every side-effecting tool call take effect once"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show five scenarios in which an agent runs a write tool twice (and a control),
    /// without and with toolonce.
    Demo(demo::DemoArgs),
    /// Run a shell command at most once per operation; duplicates replay its exit code and output.
    Exec(exec::ExecArgs),
    /// Print the operation key, canonical arguments and fingerprint of a call.
    Key(keycmd::KeyArgs),
    /// List the entries of a store, newest first (filter by state, scope, tool).
    Ls(inspect::LsArgs),
    /// Show one entry: what it is, its attempts and times, its result.
    Show(inspect::ShowArgs),
    /// Settle an operation whose outcome is unknown: record it as done or failed, or release it.
    Resolve(settle::ResolveArgs),
    /// Delete one entry (a live claim only with --force).
    Rm(settle::RmArgs),
    /// Delete expired entries.
    Purge(inspect::PurgeArgs),
    /// Serve the operator console in the browser: list, inspect, resolve and remove entries.
    Console(console::ConsoleArgs),
    /// Put toolonce in front of an MCP server: its write tools become idempotent.
    // Boxed: its options outgrow every other subcommand's.
    Mcp(Box<mcp::McpArgs>),
    /// Measure what safety costs on a store: toolonce beside the store's raw floor, same run.
    Bench(bench::BenchArgs),
    /// The agent process of the demo's crash scenario (started by `demo`, killed by it).
    #[command(name = "__demo-child", hide = true)]
    DemoChild(demo::ChildArgs),
    /// What `exec` starts in the command's place, to tie the command's life to its own.
    #[command(name = "__exec-shim", hide = true)]
    ExecShim(exec::shim::ShimArgs),
}

/// Parses the command line. The exit-code table is in the top-level help only; each
/// subcommand's help points to it.
fn parse() -> Result<Cli, clap::Error> {
    let command = Cli::command().mut_subcommands(|sub| {
        if sub.is_hide_set() {
            return sub;
        }
        let with_pointer = |text: Option<&clap::builder::StyledStr>| match text {
            Some(text) => format!("{text}\n\n{}", exit::POINTER),
            None => exit::POINTER.to_owned(),
        };
        let long = sub.get_after_long_help().map(|t| with_pointer(Some(t)));
        let short = with_pointer(sub.get_after_help());
        let sub = sub.after_help(short);
        match long {
            Some(long) => sub.after_long_help(long),
            None => sub,
        }
    });
    Cli::from_arg_matches(&command.try_get_matches()?)
}

/// Runs the command line of this process, as the `toolonce` binary does.
pub fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => return exit::clap(&e),
    };
    // The shim becomes the command's parent at once: no logger, no multi-threaded runtime.
    if let Command::ExecShim(args) = cli.command {
        return exec::shim::run(args);
    }
    // The demo provokes what toolonce warns about (a held email) and explains it in its
    // report: by default it logs errors only.
    let default_filter = match cli.command {
        Command::Demo(_) => "error",
        _ => "warn",
    };
    let (filter, quiet) = match tracing_subscriber::EnvFilter::try_from_env("RUST_LOG") {
        Ok(asked) => (asked, false),
        // exec says itself what a person must act on; the library's log line of it would be
        // a second message (only when nobody asked for logs).
        Err(_) => (
            tracing_subscriber::EnvFilter::new(default_filter),
            matches!(cli.command, Command::Exec(_)),
        ),
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Colours only for a person at a terminal, never into a log file or a pipe.
                .with_ansi(std::io::stderr().is_terminal())
                .with_filter(filter)
                .with_filter(tracing_subscriber::filter::filter_fn(move |meta| {
                    !(quiet && exec::says_itself(meta))
                })),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolonce: cannot start the async runtime: {e}");
            return ExitCode::from(exit::INTERNAL);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => demo::run(args).await,
            Command::Exec(args) => exec::run(args).await,
            Command::Key(args) => keycmd::run(args).await,
            Command::Ls(args) => inspect::ls(args).await,
            Command::Show(args) => inspect::show(args).await,
            Command::Resolve(args) => settle::resolve(args).await,
            Command::Rm(args) => settle::rm(args).await,
            Command::Purge(args) => inspect::purge(args).await,
            Command::Console(args) => console::run(args).await,
            Command::Mcp(args) => mcp::run(*args).await,
            Command::Bench(args) => bench::run(args).await,
            Command::DemoChild(args) => demo::child(args).await,
            Command::ExecShim(_) => unreachable!("the shim returned above"),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => exit::report(&e),
    }
}
