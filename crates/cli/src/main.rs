//! The `fastfallback` command-line tool.
//!
//! - `fastfallback connect URL|HOST:PORT...`: races to each origin for real and draws the race
//!   as a waterfall, then the winner and where the time went.
//! - `fastfallback get URL`: one HTTP request through the pool, like curl: the body streams
//!   to stdout (or `-o FILE`); status, protocol, timing and the race go to stderr.
//! - `fastfallback demo`: canned races on virtual time, offline and without root;
//!   `demo --testnet` (root) runs the real driver on an emulated dual-stack network.
//!
//! Exit codes: 0 success; 1 a connection or request failed; 2 bad arguments; 3 the tool could
//! not set itself up (resolver, CA file, memory file, test network).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod connect;
mod demo;
mod get;
mod setup;
mod text;
mod waterfall;

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  a connection or request failed
  2  bad arguments
  3  could not set up (resolver, CA file, memory file, test network)

Colour is used on a terminal; NO_COLOR=1 turns it off, CLICOLOR_FORCE=1 forces it.";

/// Opens the fastest working connection to an origin (Happy Eyeballs: RFC 8305, the HEv3
/// draft), and shows exactly what happened.
#[derive(Debug, Parser)]
#[command(name = "fastfallback", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Race to each origin in turn and draw every race as a waterfall.
    ///
    /// One connector contacts the origins in the order given, so a second contact shows what
    /// route memory learned from the first.
    Connect(connect::ConnectArgs),
    /// Send one HTTP request through the pool: the body streams to stdout (or -o FILE);
    /// status, protocol, timing and the race go to stderr.
    Get(get::GetArgs),
    /// Play canned races on virtual time (offline, no root), or with --testnet run the real
    /// driver on an emulated dual-stack network with IPv6 blackholed (root).
    Demo(demo::DemoArgs),
}

/// How a command ended, as an exit code.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum Outcome {
    /// Everything worked.
    Success = 0,
    /// A connection or request failed.
    Failed = 1,
    /// The tool could not set itself up.
    Setup = 3,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    setup::install_logging();
    let checked = match &cli.command {
        Command::Connect(args) => args.check(),
        Command::Get(args) => args.check(),
        Command::Demo(_) => Ok(()),
    };
    if let Err(e) = checked {
        use clap::CommandFactory;
        Cli::command()
            .error(clap::error::ErrorKind::ValueValidation, e)
            .exit();
    }
    let outcome = match cli.command {
        Command::Connect(args) => connect::run(args),
        Command::Get(args) => get::run(args),
        Command::Demo(args) => demo::run(args),
    };
    ExitCode::from(outcome as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_argument_definitions_are_consistent() {
        Cli::command().debug_assert();
    }
}
