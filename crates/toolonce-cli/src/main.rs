//! The `toolonce` command: a demo of the failure modes toolonce fixes, `exec` for any shell
//! command, key derivation for debugging, store inspection, and an MCP stdio proxy.
//!
//! Logs go to stderr (set `RUST_LOG`): stdout carries results, and for `mcp` the protocol.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod args;
mod demo;
mod exec;
mod inspect;
mod keycmd;
mod mcp;
mod output;

/// The default store of every subcommand: a SQLite file in the current directory.
pub(crate) const DEFAULT_STORE: &str = "sqlite://toolonce.db";

#[derive(Parser)]
#[command(
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
    /// Show the four ways an agent runs a write tool twice, without and with toolonce.
    Demo(demo::DemoArgs),
    /// Run a shell command at most once per operation; duplicates replay its exit code and output.
    Exec(exec::ExecArgs),
    /// Print the operation key, canonical arguments and fingerprint of a call.
    Key(keycmd::KeyArgs),
    /// List the entries of a store.
    Ls(inspect::LsArgs),
    /// Show one entry with its result.
    Show(inspect::ShowArgs),
    /// Delete one entry.
    Rm(inspect::RmArgs),
    /// Delete expired entries.
    Purge(inspect::PurgeArgs),
    /// Put toolonce in front of an MCP server: its write tools become idempotent.
    Mcp(mcp::McpArgs),
    /// The agent process of the demo's crash scenario (started by `demo`, killed by it).
    #[command(name = "__demo-child", hide = true)]
    DemoChild(demo::ChildArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, never into a log file or a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolonce: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => demo::run(args).await,
            Command::Exec(args) => exec::run(args).await,
            Command::Key(args) => keycmd::run(args).await,
            Command::Ls(args) => inspect::ls(args).await,
            Command::Show(args) => inspect::show(args).await,
            Command::Rm(args) => inspect::rm(args).await,
            Command::Purge(args) => inspect::purge(args).await,
            Command::Mcp(args) => mcp::run(args).await,
            Command::DemoChild(args) => demo::child(args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolonce: {}", toolonce::error_report(&*e));
            ExitCode::from(2)
        }
    }
}
