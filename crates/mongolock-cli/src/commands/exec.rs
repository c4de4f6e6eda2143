//! `mongolock exec`: run a command under a lock, on one resource or on several at once.
//!
//! The lock is taken with the library's handles (a mutex, a reader of a reader-writer lock,
//! a semaphore permit, or with several resources a [`MultiLock`](mongolock::MultiLock):
//! exclusive locks on all of them, taken all or nothing), so its lease is renewed in the
//! background while the child runs. The child is run as [`child`] describes: its exit
//! status passed through, signals forwarded, stopped if the lease (of any member of a set)
//! is lost.
//!
//! The child's environment:
//!
//! - one resource: `MONGOLOCK_RESOURCE`, `MONGOLOCK_LOCK_ID`, `MONGOLOCK_FENCING_TOKEN`;
//! - several: `MONGOLOCK_RESOURCES` (the resources sorted, comma-separated),
//!   `MONGOLOCK_LOCK_ID` (the set's one lock id: `mongolock unlock` with it frees the set)
//!   and `MONGOLOCK_FENCING_TOKENS` (`res=token,res=token`, in the same order).
//!
//! The other variables a mongolock sets (the other form's, and `elect`'s
//! `MONGOLOCK_ELECTION` and `MONGOLOCK_TERM`) are removed, so that an outer mongolock's do
//! not pass for this lock's.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context as _;
use mongolock::{LockClient, LockKind};
use serde::Serialize;

use crate::cli::{ExecArgs, Global, exit};
use crate::commands::child::{
    self, Child, Forwarded, Held, Patience, RunReport, Waited, finish, signal_status,
};
use crate::commands::inspect::kind_name;
use crate::connection;
use crate::output::{complain, escape};

/// The JSON document `exec --json` prints on stdout when it is done.
#[derive(Debug, Serialize)]
struct Report {
    /// The resource; with several, all of them as in `MONGOLOCK_RESOURCES` (sorted,
    /// comma-separated).
    resource: String,
    /// Every resource, sorted (one element for one resource).
    resources: Vec<String>,
    /// `exclusive` or `shared`.
    kind: &'static str,
    /// Whether the lock was acquired (false: the exit status is 75, or 128+N after a signal
    /// while waiting).
    acquired: bool,
    /// The lock id the lock (or every lock of the set) was held with.
    lock_id: Option<String>,
    /// The fencing token of the grant; `null` with several resources (see
    /// `fencing_tokens`).
    fencing_token: Option<i64>,
    /// Each resource's fencing token, once acquired.
    fencing_tokens: Option<BTreeMap<String, i64>>,
    /// How the child ran, and mongolock's exit status.
    #[serde(flatten)]
    run: RunReport,
    /// Whether the lock (every lock of a set) was released by this process (false if it was
    /// lost, or the release failed and the TTL will end it).
    released: bool,
}

/// Which lock to take, as a library handle.
enum Handle {
    /// `locks.mutex(..)`: exclusive.
    Mutex(mongolock::Mutex),
    /// `locks.rwlock(..).read()`: shared, uncapped.
    Read(mongolock::RwLock),
    /// `locks.semaphore(.., N)`: shared, at most N holders.
    Permit(mongolock::Semaphore),
    /// `locks.multi(..)`: several resources, exclusive, all or nothing.
    Set(mongolock::MultiLock),
}

impl Handle {
    /// The handle `args` ask for on `resources` (sorted, without duplicates, not empty),
    /// with the lease settings.
    fn new(locks: &LockClient, args: &ExecArgs, resources: &[String], owner: &str) -> Self {
        // The handles share their settings' names, not a type.
        macro_rules! settings {
            ($handle:expr) => {{
                let mut handle = $handle.ttl(args.ttl).owner(owner);
                if let Some(delay) = args.lease.lock_delay {
                    handle = handle.lock_delay(delay);
                }
                if let Some(hold) = args.min_hold {
                    handle = handle.min_hold(hold);
                }
                if let Some(lock_id) = &args.lease.lock_id {
                    handle = handle.lock_id(lock_id.clone());
                }
                handle
            }};
        }
        if let [resource] = resources {
            let resource = resource.clone();
            match (args.shared, args.max) {
                (false, _) => Handle::Mutex(settings!(locks.mutex(resource))),
                (true, None) => Handle::Read(settings!(locks.rwlock(resource))),
                (true, Some(max)) => Handle::Permit(settings!(locks.semaphore(resource, max))),
            }
        } else {
            Handle::Set(settings!(locks.multi(resources)))
        }
    }

    /// Acquires: `Ok(None)` if the lock was not acquired within `patience`.
    ///
    /// # Cancel safety
    ///
    /// As the library's acquires: dropping the future leaves no lock held (an attempt in
    /// flight is withdrawn in the background; [`LockClient::shutdown`] waits for that).
    async fn acquire(&self, patience: Patience) -> mongolock::Result<Option<Held>> {
        let one = match (self, patience) {
            (Handle::Mutex(h), Patience::Once) => h.try_acquire().await,
            (Handle::Mutex(h), Patience::Upto(d)) => h.acquire_timeout(d).await,
            (Handle::Mutex(h), Patience::Forever) => h.acquire().await.map(Some),
            (Handle::Read(h), Patience::Once) => h.try_read().await,
            (Handle::Read(h), Patience::Upto(d)) => h.read_timeout(d).await,
            (Handle::Read(h), Patience::Forever) => h.read().await.map(Some),
            (Handle::Permit(h), Patience::Once) => h.try_acquire().await,
            (Handle::Permit(h), Patience::Upto(d)) => h.acquire_timeout(d).await,
            (Handle::Permit(h), Patience::Forever) => h.acquire().await.map(Some),
            (Handle::Set(h), patience) => {
                let set = match patience {
                    Patience::Once => h.try_acquire().await,
                    Patience::Upto(d) => h.acquire_timeout(d).await,
                    Patience::Forever => h.acquire().await.map(Some),
                };
                return set.map(|set| set.map(Held::Set));
            }
        };
        one.map(|guard| guard.map(Held::One))
    }
}

