//! A TCP fault proxy in front of any MongoDB address.
//!
//! [`FaultProxy`] listens on a free port of 127.0.0.1 and forwards every connection to an
//! upstream address, byte for byte. Tests put it between a lock holder and the server, then
//! break the network on demand without stopping either side:
//!
//! - [`FaultProxy::add_latency`] delays every chunk of bytes in each direction;
//! - [`FaultProxy::blackhole`] keeps connections open but lets nothing through, so clients
//!   hang until their own timeouts fire;
//! - [`FaultProxy::reset_connections`] aborts every current connection (TCP `RST`);
//! - [`FaultProxy::refuse_new`] resets every new connection as soon as it is accepted;
//! - [`FaultProxy::lose_replies`] lets requests through but resets a connection instead of
//!   delivering the server's reply, so a write is applied and its client never learns it;
//! - [`FaultProxy::fault_requests`] picks out single requests by their command and delivers
//!   them late (held past the client's timeout, then run on the server on a connection of
//!   their own, the reply recorded: [`RequestFault::Late`]), cuts them (never delivered:
//!   [`RequestFault::Cut`]) or loses their reply ([`RequestFault::LoseReply`]);
//! - [`FaultProxy::heal`] returns to plain forwarding.
//!
//! Faults apply at once to existing and new connections. The proxy reads the client's bytes
//! as whole MongoDB messages (each one's header gives its length), which is all it knows of
//! MongoDB: it forwards whatever the client and server send, and parses a request's command
//! only to match it against the rules of [`FaultProxy::fault_requests`].
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use mongolock_testkit::TestServer;
//! use mongolock_testkit::faults::proxy::FaultProxy;
//!
//! let server = TestServer::start().await?;
//! let proxy = FaultProxy::start(server.addr()).await?;
//! let admin = proxy.client().database("admin");
//! admin.run_command(bson::doc! {"ping": 1}).await?;
//!
//! proxy.blackhole();
//! assert!(admin.run_command(bson::doc! {"ping": 1}).await.is_err());
//!
//! proxy.heal();
//! admin.run_command(bson::doc! {"ping": 1}).await?;
//! proxy.shutdown().await;
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! A request delivered late: the client gives up on it, and it runs afterwards.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use std::time::Duration;
//! use mongolock_testkit::TestServer;
//! use mongolock_testkit::faults::proxy::{FaultProxy, RequestFault, Requests};
//!
//! let server = TestServer::start().await?;
//! let proxy = FaultProxy::start(server.addr()).await?;
//! let app = proxy.client().database("app");
//! let hold = Duration::from_millis(300);
//! let late = proxy.fault_requests(
//!     Requests::named(&["insert"]).times(1),
//!     RequestFault::Late { hold, cut_after: None },
//! );
//! let insert = app.run_command(bson::doc! {"insert": "jobs", "documents": [{"_id": 1}]});
//! assert!(tokio::time::timeout(Duration::from_millis(100), insert).await.is_err());
//! while late.delivered() == 0 {
//!     tokio::time::sleep(Duration::from_millis(10)).await;
//! }
//! let jobs = server.client().database("app").collection::<bson::Document>("jobs");
//! assert!(jobs.find_one(bson::doc! {"_id": 1}).await?.is_some(), "it ran, late");
//! proxy.shutdown().await;
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

mod requests;

use requests::{ConnectionFaults, Framer, Held, Reply, Rules, Step};
pub use requests::{RequestFault, RequestRule, Requests};

/// How long a client from [`FaultProxy::client`] waits to select the server.
pub const SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// A client's connect timeout, which also bounds its monitor's `hello` checks.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a client's monitor checks the server (the driver's minimum).
pub const HEARTBEAT_FREQUENCY: Duration = Duration::from_millis(500);

/// Largest chunk read from one side before it is forwarded to the other.
const CHUNK_SIZE: usize = 16 * 1024;
/// Chunks read but not yet forwarded, per direction, before the proxy stops reading.
const CHUNKS_IN_FLIGHT: usize = 16;

/// The faults in force. Every connection watches it.
#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    /// Delay of every chunk, in each direction.
    latency: Duration,
    /// Forward nothing.
    blackhole: bool,
    /// Reset new connections when they are accepted.
    refuse_new: bool,
    /// Reset a connection instead of forwarding anything the server sends.
    lose_replies: bool,
    /// Bumped by [`FaultProxy::reset_connections`]: connections accepted under an older
    /// generation are reset.
    generation: u64,
    /// The proxy is stopping.
    shutdown: bool,
}

