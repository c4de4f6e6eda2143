//! `mongolock exec`: run a command under a lock.
//!
//! The lock is taken with the library's handles (a mutex, a reader of a reader-writer lock,
//! or a semaphore permit), so its lease is renewed in the background while the child runs.
//! The child runs in a process group of its own; mongolock stays its parent and
//!
//! - passes its exit status through (128+N if it was killed by signal N) after releasing
//!   the lock;
//! - forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to the child's process group, keeps
//!   waiting for the child, then releases the lock and exits with the child's status;
//! - stops the child's process group if the lease is lost (SIGTERM, then SIGKILL after
//!   `--kill-after`), and exits with [`exit::LEASE_LOST`].
//!
//! If mongolock itself fails or panics, the child's process group is killed on the way out.
//! What cannot be handled: a SIGKILL of mongolock itself cannot be caught, so it cannot be
//! forwarded. The child then goes on without a lock: its lease is no longer renewed and
//! ends with its TTL. Since the child has a process group of its own, it also does not get
//! the terminal's Ctrl-C directly (mongolock forwards it), and it cannot read from the
//! terminal (it is not the terminal's foreground group).

use std::convert::Infallible;
use std::io::ErrorKind as IoErrorKind;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use anyhow::Context as _;
use mongolock::{ErrorKind, Filter, LockClient, LockGuard, LockKind, LossReason};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::cli::{self, ExecArgs, Global, exit};
use crate::commands::inspect::{self, kind_name};

/// Exit status when the command could not be found (as `env`, `timeout` and shells use).
const COMMAND_NOT_FOUND: u8 = 127;
/// Exit status when the command was found but could not be run.
const COMMAND_NOT_RUNNABLE: u8 = 126;

/// How often the progress line asks the server who holds the lock.
const PROGRESS_POLL: Duration = Duration::from_secs(1);

/// The JSON document `exec --json` prints on stdout when it is done.
#[derive(Debug, Serialize)]
struct Report {
    /// The resource.
    resource: String,
    /// `exclusive` or `shared`.
    kind: &'static str,
    /// Whether the lock was acquired (false: the exit status is 75, or 128+N after a signal
    /// while waiting).
    acquired: bool,
    /// The lock id the lock was held with.
    lock_id: Option<String>,
    /// The fencing token of the grant.
    fencing_token: Option<i64>,
    /// mongolock's own exit status.
    exit_status: u8,
    /// The child's exit code, if it exited.
    child_exit_code: Option<i32>,
    /// The signal that ended the child, if one did.
    child_signal: Option<i32>,
    /// Whether the lease was lost while the child ran.
    lost: bool,
    /// Why it was lost.
    loss_reason: Option<&'static str>,
    /// Signals mongolock received and forwarded to the child, by name.
    forwarded_signals: Vec<&'static str>,
    /// Whether the lock was released by this process (false if it was lost, or the release
    /// failed and the TTL will end it).
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
}

/// How long to wait for the lock.
#[derive(Debug, Clone, Copy)]
enum Patience {
    /// One attempt (`--no-wait`).
    Once,
    /// Up to this long (`--wait`).
    Upto(Duration),
    /// As long as it takes.
    Forever,
}

impl Handle {
    /// The handle `args` ask for, with the lease settings.
    fn new(locks: &LockClient, args: &ExecArgs, owner: &str) -> Self {
        let resource = args.resource.clone();
        match (args.shared, args.max) {
            (false, _) => Handle::Mutex(locks.mutex(resource).ttl(args.ttl).owner(owner)),
            (true, None) => Handle::Read(locks.rwlock(resource).ttl(args.ttl).owner(owner)),
            (true, Some(max)) => {
                Handle::Permit(locks.semaphore(resource, max).ttl(args.ttl).owner(owner))
            }
        }
    }

    /// Acquires: `Ok(None)` if the lock was not acquired within `patience`.
    ///
    /// # Cancel safety
    ///
    /// As the library's acquires: dropping the future leaves no lock held (an attempt in
    /// flight is withdrawn in the background; [`LockClient::shutdown`] waits for that).
    async fn acquire(&self, patience: Patience) -> mongolock::Result<Option<LockGuard>> {
        match (self, patience) {
            (Handle::Mutex(h), Patience::Once) => h.try_acquire().await,
            (Handle::Mutex(h), Patience::Upto(d)) => h.acquire_timeout(d).await,
            (Handle::Mutex(h), Patience::Forever) => h.acquire().await.map(Some),
            (Handle::Read(h), Patience::Once) => h.try_read().await,
            (Handle::Read(h), Patience::Upto(d)) => h.read_timeout(d).await,
            (Handle::Read(h), Patience::Forever) => h.read().await.map(Some),
            (Handle::Permit(h), Patience::Once) => h.try_acquire().await,
            (Handle::Permit(h), Patience::Upto(d)) => h.acquire_timeout(d).await,
            (Handle::Permit(h), Patience::Forever) => h.acquire().await.map(Some),
        }
    }
}

