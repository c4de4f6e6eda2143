//! What `exec` and `elect` share: waiting for a lease while honouring signals, and running a
//! child process under it.
//!
//! The lease is one of the library's: a lock ([`LockGuard`]), a set of locks
//! ([`MultiGuard`]) or a leadership ([`Leadership`]), each renewed in the background while
//! the child runs. The child runs in a process group of its own; mongolock stays its parent
//! and
//!
//! - passes its exit status through (128+N if it was killed by signal N) after releasing
//!   the lease;
//! - forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to the child's process group, keeps
//!   waiting for the child, then releases the lease and exits with the child's status;
//! - stops the child's process group if the lease is lost (SIGTERM, then SIGKILL after
//!   `--kill-after`), and exits with [`exit::LEASE_LOST`].
//!
//! If mongolock itself fails or panics, the child's process group is killed on the way out.
//! What cannot be handled: a SIGKILL of mongolock itself cannot be caught, so it cannot be
//! forwarded. The child then goes on without a lease: the lease is no longer renewed and
//! ends with its TTL. Since the child has a process group of its own, it also does not get
//! the terminal's Ctrl-C directly (mongolock forwards it), and it cannot read from the
//! terminal (it is not the terminal's foreground group).

use std::convert::Infallible;
use std::future::Future;
use std::io::ErrorKind as IoErrorKind;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use anyhow::Context as _;
use mongolock::{
    ErrorKind, Filter, Leadership, LockClient, LockGuard, LockStatus, LossReason, MultiGuard,
};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::cli::{Global, exit};
use crate::commands::inspect;
use crate::connection;
use crate::output::{self, complain, escape};

/// Exit status when the command could not be found (as `env`, `timeout` and shells use).
const COMMAND_NOT_FOUND: u8 = 127;
/// Exit status when the command was found but could not be run.
const COMMAND_NOT_RUNNABLE: u8 = 126;

/// How often the progress line asks the server who holds the lock.
const PROGRESS_POLL: Duration = Duration::from_secs(1);

/// How long to wait for a lease.
#[derive(Debug, Clone, Copy)]
pub enum Patience {
    /// One attempt (`--no-wait`).
    Once,
    /// Up to this long (`--wait`).
    Upto(Duration),
    /// As long as it takes.
    Forever,
}

impl Patience {
    /// The patience `--no-wait` and `--wait` ask for.
    pub fn new(no_wait: bool, wait: Option<Duration>) -> Self {
        match (no_wait, wait) {
            (true, _) => Patience::Once,
            (false, Some(wait)) => Patience::Upto(wait),
            (false, None) => Patience::Forever,
        }
    }

    /// `" within 10s"` for a wait that gave up, else nothing: the end of a "not acquired"
    /// message.
    pub fn within(self) -> String {
        match self {
            Patience::Upto(wait) => format!(" within {}", humantime::format_duration(wait)),
            _ => String::new(),
        }
    }
}

impl std::fmt::Display for Patience {
    /// `once`, `up to 10s`, `as long as it takes`: for the logs of `-v`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Patience::Once => f.write_str("once"),
            Patience::Upto(wait) => write!(f, "up to {}", humantime::format_duration(*wait)),
            Patience::Forever => f.write_str("as long as it takes"),
        }
    }
}

/// A lease a child runs under.
#[derive(Debug)]
pub enum Held {
    /// One lock (`exec` with one resource).
    One(LockGuard),
    /// Several resources held together (`exec` with several resources).
    Set(MultiGuard),
    /// The leadership of an election (`elect`).
    Leading(Leadership),
}

