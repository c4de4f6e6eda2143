//! `mongolock exec`: run a command under a lock.

use std::process::ExitCode;

use crate::cli::{ExecArgs, Global};

/// Runs `exec`.
pub async fn run(global: &Global, args: ExecArgs) -> anyhow::Result<ExitCode> {
    let _ = (global, args);
    anyhow::bail!("exec: not written yet")
}
