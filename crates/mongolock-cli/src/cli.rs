//! The command line: global options, subcommands, the checks clap cannot express, and exit
//! codes. The connection every command that needs a server opens is in `connection.rs`.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

use crate::checks;

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
  1            any other error (the server cannot be reached, a database error)
  2            bad usage, found before connecting";

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
    /// How long to wait for the first connection to the server before giving up, with the
    /// host and the cause (connection refused, name not found). It sets the driver's
    /// serverSelectionTimeoutMS and connectTimeoutMS [default: those of the URI, else 10s].
    #[arg(long, global = true, value_name = "DURATION", value_parser = checks::duration, allow_hyphen_values = true)]
    pub connect_timeout: Option<Duration>,
    /// The database holding the lock collection (a MongoDB database name: at most 63
    /// bytes, none of / \ . space " $ * < > : | ?).
    #[arg(long, default_value = "mongolock", global = true)]
    pub db: String,
    /// The lock collection (no $, not system.*).
    #[arg(long, default_value = "locks", global = true)]
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
    /// or MONGODB_URI), with a crash and a network cut, then a primary's step-down on an
    /// emulated three-member set (the emulator only), and verify every promise.
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
    /// The resource to lock (1 to 512 bytes). Repeat it to lock several resources at once,
    /// all or nothing (exclusive only; a name must then not contain ',' or '=').
    #[arg(long, required = true)]
    pub resource: Vec<String>,
    /// Take a shared lock instead of an exclusive one (one resource only).
    #[arg(long)]
    pub shared: bool,
    /// With --shared: at most this many holders at once (a semaphore). Every shared holder
    /// of the resource must give the same --max, or none.
    #[arg(long, requires = "shared", value_parser = clap::value_parser!(u32).range(1..))]
    pub max: Option<u32>,
    /// The lease's TTL: how long the lock outlives this process if it dies (from 50ms to
    /// 36500d, 100 years of 365 days).
    #[arg(long, default_value = "30s", value_parser = checks::duration, allow_hyphen_values = true)]
    pub ttl: Duration,
    /// How long to wait for the lock (default: as long as it takes).
    #[arg(long, value_parser = checks::duration, allow_hyphen_values = true, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Fail at once (status 75) if the lock is held.
    #[arg(long)]
    pub no_wait: bool,
    /// A label stored with the lock, shown by `status` (at most 1024 bytes; default: the
    /// command's name and mongolock's pid).
    #[arg(long)]
    pub owner: Option<String>,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// Keep the lock at least this long after it was granted, by the server's clock, even
    /// when the command ends sooner: a job that must run at most once per period across
    /// hosts (`--min-hold 55m` for an hourly job; at most 36500d). A `mongolock` that dies
    /// first leaves the lock to its TTL and --lock-delay.
    #[arg(long, value_parser = checks::duration, allow_hyphen_values = true)]
    pub min_hold: Option<Duration>,
    /// After SIGTERM, how long the child has before SIGKILL.
    #[arg(long, default_value = "10s", value_parser = checks::duration, allow_hyphen_values = true)]
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
    /// server's clock: a holder that was only slow stops before the next one starts (at
    /// most 36500d).
    #[arg(long, value_parser = checks::duration, allow_hyphen_values = true)]
    pub lock_delay: Option<Duration>,
    /// Hold the lock under this lock id instead of a fresh one: give each host or service
    /// instance its own, stable one. Started again after a crash, within the TTL and with the
    /// same --ttl, it takes its lease back at once, with the same fencing token (1 to 512
    /// bytes).
    #[arg(long)]
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
                    "--resource {}: with several resources, a name must not contain ',' \
                     or '=' (MONGOLOCK_RESOURCES and MONGOLOCK_FENCING_TOKENS list them with \
                     those)",
                    checks::shown(name)
                )
            })
    }
}

