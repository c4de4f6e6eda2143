//! The running server: listener, connections, background tasks, and the handle tests hold.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::commands::blocking_pool::off_runtime;
use crate::commands::context::ConnectionInfo;
use crate::commands::cursor_table::Cursors;
use crate::commands::local_sessions::LocalSessions;
use crate::commands::session::Sessions;
use crate::commands::state::ServerState;
use crate::commands::view_catalog::Views;
use crate::commands::{self, Outcome};
use crate::engine::changes::ChangeLog;
use crate::engine::collection::Catalog;
use crate::faults::clock::Clock;
use crate::faults::fail_point::FailPoints;
use crate::wire::{self, RequestKind};

pub use crate::commands::identity::{REPLICA_SET_NAME, ServerVersion};

/// How a server is started. Build one with [`TestServer::builder`].
#[derive(Debug, Clone)]
pub struct TestServerBuilder {
    port: u16,
    standalone: bool,
    latency: Duration,
    ttl_monitor_interval: Duration,
    clock: Option<Clock>,
    change_window: (usize, usize),
    version: ServerVersion,
    pipeline_updates: bool,
}

impl Default for TestServerBuilder {
    fn default() -> Self {
        Self {
            port: 0,
            standalone: false,
            latency: Duration::ZERO,
            ttl_monitor_interval: Duration::from_secs(60),
            clock: None,
            change_window: (
                crate::engine::changes::WINDOW,
                crate::engine::changes::WINDOW_BYTES,
            ),
            version: ServerVersion::default(),
            pipeline_updates: true,
        }
    }
}

impl TestServerBuilder {
    /// Listen on this port of 127.0.0.1 (0, the default, picks a free one).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Behave as a standalone `mongod` instead of a one-member replica set: no retryable
    /// writes, no change streams, no cluster time.
    pub fn standalone(mut self, standalone: bool) -> Self {
        self.standalone = standalone;
        self
    }

    /// Delay every reply by this much, to give benchmarks a realistic round trip.
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// How often the TTL monitor runs (mongod's `ttlMonitorSleepSecs`, default 60 s).
    pub fn ttl_monitor_interval(mut self, interval: Duration) -> Self {
        self.ttl_monitor_interval = interval;
        self
    }

    /// Share an existing clock instead of creating a new one.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// How much change-stream history to keep, like the size of mongod's oplog: at most
    /// `events` events and `bytes` of them (their documents' BSON size plus a fixed overhead
    /// per event). By default 100,000 events and 8 MiB. A stream that resumes from, or whose
    /// cursor falls behind, an event no longer kept fails with `ChangeStreamHistoryLost` (286).
    pub fn change_stream_history(mut self, events: usize, bytes: usize) -> Self {
        self.change_window = (events, bytes);
        self
    }

    /// Report itself as this MongoDB release, and follow it where releases differ (see
    /// [`ServerVersion`]); 7.0 by default.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use mongolock_testkit::{ServerVersion, TestServer};
    /// let server = TestServer::builder().server_version(ServerVersion::V4_4).start().await?;
    /// let info = server.client().database("admin").run_command(bson::doc! {"buildInfo": 1}).await?;
    /// assert_eq!(info.get_str("version")?, "4.4.29");
    /// server.shutdown().await;
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn server_version(mut self, version: ServerVersion) -> Self {
        self.version = version;
        self
    }

    /// Refuse pipeline-style updates (in `update` and `findAndModify`), as servers that
    /// speak MongoDB's protocol without them do (Amazon DocumentDB is one): the command
    /// fails with code 238 (NotImplemented). The refusal is the emulator's own shape, not a
    /// copy of any such server's.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use mongolock_testkit::TestServer;
    /// let server = TestServer::builder().without_pipeline_updates().start().await?;
    /// let refused = server.client().database("d").run_command(bson::doc! {
    ///     "update": "c", "updates": [{ "q": {}, "u": [{ "$set": { "a": 1 } }] }],
    /// }).await;
    /// assert!(refused.is_err());
    /// server.shutdown().await;
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn without_pipeline_updates(mut self) -> Self {
        self.pipeline_updates = false;
        self
    }

    /// Binds the listener and starts serving.
    ///
    /// # Errors
    ///
    /// The I/O error of binding the listener (the port is taken, say).
    ///
    /// # Cancel safety
    /// Dropping the future before it completes leaves nothing running: the listener is only
    /// spawned once it is bound.
    pub async fn start(self) -> std::io::Result<TestServer> {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await?;
        self.serve(listener, None)
    }

    /// The release the server reports itself as.
    pub(crate) fn version(&self) -> ServerVersion {
        self.version
    }

    /// Starts a member of a replica set on a listener already bound.
    pub(crate) fn start_member(
        self,
        listener: TcpListener,
        replica: std::sync::Arc<dyn crate::commands::state::Member>,
    ) -> std::io::Result<TestServer> {
        self.serve(listener, Some(replica))
    }

