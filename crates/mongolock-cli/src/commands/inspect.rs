//! `mongolock status`, `unlock`, `release --force`, `purge` and `indexes`.

use std::process::ExitCode;

use crate::cli::{Global, ReleaseArgs, StatusArgs, UnlockArgs};

/// Runs `status`.
pub async fn status(global: &Global, args: StatusArgs) -> anyhow::Result<ExitCode> {
    let _ = (global, args);
    anyhow::bail!("status: not written yet")
}

/// Runs `unlock`.
pub async fn unlock(global: &Global, args: UnlockArgs) -> anyhow::Result<ExitCode> {
    let _ = (global, args);
    anyhow::bail!("unlock: not written yet")
}

/// Runs `release --force`.
pub async fn release(global: &Global, args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    let _ = (global, args);
    anyhow::bail!("release: not written yet")
}

/// Runs `purge`.
pub async fn purge(global: &Global) -> anyhow::Result<ExitCode> {
    let _ = global;
    anyhow::bail!("purge: not written yet")
}

/// Runs `indexes`.
pub async fn indexes(global: &Global) -> anyhow::Result<ExitCode> {
    let _ = global;
    anyhow::bail!("indexes: not written yet")
}