/// `mongolock elect`.
#[derive(Debug, Clone, Args)]
pub struct ElectArgs {
    /// The election: the resource whose exclusive holder leads (1 to 512 bytes).
    #[arg(long)]
    pub name: String,
    /// The value advertised while leading (an address, a host name), shown by `leader` (1
    /// to 1024 bytes).
    #[arg(long)]
    pub value: String,
    /// The leadership's TTL: how long a leader that died keeps the others from leading
    /// (from 50ms to 36500d, 100 years of 365 days).
    #[arg(long, default_value = "30s", value_parser = checks::duration, allow_hyphen_values = true)]
    pub ttl: Duration,
    /// How long to wait to lead (default: as long as it takes).
    #[arg(long, value_parser = checks::duration, allow_hyphen_values = true, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Fail at once (status 75) if someone else leads.
    #[arg(long)]
    pub no_wait: bool,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// After SIGTERM, how long the child has before SIGKILL.
    #[arg(long, default_value = "10s", value_parser = checks::duration, allow_hyphen_values = true)]
    pub kill_after: Duration,
    /// The command and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// `mongolock leader`.
#[derive(Debug, Clone, Args)]
pub struct LeaderArgs {
    /// The election (1 to 512 bytes).
    #[arg(long)]
    pub name: String,
    /// Print the leader now and then every change, until interrupted (SIGINT or SIGTERM end
    /// it with status 0).
    #[arg(long)]
    pub watch: bool,
}

/// `mongolock status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Only this resource (1 to 512 bytes).
    #[arg(long)]
    pub resource: Option<String>,
    /// Only this lock id (1 to 512 bytes).
    #[arg(long)]
    pub lock_id: Option<String>,
    /// Only this owner (at most 1024 bytes).
    #[arg(long)]
    pub owner: Option<String>,
}

/// `mongolock indexes`.
#[derive(Debug, Clone, Args)]
pub struct IndexesArgs {
    /// How long an idle resource document is kept before the TTL index deletes it (default
    /// one day, the library's DEFAULT_RETENTION; from 1s to 2147483647s). Give the one the
    /// applications set with `LockClientBuilder::retention`. The server refuses to change it on a
    /// collection whose TTL index has another: the message gives the mongosh command that
    /// changes it.
    #[arg(long, value_parser = checks::duration, allow_hyphen_values = true)]
    pub retention: Option<std::time::Duration>,
}

/// `mongolock unlock`.
#[derive(Debug, Clone, Args)]
pub struct UnlockArgs {
    /// The lock id whose locks to release (1 to 512 bytes).
    #[arg(long)]
    pub lock_id: String,
}

/// `mongolock release`.
#[derive(Debug, Clone, Args)]
pub struct ReleaseArgs {
    /// The resource whose locks to break (1 to 512 bytes).
    #[arg(long)]
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

/// The fewest workers of the demo: one ordinary worker, one that is cut off (an ordinary
/// one with `--uri`, where there is no proxy), one that crashes.
pub const DEMO_MIN_WORKERS: usize = 3;
/// The most workers of the demo.
pub const DEMO_MAX_WORKERS: usize = 64;
/// The demo's longest run: a day.
pub const DEMO_MAX_SECONDS: u64 = 24 * 60 * 60;

impl DemoArgs {
    /// What is wrong with these arguments, if anything: a usage error, found before
    /// anything starts.
    pub fn usage_error(&self) -> Option<String> {
        if !(DEMO_MIN_WORKERS..=DEMO_MAX_WORKERS).contains(&self.workers) {
            return Some(format!(
                "--workers must be between {DEMO_MIN_WORKERS} and {DEMO_MAX_WORKERS} (one crashes, one is cut off, the others work)"
            ));
        }
        if self.seconds > DEMO_MAX_SECONDS {
            return Some(format!(
                "--seconds must be at most {DEMO_MAX_SECONDS} (a day)"
            ));
        }
        None
    }
}

impl Cli {
    /// Checks what clap cannot express, before anything connects: the values the library
    /// or the server would refuse ([`checks`]), and the combinations clap cannot see. A usage
    /// error (status 2, with the subcommand's usage) if something is wrong.
    pub fn check(&self) -> Result<(), clap::Error> {
        use clap::error::ErrorKind;
        let (subcommand, kind, message) = match self.problem() {
            Ok(()) => return Ok(()),
            Err(Problem::Conflict(name, message)) => (name, ErrorKind::ArgumentConflict, message),
            Err(Problem::Invalid(name, message)) => (name, ErrorKind::ValueValidation, message),
        };
        let mut command = command();
        let error = match command.find_subcommand_mut(subcommand) {
            Some(found) => found.error(kind, message),
            None => command.error(kind, message),
        };
        Err(error)
    }

