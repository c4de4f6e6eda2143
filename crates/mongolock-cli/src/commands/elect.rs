//! `mongolock elect` and `mongolock leader`: leader election, with the library's
//! [`Election`].
//!
//! `elect` campaigns (waiting in line, as `--wait`/`--no-wait` say), then runs the child
//! while leading, as [`child`] describes: its exit status passed through, signals forwarded,
//! stopped (status 79) if leadership is lost; it resigns when the child exits, so that the
//! next campaigner leads at once. The child gets `MONGOLOCK_ELECTION` (the name),
//! `MONGOLOCK_TERM` (the leadership's term: greater for every new leader, to pass with every
//! write the leader makes) and `MONGOLOCK_LOCK_ID`; the variables `exec` sets
//! (`MONGOLOCK_RESOURCE`, `MONGOLOCK_FENCING_TOKEN` and the like), inherited from an outer
//! mongolock, are removed.
//!
//! `leader` reads the leader once, or with `--watch` follows [`Election::observe`] and
//! prints every change until SIGINT or SIGTERM.

use std::pin::pin;
use std::process::ExitCode;

use anyhow::Context as _;
use futures_util::StreamExt as _;
use mongolock::{Election, Leader};
use serde::Serialize;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::{ElectArgs, Global, LeaderArgs, exit};
use crate::commands::child::{
    self, Child, Forwarded, Held, Patience, RunReport, Waited, finish, signal_status,
};
use crate::connection;
use crate::output::{complain, escape};

/// The JSON document `elect --json` prints on stdout when it is done.
#[derive(Debug, Serialize)]
struct ElectReport {
    /// The election's name.
    election: String,
    /// The value advertised while leading.
    value: String,
    /// Whether this process led (false: the exit status is 75, or 128+N after a signal
    /// while waiting).
    elected: bool,
    /// The term it led in.
    term: Option<i64>,
    /// The lock id it led with.
    lock_id: Option<String>,
    /// How the child ran, and mongolock's exit status.
    #[serde(flatten)]
    run: RunReport,
    /// Whether this process resigned (false if leadership was lost, or the resignation
    /// failed and the TTL will end it).
    resigned: bool,
}

/// One line of `leader --json`.
#[derive(Debug, Serialize)]
struct LeaderLine {
    /// The election's name.
    election: String,
    /// Whether someone leads; the other fields are `null` if not.
    has_leader: bool,
    /// The value the leader advertises.
    value: Option<String>,
    /// The leader's term.
    term: Option<i64>,
    /// The lock id the leader holds the election with.
    lock_id: Option<String>,
    /// The leader's host, as recorded.
    host: Option<String>,
}

impl LeaderLine {
    /// The line for `leader` of `election`.
    fn new(election: &str, leader: Option<&Leader>) -> Self {
        LeaderLine {
            election: election.to_owned(),
            has_leader: leader.is_some(),
            value: leader.map(|l| l.value().to_owned()),
            term: leader.map(Leader::term),
            lock_id: leader.map(|l| l.lock_id().to_owned()),
            host: leader.and_then(|l| l.host().map(str::to_owned)),
        }
    }
}