impl Held {
    /// Resolves when the lease is lost, with the reason.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    async fn lost(&self) -> LossReason {
        match self {
            Held::One(guard) => guard.lost().await,
            Held::Set(guard) => guard.lost().await,
            Held::Leading(leadership) => leadership.lost().await,
        }
    }

    /// The lease, for messages: `lease on R`, `lease on b (one of a, b)` once a member of a
    /// set is lost, `leadership of N`.
    fn name(&self) -> String {
        match self {
            Held::One(guard) => format!("lease on {}", guard.resource()),
            Held::Set(guard) => {
                let all = guard.resources().collect::<Vec<_>>().join(", ");
                match guard.guards().iter().find(|member| member.is_lost()) {
                    Some(member) => format!("lease on {} (one of {all})", member.resource()),
                    None => format!("lease on {all}"),
                }
            }
            Held::Leading(leadership) => {
                format!("leadership of {}", leadership.guard().resource())
            }
        }
    }

    /// What a failed release did not do, for messages.
    fn release_name(&self) -> String {
        match self {
            Held::One(guard) => format!("release the lock on {}", guard.resource()),
            Held::Set(guard) => format!(
                "release the locks on {}",
                guard.resources().collect::<Vec<_>>().join(", ")
            ),
            Held::Leading(leadership) => {
                format!("resign the leadership of {}", leadership.guard().resource())
            }
        }
    }

    /// Releases the lease (resigns a leadership), reporting failures on stderr.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`]: if dropped early, the lease ends with its TTL.
    async fn release(self) -> Result<(), ReleaseError> {
        let what = self.release_name();
        let released = match self {
            Held::One(guard) => guard.release().await,
            Held::Set(guard) => guard.release().await,
            Held::Leading(leadership) => leadership.resign().await,
        };
        match released {
            Ok(()) => Ok(()),
            Err(error) => match error.kind() {
                ErrorKind::LeaseLost { reason, .. } => Err(ReleaseError::Lost(*reason)),
                _ => {
                    complain!("cannot {what} ({error}); its TTL will end it");
                    Err(ReleaseError::Failed)
                }
            },
        }
    }
}

/// Why a release did not go as planned.
enum ReleaseError {
    /// The lease had been lost before the release.
    Lost(LossReason),
    /// The release could not be sent (reported on stderr); the TTL ends the lease.
    Failed,
}