/// The signals mongolock forwards to the child: SIGINT, SIGTERM, SIGHUP and SIGQUIT. Once
/// this exists, they no longer end mongolock by default.
struct Forwarded {
    /// SIGINT.
    int: tokio::signal::unix::Signal,
    /// SIGTERM.
    term: tokio::signal::unix::Signal,
    /// SIGHUP.
    hup: tokio::signal::unix::Signal,
    /// SIGQUIT.
    quit: tokio::signal::unix::Signal,
}

impl Forwarded {
    /// Installs the handlers.
    fn install() -> anyhow::Result<Self> {
        let install = |kind: SignalKind| signal(kind).context("cannot install a signal handler");
        Ok(Forwarded {
            int: install(SignalKind::interrupt())?,
            term: install(SignalKind::terminate())?,
            hup: install(SignalKind::hangup())?,
            quit: install(SignalKind::quit())?,
        })
    }

    /// The next signal received.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a signal is either returned or stays pending for the next call.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        }
    }
}

/// The child's process group, killed with SIGKILL if this is dropped before the child was
/// seen to exit (an error or a panic in mongolock): together with `kill_on_drop`, the child
/// and what it started in its group never outlive mongolock on a path it controls.
struct Group {
    /// The group's id: the child's pid.
    pgid: Pid,
    /// Set once the child was reaped: the id may then belong to someone else.
    reaped: bool,
}

