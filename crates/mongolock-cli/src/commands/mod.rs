//! One file per subcommand (`elect.rs` holds `elect` and `leader`, `generate.rs`
//! `completions` and `man`), and `child.rs`, what `exec` and `elect` share: waiting for a
//! lease and running a child under it.

mod child;
mod demo;
mod elect;
mod exec;
mod generate;
mod inspect;

use std::process::ExitCode;

use crate::cli::{Cli, Command, exit};
use crate::connection::NoServer;
use crate::output;

/// Runs the command and returns the process's exit status.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = cli.global;
    let outcome = match cli.command {
        Command::Exec(args) => exec::run(&global, args).await,
        Command::Elect(args) => elect::elect(&global, args).await,
        Command::Leader(args) => elect::leader(&global, args).await,
        Command::Status(args) => inspect::status(&global, args).await,
        Command::Unlock(args) => inspect::unlock(&global, args).await,
        Command::Release(args) => inspect::release(&global, args).await,
        Command::Purge => inspect::purge(&global).await,
        Command::Indexes(args) => inspect::indexes(&global, args).await,
        Command::Demo(args) => demo::run(&global, args).await,
        Command::Completions(args) => generate::completions(&args),
        Command::Man(args) => generate::man(&args),
    };
    match outcome {
        Err(error) if error.is::<NoServer>() => {
            output::complain_line(&error.to_string());
            Ok(ExitCode::from(exit::NO_SERVER))
        }
        other => other,
    }
}