/// The signals mongolock forwards to the child: SIGINT, SIGTERM, SIGHUP and SIGQUIT. Once
/// this exists, they no longer end mongolock by default.
pub struct Forwarded {
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
    pub fn install() -> anyhow::Result<Self> {
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
    pub async fn recv(&mut self) -> Signal {
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
            complain!("cannot send {signal} to the child: {error}");
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// How a wait for a lease ended, when it did not fail.
pub enum Waited<T> {
    /// Acquired.
    Acquired(T),
    /// Not acquired within the patience asked for.
    NotInTime,
    /// This signal came while waiting: the attempt was given up (withdrawn in the
    /// background; [`LockClient::shutdown`] waits for that).
    Signal(Signal),
}

/// Checks, before a wait, that the server answers and that `resources` hold lock documents
/// (or nothing): waiting retries transient errors for as long as it waits, so a server that
/// cannot be reached at all is reported now instead. An error about a resource (bad input,
/// a document that is not a lock) gets the context `about(resource)`.
///
/// # Cancel safety
///
/// Reads only.
pub async fn check_reachable(
    locks: &LockClient,
    resources: &[String],
    about: impl Fn(&str) -> String,
) -> anyhow::Result<()> {
    for resource in resources {
        if let Err(error) = locks.status(&Filter::default().resource(resource)).await {
            let context = match error.kind() {
                ErrorKind::Database { .. } | ErrorKind::Timeout { .. } => {
                    "cannot reach the server".to_owned()
                }
                _ => about(resource),
            };
            return Err(anyhow::Error::new(error).context(context));
        }
    }
    Ok(())
}

/// Waits for `acquire` (which gives `None` when not acquired in time), giving up on any
/// forwarded signal. With `progress` (`(message, resources)`), a spinner on stderr shows who
/// holds the first of `resources` that is held.
///
/// # Errors
///
/// The acquire's error.
///
/// # Cancel safety
///
/// As `acquire`.
pub async fn wait_for<T>(
    locks: &LockClient,
    acquire: impl Future<Output = mongolock::Result<Option<T>>>,
    signals: &mut Forwarded,
    progress: Option<(&str, &[String])>,
) -> mongolock::Result<Waited<T>> {
    let bar = progress.map(|(message, _)| spinner(message));
    let (message, resources) = progress.unwrap_or(("", &[]));
    let waited = tokio::select! {
        acquired = acquire => acquired.map(|acquired| match acquired {
            Some(held) => Waited::Acquired(held),
            None => Waited::NotInTime,
        }),
        signal = signals.recv() => Ok(Waited::Signal(signal)),
        never = show_holders(locks, message, resources, bar.as_ref()) => match never {},
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    waited
}

/// Every variable `exec` and `elect` set in a child's environment. A child's environment
/// has those of its own lease only: the others, inherited from an outer mongolock, are
/// removed, since they describe another lease (a nested child must not pair one lease's
/// lock id with another's fencing token or term).
pub const VARIABLES: &[&str] = &[
    "MONGOLOCK_RESOURCE",
    "MONGOLOCK_RESOURCES",
    "MONGOLOCK_LOCK_ID",
    "MONGOLOCK_FENCING_TOKEN",
    "MONGOLOCK_FENCING_TOKENS",
    "MONGOLOCK_ELECTION",
    "MONGOLOCK_TERM",
];

/// The child to run under a lease.
pub struct Child<'a> {
    /// The program and its arguments (not empty).
    pub command: &'a [String],
    /// The variables of [`VARIABLES`] that describe the lease, set in the child's
    /// environment; the others are removed from it.
    pub env: Vec<(&'static str, String)>,
    /// After SIGTERM, how long the child has before SIGKILL.
    pub kill_after: Duration,
}

/// What the `--json` reports of `exec` and `elect` say of the child's run, flattened into
/// each.
#[derive(Debug, Default, Serialize)]
pub struct RunReport {
    /// mongolock's own exit status.
    pub exit_status: u8,
    /// The child's exit code, if it exited.
    pub child_exit_code: Option<i32>,
    /// The signal that ended the child, if one did.
    pub child_signal: Option<i32>,
    /// Whether the lease (of any member of a set, or the leadership) was lost while the
    /// child ran.
    pub lost: bool,
    /// Why it was lost.
    pub loss_reason: Option<&'static str>,
    /// Signals mongolock received and forwarded to the child, by name.
    pub forwarded_signals: Vec<&'static str>,
}

impl RunReport {
    /// Records how the run ended.
    pub fn record(&mut self, outcome: &Outcome) {
        self.child_exit_code = outcome.child_exit_code;
        self.child_signal = outcome.child_signal;
        self.lost = outcome.lost.is_some();
        self.loss_reason = outcome.lost.map(loss_name);
        self.exit_status = outcome.status;
    }
}

/// How a child's run under a lease ended.
#[derive(Debug, Default)]
pub struct Outcome {
    /// mongolock's exit status: the child's, or 79 if the lease was lost, or 126/127 if the
    /// child could not be run.
    pub status: u8,
    /// The child's exit code, if it exited.
    pub child_exit_code: Option<i32>,
    /// The signal that ended the child, if one did.
    pub child_signal: Option<i32>,
    /// Why the lease was lost, if it was (while the child ran, or before the release).
    pub lost: Option<LossReason>,
    /// Whether the lease was released by this process (false if it was lost, or the
    /// release failed and the TTL will end it).
    pub released: bool,
}

/// Runs `child` while `held` is held: forwards signals (recording their names in
/// `forwarded`), stops the child if the lease is lost, and releases the lease when the child
/// has exited.
///
/// # Errors
///
/// The child has no process id or cannot be waited for (then its group is killed and the
/// lease released in the background).
///
/// # Cancel safety
///
/// Not meant to be cancelled; if it is dropped, the child's process group is killed and
/// the lease released in the background.
pub async fn run_under(
    held: Held,
    child: Child<'_>,
    signals: &mut Forwarded,
    forwarded: &mut Vec<&'static str>,
) -> anyhow::Result<Outcome> {
    let (program, args) = child
        .command
        .split_first()
        .context("no COMMAND given after --")?;
    let mut command = tokio::process::Command::new(program);
    command.args(args);
    // Removed first, then set: the lease's own are set again.
    for name in VARIABLES {
        command.env_remove(name);
    }
    for (name, value) in &child.env {
        command.env(name, value);
    }
    command.process_group(0).kill_on_drop(true);
    die_with_parent(&mut command);
    let mut process = match command.spawn() {
        Ok(process) => process,
        Err(error) => {
            let status = match error.kind() {
                IoErrorKind::NotFound => COMMAND_NOT_FOUND,
                _ => COMMAND_NOT_RUNNABLE,
            };
            complain!("cannot run {program:?}: {error}");
            return Ok(Outcome {
                status,
                released: held.release().await.is_ok(),
                ..Outcome::default()
            });
        }
    };
    let pid = process
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
            status = process.wait() => {
                group.reaped = true;
                break status.context("cannot wait for the child")?;
            }
            reason = held.lost(), if lost.is_none() => {
                lost = Some(reason);
                complain!(
                    "{} lost ({}): stopping the child",
                    held.name(),
                    describe_loss(reason)
                );
                group.signal(Signal::SIGTERM);
                // A --kill-after past what the clock can represent never comes.
                kill_at = Instant::now().checked_add(child.kill_after);
            }
            () = sleep_until(kill_at), if kill_at.is_some() => {
                complain!(
                    "the child is still running {} after SIGTERM: SIGKILL",
                    humantime::format_duration(child.kill_after)
                );
                group.signal(Signal::SIGKILL);
                kill_at = None;
            }
            signal = signals.recv() => {
                tracing::info!(%signal, "forwarding to the child");
                forwarded.push(signal.as_str());
                group.signal(signal);
            }
        }
    };
    let mut outcome = Outcome {
        child_exit_code: status.code(),
        child_signal: status.signal(),
        ..Outcome::default()
    };
    let child_status = match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(exit::ERROR),
        (None, Some(signal)) => signal_status(signal),
        (None, None) => exit::ERROR,
    };
    if let Some(reason) = lost {
        outcome.lost = Some(reason);
        outcome.status = exit::LEASE_LOST;
        drop(held);
        return Ok(outcome);
    }
    let name = held.name();
    outcome.status = match held.release().await {
        Ok(()) => {
            outcome.released = true;
            child_status
        }
        Err(ReleaseError::Lost(reason)) => {
            // Lost after the child's last step was seen, but before the release: the child
            // may have run without the lease at the end. Say so.
            complain!(
                "{name} lost ({}) before the child's exit was seen",
                describe_loss(reason)
            );
            outcome.lost = Some(reason);
            exit::LEASE_LOST
        }
        Err(ReleaseError::Failed) => {
            // Said on stderr; the TTL ends the lease. Nothing is left to protect, and the
            // client's cleanup would wait for the same server.
            connection::hurry();
            child_status
        }
    };
    Ok(outcome)
}

/// Sets up `command` so that its process gets SIGKILL when this one dies, however it dies
/// (SIGKILL included): on Linux, its parent-death signal (`prctl(PR_SET_PDEATHSIG)`), set in
/// the child between fork and exec. If this process died before that (the child then has
/// another parent already), the child exits at once instead of running the command.
///
/// The signal goes to the child only, not to what it started (its process group): a child
/// that starts others must see to them. It is sent when the thread that spawned the child
/// ends; `exec` and `elect` spawn it from the thread that runs `main`, which ends only with
/// the process.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_parent(command: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the hook runs in the forked child, where only async-signal-safe calls are
    // sound: it makes two system calls (prctl(2), getppid(2)) and builds an io::Error from an
    // errno, which allocates nothing. It touches no lock and no memory of the parent's.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if nix::unistd::getppid() != parent {
                // The parent died before the signal was set: nobody holds the lease.
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
}