    /// The first thing wrong with the command line that clap cannot see.
    fn problem(&self) -> Result<(), Problem> {
        let name = self.command.name();
        let invalid = |message: String| Problem::Invalid(name, message);
        if self.command.needs_server() {
            checks::database(&self.global.db).map_err(invalid)?;
            checks::collection(&self.global.db, &self.global.collection).map_err(invalid)?;
        }
        if self
            .global
            .connect_timeout
            .is_some_and(|limit| limit.is_zero())
        {
            return Err(invalid(
                "--connect-timeout must be longer than zero".to_owned(),
            ));
        }
        match &self.command {
            Command::Exec(args) => {
                if let Some(message) = args.usage_error() {
                    return Err(Problem::Conflict(name, message));
                }
                for resource in &args.resource {
                    checks::id("--resource", resource).map_err(invalid)?;
                }
                args.lease.check().map_err(invalid)?;
                if let Some(owner) = &args.owner {
                    checks::label("--owner", owner).map_err(invalid)?;
                }
                checks::lease_ttl("--ttl", args.ttl).map_err(invalid)?;
                if let Some(hold) = args.min_hold {
                    checks::at_most_max("--min-hold", hold).map_err(invalid)?;
                }
                checks::details(args.owner.as_deref(), args.ttl, args.lease.lock_delay)
                    .map_err(invalid)
            }
            Command::Elect(args) => {
                checks::id("--name", &args.name).map_err(invalid)?;
                if args.value.is_empty() {
                    return Err(invalid("--value must not be empty".to_owned()));
                }
                checks::label("--value", &args.value).map_err(invalid)?;
                args.lease.check().map_err(invalid)?;
                checks::lease_ttl("--ttl", args.ttl).map_err(invalid)?;
                checks::details(None, args.ttl, args.lease.lock_delay).map_err(invalid)
            }
            Command::Leader(args) => checks::id("--name", &args.name).map_err(invalid),
            Command::Status(args) => {
                if let Some(resource) = &args.resource {
                    checks::id("--resource", resource).map_err(invalid)?;
                }
                if let Some(lock_id) = &args.lock_id {
                    checks::id("--lock-id", lock_id).map_err(invalid)?;
                }
                match &args.owner {
                    Some(owner) => checks::label("--owner", owner).map_err(invalid),
                    None => Ok(()),
                }
            }
            Command::Unlock(args) => checks::id("--lock-id", &args.lock_id).map_err(invalid),
            Command::Release(args) => checks::id("--resource", &args.resource).map_err(invalid),
            Command::Indexes(IndexesArgs {
                retention: Some(retention),
            }) => checks::retention(*retention).map_err(invalid),
            Command::Demo(args) => match args.usage_error() {
                Some(message) => Err(invalid(message)),
                None => Ok(()),
            },
            Command::Man(ManArgs {
                subcommand: Some(page),
            }) if !page_names().contains(page) => Err(invalid(format!(
                "no page for {}: [SUBCOMMAND] is one of {}",
                checks::shown(page),
                page_names().join(", ")
            ))),
            _ => Ok(()),
        }
    }
}

/// Something wrong with the command line, with the subcommand it concerns.
enum Problem {
    /// Arguments that do not go together.
    Conflict(&'static str, String),
    /// A value that cannot be used.
    Invalid(&'static str, String),
}

impl LeaseArgs {
    /// Checks `--lock-id` and `--lock-delay`.
    fn check(&self) -> Result<(), String> {
        if let Some(lock_id) = &self.lock_id {
            checks::id("--lock-id", lock_id)?;
        }
        match self.lock_delay {
            Some(delay) => checks::lock_delay(delay),
            None => Ok(()),
        }
    }
}

impl Command {
    /// The subcommand's name, as typed.
    fn name(&self) -> &'static str {
        match self {
            Command::Exec(_) => "exec",
            Command::Elect(_) => "elect",
            Command::Leader(_) => "leader",
            Command::Status(_) => "status",
            Command::Unlock(_) => "unlock",
            Command::Release(_) => "release",
            Command::Purge => "purge",
            Command::Indexes(_) => "indexes",
            Command::Demo(_) => "demo",
            Command::Completions(_) => "completions",
            Command::Man(_) => "man",
        }
    }

    /// Whether the subcommand talks to a server (the demo may: with --uri).
    fn needs_server(&self) -> bool {
        !matches!(self, Command::Completions(_) | Command::Man(_))
    }
}

/// The subcommands that need no server: `--uri`, `--connect-timeout`, `--db` and
/// `--collection` are not offered there (hidden from their help, manual pages and
/// completions; still accepted, and ignored).
const OFFLINE: &[&str] = &["completions", "man"];

/// The options of a server, hidden where [`OFFLINE`] says.
const SERVER_OPTIONS: &[&str] = &["uri", "connect_timeout", "db", "collection"];

/// The command line as it is parsed, built (global options copied into every
/// subcommand), with the server's options hidden from the subcommands that need no server.
pub fn command() -> clap::Command {
    built(Cli::command())
}

/// `command` built, with the server's options hidden where [`OFFLINE`] says: those
/// subcommands get hidden copies of them first, which clap then does not replace with the
/// global ones (changing an argument after the build would leave clap's lookup stale).
fn built(mut command: clap::Command) -> clap::Command {
    let hidden: Vec<clap::Arg> = (command.get_arguments())
        .filter(|arg| SERVER_OPTIONS.contains(&arg.get_id().as_str()))
        .map(|arg| arg.clone().hide(true))
        .collect();
    for name in OFFLINE {
        command = command.mut_subcommand(name, |sub| sub.args(hidden.clone()));
    }
    command.build();
    command
}

/// The command line for the completion scripts: as [`command`], but the server's options are
/// not offered at all by the subcommands [`OFFLINE`] names (the generators list hidden
/// options too). They are made options of the top level and of each other subcommand
/// instead of global ones, which completes the same everywhere else.
pub fn completion_definitions() -> clap::Command {
    let mut command = Cli::command();
    let copies: Vec<clap::Arg> = (command.get_arguments())
        .filter(|arg| SERVER_OPTIONS.contains(&arg.get_id().as_str()))
        .cloned()
        .collect();
    for option in SERVER_OPTIONS {
        command = command.mut_arg(option, |arg| arg.global(false));
    }
    let online: Vec<String> = (command.get_subcommands())
        .map(|sub| sub.get_name().to_owned())
        .filter(|name| !OFFLINE.contains(&name.as_str()))
        .collect();
    for name in online {
        command = command.mut_subcommand(name, |sub| sub.args(copies.clone()));
    }
    command.build();
    command
}

/// Parses the command line `args` (the program's name first).
///
/// # Errors
///
/// Clap's usage error, with two changes: its usage line is the one a user types even when
/// `MONGODB_URI` is set (clap lists an option given by the environment as if it had been
/// typed, and required), and a COMMAND given without `--` before it gets a tip saying so.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Cli, clap::Error> {
    let args: Vec<OsString> = args.into_iter().collect();
    let error = match command().try_get_matches_from(&args) {
        Ok(matches) => return Cli::from_arg_matches(&matches),
        Err(error) => error,
    };
    // The same arguments without the environment's URI fail the same way (the URI is never
    // required); only the usage line changes.
    let error = built(Cli::command().mut_arg("uri", |uri| uri.env(None)))
        .try_get_matches_from(&args)
        .err()
        .filter(|again| again.kind() == error.kind())
        .unwrap_or(error);
    Err(hint_dashes(error, &args))
}

/// `error` with a tip when it is about an argument that looks like a COMMAND given to `exec`
/// or `elect` without `--` before it.
fn hint_dashes(mut error: clap::Error, args: &[OsString]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue};
    let subcommand = args.iter().find_map(|arg| match arg.to_str() {
        Some(name @ ("exec" | "elect")) => Some(name),
        _ => None,
    });
    let unexpected = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.clone(),
        _ => return error,
    };
    let Some(subcommand) = subcommand else {
        return error;
    };
    if error.kind() != clap::error::ErrorKind::UnknownArgument
        || unexpected.starts_with('-')
        || args.iter().any(|arg| arg == "--")
    {
        return error;
    }
    let tip = format!(
        "put -- before the command to run: mongolock {subcommand} [OPTIONS] -- {unexpected} ..."
    );
    let mut tips = match error.get(ContextKind::Suggested) {
        Some(ContextValue::StyledStrs(tips)) => tips.clone(),
        _ => Vec::new(),
    };
    tips.push(tip.into());
    error.insert(ContextKind::Suggested, ContextValue::StyledStrs(tips));
    error
}

/// The command line as clap sees it, for the generated manual pages: built
/// (global options copied into every subcommand, each subcommand named `mongolock-NAME`),
/// without clap's `help` subcommand.
pub fn definitions() -> clap::Command {
    built(Cli::command().disable_help_subcommand(true))
}

/// The subcommands that have a manual page of their own: every visible one.
pub fn page_names() -> Vec<String> {
    definitions()
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .map(|sub| sub.get_name().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_without_dashes_gets_a_tip() {
        let args = ["mongolock", "exec", "--resource", "r", "sleep", "60"].map(OsString::from);
        let error = parse(args).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("put -- before the command to run"),
            "{error}"
        );
        let args = ["mongolock", "status", "now"].map(OsString::from);
        let error = parse(args).unwrap_err();
        assert!(!error.to_string().contains("put --"), "{error}");
    }
}