impl Group {
    /// Sends `signal` to the group, unless the child was reaped. A group already gone is
    /// not an error.
    fn signal(&self, signal: Signal) {
        if self.reaped {
            return;
        }
        if let Err(error) = killpg(self.pgid, signal)
            && error != nix::errno::Errno::ESRCH
        {
            eprintln!("mongolock: cannot send {signal} to the child: {error}");
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// Runs `exec`: acquires, runs the child under the lock, and returns the exit status (see
/// the crate's `AFTER_HELP`).
///
/// # Cancel safety
///
/// Not meant to be cancelled (it is the whole process); if it is dropped, the child's
/// process group is killed and the lock released in the background.
pub async fn run(global: &Global, args: ExecArgs) -> anyhow::Result<ExitCode> {
    if args.resource.is_empty() {
        anyhow::bail!("--resource must not be empty");
    }
    if args.max == Some(0) {
        anyhow::bail!("--max must be at least 1");
    }
    if args.ttl.is_zero() {
        anyhow::bail!("--ttl must be longer than zero");
    }
    let program = args.command.first().context("no COMMAND given after --")?;
    let locks = cli::connect(global).await?;
    if !args.no_wait {
        // Waiting retries transient errors for as long as it waits: a server that cannot be
        // reached at all is reported now instead (a single attempt reports it anyway).
        if let Err(error) = locks
            .status(&Filter::default().resource(&args.resource))
            .await
        {
            // Bad input or a document that is not a lock is about the lock, not the server.
            let context = match error.kind() {
                ErrorKind::Database { .. } | ErrorKind::Timeout { .. } => {
                    "cannot reach the server".to_owned()
                }
                _ => format!("cannot acquire a lock on {}", args.resource),
            };
            return Err(anyhow::Error::new(error).context(context));
        }
    }
    // Installed before waiting: a Ctrl-C while waiting withdraws the attempt cleanly.
    let mut signals = Forwarded::install()?;

    let owner = match &args.owner {
        Some(owner) => owner.clone(),
        None => format!("{program} (pid {})", std::process::id()),
    };
    let handle = Handle::new(&locks, &args, &owner);
    let patience = match (args.no_wait, args.wait) {
        (true, _) => Patience::Once,
        (false, Some(wait)) => Patience::Upto(wait),
        (false, None) => Patience::Forever,
    };
    let kind = if args.shared {
        LockKind::Shared
    } else {
        LockKind::Exclusive
    };
    let mut report = Report {
        resource: args.resource.clone(),
        kind: kind_name(kind),
        acquired: false,
        lock_id: None,
        fencing_token: None,
        exit_status: 0,
        child_exit_code: None,
        child_signal: None,
        lost: false,
        loss_reason: None,
        forwarded_signals: Vec::new(),
        released: false,
    };

    tracing::info!(resource = %args.resource, ?patience, "waiting for the lock");
    let progress = (cli::stderr_is_terminal() && !args.no_wait).then(|| spinner(&args.resource));
    let acquired = tokio::select! {
        acquired = handle.acquire(patience) => Ok(acquired),
        signal = signals.recv() => Err(signal),
        never = show_holders(&locks, &args.resource, progress.as_ref()) => match never {},
    };
    if let Some(progress) = &progress {
        progress.finish_and_clear();
    }
    let guard = match acquired {
        Ok(Ok(Some(guard))) => guard,
        Ok(Ok(None)) => {
            eprintln!(
                "mongolock: {} is held by others: not acquired{}",
                args.resource,
                match patience {
                    Patience::Upto(wait) => format!(" within {}", humantime::format_duration(wait)),
                    _ => String::new(),
                }
            );
            return finish(&locks, global, report, exit::NOT_ACQUIRED).await;
        }
        Ok(Err(error)) => {
            locks.shutdown().await;
            return Err(anyhow::Error::new(error)
                .context(format!("cannot acquire a lock on {}", args.resource)));
        }
        Err(signal) => {
            eprintln!(
                "mongolock: {signal} received while waiting for {}: gave up",
                args.resource
            );
            return finish(&locks, global, report, signal_status(signal as i32)).await;
        }
    };
    report.acquired = true;
    report.lock_id = Some(guard.lock_id().to_owned());
    report.fencing_token = Some(guard.fencing_token());
    tracing::info!(
        resource = guard.resource(),
        lock_id = guard.lock_id(),
        token = guard.fencing_token(),
        "acquired"
    );

    let mut command = tokio::process::Command::new(program);
    command
        .args(&args.command[1..])
        .env("MONGOLOCK_RESOURCE", &args.resource)
        .env("MONGOLOCK_LOCK_ID", guard.lock_id())
        .env("MONGOLOCK_FENCING_TOKEN", guard.fencing_token().to_string())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let status = match error.kind() {
                IoErrorKind::NotFound => COMMAND_NOT_FOUND,
                _ => COMMAND_NOT_RUNNABLE,
            };
            eprintln!("mongolock: cannot run {program:?}: {error}");
            report.released = release(guard, &args.resource).await.is_ok();
            return finish(&locks, global, report, status).await;
        }
    };
    let pid = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .context("the child has no process id")?;
    let mut group = Group {
        pgid: Pid::from_raw(pid),
        reaped: false,
    };

    // Wait for the child, forwarding signals; if the lease is lost, stop the child.
    let mut lost: Option<LossReason> = None;
    let mut kill_at: Option<Instant> = None;
    let status: ExitStatus = loop {
        tokio::select! {
            status = child.wait() => {
                group.reaped = true;
                break status.context("cannot wait for the child")?;
            }
            reason = guard.lost(), if lost.is_none() => {
                lost = Some(reason);
                eprintln!(
                    "mongolock: lease on {} lost ({}): stopping the child",
                    args.resource,
                    describe_loss(reason)
                );
                group.signal(Signal::SIGTERM);
                // A --kill-after past what the clock can represent never comes.
                kill_at = Instant::now().checked_add(args.kill_after);
            }
            () = sleep_until(kill_at), if kill_at.is_some() => {
                eprintln!(
                    "mongolock: the child is still running {} after SIGTERM: SIGKILL",
                    humantime::format_duration(args.kill_after)
                );
                group.signal(Signal::SIGKILL);
                kill_at = None;
            }
            signal = signals.recv() => {
                tracing::info!(%signal, "forwarding to the child");
                report.forwarded_signals.push(signal.as_str());
                group.signal(signal);
            }
        }
    };
    report.child_exit_code = status.code();
    report.child_signal = status.signal();
    let child_status = match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(exit::ERROR),
        (None, Some(signal)) => signal_status(signal),
        (None, None) => exit::ERROR,
    };