/// Elsewhere than Linux there is no parent-death signal: a child of a mongolock killed with
/// SIGKILL runs on without a lease (docs/operating.md says so).
#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut tokio::process::Command) {}

/// After a lease was lost, how long the client's cleanup (the release of what the server may
/// still hold of the lost lease, and any release or withdrawal owed) may take before
/// mongolock exits all the same: the lease protects nothing any more, and whatever the server
/// still holds of it ends with its TTL.
pub const LOST_CLEANUP_LIMIT: Duration = Duration::from_secs(2);

/// How long a cleanup after a loss runs before mongolock says it is waiting.
const LOST_CLEANUP_NOTICE: Duration = Duration::from_millis(300);

/// Waits for the background work of the client, prints `report` as one JSON line if
/// `--json` asked for it, and returns `status`. After a lost lease (`status` is
/// [`exit::LEASE_LOST`]) or a release that failed ([`connection::hurried`]), the wait
/// is bounded by [`LOST_CLEANUP_LIMIT`], and said on stderr if it takes more than a moment.
///
/// # Cancel safety
///
/// Dropping it stops waiting for the client's background releases.
pub async fn finish(
    locks: &LockClient,
    global: &Global,
    report: &impl Serialize,
    status: u8,
) -> anyhow::Result<ExitCode> {
    if status == exit::LEASE_LOST {
        shutdown_bounded(locks, "the lease is lost").await;
    } else if connection::hurried() {
        shutdown_bounded(locks, "the release failed").await;
    } else {
        locks.shutdown().await;
    }
    if global.json {
        println!("{}", serde_json::to_string(report)?);
    }
    Ok(ExitCode::from(status))
}

