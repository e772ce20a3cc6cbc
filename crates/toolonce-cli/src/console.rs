//! `toolonce console --store URL`: the operator console in the browser. It lists a store's
//! entries (filtered by scope, tool, state, age and text, paged by the store's cursor so that
//! no request reads more than a bounded number of pages), shows one entry, and settles or
//! removes it, fenced on what the page showed ([`act`]).
//!
//! Safe by default: it listens on loopback (another address needs `--allow-remote`), prints
//! at start a URL whose fragment carries a random token once; the page exchanges it for an
//! HttpOnly, SameSite=Strict session cookie and a CSRF token ([`session`]), so the token is
//! never in a request line, a log or a URL again. Every API request needs the session (401),
//! every request from a browser another `Origin` is refused (403), and every action (POST)
//! needs the CSRF token and an allowed `Origin`. The HTTP server is bounded: connections,
//! header and body bytes, header and body time ([`server`]).
//!
//! Layout: [`server`] accepts connections, [`routes`] is the route table (the place for
//! `/metrics`, served to the token's holder as `Authorization: Bearer`), [`session`] authenticates, [`api`] reads, [`act`] writes, [`bulk`] acts by filter, [`stats`] samples the store for the charts, [`calls`] counts this process's replays per minute, [`reply`] shapes
//! answers, `assets/` is the page (embedded with `include_str!`).

// A refusal (`Err` of an HTTP answer) is answered at once, never stored: boxing it would only
// add an allocation.
#![allow(clippy::result_large_err)]

use std::net::SocketAddr;
use std::process::ExitCode;

use crate::args::StoreArg;

mod act;
mod api;
mod bulk;
mod calls;
mod reply;
mod routes;
mod server;
mod session;
mod stats;

pub(crate) use server::{Calls, Console};
pub(crate) use session::random_hex;

#[derive(clap::Args)]
pub(crate) struct ConsoleArgs {
    #[command(flatten)]
    store: StoreArg,
    /// Where to listen: PORT or IP:PORT (a bare port is on 127.0.0.1; port 0 picks one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8932")]
    listen: String,
    /// Listen on an address that is not loopback: anyone who can reach it and holds the token
    /// can settle and delete entries, and the token travels in clear text over plain HTTP.
    #[arg(long)]
    allow_remote: bool,
    /// An origin the page is opened from besides the listening address (a host name, or a
    /// reverse proxy's https://...); repeatable.
    #[arg(long, value_name = "ORIGIN")]
    origin: Vec<String>,
    /// The name of an environment variable holding the console's token, instead of a random
    /// one printed at start: a token that stays across restarts, for a Prometheus scraper of
    /// `/metrics` (`Authorization: Bearer TOKEN`). It is then never printed.
    #[arg(long, value_name = "VAR")]
    require_token: Option<String>,
}

pub(crate) async fn run(a: ConsoleArgs) -> anyhow::Result<ExitCode> {
    let addr = listen_addr(&a.listen)?;
    if !addr.ip().is_loopback() && !a.allow_remote {
        anyhow::bail!(
            "--listen {addr} is not a loopback address: add --allow-remote to serve the \
             console beyond this machine (anyone reaching it with the token can settle and \
             delete entries)"
        );
    }
    let given = match &a.require_token {
        Some(var) => Some(given_token(var)?),
        None => None,
    };
    let store = a.store.open_existing().await?;
    // Before the console counts anything, as the gateway does.
    crate::prometheus::install()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() {
        eprintln!(
            "toolonce console: listening on {local}, beyond loopback (--allow-remote): put it \
             behind TLS"
        );
    }
    let token = match &given {
        Some(token) => token.clone(),
        None => session::random_hex(32)?,
    };
    let console = Console::new(store, &token, local, &a.origin, Calls::Elsewhere)?;
    // The log (stderr) says where; the token goes once, to stdout, as the URL to open: its
    // fragment never reaches a server, a proxy's log or a Referer. A given token is not
    // printed at all: its holder has it.
    eprintln!("toolonce console: listening on http://{local}/console/");
    match (&given, &a.require_token) {
        (Some(_), Some(var)) => {
            eprintln!("toolonce console: its token is ${var}'s");
            crate::output::outln!("http://{local}/console/");
        }
        _ => crate::output::outln!("http://{local}/console/#token={token}"),
    }
    server::serve(listener, console).await?;
    Ok(ExitCode::SUCCESS)
}

/// The token in the environment variable `var` (as the gateway's `--require-token`).
fn given_token(var: &str) -> anyhow::Result<String> {
    match std::env::var(var) {
        Ok(token) if !token.trim().is_empty() && token.trim() == token => Ok(token),
        Ok(_) => anyhow::bail!(
            "--require-token {var}: the variable is empty or has surrounding whitespace"
        ),
        Err(_) => anyhow::bail!("--require-token {var}: the environment variable is not set"),
    }
}

/// `--listen` as an address: a bare port is on 127.0.0.1.
fn listen_addr(text: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|_| {
        anyhow::anyhow!("--listen {text}: expected PORT or IP:PORT (such as 127.0.0.1:8932)")
    })
}
