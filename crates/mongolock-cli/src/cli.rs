//! The command line: global options, subcommands, the checks clap cannot express, exit
//! codes, and the connection every command that needs a server opens.

use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::bail;
use clap::{Args, CommandFactory as _, Parser, Subcommand};
use mongolock::LockClient;

use crate::{output, uri};

/// Exit statuses, documented in `mongolock --help` and the README.
pub mod exit {
    /// A command failed (bad input, a database error).
    pub const ERROR: u8 = 1;
    /// The lock was not acquired, or leadership not won, in time (`exec` or `elect` with
    /// `--no-wait`, or `--wait` elapsed).
    pub const NOT_ACQUIRED: u8 = 75;
    /// No server was given: no `--uri` and no `MONGODB_URI`.
    pub const NO_SERVER: u8 = 78;
    /// The lease (or the leadership) was lost while the child ran; the child was stopped.
    pub const LEASE_LOST: u8 = 79;
    /// The demo found a broken promise.
    pub const DEMO_VIOLATION: u8 = 80;
}

/// The end of `mongolock --help`, and the manual pages' EXIT STATUS section.
pub const AFTER_HELP: &str = "\
Exit status:
  exec, elect  the child's own status (128+N if it was killed by signal N);
               127: COMMAND not found, 126: COMMAND could not be run
  75           the lock (elect: leadership) was not acquired in time
               (--no-wait, or --wait elapsed)
  78           no server given: pass --uri or set MONGODB_URI
  79           the lease (elect: leadership) was lost while the child ran;
               the child was stopped
  80           demo: a promise was broken
  1            any other error; 2: bad usage";

/// `mongolock completions --help`: what it does and how each shell loads the script.
const COMPLETIONS_ABOUT: &str = "\
Print the completion script for SHELL to stdout.

To install it:
  bash        mongolock completions bash > ~/.local/share/bash-completion/completions/mongolock
  zsh         mongolock completions zsh > \"${fpath[1]}/_mongolock\"
  fish        mongolock completions fish > ~/.config/fish/completions/mongolock.fish
  elvish      eval (mongolock completions elvish | slurp)
  powershell  mongolock completions powershell | Out-String | Invoke-Expression";

/// Distributed locks stored in MongoDB: run a command under a lock or while leading an
/// election, see who holds what and who leads, release what a dead host left.
#[derive(Debug, Parser)]
#[command(name = "mongolock", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// Options every command takes.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Connection and output options.
#[derive(Debug, Clone, Args)]
pub struct Global {
    /// The MongoDB connection string (a replica set for change-stream wake-ups).
    #[arg(long, env = "MONGODB_URI", global = true, hide_env_values = true)]
    pub uri: Option<String>,
    /// The database holding the lock collection.
    #[arg(long, default_value = "mongolock", global = true, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub db: String,
    /// The lock collection.
    #[arg(long, default_value = "locks", global = true, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub collection: String,
    /// Machine-readable output (one JSON document; `leader --watch`: one per line) instead
    /// of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Log what happens to stderr (repeat for more). Quiet by default.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Acquire a lock (on one resource, or on several at once), run COMMAND while it is held
    /// and kept alive, release it when COMMAND exits.
    ///
    /// The child gets MONGOLOCK_RESOURCE, MONGOLOCK_LOCK_ID and MONGOLOCK_FENCING_TOKEN. With
    /// several --resource, all are locked at once (all or nothing, exclusive) and the child
    /// gets MONGOLOCK_RESOURCES (sorted, comma-separated), MONGOLOCK_LOCK_ID (one for the
    /// set) and MONGOLOCK_FENCING_TOKENS (res=token,res=token) instead. The other MONGOLOCK_*
    /// variables of an outer mongolock are removed. If the lease (of any resource) is lost,
    /// the child gets SIGTERM, then SIGKILL after --kill-after.
    Exec(ExecArgs),
    /// Campaign to lead an election, run COMMAND while leading, resign when COMMAND exits.
    ///
    /// The child gets MONGOLOCK_ELECTION, MONGOLOCK_TERM (greater for every new leader: pass
    /// it with every write) and MONGOLOCK_LOCK_ID; the other MONGOLOCK_* variables of an outer
    /// mongolock are removed. If leadership is lost, the child gets SIGTERM, then SIGKILL
    /// after --kill-after.
    Elect(ElectArgs),
    /// Show who leads an election (value, term, lock id, host), or that nobody does; with
    /// --watch, every change until interrupted.
    Leader(LeaderArgs),
    /// List locks with their remaining TTL (computed by the server): live ones, those within
    /// their lock-delay, and expired ones not purged yet.
    Status(StatusArgs),
    /// Release every lock of a lock id.
    Unlock(UnlockArgs),
    /// Break every lock on a resource, whoever holds it (a lock left by a dead host).
    Release(ReleaseArgs),
    /// Remove expired locks (never a live one).
    Purge,
    /// Create the indexes the lock commands use (idempotent).
    Indexes(IndexesArgs),
    /// Watch workers contend for locks on the embedded emulator (or on the server of --uri
    /// or MONGODB_URI), with a crash and a network cut, then verify every promise.
    Demo(DemoArgs),
    /// Print the completion script for SHELL to stdout (how to install it: --help).
    #[command(long_about = COMPLETIONS_ABOUT)]
    Completions(CompletionsArgs),
    /// Print the manual page (roff) to stdout: mongolock(1), or SUBCOMMAND's page.
    ///
    /// Read it with `mongolock man | man -l -`, or install it with
    /// `mongolock man > /usr/local/share/man/man1/mongolock.1` (and
    /// `mongolock man exec > .../mongolock-exec.1` for each subcommand).
    Man(ManArgs),
}

