//! `mongolock status`, `unlock`, `release --force`, `purge` and `indexes`: looking at and
//! clearing locks.
//!
//! Each prints a short human line (or table) on stdout, or with `--json` one JSON document.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use mongolock::{Filter, LockKind, LockStatus};
use serde::Serialize;

use crate::cli::{Global, IndexesArgs, ReleaseArgs, StatusArgs, UnlockArgs, exit};
use crate::connection;
use crate::output::{self, escape};

/// One lock in `status --json`.
#[derive(Debug, Serialize)]
struct StatusRow {
    /// The locked resource.
    resource: String,
    /// `exclusive` or `shared`.
    kind: &'static str,
    /// The lock id holding it.
    lock_id: String,
    /// The owner label, if any.
    owner: Option<String>,
    /// The host label.
    host: Option<String>,
    /// The fencing token.
    fencing_token: i64,
    /// Remaining TTL in milliseconds, computed by the server; `null` for a lock without TTL.
    ttl_remaining_ms: Option<u128>,
    /// Whether the lock's lease had ended when the server answered (it blocks nobody, unless
    /// within its lock-delay; `purge` removes it after that).
    expired: bool,
    /// For an ended lease with a lock-delay, the milliseconds of the delay left, during which
    /// nobody gets the lock; `null` otherwise.
    lock_delay_remaining_ms: Option<u128>,
    /// When its holder let go of it within its minimum hold (server time, RFC 3339);
    /// `null` otherwise.
    let_go_at: Option<String>,
    /// For a lock let go of within its minimum hold, the milliseconds of the hold left,
    /// during which it stays in force (an exclusive lock keeps everybody out, a reader's
    /// share keeps writers out); `null` otherwise.
    min_hold_remaining_ms: Option<u128>,
    /// When it was granted (server time, RFC 3339).
    created_at: String,
    /// When it was last renewed (server time, RFC 3339).
    renewed_at: String,
    /// When it ends unless renewed (server time, RFC 3339); `null` without TTL.
    expires_at: Option<String>,
}

impl StatusRow {
    /// The row for `lock`.
    fn new(lock: &LockStatus) -> Self {
        StatusRow {
            resource: lock.resource().to_owned(),
            kind: kind_name(lock.kind()),
            lock_id: lock.lock_id().to_owned(),
            owner: lock.owner().map(str::to_owned),
            host: lock.host().map(str::to_owned),
            fencing_token: lock.fencing_token(),
            ttl_remaining_ms: lock.ttl_remaining().map(|d| d.as_millis()),
            expired: lock.is_expired(),
            lock_delay_remaining_ms: lock.lock_delay_remaining().map(|d| d.as_millis()),
            let_go_at: lock.holder().let_go_at().map(rfc3339),
            min_hold_remaining_ms: lock.min_hold_remaining().map(|d| d.as_millis()),
            created_at: rfc3339(lock.created_at()),
            renewed_at: rfc3339(lock.renewed_at()),
            expires_at: lock.holder().expires_at().map(rfc3339),
        }
    }
}

