//! The stdio proxy run in-process: `toolonce mcp ARGS`, with the client's side on any pair of
//! byte streams instead of the process's stdin and stdout, on the caller's runtime. Tests
//! drive the real proxy this way without a process of its own between them and it (as
//! mini-redis's `server::run` takes a listener), and see its store directly; the server is
//! still a child process or an `--upstream` URL, as the arguments say.

use std::ffi::OsString;
use std::process::ExitStatus;

use clap::Parser;
use tokio::io::{AsyncRead, AsyncWrite};

/// `toolonce mcp`'s own arguments, as [`proxy`] parses them.
#[derive(Parser)]
#[command(name = "toolonce mcp", no_binary_name = true)]
struct Embedded {
    #[command(flatten)]
    args: super::McpArgs,
}

/// Runs `toolonce mcp ARGS` (everything after `mcp`, such as `["--store", "memory://",
/// "--scope", "s", "--", "server"]`) with the client's messages read from `input` and the
/// proxy's written to `output`, until `input` ends and the server has exited; returns the
/// server's exit status. `--listen` is refused: a gateway is served with `toolonce mcp
/// --listen`. Must be called within a Tokio runtime with I/O and time enabled (a
/// current-thread one is what the command uses).
///
/// # Errors
///
/// Arguments `toolonce mcp` would refuse (the message is clap's or the command's), a store
/// that can never work, or a server that cannot be started.
pub async fn proxy<A>(
    args: impl IntoIterator<Item = A>,
    input: impl AsyncRead + Send + Unpin + 'static,
    output: impl AsyncWrite + Send + Unpin + 'static,
) -> anyhow::Result<ExitStatus>
where
    A: Into<OsString> + Clone,
{
    let Embedded { args } = Embedded::try_parse_from(args)?;
    match super::prepare(args).await? {
        super::Prepared::Stdio(settings) => super::serve(*settings, input, output).await,
        super::Prepared::Gateway(..) => {
            anyhow::bail!("--listen serves a gateway: run it with `toolonce mcp --listen`")
        }
    }
}