/// `mongolock exec`.
#[derive(Debug, Clone, Args)]
pub struct ExecArgs {
    /// The resource to lock. Repeat it to lock several resources at once, all or nothing
    /// (exclusive only; a name must then not contain ',' or '=').
    #[arg(long, required = true, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub resource: Vec<String>,
    /// Take a shared lock instead of an exclusive one (one resource only).
    #[arg(long)]
    pub shared: bool,
    /// With --shared: at most this many holders at once (a semaphore). Every shared holder
    /// of the resource must give the same --max, or none.
    #[arg(long, requires = "shared", value_parser = clap::value_parser!(u32).range(1..))]
    pub max: Option<u32>,
    /// The lease's TTL: how long the lock outlives this process if it dies.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// How long to wait for the lock (default: as long as it takes).
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Fail at once (status 75) if the lock is held.
    #[arg(long)]
    pub no_wait: bool,
    /// A label stored with the lock, shown by `status` (default: the command's name and
    /// mongolock's pid).
    #[arg(long)]
    pub owner: Option<String>,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// After SIGTERM, how long the child has before SIGKILL.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub kill_after: Duration,
    /// The command and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// The lease settings `exec` and `elect` share beyond the TTL.
#[derive(Debug, Clone, Args)]
pub struct LeaseArgs {
    /// After a lease that ends without a release (this process stalled past its TTL, or an
    /// operator ran `release --force`), nobody gets the lock for this long more, by the
    /// server's clock: a holder that was only slow stops before the next one starts.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub lock_delay: Option<Duration>,
    /// Hold the lock under this lock id instead of a fresh one: give each host or service
    /// instance its own, stable one. Started again after a crash, within the TTL and with the
    /// same --ttl, it takes its lease back at once, with the same fencing token.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub lock_id: Option<String>,
}

impl ExecArgs {
    /// The resources named, sorted and without duplicates.
    pub fn resources(&self) -> Vec<String> {
        let sorted: std::collections::BTreeSet<&String> = self.resource.iter().collect();
        sorted.into_iter().cloned().collect()
    }

