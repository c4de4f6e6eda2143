//! A relay that holds back one reply: put between a client and its upstream (the client's
//! [`FaultProxy`](mongolock_testkit::FaultProxy)), it forwards every connection byte for
//! byte, as whole MongoDB messages, and once armed ([`ReplyHold::arm`]) keeps the server's
//! reply to the next lock attempt (a request that [`commands::is_attempt`] picks out) until
//! [`ReplyHold::release`]. The attempt runs on the server at once; its reply waits in the
//! relay while the client's other connections go on, so another reply of the same client
//! can be read first. It can also keep the client's keeper from renewing
//! ([`ReplyHold::blackhole`]): its `update` commands (renewals) are no longer forwarded, and
//! get no answer, while everything else goes on (closing the connections instead would make
//! the driver's monitor clear its pool, and with it the read of a reply just let go; and a
//! grant read too late is withdrawn with a `findAndModify`, which must land).
//!
//! The server's clock-step fault ([`crate::workload`]'s `step` submodule) steps the
//! emulator's clock while such a reply is held.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bson::Document;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::commands;

/// The opcode of an `OP_MSG`.
const OP_MSG: i32 = 2013;

/// What the relay's handle and its connections share.
#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    /// Hold the reply to the next lock attempt.
    armed: AtomicBool,
    /// When the held reply came back from the server (the attempt had run).
    held: watch::Sender<Option<Instant>>,
    /// The held reply may go on.
    released: watch::Sender<bool>,
    /// Every connection is closed, and new ones refused (the relay stops).
    cut: watch::Sender<bool>,
    /// The client's `update` commands (its renewals) are not forwarded.
    blackhole: AtomicBool,
    /// Blackhole the renewals as soon as the held reply has been forwarded.
    blackhole_after: AtomicBool,
}

/// A relay in front of one upstream address that can hold back the reply to one lock
/// attempt (see the module's documentation). Dropping it stops it and closes its connections.
#[derive(Debug)]
pub struct ReplyHold {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl ReplyHold {
    /// A relay on a free port of 127.0.0.1 in front of `upstream`. Call it inside a Tokio
    /// runtime: its tasks run there.
    ///
    /// # Errors
    /// It could not bind.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<ReplyHold> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            armed: AtomicBool::new(false),
            held: watch::Sender::new(None),
            released: watch::Sender::new(false),
            cut: watch::Sender::new(false),
            blackhole: AtomicBool::new(false),
            blackhole_after: AtomicBool::new(false),
        });
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    if *shared.cut.borrow() {
                        continue; // dropped: refused
                    }
                    tokio::spawn(relay(client, shared.clone()));
                }
            }
        });
        Ok(ReplyHold { addr, shared, task })
    }

    /// `options` (a client's, through its proxy) pointed at the relay instead.
    pub fn client_options(
        &self,
        mut options: mongodb::options::ClientOptions,
    ) -> mongodb::options::ClientOptions {
        options.hosts = vec![mongodb::options::ServerAddress::Tcp {
            host: self.addr.ip().to_string(),
            port: Some(self.addr.port()),
        }];
        options
    }

    /// Holds back the reply to the next lock attempt.
    pub fn arm(&self) {
        self.shared.armed.store(true, Ordering::SeqCst);
    }

    /// Waits up to `limit` until the reply is held (its attempt ran); returns when it came
    /// back from the server, or `None` if it did not within `limit`.
    pub async fn held(&self, limit: Duration) -> Option<Instant> {
        let mut held = self.shared.held.subscribe();
        let seen = tokio::time::timeout(limit, held.wait_for(Option::is_some)).await;
        seen.ok().and_then(|held| held.ok().and_then(|at| *at))
    }

    /// True while a reply is held and not yet let go.
    pub fn holding(&self) -> bool {
        self.shared.held.borrow().is_some() && !*self.shared.released.borrow()
    }

    /// Lets the held reply go on (and any reply held later).
    pub fn release(&self) {
        self.shared.armed.store(false, Ordering::SeqCst);
        self.shared.released.send_replace(true);
    }

    /// Lets the held reply go on and blackholes the client's renewals right after it is
    /// forwarded (before the client can send anything after reading it: no renewal of the
    /// grant lands).
    pub fn release_then_blackhole(&self) {
        self.shared.blackhole_after.store(true, Ordering::SeqCst);
        self.release();
    }

    /// Drops the client's renewals (`true`: its `update` commands go unanswered; everything
    /// else goes on) or lets them through again (`false`).
    pub fn blackhole(&self, on: bool) {
        self.shared.blackhole.store(on, Ordering::SeqCst);
    }
}

