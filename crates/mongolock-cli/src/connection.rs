//! The connection every command that needs a server opens ([`connect`]), what is said when
//! there is none or it cannot be reached, and the driver's shutdown at the end of a run
//! ([`close`], [`hurry`]).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::bail;
use mongolock::LockClient;

use crate::cli::Global;
use crate::uri;

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
        let limit = if hurried() {
            HURRIED_CLOSE_LIMIT
        } else {
            CLOSE_LIMIT
        };
        if tokio::time::timeout(limit, shutdown).await.is_err() {
            tracing::debug!("the driver did not shut down in time; leaving it to the exit");
        }
    }
}

/// The longest [`close`] waits for the driver to shut down.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);

/// The longest [`close`] waits for the driver to shut down after [`hurry`].
const HURRIED_CLOSE_LIMIT: Duration = Duration::from_millis(500);

/// Set by [`hurry`].
static HURRY: AtomicBool = AtomicBool::new(false);

/// Tells [`close`] to wait for the driver only briefly ([`HURRIED_CLOSE_LIMIT`]): there is
/// nothing left to protect (a lease was lost, or its release failed) and the server may not
/// answer.
pub fn hurry() {
    HURRY.store(true, Ordering::Relaxed);
}

/// Whether [`hurry`] was called.
pub fn hurried() -> bool {
    HURRY.load(Ordering::Relaxed)
}

/// Connects to the server named by `--uri` or `MONGODB_URI`, and returns the lock client on
/// `--db` / `--collection`. A connection string that does not parse is reported without
/// its user info ([`uri::options`]); a server that cannot be reached within
/// `--connect-timeout` is reported with its hosts and the cause ([`Unreachable`]).
///
/// # Cancel safety
///
/// Cancel safe: nothing is written.
pub async fn connect(global: &Global) -> anyhow::Result<LockClient> {
    let Some(uri) = global.uri.as_deref().filter(|u| !u.is_empty()) else {
        bail!(NoServer);
    };
    let options = uri::options(uri, global.connect_timeout).await?;
    let hosts = (options.hosts.iter())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let limit = (options.server_selection_timeout).unwrap_or(uri::DEFAULT_CONNECT_TIMEOUT);
    let client = mongodb::Client::with_options(options).map_err(|error| {
        anyhow::Error::new(error).context(format!(
            "cannot use the connection string {}",
            uri::redacted(uri)
        ))
    })?;
    let _ = DRIVER.set(client.clone());
    let locks = LockClient::new(client.database(&global.db).collection(&global.collection));
    if let Err(error) = reach(&client, &hosts, limit).await {
        // A server the driver refuses at once (older than 4.4, by its wire version) was
        // reached, but cannot run the commands: the library's check says so, in its words.
        let answered = error
            .downcast_ref::<Unreachable>()
            .is_some_and(|unreachable| matches!(unreachable.cause, Causes::Message(_)));
        if answered
            && let Ok(Err(unsupported)) =
                tokio::time::timeout(UNSUPPORTED_CHECK_LIMIT, locks.check_server()).await
            && matches!(
                unsupported.kind(),
                mongolock::ErrorKind::UnsupportedServer { .. }
            )
        {
            return Err(unsupported.into());
        }
        return Err(error);
    }
    // A server that cannot run the commands is said so first, in one line, whatever the
    // command; any other failure is left to the command itself, which words it.
    if let Err(error) = locks.check_server().await
        && matches!(error.kind(), mongolock::ErrorKind::UnsupportedServer { .. })
    {
        return Err(error.into());
    }
    Ok(locks)
}

/// How long [`connect`] asks the library whether a server that the driver refused is one it
/// cannot run on (the driver refuses such a server at once).
const UNSUPPORTED_CHECK_LIMIT: Duration = Duration::from_secs(1);

