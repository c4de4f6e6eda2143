//! `mongolock`: run a job under a distributed lock stored in MongoDB (on one resource or
//! several at once) or while leading an election, show who holds what and who leads,
//! release, purge. The commands live in `commands/`; this file only parses and dispatches.

mod checks;
mod cli;
mod commands;
mod connection;
mod output;
mod uri;

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    output::protect(std::env::args_os(), std::env::var_os("MONGODB_URI"));
    output::scrub_panics();
    let cli = cli::parse(std::env::args_os()).unwrap_or_else(|error| output::exit_usage(&error));
    if let Err(error) = cli.check() {
        output::exit_usage(&error);
    }
    output::init_logging(cli.global.verbose);
    let outcome = commands::run(cli).await;
    connection::close().await;
    match outcome {
        Ok(code) => code,
        Err(error) => {
            output::complain_line(&output::describe(&error));
            ExitCode::from(cli::exit::ERROR)
        }
    }
}
