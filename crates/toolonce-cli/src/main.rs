//! The `toolonce` binary: everything it does lives in the library, [`toolonce_cli`], so that
//! tests can drive its parts (the MCP proxy) in-process.

fn main() -> std::process::ExitCode {
    toolonce_cli::main()
}
