//! `mongolock`: run a job under a distributed lock stored in MongoDB (on one resource or
//! several at once) or while leading an election, show who holds what and who leads,
//! release, purge. The commands live in `commands/`; this file only parses and dispatches.

mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    if let Err(error) = cli.check() {
        error.exit();
    }
    cli::init_logging(&cli.global);
    let outcome = commands::run(cli).await;
    cli::close().await;
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("mongolock: {}", cli::describe(&error));
            ExitCode::from(cli::exit::ERROR)
        }
    }
}