impl Drop for ReplyHold {
    fn drop(&mut self) {
        self.release();
        self.shared.cut.send_replace(true);
        self.task.abort();
    }
}

/// The request id and the response-to of a message's header, and its opcode.
fn header(message: &[u8]) -> (i32, i32, i32) {
    let field = |at: usize| {
        i32::from_le_bytes([
            message[at],
            message[at + 1],
            message[at + 2],
            message[at + 3],
        ])
    };
    (field(4), field(8), field(12))
}

/// The command of an `OP_MSG` request (its body section), if it is one.
fn command(message: &[u8]) -> Option<Document> {
    let (_, _, opcode) = header(message);
    // Header (16 bytes), flag bits (4), then sections; the body is of kind 0.
    if opcode != OP_MSG || message.len() < 21 || message[20] != 0 {
        return None;
    }
    Document::from_reader(&message[21..]).ok()
}

/// Reads one whole message (its header gives its length); `None` at the end of the stream.
async fn read_message(from: &mut OwnedReadHalf) -> Option<Vec<u8>> {
    let mut length = [0u8; 4];
    from.read_exact(&mut length).await.ok()?;
    let total = usize::try_from(i32::from_le_bytes(length)).ok()?;
    if !(16..=48 * 1024 * 1024).contains(&total) {
        return None;
    }
    let mut message = vec![0u8; total];
    message[..4].copy_from_slice(&length);
    from.read_exact(&mut message[4..]).await.ok()?;
    Some(message)
}

/// Relays one connection until either side closes it or the client is cut off.
async fn relay(client: TcpStream, shared: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(shared.upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let picked: Arc<std::sync::Mutex<Option<i32>>> = Arc::default();
    let mut cut = shared.cut.subscribe();
    tokio::select! {
        () = requests(client_read, server_write, &shared, &picked) => {}
        () = replies(server_read, client_write, &shared, &picked) => {}
        _ = cut.wait_for(|cut| *cut) => {}
    }
}

/// Forwards the client's requests, noting the id of the lock attempt picked out, if armed.
async fn requests(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shared: &Shared,
    picked: &std::sync::Mutex<Option<i32>>,
) {
    while let Some(message) = read_message(&mut from).await {
        if shared.armed.load(Ordering::SeqCst)
            && command(&message).is_some_and(|c| commands::is_attempt(&c))
            && shared.armed.swap(false, Ordering::SeqCst)
        {
            *picked.lock().unwrap_or_else(|e| e.into_inner()) = Some(header(&message).0);
        }
        if shared.blackhole.load(Ordering::SeqCst)
            && command(&message).is_some_and(|c| c.get_str("update").is_ok())
        {
            continue;
        }
        if to.write_all(&message).await.is_err() {
            return;
        }
    }
}

/// Forwards the server's replies, holding back the one to the picked-out request until it is
/// let go.
async fn replies(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shared: &Shared,
    picked: &std::sync::Mutex<Option<i32>>,
) {
    while let Some(message) = read_message(&mut from).await {
        let (_, response_to, _) = header(&message);
        let hold = {
            let mut picked = picked.lock().unwrap_or_else(|e| e.into_inner());
            let hold = *picked == Some(response_to);
            if hold {
                *picked = None;
            }
            hold
        };
        if hold {
            shared.held.send_replace(Some(Instant::now()));
            let mut released = shared.released.subscribe();
            let _ = released.wait_for(|released| *released).await;
        }
        if to.write_all(&message).await.is_err() {
            return;
        }
        if hold && shared.blackhole_after.swap(false, Ordering::SeqCst) {
            shared.blackhole.store(true, Ordering::SeqCst);
        }
    }
}