    /// What is wrong with these arguments that clap cannot see: `--shared` with several
    /// resources, or a resource of a set whose name the child's environment cannot list.
    pub fn usage_error(&self) -> Option<String> {
        let resources = self.resources();
        if resources.len() < 2 {
            return None;
        }
        if self.shared {
            return Some(
                "--shared takes one --resource: several resources are locked exclusively, \
                 all at once"
                    .to_owned(),
            );
        }
        resources
            .iter()
            .find(|name| name.contains([',', '=']))
            .map(|name| {
                format!(
                    "--resource {name:?}: with several resources, a name must not contain ',' \
                     or '=' (MONGOLOCK_RESOURCES and MONGOLOCK_FENCING_TOKENS list them with \
                     those)"
                )
            })
    }
}

/// `mongolock elect`.
#[derive(Debug, Clone, Args)]
pub struct ElectArgs {
    /// The election: the resource whose exclusive holder leads.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub name: String,
    /// The value advertised while leading (an address, a host name), shown by `leader`.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub value: String,
    /// The leadership's TTL: how long a leader that died keeps the others from leading.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// How long to wait to lead (default: as long as it takes).
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Fail at once (status 75) if someone else leads.
    #[arg(long)]
    pub no_wait: bool,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// After SIGTERM, how long the child has before SIGKILL.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub kill_after: Duration,
    /// The command and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// `mongolock leader`.
#[derive(Debug, Clone, Args)]
pub struct LeaderArgs {
    /// The election.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub name: String,
    /// Print the leader now and then every change, until interrupted (SIGINT or SIGTERM end
    /// it with status 0).
    #[arg(long)]
    pub watch: bool,
}

/// `mongolock status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Only this resource.
    #[arg(long)]
    pub resource: Option<String>,
    /// Only this lock id.
    #[arg(long)]
    pub lock_id: Option<String>,
    /// Only this owner.
    #[arg(long)]
    pub owner: Option<String>,
}

/// `mongolock indexes`.
#[derive(Debug, Clone, Args)]
pub struct IndexesArgs {
    /// How long an idle resource document is kept before the TTL index deletes it (default
    /// one day, the library's DEFAULT_RETENTION). Give the one the applications set with
    /// `with_retention`: the server refuses to change it on an existing collection (drop the
    /// index idleSince_ttl first).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub retention: Option<std::time::Duration>,
}

/// `mongolock unlock`.
#[derive(Debug, Clone, Args)]
pub struct UnlockArgs {
    /// The lock id whose locks to release.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub lock_id: String,
}

/// `mongolock release`.
#[derive(Debug, Clone, Args)]
pub struct ReleaseArgs {
    /// The resource whose locks to break.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub resource: String,
    /// Required: this ends a holder's lock without its consent.
    #[arg(long, required = true)]
    pub force: bool,
    /// Do not ask for confirmation on a terminal.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `mongolock completions`.
#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `mongolock man`.
#[derive(Debug, Clone, Args)]
pub struct ManArgs {
    /// A subcommand whose page to print (mongolock-SUBCOMMAND(1)) instead of mongolock(1).
    pub subcommand: Option<String>,
}

/// `mongolock demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// How many workers contend.
    #[arg(long, default_value_t = 6)]
    pub workers: usize,
    /// How long the demo runs, in seconds (at most a day).
    #[arg(long, default_value_t = 8)]
    pub seconds: u64,
}

impl Cli {
    /// Checks what clap cannot express; a usage error (status 2, with the subcommand's
    /// usage) if something is wrong.
    pub fn check(&self) -> Result<(), clap::Error> {
        let (subcommand, kind, message) = match &self.command {
            Command::Exec(args) => match args.usage_error() {
                Some(message) => ("exec", clap::error::ErrorKind::ArgumentConflict, message),
                None => return Ok(()),
            },
            Command::Man(ManArgs {
                subcommand: Some(name),
            }) if !page_names().contains(name) => (
                "man",
                clap::error::ErrorKind::InvalidValue,
                format!(
                    "no page for {name:?}: [SUBCOMMAND] is one of {}",
                    page_names().join(", ")
                ),
            ),
            _ => return Ok(()),
        };
        let mut command = Cli::command();
        command.build();
        let error = match command.find_subcommand_mut(subcommand) {
            Some(found) => found.error(kind, message),
            None => command.error(kind, message),
        };
        Err(error)
    }
}

/// The command line as clap sees it, for the generated manual pages: built
/// (global options copied into every subcommand, each subcommand named `mongolock-NAME`),
/// without clap's `help` subcommand.
pub fn definitions() -> clap::Command {
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    command
}

/// The subcommands that have a manual page of their own: every visible one.
pub fn page_names() -> Vec<String> {
    definitions()
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .map(|sub| sub.get_name().to_owned())
        .collect()
}

/// Logs to stderr at the level asked for with `-v`; nothing by default. Each event is
/// written scrubbed and escaped ([`output::Logs`]), without colours (an escape sequence in
/// a field could not be told from the formatter's own).
pub fn init_logging(global: &Global) {
    let level = match global.verbose {
        0 => return,
        1 => "mongolock=info",
        2 => "mongolock=debug",
        _ => "debug",
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(level))
        .with_writer(output::Logs)
        .with_ansi(false)
        .try_init();
}

/// Whether stderr is a terminal (progress lines and prompts only then).
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// The error for a command that needs a server and has none.
#[derive(Debug)]
pub struct NoServer;

impl std::fmt::Display for NoServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "no MongoDB server given: pass --uri mongodb://HOST/?replicaSet=NAME \
             or set MONGODB_URI (try `mongolock demo` for one without a server)",
        )
    }
}

