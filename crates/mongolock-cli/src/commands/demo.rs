//! `mongolock demo`.

use std::process::ExitCode;

use crate::cli::{DemoArgs, Global};

/// Runs `demo`.
pub async fn run(global: &Global, args: DemoArgs) -> anyhow::Result<ExitCode> {
    let _ = (global, args);
    anyhow::bail!("demo: not written yet")
}