    fn serve(
        self,
        listener: TcpListener,
        replica: Option<std::sync::Arc<dyn crate::commands::state::Member>>,
    ) -> std::io::Result<TestServer> {
        let addr = listener.local_addr()?;
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let clock = self.clock.unwrap_or_default();
        let mut changes =
            ChangeLog::with_window(clock.clone(), self.change_window.0, self.change_window.1);
        if !self.version.logs_pipeline_deltas() {
            changes = changes.without_pipeline_deltas();
        }
        let state = Arc::new(ServerState {
            address: format!("127.0.0.1:{}", addr.port()),
            standalone: self.standalone,
            version: self.version,
            pipeline_updates: self.pipeline_updates,
            latency: self.latency,
            ttl_monitor_interval: self.ttl_monitor_interval,
            catalog: Catalog::new(Arc::new(changes)),
            clock,
            cursors: Cursors::default(),
            sessions: Sessions::default(),
            local_sessions: LocalSessions::default(),
            views: Views::default(),
            fail_points: FailPoints::default(),
            next_connection_id: AtomicI64::new(1),
            shutdown: shutdown_rx,
            replica,
        });
        let accept = tokio::spawn(accept_loop(listener, state.clone()));
        let ttl = tokio::spawn(ttl_monitor(state.clone()));
        let server = TestServer {
            addr,
            state,
            shutdown: shutdown_tx,
            tasks: vec![accept, ttl],
            client: std::sync::OnceLock::new(),
        };
        // A replica-set member's shared client is made on first use: each would monitor
        // the whole set.
        if server.state.replica.is_none() {
            let _ = server.client.set(server.new_client());
        }
        Ok(server)
    }
}

/// A running emulator. Dropping it stops the server (connections close as their tasks end).
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use mongolock_testkit::TestServer;
/// let server = TestServer::start().await?;
/// let coll = server.client().database("app").collection::<bson::Document>("things");
/// coll.insert_one(bson::doc! {"_id": 1}).await?;
/// assert_eq!(coll.count_documents(bson::doc! {}).await?, 1);
/// server.shutdown().await;
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct TestServer {
    addr: SocketAddr,
    state: Arc<ServerState>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    client: std::sync::OnceLock<mongodb::Client>,
}

impl TestServer {
    /// Starts a one-member replica set on a free port with default options.
    ///
    /// # Errors
    ///
    /// As [`TestServerBuilder::start`].
    ///
    /// # Cancel safety
    /// See [`TestServerBuilder::start`].
    pub async fn start() -> std::io::Result<TestServer> {
        Self::builder().start().await
    }

    /// Options for a server to start.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A connection string for this server.
    pub fn uri(&self) -> String {
        if self.state.standalone {
            format!("mongodb://{}/", self.state.address)
        } else {
            format!(
                "mongodb://{}/?replicaSet={REPLICA_SET_NAME}",
                self.state.address
            )
        }
    }

    /// A driver client connected to this server, shared by every caller.
    pub fn client(&self) -> mongodb::Client {
        self.client.get_or_init(|| self.new_client()).clone()
    }

    /// A new driver client with its own connection pool.
    pub fn new_client(&self) -> mongodb::Client {
        mongodb::Client::with_options(self.client_options()).expect("client options are valid")
    }

    /// The options [`TestServer::new_client`] builds its clients with, for a client that
    /// needs one more (a command monitor, say).
    pub fn client_options(&self) -> mongodb::options::ClientOptions {
        mongodb::options::ClientOptions::builder()
            .hosts(vec![mongodb::options::ServerAddress::Tcp {
                host: "127.0.0.1".into(),
                port: Some(self.addr.port()),
            }])
            .repl_set_name(if self.state.standalone {
                None
            } else {
                Some(REPLICA_SET_NAME.to_string())
            })
            .server_selection_timeout(Duration::from_secs(10))
            .build()
    }

    /// The server clock.
    pub fn clock(&self) -> &Clock {
        &self.state.clock
    }

    /// The server's state, for the replica set it is a member of.
    pub(crate) fn state_weak(&self) -> std::sync::Weak<ServerState> {
        Arc::downgrade(&self.state)
    }