/// [`LockClient::shutdown`] when nothing is left to protect (`why`: the lease is lost, or
/// its release failed): at most [`LOST_CLEANUP_LIMIT`], saying so on stderr if it takes
/// longer than [`LOST_CLEANUP_NOTICE`] (a server that does not answer), and telling the
/// driver's shutdown to hurry ([`connection::hurry`]).
///
/// # Cancel safety
///
/// Dropping it stops waiting; the cleanup is dropped with the runtime.
async fn shutdown_bounded(locks: &LockClient, why: &str) {
    connection::hurry();
    let shutdown = locks.shutdown();
    tokio::pin!(shutdown);
    if tokio::time::timeout(LOST_CLEANUP_NOTICE, &mut shutdown)
        .await
        .is_ok()
    {
        return;
    }
    complain!(
        "{why}; giving the server up to {} to clear the lease",
        humantime::format_duration(LOST_CLEANUP_LIMIT)
    );
    if tokio::time::timeout(LOST_CLEANUP_LIMIT - LOST_CLEANUP_NOTICE, shutdown)
        .await
        .is_err()
    {
        complain!("no answer: exiting; the TTL ends what the server still holds of the lease");
    }
}

/// Sleeps until `at`, or forever if it is `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The shell's status for a death by `signal`: 128+N.
pub fn signal_status(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(exit::ERROR)
}

/// The reason, as the JSON reports spell it.
pub fn loss_name(reason: LossReason) -> &'static str {
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
        LossReason::Revoked => {
            "revoked: the server no longer has it, force-released or its group purged"
        }
        LossReason::Released => "released",
        _ => "unknown reason",
    }
}

/// The spinner shown on a terminal while waiting, with `message`.
fn spinner(message: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {wide_msg}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar.set_message(output::message(message));
    bar
}

/// Updates `progress` with who holds the first held of `resources` and until when (server
/// time), asking the server about once a second. Never returns; without a progress line it
/// just waits.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
async fn show_holders(
    locks: &LockClient,
    waiting: &str,
    resources: &[String],
    progress: Option<&indicatif::ProgressBar>,
) -> Infallible {
    let Some(progress) = progress else {
        return std::future::pending().await;
    };
    loop {
        let mut message = format!("{waiting} (free now; asking again)");
        for resource in resources {
            match locks.status(&Filter::default().resource(resource)).await {
                Ok(held) => {
                    let named = (resources.len() > 1).then_some(resource.as_str());
                    if let Some(line) = describe_holders(waiting, named, &held) {
                        message = line;
                        break;
                    }
                }
                Err(error) => {
                    message = format!("{waiting} (cannot list the holders of {resource}: {error})");
                    break;
                }
            }
        }
        progress.set_message(output::message(&message));
        tokio::time::sleep(PROGRESS_POLL).await;
    }
}

/// One line: who holds a resource (`named`, when there are several), and until when (the
/// most useful first: the line is cut to the terminal's width); `None` if nobody does.
fn describe_holders(waiting: &str, named: Option<&str>, held: &[LockStatus]) -> Option<String> {
    let live: Vec<_> = held.iter().filter(|lock| !lock.is_expired()).collect();
    let first = live.first()?;
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
    let which = named
        .map(|name| format!("{} ", escape(name)))
        .unwrap_or_default();
    Some(format!(
        "{waiting}: {which}held by {} on {}, {until}, lock id {}{more}",
        escape(first.owner().unwrap_or("no owner")),
        escape(first.host().unwrap_or("unknown host")),
        escape(first.lock_id()),
    ))
}

/// Whether progress is shown while waiting: on a terminal, unless the wait is one attempt.
pub fn shows_progress(patience: Patience) -> bool {
    output::stderr_is_terminal() && !matches!(patience, Patience::Once)
}
