//! The operator console the gateway serves under `/console` (`--console`): opened once at
//! start with the gateway's store and token, and found for a request by its path.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::console::{Calls, Console};

use super::sessions::{ConsoleToken, Gateway};

/// The console of `gateway`, if it serves one, opened at `local`; says where it is.
pub(super) fn open(gateway: &Gateway, local: SocketAddr) -> anyhow::Result<Option<Arc<Console>>> {
    let token = match &gateway.console {
        None => return Ok(None),
        Some(ConsoleToken::Given(token)) => {
            eprintln!(
                "toolonce mcp: the console is on http://{local}/console/ (its token is the \
                 --require-token one)"
            );
            token
        }
        Some(ConsoleToken::Printed(token)) => {
            // As `toolonce console`: the token once, on stdout (HTTP is the protocol here).
            println!("http://{local}/console/#token={token}");
            token
        }
    };
    Ok(Some(Console::new(
        gateway.store.clone(),
        token,
        local,
        &[],
        Calls::Here,
    )?))
}

/// The console, when it serves `path` (`/console` and below).
pub(super) fn serving<'a>(
    console: Option<&'a Arc<Console>>,
    path: &str,
) -> Option<&'a Arc<Console>> {
    console.filter(|_| path == "/console" || path.starts_with("/console/"))
}