    let exit_status = match lost {
        Some(reason) => {
            report.lost = true;
            report.loss_reason = Some(loss_name(reason));
            drop(guard);
            exit::LEASE_LOST
        }
        None => match release(guard, &args.resource).await {
            Ok(()) => {
                report.released = true;
                child_status
            }
            Err(ReleaseError::Lost(reason)) => {
                // Lost after the child's last step was seen, but before the release: the
                // child may have run without the lock at the end. Say so.
                eprintln!(
                    "mongolock: lease on {} lost ({}) before the child's exit was seen",
                    args.resource,
                    describe_loss(reason)
                );
                report.lost = true;
                report.loss_reason = Some(loss_name(reason));
                exit::LEASE_LOST
            }
            Err(ReleaseError::Failed) => child_status,
        },
    };
    finish(&locks, global, report, exit_status).await
}

/// Why a release did not go as planned.
enum ReleaseError {
    /// The lease had been lost before the release.
    Lost(LossReason),
    /// The release could not be sent (reported on stderr); the TTL ends the lock.
    Failed,
}

/// Releases `guard`, reporting failures on stderr.
///
/// # Cancel safety
///
/// As [`LockGuard::release`]: if dropped early, the lock ends with its TTL.
async fn release(guard: LockGuard, resource: &str) -> Result<(), ReleaseError> {
    match guard.release().await {
        Ok(()) => Ok(()),
        Err(error) => match error.kind() {
            ErrorKind::LeaseLost { reason, .. } => Err(ReleaseError::Lost(*reason)),
            _ => {
                eprintln!(
                    "mongolock: cannot release the lock on {resource} ({error}); its TTL will end it"
                );
                Err(ReleaseError::Failed)
            }
        },
    }
}

/// Waits for the background work of the client, prints the JSON report if asked, and
/// returns `status`.
///
/// # Cancel safety
///
/// Dropping it stops waiting for the client's background releases.
async fn finish(
    locks: &LockClient,
    global: &Global,
    mut report: Report,
    status: u8,
) -> anyhow::Result<ExitCode> {
    locks.shutdown().await;
    report.exit_status = status;
    if global.json {
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(ExitCode::from(status))
}

/// Sleeps until `at`, or forever if it is `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The shell's status for a death by `signal`: 128+N.
fn signal_status(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(exit::ERROR)
}

/// The reason, as the JSON report spells it.
fn loss_name(reason: LossReason) -> &'static str {
    match reason {
        LossReason::Deadline => "deadline",
        LossReason::Revoked => "revoked",
        LossReason::Released => "released",
        _ => "unknown",
    }
}

/// The reason, for people.
fn describe_loss(reason: LossReason) -> &'static str {
    match reason {
        LossReason::Deadline => "no renewal succeeded in time",
        LossReason::Revoked => "revoked: the server no longer has it, force-released or purged",
        LossReason::Released => "released",
        _ => "unknown reason",
    }
}

/// The spinner shown on a terminal while waiting.
fn spinner(resource: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {wide_msg}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar.set_message(format!("waiting for {resource}"));
    bar
}

/// Updates `progress` with who holds `resource` and until when (server time), asking the
/// server about once a second. Never returns; without a progress line it just waits.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
async fn show_holders(
    locks: &LockClient,
    resource: &str,
    progress: Option<&indicatif::ProgressBar>,
) -> Infallible {
    let Some(progress) = progress else {
        return std::future::pending().await;
    };
    loop {
        let message = match locks.status(&Filter::default().resource(resource)).await {
            Ok(held) => describe_holders(resource, &held),
            Err(error) => format!("waiting for {resource} (cannot list its holders: {error})"),
        };
        progress.set_message(message);
        tokio::time::sleep(PROGRESS_POLL).await;
    }
}

/// One line: who holds `resource`, and until when (the most useful first: the line is cut
/// to the terminal's width).
fn describe_holders(resource: &str, held: &[mongolock::LockStatus]) -> String {
    let live: Vec<_> = held.iter().filter(|lock| !lock.is_expired()).collect();
    let Some(first) = live.first() else {
        return format!("waiting for {resource} (free now; asking again)");
    };
    let until = match (first.ttl_remaining(), first.holder().expires_at()) {
        (Some(left), Some(at)) => format!(
            "{} left (until {} server time)",
            inspect::format_ttl(left),
            at.try_to_rfc3339_string()
                .unwrap_or_else(|_| at.to_string())
        ),
        _ => "no TTL".to_owned(),
    };
    let more = match live.len() {
        1 => String::new(),
        n => format!(", and {} more holder(s)", n - 1),
    };
    format!(
        "waiting for {resource}: held by {} on {}, {until}, lock id {}{more}",
        first.owner().unwrap_or("no owner"),
        first.host().unwrap_or("unknown host"),
        first.lock_id(),
    )
}