/// Runs `elect` (its arguments checked by `Cli::check`): campaigns, runs the child while
/// leading, resigns, and returns the exit status (see the crate's `AFTER_HELP`).
///
/// # Cancel safety
///
/// Not meant to be cancelled (it is the whole process); if it is dropped, the child's
/// process group is killed and leadership resigned in the background.
pub async fn elect(global: &Global, args: ElectArgs) -> anyhow::Result<ExitCode> {
    // The arguments were checked before (`Cli::check`).
    if args.command.is_empty() {
        anyhow::bail!("no COMMAND given after --");
    }
    let name = args.name.clone();
    let locks = connection::connect(global).await?;
    if !args.no_wait {
        child::check_reachable(&locks, std::slice::from_ref(&name), |name| {
            format!("cannot campaign in {name}")
        })
        .await?;
    }
    // Installed before waiting: a Ctrl-C while waiting withdraws the campaign cleanly.
    let mut signals = Forwarded::install()?;

    let mut election = locks.election(name.clone()).ttl(args.ttl);
    if let Some(delay) = args.lease.lock_delay {
        election = election.lock_delay(delay);
    }
    if let Some(lock_id) = &args.lease.lock_id {
        election = election.lock_id(lock_id.clone());
    }
    let patience = Patience::new(args.no_wait, args.wait);
    let mut report = ElectReport {
        election: name.clone(),
        value: args.value.clone(),
        elected: false,
        term: None,
        lock_id: None,
        run: RunReport::default(),
        resigned: false,
    };

    tracing::info!(election = %name, %patience, "campaigning");
    let waiting = format!("waiting to lead {}", escape(&name));
    let names = [name.clone()];
    let progress = child::shows_progress(patience).then_some((waiting.as_str(), &names[..]));
    let campaign = async {
        let value = args.value.clone();
        match patience {
            Patience::Once => election.try_campaign(value).await,
            Patience::Upto(wait) => election.campaign_timeout(value, wait).await,
            Patience::Forever => election.campaign(value).await.map(Some),
        }
    };
    let leadership = match child::wait_for(&locks, campaign, &mut signals, progress).await {
        Ok(Waited::Acquired(leadership)) => leadership,
        Ok(Waited::NotInTime) => {
            complain!("{name} is led by others: not leading{}", patience.within());
            report.run.exit_status = exit::NOT_ACQUIRED;
            return finish(&locks, global, &report, exit::NOT_ACQUIRED).await;
        }
        Ok(Waited::Signal(signal)) => {
            complain!("{signal} received while waiting to lead {name}: gave up");
            let status = signal_status(signal as i32);
            report.run.exit_status = status;
            return finish(&locks, global, &report, status).await;
        }
        Err(error) => {
            locks.shutdown().await;
            return Err(anyhow::Error::new(error).context(format!("cannot campaign in {name}")));
        }
    };
    let lock_id = leadership.guard().lock_id().to_owned();
    tracing::info!(election = %name, term = leadership.term(), lock_id = %lock_id, "leading");
    report.elected = true;
    report.term = Some(leadership.term());
    report.lock_id = Some(lock_id.clone());
    let to_run = Child {
        command: &args.command,
        env: vec![
            ("MONGOLOCK_ELECTION", name.clone()),
            ("MONGOLOCK_TERM", leadership.term().to_string()),
            ("MONGOLOCK_LOCK_ID", lock_id),
        ],
        kill_after: args.kill_after,
    };
    let outcome = child::run_under(
        Held::Leading(leadership),
        to_run,
        &mut signals,
        &mut report.run.forwarded_signals,
    )
    .await?;
    report.run.record(&outcome);
    report.resigned = outcome.released;
    finish(&locks, global, &report, outcome.status).await
}

/// Runs `leader`: prints the leader (or that nobody leads) once, or with `--watch` every
/// change until SIGINT or SIGTERM, then exits 0.
///
/// # Cancel safety
///
/// Reads only.
pub async fn leader(global: &Global, args: LeaderArgs) -> anyhow::Result<ExitCode> {
    let locks = connection::connect(global).await?;
    let election = locks.election(args.name.clone());
    let cannot = || format!("cannot read the leader of {}", args.name);
    if !args.watch {
        let leader = election.leader().await.with_context(cannot)?;
        print_leader(global, &election, leader.as_ref())?;
        return Ok(ExitCode::SUCCESS);
    }
    // Installed before the first read: an interruption ends the watch with status 0.
    let mut interrupt =
        signal(SignalKind::interrupt()).context("cannot install a signal handler")?;
    let mut terminate =
        signal(SignalKind::terminate()).context("cannot install a signal handler")?;
    let mut changes = pin!(election.observe());
    let mut printed = false;
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(leader)) => {
                    print_leader(global, &election, leader.as_ref())?;
                    printed = true;
                }
                // The first read failing is an error (a bad name, a document that is not a
                // lock, a server that cannot be reached); later ones are reported, and the
                // observer reads again after a pause.
                Some(Err(error)) if !printed => {
                    return Err(anyhow::Error::new(error).context(cannot()));
                }
                Some(Err(error)) => {
                    complain!("{} ({error}); reading again", cannot());
                }
                None => break,
            },
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints `leader` of `election`: one line of text, or one JSON document on one line.
fn print_leader(
    global: &Global,
    election: &Election,
    leader: Option<&Leader>,
) -> anyhow::Result<()> {
    if global.json {
        println!(
            "{}",
            serde_json::to_string(&LeaderLine::new(election.name(), leader))?
        );
        return Ok(());
    }
    // Every string is stored by whoever campaigned: escaped, so that it stays on its line.
    let name = escape(election.name());
    match leader {
        Some(leader) => println!(
            "{name}: led by {} (term {}, lock id {}, host {})",
            match leader.value() {
                "" => "(no value)".into(),
                value => escape(value),
            },
            leader.term(),
            escape(leader.lock_id()),
            escape(leader.host().unwrap_or("unknown")),
        ),
        None => println!("{name}: nobody leads"),
    }
    Ok(())
}