/// What the proxy handle, the accept loop and the connections share.
#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    faults: watch::Sender<Faults>,
    connections: AtomicUsize,
    /// The rules of [`FaultProxy::fault_requests`].
    rules: Rules,
    /// Requests held for late delivery, to the accept loop (whose tasks end with the proxy).
    late: mpsc::UnboundedSender<Held>,
}

/// A TCP proxy that injects network faults between MongoDB clients and a server.
///
/// Fault controls take `&self`, so one proxy can be shared (for example in an `Arc`) between
/// the test and the tasks it drives. Dropping the proxy, or [`FaultProxy::shutdown`], stops
/// it and closes all its connections.
///
/// # Driver clients
///
/// The emulator (like a real replica-set member) names its own address in `hello`, so a
/// driver told to discover a replica set would switch to that address and bypass the proxy.
/// [`FaultProxy::uri`] and [`FaultProxy::client`] therefore use a *direct connection*, with
/// short timeouts ([`SERVER_SELECTION_TIMEOUT`], [`CONNECT_TIMEOUT`],
/// [`HEARTBEAT_FREQUENCY`]) so that operations fail within about two seconds when the proxy
/// blocks them, instead of the driver's default thirty.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_task: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on a free port of 127.0.0.1 that forwards connections to `upstream`.
    ///
    /// The upstream address is only dialled when a client connects; if it cannot be reached
    /// then, that client's connection is reset.
    ///
    /// # Errors
    /// Binding the listener failed.
    ///
    /// # Cancel safety
    /// Dropping the future before it completes leaves nothing running: the accept loop is
    /// only spawned once the listener is bound.
    pub async fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (faults, _) = watch::channel(Faults::default());
        let (late, held) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            upstream,
            faults,
            connections: AtomicUsize::new(0),
            rules: Rules::default(),
            late,
        });
        let accept_task = tokio::spawn(accept_loop(listener, shared.clone(), held));
        Ok(FaultProxy {
            addr,
            shared,
            accept_task: Some(accept_task),
        })
    }

    /// The address the proxy listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// A connection string that reaches the upstream server through the proxy.
    ///
    /// It sets `directConnection=true`, so the driver never leaves the proxy's address for
    /// the hosts the server advertises, and the same short timeouts as
    /// [`FaultProxy::client_options`].
    pub fn uri(&self) -> String {
        format!(
            "mongodb://{}/?directConnection=true&serverSelectionTimeoutMS={}\
             &connectTimeoutMS={}&heartbeatFrequencyMS={}",
            self.addr,
            SERVER_SELECTION_TIMEOUT.as_millis(),
            CONNECT_TIMEOUT.as_millis(),
            HEARTBEAT_FREQUENCY.as_millis(),
        )
    }

    /// Driver options for a client that goes through the proxy: a direct connection to
    /// [`FaultProxy::addr`] with short timeouts ([`SERVER_SELECTION_TIMEOUT`],
    /// [`CONNECT_TIMEOUT`], [`HEARTBEAT_FREQUENCY`]). Adjust them before building a client.
    ///
    /// With these settings an operation that the proxy blocks fails within about two
    /// seconds: the client's monitor times out after [`CONNECT_TIMEOUT`], which makes the
    /// driver interrupt operations in flight, and server selection gives up after
    /// [`SERVER_SELECTION_TIMEOUT`].
    pub fn client_options(&self) -> mongodb::options::ClientOptions {
        mongodb::options::ClientOptions::builder()
            .hosts(vec![mongodb::options::ServerAddress::Tcp {
                host: self.addr.ip().to_string(),
                port: Some(self.addr.port()),
            }])
            .direct_connection(true)
            .server_selection_timeout(SERVER_SELECTION_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .heartbeat_freq(HEARTBEAT_FREQUENCY)
            .build()
    }

    /// A new driver client, with its own connection pool, built from
    /// [`FaultProxy::client_options`]. Call it inside a Tokio runtime.
    ///
    /// # Panics
    /// Never in practice: the options are fixed and valid.
    pub fn client(&self) -> mongodb::Client {
        mongodb::Client::with_options(self.client_options())
            .expect("fault proxy client options are valid")
    }

    /// Delays every chunk of bytes by `latency` in each direction, so a request and its
    /// reply take at least twice `latency` longer. Replaces any latency set before;
    /// `Duration::ZERO` removes it.
    ///
    /// Chunks are delayed from the moment the proxy reads them, so latency does not add up
    /// over the chunks of one message. It applies at once to bytes already waiting in the
    /// proxy and to every connection, old and new.
    pub fn add_latency(&self, latency: Duration) {
        self.shared.faults.send_modify(|f| f.latency = latency);
    }

    /// Stops forwarding in both directions while keeping every connection open, like a
    /// network partition: clients hang until their own timeouts fire. New connections are
    /// still accepted (and blackholed).
    ///
    /// Bytes that arrive meanwhile are held, not dropped (up to a bounded buffer, after
    /// which TCP flow control pushes back on the sender), and so is the end of a stream:
    /// [`FaultProxy::heal`] delivers them in order, as TCP does once a partition heals.
    /// A client that gave up meanwhile has usually closed its connection, and then the
    /// late reply is discarded along with it.
    pub fn blackhole(&self) {
        self.shared.faults.send_modify(|f| f.blackhole = true);
    }

    /// Aborts every current connection: both sides get a TCP reset (`RST`), so clients see
    /// "connection reset" on their next read or write. Connections accepted afterwards are
    /// not affected. The connections close on the proxy's tasks, so
    /// [`FaultProxy::connection_count`] drops shortly after this returns.
    pub fn reset_connections(&self) {
        self.shared.faults.send_modify(|f| f.generation += 1);
    }

    /// Resets every new connection as soon as it is accepted, so new clients (and the
    /// driver's new pooled and monitoring connections) cannot connect. Existing connections
    /// keep working; combine with [`FaultProxy::reset_connections`] to cut a client off
    /// completely.
    pub fn refuse_new(&self) {
        self.shared.faults.send_modify(|f| f.refuse_new = true);
    }

    /// Lets every request through to the server but loses every reply: when the server's
    /// answer reaches the proxy, the connection is reset (both sides get a TCP `RST`)
    /// instead. The server has executed the command (a write is applied and committed) and
    /// the client sees a network error, so the outcome is unknown to it: the fault behind
    /// MongoDB's retryable-writes rules and Jepsen's indeterminate (`info`) operations.
    ///
    /// It applies to every connection, monitoring ones included, until
    /// [`FaultProxy::heal`]; a reply already forwarded is not taken back.
    pub fn lose_replies(&self) {
        self.shared.faults.send_modify(|f| f.lose_replies = true);
    }

    /// Applies `fault` to the requests `which` picks out, on every connection, old and new,
    /// from now until [`FaultProxy::heal`] (or until `which` has picked out as many as its
    /// [`Requests::times`] allows, or its [`Requests::until`] has passed). Rules are tried in the order they were added; the first
    /// that picks a request out decides, and the others let it be. Requests that no rule
    /// picks out are forwarded as the other faults say.
    ///
    /// A request is matched when the proxy has read the whole of it, before latency or a
    /// blackhole holds it, and only OP_MSG and OP_QUERY commands are matched. A request
    /// delivered late ([`RequestFault::Late`]) leaves its connection at once and goes to the
    /// server on a connection of its own when its hold ends, whatever faults are in force
    /// then (it was on its way already): only stopping the proxy stops it. The returned
    /// [`RequestRule`] counts what the rule did.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use mongolock_testkit::TestServer;
    /// use mongolock_testkit::faults::proxy::{FaultProxy, RequestFault, Requests};
    ///
    /// let server = TestServer::start().await?;
    /// let proxy = FaultProxy::start(server.addr()).await?;
    /// let jobs = proxy.client().database("app").collection::<bson::Document>("jobs");
    /// let cut = proxy.fault_requests(Requests::named(&["insert"]), RequestFault::Cut);
    /// assert!(jobs.insert_one(bson::doc! {"_id": 1}).await.is_err());
    /// assert!(cut.applied() >= 1);
    /// proxy.heal();
    /// jobs.insert_one(bson::doc! {"_id": 1}).await?; // the cut one never ran
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn fault_requests(&self, which: Requests, fault: RequestFault) -> RequestRule {
        self.shared.rules.add(which, fault)
    }

    /// Removes every fault: no latency, no blackhole, new connections accepted, replies
    /// delivered, no rule on requests. Bytes held by [`FaultProxy::blackhole`] are
    /// delivered, and so are requests already held for late delivery, when their hold ends.
    /// Connections already reset stay closed.
    pub fn heal(&self) {
        self.shared.faults.send_modify(|f| {
            f.latency = Duration::ZERO;
            f.blackhole = false;
            f.refuse_new = false;
            f.lose_replies = false;
        });
        self.shared.rules.clear();
    }

    /// How many client connections the proxy holds open now. Refused connections do not
    /// count.
    pub fn connection_count(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Stops accepting, closes every connection and waits until all the proxy's tasks have
    /// ended.
    ///
    /// # Cancel safety
    /// Dropping the future after it started still stops the proxy: the stop signal is sent
    /// before the first await, and dropping the proxy aborts whatever is left.
    pub async fn shutdown(mut self) {
        self.shared.faults.send_modify(|f| f.shutdown = true);
        if let Some(task) = self.accept_task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.faults.send_modify(|f| f.shutdown = true);
        if let Some(task) = self.accept_task.take() {
            // The connection tasks live in the accept task's `JoinSet`, which aborts them
            // when it is dropped.
            task.abort();
        }
    }
}

/// Counts a connection while it is open.
struct ConnectionGuard(Arc<Shared>);

impl ConnectionGuard {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.connections.fetch_add(1, Ordering::SeqCst);
        Self(shared.clone())
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut held: mpsc::UnboundedReceiver<Held>,
) {
    let mut faults = shared.faults.subscribe();
    // The connections, and the requests held for late delivery.
    let mut connections = JoinSet::new();
    loop {
        if faults.borrow_and_update().shutdown {
            break;
        }
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let now = *shared.faults.borrow();
                    if now.shutdown {
                        break;
                    }
                    if now.refuse_new {
                        abort(client);
                        continue;
                    }
                    let guard = ConnectionGuard::new(&shared);
                    connections.spawn(serve(client, shared.clone(), now.generation, guard));
                }
                Err(error) => {
                    // Usually out of file descriptors: back off instead of spinning.
                    tracing::debug!(%error, "fault proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            Some(request) = held.recv() => {
                connections.spawn(request.deliver(shared.upstream));
            }
            changed = faults.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
    drop(listener);
    connections.shutdown().await;
}

/// Closes a connection with a TCP reset rather than an orderly `FIN`.
fn abort(stream: TcpStream) {
    // A zero linger makes `close` send RST and return at once; only a non-zero linger
    // blocks (which is why Tokio deprecates `set_linger`).
    #[allow(deprecated)]
    let _ = stream.set_linger(Some(Duration::ZERO));
    drop(stream);
}

/// Forwards one client connection until either side closes it or a reset is requested.
async fn serve(client: TcpStream, shared: Arc<Shared>, generation: u64, _guard: ConnectionGuard) {
    let upstream = shared.upstream;
    let mut faults = shared.faults.subscribe();
    let _ = client.set_nodelay(true);
    let connected = tokio::select! {
        connected = TcpStream::connect(upstream) => connected,
        _ = reset_requested(&mut faults, generation) => {
            abort(client);
            return;
        }
    };
    let mut server = match connected {
        Ok(server) => server,
        Err(error) => {
            tracing::debug!(%error, %upstream, "fault proxy: upstream unreachable");
            abort(client);
            return;
        }
    };
    let _ = server.set_nodelay(true);
    let mut client = client;
    let connection = ConnectionFaults::default();
    let upstream_side = Side {
        faults: faults.clone(),
        shared: &shared,
        connection: &connection,
    };
    let downstream_side = Side {
        faults: faults.clone(),
        shared: &shared,
        connection: &connection,
    };
    let clean = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let forward = async {
            tokio::try_join!(
                pump(
                    client_read,
                    server_write,
                    upstream_side,
                    Direction::ToServer
                ),
                pump(
                    server_read,
                    client_write,
                    downstream_side,
                    Direction::ToClient
                ),
            )
        };
        tokio::select! {
            forwarded = forward => forwarded.is_ok(),
            _ = reset_requested(&mut faults, generation) => false,
        }
    };
    if !clean {
        // A reset was requested, or one side failed: abort both so each peer sees it.
        abort(client);
        abort(server);
    }
}

/// Completes when a reset newer than `generation` is requested.
async fn reset_requested(faults: &mut watch::Receiver<Faults>, generation: u64) {
    loop {
        if faults.borrow_and_update().generation != generation {
            return;
        }
        if faults.changed().await.is_err() {
            // The proxy is gone; its drop aborts this task.
            std::future::pending::<()>().await;
        }
    }
}

/// Which way a [`pump`] forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Requests, from the client to the server.
    ToServer,
    /// Replies, from the server to the client.
    ToClient,
}