impl std::error::Error for NoServer {}

/// The driver client of this run, kept so that [`close`] can shut it down before the runtime
/// ends.
static DRIVER: OnceLock<mongodb::Client> = OnceLock::new();

/// Shuts down the driver client opened by [`connect`], if any, without waiting for open
/// cursors (the command is done with them), and for at most [`CLOSE_LIMIT`]. Without this,
/// the driver's own cleanup on drop (ending sessions) could run while the runtime shuts down,
/// after its connection pool had stopped, and panic in a background task.
pub async fn close() {
    if let Some(client) = DRIVER.get() {
        let shutdown = client.clone().shutdown().immediate(true);
        if tokio::time::timeout(CLOSE_LIMIT, shutdown).await.is_err() {
            tracing::debug!("the driver did not shut down in time; leaving it to the exit");
        }
    }
}

/// An error and its causes on one line, as `{:#}` joins them, except that a driver error is
/// told by its kind (for a server's refusal: the code, its name and the server's message)
/// rather than with the labels and the raw reply its own `Display` adds.
pub fn describe(error: &anyhow::Error) -> String {
    let causes: Vec<String> = error
        .chain()
        .map(
            |cause| match cause.downcast_ref::<mongodb::error::Error>() {
                Some(driver) => driver.kind.to_string(),
                None => cause.to_string(),
            },
        )
        .collect();
    causes.join(": ")
}

/// The longest [`close`] waits for the driver to shut down.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);

/// Connects to the server named by `--uri` or `MONGODB_URI`, and returns the lock client on
/// `--db` / `--collection`. A connection string that does not parse is reported without
/// its user info ([`uri::client`]).
pub async fn connect(global: &Global) -> anyhow::Result<LockClient> {
    let Some(uri) = global.uri.as_deref().filter(|u| !u.is_empty()) else {
        bail!(NoServer);
    };
    let client = uri::client(uri).await?;
    let _ = DRIVER.set(client.clone());
    let locks = LockClient::new(client.database(&global.db).collection(&global.collection));
    // A server that cannot run the commands is said so first, in one line, whatever the
    // command; any other failure is left to the command itself, which words it.
    if let Err(error) = locks.check_server().await
        && matches!(error.kind(), mongolock::ErrorKind::UnsupportedServer { .. })
    {
        return Err(error.into());
    }
    Ok(locks)
}