/// Waits for the first connection to `client` (whose servers are `hosts`): one `ping`,
/// which waits for a server as long as the server selection timeout, `limit`.
///
/// # Errors
///
/// [`Unreachable`] if no server could be selected, else the driver's error (an
/// authentication that failed, say) in the context of the hosts.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
async fn reach(client: &mongodb::Client, hosts: &str, limit: Duration) -> anyhow::Result<()> {
    tracing::debug!(%hosts, limit = %humantime::format_duration(limit), "connecting");
    let error = match (client.database("admin"))
        .run_command(bson::doc! { "ping": 1 })
        .await
    {
        Ok(_) => return Ok(()),
        Err(error) => error,
    };
    // The driver's own words, topology and all, for -v.
    tracing::info!(%hosts, %error, "cannot reach the server");
    match &*error.kind {
        mongodb::error::ErrorKind::ServerSelection { message, .. } => Err(Unreachable {
            hosts: hosts.to_owned(),
            limit,
            cause: selection_causes(message),
        }
        .into()),
        _ => Err(anyhow::Error::new(error).context(format!("cannot use the server {hosts}"))),
    }
}

/// No server of the connection string could be reached in time.
#[derive(Debug)]
pub struct Unreachable {
    /// The hosts of the connection string (never its user info).
    hosts: String,
    /// How long the driver waited (`--connect-timeout`).
    limit: Duration,
    /// Why, in the driver's words: each host's error, or the driver's message if it names
    /// none.
    cause: Causes,
}

/// Why no server could be selected.
#[derive(Debug, PartialEq, Eq)]
enum Causes {
    /// Each host with its error.
    ByHost(Vec<(String, String)>),
    /// The driver's message, which names no host's error.
    Message(String),
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let within = humantime::format_duration(self.limit);
        match &self.cause {
            Causes::ByHost(causes) if causes.len() == 1 => write!(
                f,
                "cannot reach the server {} within {within} (--connect-timeout): {}",
                causes[0].0, causes[0].1
            ),
            Causes::ByHost(causes) => {
                let each: Vec<String> = (causes.iter())
                    .map(|(host, cause)| format!("{host}: {cause}"))
                    .collect();
                write!(
                    f,
                    "cannot reach any server of {} within {within} (--connect-timeout): {}",
                    self.hosts,
                    each.join("; ")
                )
            }
            Causes::Message(message) => write!(
                f,
                "cannot reach the server {} within {within} (--connect-timeout): {message}",
                self.hosts
            ),
        }
    }
}

impl std::error::Error for Unreachable {}

/// The causes in a driver's server selection error: each server's error
/// (`Connection refused (os error 111)`), or the message itself when it names none (a
/// server that answered but cannot be selected).
///
/// The driver writes `... Servers: [ { Address: HOST, Type: Unknown, Error: Kind: CAUSE,
/// labels: {} }, ... ]`; this reads that shape and falls back to the whole message.
fn selection_causes(message: &str) -> Causes {
    let causes: Vec<(String, String)> = message
        .split("{ Address: ")
        .skip(1)
        .filter_map(|server| {
            let (host, rest) = server.split_once(',')?;
            let (_, error) = rest.split_once("Error: ")?;
            let error = error.split(", labels:").next().unwrap_or(error);
            let error = error.strip_prefix("Kind: ").unwrap_or(error);
            let error = error.strip_prefix("I/O error: ").unwrap_or(error);
            Some((host.trim().to_owned(), error.trim().to_owned()))
        })
        .collect();
    if causes.is_empty() {
        Causes::Message(message.to_owned())
    } else {
        Causes::ByHost(causes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_of_each_host_is_read_from_the_drivers_message() {
        let message = "Server selection timeout: No available servers. Topology: { Type: \
                       Unknown, Servers: [ { Address: db1:27017, Type: Unknown, Error: Kind: \
                       I/O error: Connection refused (os error 111), labels: {} }, { Address: \
                       db2:27017, Type: Unknown, Error: Kind: I/O error: failed to lookup \
                       address information: Name or service not known, labels: {} } ] }";
        assert_eq!(
            selection_causes(message),
            Causes::ByHost(vec![
                (
                    "db1:27017".to_owned(),
                    "Connection refused (os error 111)".to_owned()
                ),
                (
                    "db2:27017".to_owned(),
                    "failed to lookup address information: Name or service not known".to_owned()
                ),
            ])
        );
        assert_eq!(
            selection_causes("No suitable servers"),
            Causes::Message("No suitable servers".to_owned())
        );
    }
}