/// Runs `exec` (its arguments checked by `Cli::check`): acquires, runs the child under the
/// lock, and returns the exit status (see the crate's `AFTER_HELP`).
///
/// # Cancel safety
///
/// Not meant to be cancelled (it is the whole process); if it is dropped, the child's
/// process group is killed and the lock released in the background.
pub async fn run(global: &Global, args: ExecArgs) -> anyhow::Result<ExitCode> {
    // The arguments were checked before (`Cli::check`).
    let resources = args.resources();
    let program = args.command.first().context("no COMMAND given after --")?;
    let label = resources.join(", ");
    tracing::info!(resources = %label, ttl = %humantime::format_duration(args.ttl), "exec");
    let locks = connection::connect(global).await?;
    if !args.no_wait {
        child::check_reachable(&locks, &resources, |resource| {
            format!("cannot acquire a lock on {resource}")
        })
        .await?;
    }
    // Installed before waiting: a Ctrl-C while waiting withdraws the attempt cleanly.
    let mut signals = Forwarded::install()?;

    let owner = match &args.owner {
        Some(owner) => owner.clone(),
        None => format!("{program} (pid {})", std::process::id()),
    };
    let handle = Handle::new(&locks, &args, &resources, &owner);
    let patience = Patience::new(args.no_wait, args.wait);
    let kind = if args.shared {
        LockKind::Shared
    } else {
        LockKind::Exclusive
    };
    let mut report = Report {
        resource: resources.join(","),
        resources: resources.clone(),
        kind: kind_name(kind),
        acquired: false,
        lock_id: None,
        fencing_token: None,
        fencing_tokens: None,
        run: RunReport::default(),
        released: false,
    };

    tracing::info!(resources = %label, %patience, "waiting for the lock");
    let waiting = format!("waiting for {}", escape(&label));
    let progress = child::shows_progress(patience).then_some((waiting.as_str(), &resources[..]));
    let waited = child::wait_for(&locks, handle.acquire(patience), &mut signals, progress).await;
    let held = match waited {
        Ok(Waited::Acquired(held)) => held,
        Ok(Waited::NotInTime) => {
            let who = if resources.len() > 1 {
                format!("{label}: at least one is held by others")
            } else {
                format!("{label} is held by others")
            };
            complain!("{who}: not acquired{}", patience.within());
            report.run.exit_status = exit::NOT_ACQUIRED;
            return finish(&locks, global, &report, exit::NOT_ACQUIRED).await;
        }
        Ok(Waited::Signal(signal)) => {
            complain!("{signal} received while waiting for {label}: gave up");
            let status = signal_status(signal as i32);
            report.run.exit_status = status;
            return finish(&locks, global, &report, status).await;
        }
        Err(error) => {
            locks.shutdown().await;
            return Err(
                anyhow::Error::new(error).context(format!("cannot acquire a lock on {label}"))
            );
        }
    };

    report.acquired = true;
    let env: Vec<(&'static str, String)> = match &held {
        Held::Set(set) => {
            let tokens: BTreeMap<String, i64> = set
                .guards()
                .iter()
                .map(|guard| (guard.resource().to_owned(), guard.fencing_token()))
                .collect();
            let listed = tokens
                .iter()
                .map(|(resource, token)| format!("{resource}={token}"))
                .collect::<Vec<_>>()
                .join(",");
            tracing::info!(resources = %label, lock_id = set.lock_id(), tokens = %listed, "acquired");
            report.lock_id = Some(set.lock_id().to_owned());
            report.fencing_tokens = Some(tokens);
            vec![
                ("MONGOLOCK_RESOURCES", resources.join(",")),
                ("MONGOLOCK_LOCK_ID", set.lock_id().to_owned()),
                ("MONGOLOCK_FENCING_TOKENS", listed),
            ]
        }
        Held::One(guard) => {
            tracing::info!(
                resource = guard.resource(),
                lock_id = guard.lock_id(),
                token = guard.fencing_token(),
                "acquired"
            );
            report.lock_id = Some(guard.lock_id().to_owned());
            report.fencing_token = Some(guard.fencing_token());
            report.fencing_tokens = Some(BTreeMap::from([(
                guard.resource().to_owned(),
                guard.fencing_token(),
            )]));
            vec![
                ("MONGOLOCK_RESOURCE", guard.resource().to_owned()),
                ("MONGOLOCK_LOCK_ID", guard.lock_id().to_owned()),
                ("MONGOLOCK_FENCING_TOKEN", guard.fencing_token().to_string()),
            ]
        }
        Held::Leading(_) => anyhow::bail!("exec holds locks, not a leadership"),
    };
    let to_run = Child {
        command: &args.command,
        env,
        kill_after: args.kill_after,
    };
    let outcome = child::run_under(
        held,
        to_run,
        &mut signals,
        &mut report.run.forwarded_signals,
    )
    .await?;
    report.run.record(&outcome);
    report.released = outcome.released;
    finish(&locks, global, &report, outcome.status).await
}
