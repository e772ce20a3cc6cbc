//! The arguments of `toolonce demo`, and of the agent process its crash scenarios start
//! (`toolonce __demo-child`).

use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    /// Run against this store instead of a fresh SQLite file in a temporary directory. Each run
    /// uses scopes of its own, so earlier runs never interfere. (TOOLONCE_STORE is ignored
    /// here, so the demo never writes into your store unasked.)
    #[arg(long, value_name = "URL")]
    pub(super) store: Option<String>,
}

/// The agent process of the crash scenario, started by the demo itself.
#[derive(clap::Args)]
pub(crate) struct ChildArgs {
    /// The fake provider's ledger file.
    #[arg(long)]
    pub(super) ledger: PathBuf,
    /// The fake mail server's outbox file.
    #[arg(long)]
    pub(super) outbox: PathBuf,
    /// The scenario whose agent this is (`crash` or `email-crash`).
    #[arg(long)]
    pub(super) scenario: String,
    /// The agent's checkpoint file.
    #[arg(long)]
    pub(super) checkpoint: PathBuf,
    /// Call the tool through toolonce on this store; directly when absent.
    #[arg(long)]
    pub(super) store: Option<String>,
    #[arg(long)]
    pub(super) scope: String,
    #[arg(long, value_parser = crate::args::lease)]
    pub(super) lease: Duration,
}