/// What one direction of a connection reads the faults from.
struct Side<'a> {
    faults: watch::Receiver<Faults>,
    shared: &'a Shared,
    connection: &'a ConnectionFaults,
}

/// Forwards one direction: a reader fills a bounded queue of time-stamped messages, a writer
/// delivers each once the faults allow it. Both directions are read as whole messages, so
/// that the rules of [`FaultProxy::fault_requests`] can pick out a request, and its reply by
/// the request's id. The client's side also sends the proxy's own answers to requests it
/// refused (`answers`). Ends when the end of the stream has been forwarded; fails on the
/// first I/O error, on a reply to lose and on a request to cut (each of which resets the
/// connection).
async fn pump(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    side: Side<'_>,
    direction: Direction,
) -> io::Result<()> {
    let Side {
        mut faults,
        shared,
        connection,
    } = side;
    let (chunks_tx, mut chunks_rx) = mpsc::channel::<(Instant, Vec<u8>)>(CHUNKS_IN_FLIGHT);
    let read = async move {
        let mut buffer = vec![0u8; CHUNK_SIZE];
        let mut framer = Framer::default();
        loop {
            let cut_at = framer.cut_at;
            let n = tokio::select! {
                read = from.read(&mut buffer) => read?,
                () = sleep_until_some(cut_at) => {
                    return Err(requests::reset("the client gave up on a request held for late delivery"));
                }
            };
            if n == 0 {
                if let Some(rest) = framer.rest() {
                    let _ = chunks_tx.send((Instant::now(), rest)).await;
                }
                // End of stream: dropping the sender lets the writer forward it.
                return Ok::<(), io::Error>(());
            }
            let steps = match direction {
                Direction::ToServer => {
                    (framer.requests(&buffer[..n], &shared.rules, connection)).await
                }
                Direction::ToClient => (framer.messages(&buffer[..n]).into_iter())
                    .map(|(message, _)| Step::Forward(message))
                    .collect(),
            };
            for step in steps {
                match step {
                    Step::Forward(bytes) => {
                        if chunks_tx.send((Instant::now(), bytes)).await.is_err() {
                            return Ok(());
                        }
                    }
                    Step::Cut => return Err(requests::reset("request cut")),
                    Step::Hold(held) => {
                        // The accept loop is gone only when the proxy stops.
                        let _ = shared.late.send(held);
                    }
                    Step::Answer(answer) => connection.answer(answer),
                }
            }
        }
    };
    let write = async move {
        loop {
            let next = tokio::select! {
                biased;
                answer = connection.next_answer(), if direction == Direction::ToClient => {
                    to.write_all(&answer).await?;
                    continue;
                }
                next = chunks_rx.recv() => next,
            };
            let Some((read_at, mut chunk)) = next else {
                break;
            };
            wait_until_forwardable(&mut faults, read_at).await;
            if direction == Direction::ToClient {
                let lost =
                    || io::Error::new(io::ErrorKind::ConnectionReset, "fault proxy: reply lost");
                if faults.borrow().lose_replies {
                    return Err(lost());
                }
                match connection.reply(&chunk) {
                    Reply::Forward => {}
                    Reply::Lose => return Err(lost()),
                    Reply::Replace(instead) => chunk = instead,
                }
            }
            to.write_all(&chunk).await?;
        }
        wait_until_forwardable(&mut faults, Instant::now()).await;
        // The peer may already be gone; the connection ends either way.
        let _ = to.shutdown().await;
        Ok::<(), io::Error>(())
    };
    tokio::try_join!(read, write).map(|_| ())
}

/// Sleeps until `at`; never resolves without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Waits until a chunk read at `read_at` may be forwarded: no blackhole, and the latency in
/// force has passed since it was read. Re-evaluates whenever the faults change.
async fn wait_until_forwardable(faults: &mut watch::Receiver<Faults>, read_at: Instant) {
    loop {
        let now = *faults.borrow_and_update();
        // A latency too large to represent waits like a blackhole.
        let due = if now.blackhole {
            None
        } else {
            read_at.checked_add(now.latency)
        };
        match due {
            Some(due) if due <= Instant::now() => return,
            Some(due) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => return,
                    changed = faults.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
            None => {
                if faults.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}