/// Runs `status`: every lock matching the filters, live ones and expired ones not purged
/// yet (marked `expired`: they block nobody, unless within their lock-delay, shown as
/// `lock-delay`).
///
/// # Cancel safety
///
/// Reads only.
pub async fn status(global: &Global, args: StatusArgs) -> anyhow::Result<ExitCode> {
    let mut filter = Filter::default();
    if let Some(resource) = args.resource {
        filter = filter.resource(resource);
    }
    if let Some(lock_id) = args.lock_id {
        filter = filter.lock_id(lock_id);
    }
    if let Some(owner) = args.owner {
        filter = filter.owner(owner);
    }
    let locks = connection::connect(global).await?;
    let held = locks
        .status(&filter)
        .await
        .context("cannot list the locks")?;
    if global.json {
        let rows: Vec<_> = held.iter().map(StatusRow::new).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    if held.is_empty() {
        println!("no locks");
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", table(&held));
    let delayed = (held.iter())
        .filter(|lock| lock.lock_delay_remaining().is_some())
        .count();
    let kept = (held.iter())
        .filter(|lock| lock.min_hold_remaining().is_some())
        .count();
    let expired = held.iter().filter(|lock| lock.is_expired()).count() - delayed - kept;
    if delayed > 0 {
        println!(
            "{delayed} lock(s) ended without a release keep everybody out (a reader's: writers) until their lock-delay ends"
        );
    }
    if kept > 0 {
        println!(
            "{kept} lock(s) let go of within their minimum hold keep everybody out (a reader's: writers) until the hold ends"
        );
    }
    if expired > 0 {
        println!("{expired} expired lock(s) block nobody; `mongolock purge` removes them");
    }
    Ok(ExitCode::SUCCESS)
}

/// The `status` table, one line per lock, columns aligned. The stored strings are
/// [`escape`]d: whoever took a lock wrote them, and they must not add rows.
fn table(held: &[LockStatus]) -> String {
    let header = [
        "RESOURCE", "KIND", "LOCK ID", "OWNER", "HOST", "TOKEN", "TTL",
    ];
    let rows: Vec<[String; 7]> = held
        .iter()
        .map(|lock| {
            let ttl = match (lock.is_expired(), lock.ttl_remaining()) {
                (true, _) => match (lock.lock_delay_remaining(), lock.min_hold_remaining()) {
                    (Some(left), _) => format!("lock-delay {}", format_ttl(left)),
                    (None, Some(left)) => format!("min hold {}", format_ttl(left)),
                    (None, None) => "expired".to_owned(),
                },
                (false, Some(left)) => format_ttl(left),
                (false, None) => "no TTL".to_owned(),
            };
            [
                escape(lock.resource()).into_owned(),
                kind_name(lock.kind()).to_owned(),
                escape(lock.lock_id()).into_owned(),
                escape(lock.owner().unwrap_or("-")).into_owned(),
                escape(lock.host().unwrap_or("-")).into_owned(),
                lock.fencing_token().to_string(),
                ttl,
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let last = cells.len() - 1;
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                out.push_str(cell);
                let pad = width - cell.chars().count() + 2;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    };
    line(&header);
    for row in &rows {
        line(&row.each_ref().map(String::as_str));
    }
    out
}

/// Runs `unlock`: releases every lock of the lock id.
///
/// # Cancel safety
///
/// If dropped, the locks may or may not have been released; running it again is harmless.
pub async fn unlock(global: &Global, args: UnlockArgs) -> anyhow::Result<ExitCode> {
    let locks = connection::connect(global).await?;
    let released = locks
        .unlock(&args.lock_id)
        .await
        .with_context(|| format!("cannot release the locks of {}", args.lock_id))?;
    if global.json {
        println!("{}", serde_json::json!({ "released": released }));
    } else {
        println!(
            "released {released} lock(s) of lock id {}",
            escape(&args.lock_id)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `release --force`: breaks every lock on the resource. On a terminal without
/// `--yes`, asks first; otherwise `--force` is enough.
///
/// # Cancel safety
///
/// If dropped after the question was answered, the locks may or may not have been removed;
/// running it again is harmless.
pub async fn release(global: &Global, args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    let locks = connection::connect(global).await?;
    let interactive = std::io::stdin().is_terminal() && output::stderr_is_terminal();
    if interactive && !args.yes {
        let held = locks
            .status(&Filter::default().resource(&args.resource))
            .await
            .context("cannot list the locks")?;
        let live: Vec<_> = held.iter().filter(|lock| !lock.is_expired()).collect();
        if !live.is_empty() {
            let holders: Vec<String> = live
                .iter()
                .map(|lock| {
                    format!(
                        "{} ({}, {})",
                        escape(lock.lock_id()),
                        escape(lock.owner().unwrap_or("no owner")),
                        escape(lock.host().unwrap_or("unknown host"))
                    )
                })
                .collect();
            let question = output::message(&format!(
                "Break {} lock(s) on {} held by {}? [y/N] ",
                live.len(),
                escape(&args.resource),
                holders.join(", ")
            ));
            if !confirm(question).await? {
                output::complain_line("not released");
                return Ok(ExitCode::from(exit::ERROR));
            }
        }
    }
    let released = locks
        .force_release(&args.resource)
        .await
        .with_context(|| format!("cannot release the locks on {}", args.resource))?;
    if global.json {
        println!(
            "{}",
            serde_json::json!({ "resource": args.resource, "released": released })
        );
    } else {
        println!("released {released} lock(s) on {}", escape(&args.resource));
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks `question` on stderr and reads the answer from stdin: true for `y` or `yes`.
///
/// # Cancel safety
///
/// If dropped, the read goes on in a blocking thread until a line comes.
async fn confirm(question: String) -> anyhow::Result<bool> {
    let answer = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        let mut stderr = std::io::stderr();
        stderr.write_all(question.as_bytes())?;
        stderr.flush()?;
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        Ok(answer)
    })
    .await
    .context("the question was not answered")?
    .context("cannot read the answer")?;
    let answer = answer.trim().to_ascii_lowercase();
    Ok(answer == "y" || answer == "yes")
}

/// Runs `purge`: removes expired locks, never a live one.
///
/// # Cancel safety
///
/// If dropped, some expired locks may have been removed; running it again removes the rest.
pub async fn purge(global: &Global) -> anyhow::Result<ExitCode> {
    let locks = connection::connect(global).await?;
    let purged = locks.purge().await.context("cannot purge")?;
    if global.json {
        println!("{}", serde_json::json!({ "resources": purged.resources() }));
    } else {
        println!(
            "removed expired locks from {} resource(s)",
            purged.resources()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `indexes`: creates the indexes the lock commands use (idempotent), the TTL index
/// with `--retention`.
///
/// # Cancel safety
///
/// If dropped, the indexes may or may not have been created; running it again is harmless.
pub async fn indexes(global: &Global, args: IndexesArgs) -> anyhow::Result<ExitCode> {
    let retention = args.retention.unwrap_or(mongolock::DEFAULT_RETENTION);
    let connected = connection::connect(global).await?;
    let locks = mongolock::LockClient::builder(connected.collection().clone())
        .retention(retention)
        .build()?;
    if let Err(error) = locks.create_indexes().await {
        if matches!(
            error.kind(),
            mongolock::ErrorKind::Database {
                code: Some(INDEX_OPTIONS_CONFLICT),
                ..
            }
        ) {
            let stored = stored_retention(&locks).await;
            retention_conflict(global, retention, stored);
            return Ok(ExitCode::from(exit::ERROR));
        }
        return Err(anyhow::Error::new(error).context("cannot create the indexes"));
    }
    let namespace = format!("{}.{}", global.db, global.collection);
    if global.json {
        println!(
            "{}",
            serde_json::json!({ "indexes": "ok", "namespace": namespace })
        );
    } else {
        println!("indexes ready on {}", escape(&namespace));
    }
    Ok(ExitCode::SUCCESS)
}

/// The server's code for an index that exists with other options (`IndexOptionsConflict`).
const INDEX_OPTIONS_CONFLICT: i32 = 85;

/// The name of the library's TTL index.
const TTL_INDEX: &str = "idleSince_ttl";

/// The retention of the TTL index the collection has, if it can be read.
///
/// # Cancel safety
///
/// Reads only.
async fn stored_retention(locks: &mongolock::LockClient) -> Option<Duration> {
    use futures_util::TryStreamExt as _;
    let indexes: Vec<mongodb::IndexModel> = locks
        .collection()
        .list_indexes()
        .await
        .ok()?
        .try_collect()
        .await
        .ok()?;
    indexes
        .iter()
        .filter_map(|index| index.options.as_ref())
        .find(|options| options.name.as_deref() == Some(TTL_INDEX))
        .and_then(|options| options.expire_after)
}

/// Says that the collection's TTL index keeps idle documents for `stored` (if known) rather
/// than `retention`, and how to change it: the exact mongosh command (`collMod`).
fn retention_conflict(global: &Global, retention: Duration, stored: Option<Duration>) {
    let namespace = escape(&format!("{}.{}", global.db, global.collection)).into_owned();
    let asked = humantime::format_duration(retention);
    let kept = stored.map_or_else(
        || "another retention".to_owned(),
        |stored| humantime::format_duration(stored).to_string(),
    );
    // JSON string literals are JavaScript string literals.
    let quote = |name: &str| serde_json::Value::from(name).to_string();
    output::complain_line(&format!(
        "the TTL index {TTL_INDEX} of {namespace} keeps idle documents for {kept}, not \
         {asked}, and the server does not change it here (IndexOptionsConflict)"
    ));
    output::complain_line(&format!(
        "to keep them for {asked}, run in mongosh: db.getSiblingDB({}).runCommand({{collMod: \
         {}, index: {{name: \"{TTL_INDEX}\", expireAfterSeconds: {}}}}}); or give --retention \
         the retention the index has",
        quote(&global.db),
        quote(&global.collection),
        retention.as_secs()
    ));
}

/// A remaining TTL for people: whole seconds (`1m 30s`), or `<1s`.
pub(crate) fn format_ttl(left: Duration) -> String {
    if left.is_zero() {
        return "0s".to_owned();
    }
    if left < Duration::from_secs(1) {
        return "<1s".to_owned();
    }
    humantime::format_duration(Duration::from_secs(left.as_secs())).to_string()
}

/// The kind, as `status` and `exec --json` spell it.
pub(crate) fn kind_name(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Exclusive => "exclusive",
        LockKind::Shared => "shared",
    }
}

/// A server time as RFC 3339.
fn rfc3339(time: bson::DateTime) -> String {
    time.try_to_rfc3339_string()
        .unwrap_or_else(|_| time.to_string())
}