    /// Stops accepting connections and ends background tasks.
    ///
    /// # Cancel safety
    /// Dropping the future after it started still stops the server: the signal is sent
    /// before the first await.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(client) = self.client.take() {
            client.shutdown().immediate(true).await;
        }
        for task in self.tasks.drain(..) {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<ServerState>) {
    let mut shutdown = state.shutdown.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    if state.replica.as_ref().is_some_and(|r| r.is_down()) {
                        // A stopped replica-set member: the connection is refused.
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let id = state.next_connection_id.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(serve_connection(stream, id, state.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            _ = shutdown.changed() => return,
        }
    }
}

async fn serve_connection(stream: TcpStream, id: i64, state: Arc<ServerState>) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut shutdown = state.shutdown.clone();
    let mut info = ConnectionInfo::new(id);
    let mut next_reply_id: i32 = 1;
    loop {
        let request = tokio::select! {
            request = wire::read_request(&mut read) => request,
            _ = shutdown.changed() => return,
        };
        let request = match request {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(error) => {
                tracing::debug!(%error, connection = id, "closing connection");
                return;
            }
        };
        let (request_id, kind) = (request.request_id, request.kind);
        let streamed = streamed_hello(&state, &request);
        let outcome = commands::dispatch(&state, &mut info, request).await;
        let body = match outcome {
            Outcome::Reply(body) => body,
            Outcome::CloseConnection => return,
        };
        if kind.no_reply_wanted() {
            continue;
        }
        if !state.latency.is_zero() {
            tokio::time::sleep(state.latency).await;
        }
        let bytes = match kind {
            RequestKind::Msg { .. } => wire::encode_op_msg(next_reply_id, request_id, &body),
            RequestKind::Query => wire::encode_op_reply(next_reply_id, request_id, &body),
        };
        if let Some(command) = streamed
            && body.get_f64("ok") == Ok(1.0)
        {
            stream_hello(
                &state,
                &mut info,
                &mut write,
                command,
                body,
                bytes,
                next_reply_id,
            )
            .await;
            return;
        }
        next_reply_id = next_reply_id.wrapping_add(1);
        if wire::write_message(&mut write, &bytes).await.is_err() {
            return;
        }
    }
}

/// OP_MSG's `exhaustAllowed` flag bit.
const EXHAUST_ALLOWED: u32 = 1 << 16;

/// The command of an awaitable `hello` sent to a replica-set member with `exhaustAllowed`:
/// the member streams its replies (server-monitoring spec, "Streaming Protocol"; the Node
/// driver, under mongosh, requires `moreToCome` on them).
fn streamed_hello(state: &ServerState, request: &wire::Request) -> Option<bson::Document> {
    let RequestKind::Msg { flags } = request.kind else {
        return None;
    };
    let cmd = &request.command;
    let hello = matches!(
        cmd.keys().next().map(String::as_str),
        Some("hello" | "isMaster" | "ismaster")
    );
    (state.replica.is_some()
        && flags & EXHAUST_ALLOWED != 0
        && hello
        && cmd.contains_key("topologyVersion")
        && cmd.contains_key("maxAwaitTimeMS"))
    .then(|| cmd.clone())
}

/// Streams `hello` replies with `moreToCome`, each answering the previous one (its
/// `responseTo` is the previous reply's id), one per topology change or `maxAwaitTimeMS`,
/// until the connection or the member goes away. The connection serves nothing else after.
/// As mongod's `CmdHello` (`src/mongo/db/repl/replication_info.cpp`) does, each next
/// invocation is the same command with the `topologyVersion` of the reply just sent.
#[allow(clippy::too_many_arguments)]
async fn stream_hello(
    state: &Arc<ServerState>,
    info: &mut ConnectionInfo,
    write: &mut tokio::net::tcp::OwnedWriteHalf,
    mut command: bson::Document,
    mut body: bson::Document,
    mut bytes: Vec<u8>,
    mut reply_id: i32,
) {
    loop {
        bytes[16..20].copy_from_slice(&wire::FLAG_MORE_TO_COME.to_le_bytes());
        if wire::write_message(write, &bytes).await.is_err() {
            return;
        }
        if let Ok(version) = body.get_document("topologyVersion") {
            command.insert("topologyVersion", version.clone());
        }
        let request = wire::Request {
            request_id: reply_id,
            kind: RequestKind::Msg {
                flags: EXHAUST_ALLOWED,
            },
            command: command.clone(),
            duplicate_field: None,
            error: None,
        };
        body = match commands::dispatch(state, info, request).await {
            Outcome::Reply(body) => body,
            Outcome::CloseConnection => return,
        };
        let previous = reply_id;
        reply_id = reply_id.wrapping_add(1);
        bytes = wire::encode_op_msg(reply_id, previous, &body);
        if body.get_f64("ok") != Ok(1.0) {
            // An error reply never carries moreToCome; the stream ends with it.
            let _ = wire::write_message(write, &bytes).await;
            return;
        }
    }
}

async fn ttl_monitor(state: Arc<ServerState>) {
    let mut shutdown = state.shutdown.clone();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(state.ttl_monitor_interval) => {}
            _ = shutdown.changed() => return,
        }
        // Secondaries do not delete: they apply the primary's deletes.
        if state.replica.as_ref().is_some_and(|r| !r.is_primary()) {
            continue;
        }
        // Off the runtime: the pass waits for collection locks a long command may hold.
        let pass_state = state.clone();
        let removed = off_runtime(move || commands::ttl::run_pass(&pass_state))
            .await
            .unwrap_or(0);
        if removed > 0 {
            tracing::debug!(removed, "TTL monitor removed expired documents");
        }
    }
}
